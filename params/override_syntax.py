"""The reference's override syntaxes: ``k=v`` CSV (``a=1,b.c=gs://x,d='hi, there',e=[1,2]``), a YAML/JSON mapping,
or the path of a YAML file, read through the ``read_file`` the caller passes (this package reads no files).
Values are typed as params YAML types them (``params_yaml``)."""
import json
import re
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

from absl import logging

from params import params_yaml
from params.params_dict import ParamsDict

_CSV_NAME_RE = re.compile(r'\s*([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)\s*=\s*')
_OPENERS = {'[': ']', '{': '}'}


def _quoted_end(text: str, start: int) -> int:
  """Index just after the quoted string starting at ``start`` (YAML rules: '' or backslash escapes)."""
  quote = text[start]
  i = start + 1
  while i < len(text):
    if quote == '"' and text[i] == '\\':
      i += 2
      continue
    if text[i] == quote:
      if quote == "'" and text.startswith("''", i):
        i += 2
        continue
      return i + 1
    i += 1
  raise ValueError(f'Malformed k=v override: unterminated quote in {text[start:]!r}.')


def _bracketed_end(text: str, start: int) -> int:
  """Index just after the balanced [...] or {...} starting at ``start``; quotes inside are skipped."""
  stack = []
  i = start
  while i < len(text):
    char = text[i]
    if char in '\'"':
      i = _quoted_end(text, i)
      continue
    if char in _OPENERS:
      stack.append(_OPENERS[char])
    elif char in ']}':
      if not stack or stack.pop() != char:
        raise ValueError(f'Malformed k=v override: unbalanced {char!r} in {text[start:]!r}.')
      if not stack:
        return i + 1
    i += 1
  raise ValueError(f'Malformed k=v override: unclosed {text[start]!r} in {text[start:]!r}.')


def _malformed_pair_message(csv_str: str, pos: int) -> str:
  bad = csv_str[pos:].split(',', 1)[0].strip()
  if not bad:
    return f'Malformed k=v override: empty pair at position {pos} of {csv_str!r} (a stray comma?).'
  message = f'Malformed k=v override: {bad!r} in {csv_str!r} is not name=value.'
  if pos:  # Most likely the tail of an unquoted value that contains a comma.
    message += " Quote values that contain commas, e.g. dropblock_groups='3,4'."
  return message


def _split_csv_pairs(csv_str: str) -> List[Tuple[str, str]]:
  """Splits ``csv_str`` into (dotted name, raw value) pairs; raises ValueError naming the bad part."""
  pairs = []
  pos = 0
  while True:
    match = _CSV_NAME_RE.match(csv_str, pos)
    if not match:
      raise ValueError(_malformed_pair_message(csv_str, pos))
    pos = match.end()
    first = csv_str[pos:pos + 1]
    if first in ('"', "'"):
      end = _quoted_end(csv_str, pos)
    elif first in _OPENERS:
      end = _bracketed_end(csv_str, pos)
    else:
      comma = csv_str.find(',', pos)
      end = len(csv_str) if comma < 0 else comma
    pairs.append((match.group(1), csv_str[pos:end].strip()))
    pos = end
    while pos < len(csv_str) and csv_str[pos].isspace():
      pos += 1
    if pos == len(csv_str):
      return pairs
    if csv_str[pos] != ',':
      raise ValueError(f'Malformed k=v override: unexpected {csv_str[pos:]!r} after the value of '
                       f'{match.group(1)!r} in {csv_str!r}.')
    pos += 1


def _csv_value(name: str, raw: str) -> Any:
  """Parses one raw CSV value with the params YAML loader; an unquoted value is always a scalar."""
  value = params_yaml.load(raw, f'the value of {name!r} ({raw!r})')
  if raw[:1] not in ('"', "'", '[', '{') and isinstance(value, (dict, list)):
    return raw  # e.g. 'x: y' unquoted: keep the text rather than a surprising mapping.
  return value


def nested_csv_str_to_json_str(csv_str: str) -> str:
  """Converts ``'a=1,b.c=x,d='hi, there',e=[1,2]'`` to the JSON string of ``{a: 1, b: {c: 'x'}, ...}``.

  Values are typed by the params YAML loader (1e-4 is a float, true/yes are booleans, null or nothing is None,
  '007' quoted stays a string); unquoted values such as ``gs://bucket/x`` stay strings; dotted names nest. Raises
  ValueError naming the malformed part, or a name given twice. An empty string gives ''.
  """
  if not csv_str or not csv_str.strip():
    return ''
  nested: Dict[str, Any] = {}
  for name, raw in _split_csv_pairs(csv_str):
    node = nested
    parts = name.split('.')
    for i, part in enumerate(parts[:-1]):
      node = node.setdefault(part, {})
      if not isinstance(node, dict):
        raise ValueError(f'Malformed k=v override: {name!r} nests under {".".join(parts[:i + 1])!r}, which is '
                         f'also given a value.')
    if parts[-1] in node:
      raise ValueError(f'Malformed k=v override: {name!r} is given more than once in {csv_str!r}.')
    node[parts[-1]] = _csv_value(name, raw)
  try:
    return json.dumps(nested)
  except (TypeError, ValueError) as e:
    raise ValueError(f'Override {csv_str!r} has a value JSON cannot hold: {e}') from None




ReadFile = Callable[[str], Optional[str]]  # a path -> its text, or None when there is no such file


def override_params_dict(params: ParamsDict, dict_or_string_or_yaml_file: Union[None, str, Mapping[str, Any]],
                         is_strict: bool, read_file: Optional[ReadFile] = None) -> ParamsDict:
  """Overrides ``params`` from a dict, a ``k=v`` CSV string, a YAML/JSON string or a YAML file path.

  Strings are tried in that order: CSV, then a YAML/JSON mapping, then a file path read by ``read_file``. A falsy
  input is a no-op. Returns ``params``.
  """
  source = dict_or_string_or_yaml_file
  if not source:
    return params
  if isinstance(source, Mapping):
    params.override(source, is_strict)
    return params
  if not isinstance(source, str):
    raise ValueError(f'Cannot override params from a {type(source).__name__}; give a dict, a k=v string, a '
                     f'YAML/JSON string or a YAML file path.')
  if not source.strip():
    return params
  params.override(parse_override_string(source, read_file), is_strict)
  return params


def parse_override_string(text: str, read_file: Optional[ReadFile] = None) -> Dict[str, Any]:
  """The mapping a CSV, YAML/JSON or file-path override string stands for (a path needs ``read_file``)."""
  try:
    return json.loads(nested_csv_str_to_json_str(text))
  except params_yaml.UnsafeYamlError:
    raise
  except ValueError as e:
    csv_error = str(e)
  yaml_error = None
  try:
    data = params_yaml.load(text, 'the override string')
  except params_yaml.UnsafeYamlError:
    raise
  except ValueError as e:
    data, yaml_error = None, str(e)
  if isinstance(data, dict):
    return data
  path = text.strip()
  content = read_file(path) if read_file is not None else None
  if content is not None:
    logging.info('Overriding params from file %s', path)
    return params_yaml.yaml_mapping(content, f'file {path!r}')
  yaml_part = yaml_error or f'YAML reads it as a {type(data).__name__}, not a mapping'
  raise ValueError(f'Params override {text!r} is neither valid k=v CSV ({csv_error}), nor a YAML/JSON mapping '
                   f'({yaml_part}), nor an existing file.')


def parse_scalar(text: str) -> Any:
  """One value typed as params YAML types it: '1e-4' -> 1e-4, 'true' -> True, 'null' -> None, 'gs://x' -> str."""
  return _csv_value('value', text)
