"""Params YAML: one safe loader that reads ``1e-4`` as a float and refuses ``!!python/...`` tags, in CSV overrides,
YAML strings and files alike (the reference read files with FullLoader and got the string '1e-4'), and a dumper
whose output reads back equal. Nothing is registered on PyYAML's global classes.
"""
import re
from typing import Any, Dict, List, Mapping, Sequence, Tuple

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


class DuplicateKeyError(ValueError):
  """A YAML mapping sets one key twice (PyYAML would silently keep the later value)."""


class ParamsYamlLoader(yaml.SafeLoader):
  """The only YAML loader used for params: safe (no Python objects), reads ``1e-4`` as a float, and refuses a
  mapping that sets a key twice (an edit at the top of a config, an old value further down: which one counts?)."""

  def construct_mapping(self, node, deep=False):
    if isinstance(node, yaml.MappingNode):
      seen = {}
      for key_node, _ in node.value:
        key = self.construct_object(key_node, deep=True)
        try:
          first = seen.setdefault(key, key_node)
        except TypeError:  # an unhashable key: PyYAML's own error says so
          continue
        if first is not key_node:
          raise DuplicateKeyError(f'{key!r} is set twice: on line {first.start_mark.line + 1} and on line '
                                  f'{key_node.start_mark.line + 1}. Keep one of them.')
    return super().construct_mapping(node, deep=deep)


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


def load(text: str, source: str) -> Any:
  """Parses YAML safely; a refused tag or a syntax error becomes a ValueError that names ``source``."""
  try:
    return yaml.load(text, Loader=ParamsYamlLoader)  # pylint: disable=no-value-for-parameter
  except DuplicateKeyError as e:
    raise DuplicateKeyError(f'{source}: {e}') from None
  except yaml.constructor.ConstructorError as e:
    raise UnsafeYamlError(
        f'Refusing to read {source}: it uses a YAML tag that would construct a Python object or another '
        f'unsupported type ({e.problem}). Params YAML may only hold mappings, lists, strings, numbers, '
        f'booleans and null.') from None
  except yaml.YAMLError as e:
    raise ValueError(f'Cannot parse YAML in {source}: {e}') from None


def yaml_mapping(text: str, source: str) -> Dict[str, Any]:
  """The params mapping a YAML text holds (an empty text is an empty mapping); errors name ``source``."""
  data = load(text, source)
  if data is None:
    return {}
  if not isinstance(data, dict):
    raise ValueError(f'YAML {source} must hold a mapping of params, not a {type(data).__name__}.')
  return data


def params_to_yaml_string(params: Mapping[str, Any]) -> str:
  """Block-style YAML with flow-style lists, in key order; reads back equal with the params loader."""
  data = params.as_dict() if hasattr(params, 'as_dict') else dict(params)
  return yaml.dump(data, Dumper=ParamsYamlDumper, default_flow_style=False, sort_keys=False, allow_unicode=True)
