"""A flat, lockable, type-checked params dictionary and the reference's override syntaxes.

Re-implements the reference's ``params_dict`` (tensorflow/tpu ``models/hyperparameters/params_dict.py``) with the
same public names for a flat table of params, and fixes its defects on purpose:
- overrides are type-checked against the current value (the reference accepted ``train_steps='abc'``);
- unknown keys name the closest valid keys;
- validation is a function of the params (``resnet_config.validate``: typed checks from the param definitions),
  not restriction strings to parse;
- YAML is always read with one safe loader that reads ``1e-4`` as a float, in CSV overrides, YAML strings and files
  alike (the reference read files with FullLoader and got the string '1e-4'), and refuses ``!!python/...`` tags;
- nothing is registered on PyYAML's global classes.

It reads and writes no files: an override that names a file is read through the ``read_file`` the caller passes
(``resnet/params_files.py`` reads local and ``gs://`` paths, and writes ``params.yaml`` atomically).
"""
import collections.abc
import copy
import difflib
import json
import numbers
import re
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from absl import logging
import yaml

_FLOAT_TAG = 'tag:yaml.org,2002:float'
_TIMESTAMP_TAG = 'tag:yaml.org,2002:timestamp'

# YAML 1.1 floats need a '.', so '1e-4' would be a string; this also reads 1e-4, -1.e-3, +0.001, 1e3, .5 and -.5.
_FLOAT_RE = re.compile(r'''^(?:
    [-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
   |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
   |[-+]?\.[0-9_]+(?:[eE][-+]?[0-9]+)?
   |[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*
   |[-+]?\.(?:inf|Inf|INF)
   |\.(?:nan|NaN|NAN))$''', re.X)
_FLOAT_FIRST_CHARS = list('-+0123456789.')


def _resolvers_without_timestamps() -> Dict[Any, List[Tuple[str, Any]]]:
  """SafeLoader's implicit resolvers minus timestamps, so a date-like value stays a plain (JSON-able) string."""
  return {first: [(tag, regexp) for tag, regexp in resolvers if tag != _TIMESTAMP_TAG]
          for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}


class ParamsYamlLoader(yaml.SafeLoader):
  """The only YAML loader used for params: safe (no Python objects) and reads ``1e-4`` as a float."""


ParamsYamlLoader.yaml_implicit_resolvers = _resolvers_without_timestamps()
ParamsYamlLoader.add_implicit_resolver(_FLOAT_TAG, _FLOAT_RE, _FLOAT_FIRST_CHARS)


class ParamsYamlDumper(yaml.SafeDumper):
  """Block-style dumper with flow-style lists; quotes any string the loader would read as something else."""


ParamsYamlDumper.yaml_implicit_resolvers = _resolvers_without_timestamps()
ParamsYamlDumper.add_implicit_resolver(_FLOAT_TAG, _FLOAT_RE, _FLOAT_FIRST_CHARS)


def _represent_flow_list(dumper: yaml.SafeDumper, data: Sequence[Any]) -> yaml.Node:
  return dumper.represent_sequence('tag:yaml.org,2002:seq', list(data), flow_style=True)


ParamsYamlDumper.add_representer(list, _represent_flow_list)
ParamsYamlDumper.add_representer(tuple, _represent_flow_list)


class UnsafeYamlError(ValueError):
  """YAML that asks for a Python object (``!!python/...``) or another type the safe loader refuses."""


def _yaml_load(text: str, source: str) -> Any:
  """Parses YAML safely; a refused tag or a syntax error becomes a ValueError that names ``source``."""
  try:
    return yaml.load(text, Loader=ParamsYamlLoader)  # pylint: disable=no-value-for-parameter
  except yaml.constructor.ConstructorError as e:
    raise UnsafeYamlError(
        f'Refusing to read {source}: it uses a YAML tag that would construct a Python object or another '
        f'unsupported type ({e.problem}). Params YAML may only hold mappings, lists, strings, numbers, '
        f'booleans and null.') from None
  except yaml.YAMLError as e:
    raise ValueError(f'Cannot parse YAML in {source}: {e}') from None


# ------------------------------------------------------------------------------------------------------------------
# Errors


class UnknownParamError(KeyError, AttributeError):
  """A key that does not exist. Both a KeyError (as the reference) and an AttributeError (so hasattr() works)."""

  def __str__(self) -> str:  # KeyError would repr() the message.
    return str(self.args[0]) if self.args else ''


class ParamTypeError(TypeError, ValueError):
  """An override whose type does not match the current value. Also a ValueError, as all bad input here."""


def _unknown_key_message(key: str, known: Sequence[str]) -> str:
  """``Unknown param 'x'.`` and the closest valid keys, or all of them when none is close."""
  names = sorted(known)
  close = difflib.get_close_matches(key, names, n=5, cutoff=0.6)
  if close:
    hint = 'Did you mean: ' + ', '.join(close) + '?'
  else:
    hint = 'Valid params here: ' + (', '.join(names) if names else '(none)') + '.'
  return f'Unknown param {key!r}. {hint}'


# ------------------------------------------------------------------------------------------------------------------
# Type checking of one override


def _type_name(value: Any) -> str:
  return 'dict' if isinstance(value, Mapping) else type(value).__name__


def _checked_value(name: str, old: Any, new: Any) -> Any:
  """Returns ``new`` converted to the type of ``old``, or raises ParamTypeError naming the param.

  Rules: None replaces anything and anything replaces None; bool and int are distinct; an int is accepted for a
  float (converted); a float is not accepted for an int; lists replace lists, dicts replace dicts; otherwise the
  types must match.
  """
  if new is None or old is None:
    return new
  if isinstance(new, Mapping) and not isinstance(old, Mapping):
    raise ParamTypeError(f'Param {name!r} is a scalar ({type(old).__name__} {old!r}); cannot override it with a '
                         f'dict {dict(new)!r}.')
  problem = None
  if isinstance(old, bool):
    if isinstance(new, bool):
      return new
    problem = 'use true or false'
  elif isinstance(old, numbers.Integral):
    if isinstance(new, numbers.Integral) and not isinstance(new, bool):
      return int(new)
  elif isinstance(old, numbers.Real):
    if isinstance(new, numbers.Real) and not isinstance(new, bool):
      return float(new)
  elif isinstance(old, str):
    if isinstance(new, str):
      return new
    problem = f"quote the value to pass a string, e.g. {name}='{new}'"
  elif isinstance(old, (list, tuple)):
    if isinstance(new, (list, tuple)):
      return list(new)
  elif isinstance(old, Mapping):
    if isinstance(new, Mapping):
      return dict(new)
  elif isinstance(new, type(old)):
    return new
  expected = 'list' if isinstance(old, (list, tuple)) else _type_name(old)
  message = f'Param {name!r} expects {expected} (current value {old!r}), but got {_type_name(new)} {new!r}.'
  if problem:
    message += f' Hint: {problem}.'
  raise ParamTypeError(message)


# ------------------------------------------------------------------------------------------------------------------
# ParamsDict

_INTERNAL_ATTRS = ('_params', '_locked', '_validator', '_aliases')
Validator = Callable[['ParamsDict'], None]


class ParamsDict(collections.abc.Mapping):
  """Flat params with attribute access, strict type-checked overrides, a validator and a lock.

  A read-only ``Mapping`` (``dict(params)`` is a plain shallow copy); values live in an internal dict (not in
  ``__dict__``), so a key can never shadow a method. A dict value is one value: an override replaces it whole.
  ``validator`` (e.g. ``resnet_config.validate``) raises ValueError for invalid values; ``validate()`` and the
  constructor run it. ``aliases`` maps other names of a key (e.g. a reference's old name) to the key; overrides
  and lookups accept them.
  """

  def __init__(self, default_params: Optional[Mapping[str, Any]] = None,
               validator: Optional[Validator] = None, aliases: Optional[Mapping[str, str]] = None) -> None:
    if validator is not None and not callable(validator):
      raise TypeError(f'validator must be a function of the params, got {type(validator).__name__} {validator!r} '
                      '(restriction strings are not supported).')
    object.__setattr__(self, '_params', {})
    object.__setattr__(self, '_locked', False)
    object.__setattr__(self, '_validator', validator)
    object.__setattr__(self, '_aliases', dict(aliases or {}))
    if default_params is not None:
      self.override(default_params, is_strict=False)
    self.validate()

  # --- access -----------------------------------------------------------------------------------------------------

  def __getattr__(self, name: str) -> Any:
    # Only called when normal lookup fails. Internal or dunder names must fail fast: copy and pickle probe them
    # on instances that have no ``_params`` yet.
    if name.startswith('_'):
      raise AttributeError(name)
    return self[name]

  def __getitem__(self, key: str) -> Any:
    params = self._params
    key = self._aliases.get(key, key)
    if key not in params:
      raise UnknownParamError(_unknown_key_message(key, list(params)))
    return params[key]

  def __setattr__(self, name: str, value: Any) -> None:
    self.override({name: value}, is_strict=True)  # A strict, type-checked one-key override.

  def __setitem__(self, key: str, value: Any) -> None:
    self.__setattr__(key, value)

  def __delattr__(self, name: str) -> None:
    name = self._aliases.get(name, name)
    if self._locked:
      raise ValueError(f'Params are locked; cannot delete {name!r}.')
    if name not in self._params:
      raise UnknownParamError(_unknown_key_message(name, list(self._params)))
    del self._params[name]

  def __delitem__(self, key: str) -> None:
    self.__delattr__(key)

  def __contains__(self, key: object) -> bool:
    return self._aliases.get(key, key) in self._params if isinstance(key, str) else False

  def __iter__(self) -> Iterator[str]:
    return iter(list(self._params))

  def __len__(self) -> int:
    return len(self._params)

  def __dir__(self) -> List[str]:
    return sorted(set(super().__dir__()) | set(self._params))

  def get(self, key: str, default: Any = None) -> Any:
    """Returns the value of ``key`` (or of the key it is an alias of), or ``default`` when it does not exist."""
    return self._params.get(self._aliases.get(key, key), default)

  def as_dict(self) -> Dict[str, Any]:
    """A deep copy as a plain dict, safe to mutate, pickle or dump."""
    return copy.deepcopy(self._params)

  def __eq__(self, other: object) -> bool:
    if isinstance(other, Mapping):
      return self._params == dict(other)
    return NotImplemented

  __hash__ = None  # Mutable.

  def __repr__(self) -> str:
    return f'ParamsDict({self._params!r})'

  def __str__(self) -> str:
    return params_to_yaml_string(self)

  # --- pickling and copying ---------------------------------------------------------------------------------------

  def __getstate__(self) -> Dict[str, Any]:
    return {name: self.__dict__[name] for name in _INTERNAL_ATTRS}

  def __setstate__(self, state: Mapping[str, Any]) -> None:
    for name in _INTERNAL_ATTRS:
      object.__setattr__(self, name, state[name])

  # --- override, validate, lock -----------------------------------------------------------------------------------

  def lock(self) -> 'ParamsDict':
    """Freezes the params: any later set, override or delete raises ValueError."""
    object.__setattr__(self, '_locked', True)
    return self

  @property
  def is_locked(self) -> bool:
    return self._locked

  def override(self, override_params: Mapping[str, Any], is_strict: bool = True) -> None:
    """Overrides values from a dict (or ParamsDict); all-or-nothing.

    Strict mode refuses unknown keys (KeyError listing the closest keys); non-strict mode adds them. Every
    override of an existing value is type-checked (see ``_checked_value``). Nothing changes if any key fails.
    """
    if not isinstance(override_params, Mapping):
      raise ValueError(f'override() needs a dict or ParamsDict, got {type(override_params).__name__}.')
    if self._locked:
      names = ', '.join(repr(str(k)) for k in override_params) or '(nothing)'
      raise ValueError(f'Params are locked; cannot override {names}.')
    updates = {}
    for key, value in override_params.items():
      if not isinstance(key, str):
        raise KeyError(f'Param names must be strings; got {key!r}.')
      if key in self._aliases and self._aliases[key] in override_params:
        raise KeyError(f'{key!r} and {self._aliases[key]!r} name the same param: give one of them.')
      key = self._aliases.get(key, key)
      if key in _INTERNAL_ATTRS or hasattr(ParamsDict, key):
        raise KeyError(f'{key!r} is a reserved name (a ParamsDict method or internal).')
      if isinstance(value, Mapping):
        value = dict(value)
      if key in self._params:
        value = _checked_value(key, self._params[key], value)
      elif is_strict:
        raise UnknownParamError(_unknown_key_message(key, list(self._params)))
      updates[key] = copy.deepcopy(value)
    self._params.update(updates)

  def validate(self) -> None:
    """Runs the validator, if any: a ValueError names every invalid value."""
    if self._validator is not None:
      self._validator(self)


# ------------------------------------------------------------------------------------------------------------------
# CSV overrides: 'a=1,b.c=gs://x,d='hi, there',e=[1,2]'

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
  value = _yaml_load(raw, f'the value of {name!r} ({raw!r})')
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


# ------------------------------------------------------------------------------------------------------------------
# Files


ReadFile = Callable[[str], Optional[str]]  # a path -> its text, or None when there is no such file


def yaml_mapping(text: str, source: str) -> Dict[str, Any]:
  """The params mapping a YAML text holds (an empty text is an empty mapping); errors name ``source``."""
  data = _yaml_load(text, source)
  if data is None:
    return {}
  if not isinstance(data, dict):
    raise ValueError(f'YAML {source} must hold a mapping of params, not a {type(data).__name__}.')
  return data


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
  except UnsafeYamlError:
    raise
  except ValueError as e:
    csv_error = str(e)
  yaml_error = None
  try:
    data = _yaml_load(text, 'the override string')
  except UnsafeYamlError:
    raise
  except ValueError as e:
    data, yaml_error = None, str(e)
  if isinstance(data, dict):
    return data
  path = text.strip()
  content = read_file(path) if read_file is not None else None
  if content is not None:
    logging.info('Overriding params from file %s', path)
    return yaml_mapping(content, f'file {path!r}')
  yaml_part = yaml_error or f'YAML reads it as a {type(data).__name__}, not a mapping'
  raise ValueError(f'Params override {text!r} is neither valid k=v CSV ({csv_error}), nor a YAML/JSON mapping '
                   f'({yaml_part}), nor an existing file.')


def params_to_yaml_string(params: Union[ParamsDict, Mapping[str, Any]]) -> str:
  """Block-style YAML with flow-style lists, in key order; reads back equal with the params loader."""
  data = params.as_dict() if isinstance(params, ParamsDict) else dict(params)
  return yaml.dump(data, Dumper=ParamsYamlDumper, default_flow_style=False, sort_keys=False, allow_unicode=True)


def parse_scalar(text: str) -> Any:
  """One value typed as params YAML types it: '1e-4' -> 1e-4, 'true' -> True, 'null' -> None, 'gs://x' -> str."""
  return _csv_value('value', text)
