"""Command-line flags of the ResNet trainer, generated from ``params/resnet_config.PARAMS``, and the params they make.

Every params key has a flag of the same name that defaults to None ("use params"); its help shows the real
default and the allowed values. Precedence, lowest to highest:

  defaults < --config_file (in order) < --params_override / --param_overrides (in command-line order)
  < explicit params flags (any that is not None)

All of them are strict (an unknown key is an error naming the closest keys) and type-checked. Data-dependent
params left unset (class and image counts) are then filled from ``data_dir/summary.json``; the result is
validated and locked.

``--config_file`` may be repeated; files apply in order, so a device config and a dataset config combine, e.g.
``--config_file=resnet50_tpu_v3_8 --config_file=flowers_finetune``. A name that is not an existing file is looked
up in ``params/configs/`` (with or without ``.yaml``).
"""
import contextlib
import os
from typing import Any, Dict, Iterator, List, Optional, Tuple

from absl import flags
from absl import logging

from params import params_dict
from params import resnet_config
from params.resnet_config import PARAMS, RESNET_CFG, RESNET_RESTRICTIONS

CONFIG_DIR = os.path.join(os.path.dirname(os.path.abspath(params_dict.__file__)), 'configs')
MODES = ('train', 'eval', 'train_and_eval', 'predict')
PARAMS_FLAG_NAMES: Tuple[str, ...] = tuple(RESNET_CFG)
NON_PARAMS_FLAG_NAMES: Tuple[str, ...] = ('mode', 'config_file', 'params_override', 'param_overrides',
                                          'dump_params')


class _ListParser(flags.ArgumentParser):
  """``a,b,c`` -> a list whose items are typed as in params YAML (``0.35,1`` -> [0.35, 1])."""

  syntactic_help = 'a comma-separated list'

  def parse(self, argument: Any) -> Any:
    if isinstance(argument, list):
      return argument
    return [params_dict.parse_scalar(item.strip()) for item in str(argument).split(',') if item.strip()]

  def flag_type(self) -> str:
    return 'list'


def _define_param_flag(param: resnet_config.Param, flag_values: flags.FlagValues) -> None:
  allowed = f' One of: {", ".join(str(c) for c in param.choices)}.' if param.choices else ''
  help_text = f'{param.help}{allowed} [params default: {param.default!r}]'
  kind = param.value_type
  if kind is list:
    flags.DEFINE(_ListParser(), param.name, None, help_text, flag_values=flag_values,
                 serializer=flags.CsvListSerializer(','))
    return
  definer = {bool: flags.DEFINE_bool, int: flags.DEFINE_integer, float: flags.DEFINE_float}.get(
      kind, flags.DEFINE_string)
  definer(param.name, None, help_text, flag_values=flag_values)


def _define_other_flags(flag_values: flags.FlagValues) -> None:
  """Flags that steer this invocation but are not params keys."""
  fv = flag_values
  definitions = [
      ('mode', lambda: flags.DEFINE_enum(
          'mode', 'train_and_eval', list(MODES), 'What to run.', flag_values=fv)),
      ('config_file', lambda: flags.DEFINE_multi_string(
          'config_file', None, 'YAML params file applied on top of the defaults (strict). Repeat to apply several '
          'in order. A name that is not a file is looked up in params/configs/ (e.g. resnet50_gpu).',
          flag_values=fv)),
      ('params_override', lambda: flags.DEFINE_multi_string(
          'params_override', None, "Params overrides applied after --config_file (strict): k=v CSV "
          "(train_steps=42,dropblock_groups='3,4'), a YAML/JSON string, or a YAML file path. Repeatable; "
          'applied in command-line order together with --param_overrides.', flag_values=fv)),
      ('param_overrides', lambda: flags.DEFINE_alias(
          'param_overrides', 'params_override', flag_values=fv)),
      ('dump_params', lambda: flags.DEFINE_bool(
          'dump_params', False, 'Print the effective params as YAML and exit.', flag_values=fv)),
  ]
  for name, define in definitions:
    if name not in flag_values:
      define()


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """Defines every flag on ``flag_values``; flags already defined there are left alone (idempotent)."""
  for param in PARAMS:
    if param.name not in flag_values:
      _define_param_flag(param, flag_values)
  _define_other_flags(flag_values)


def resolve_config_file(name: str) -> str:
  """``name`` itself when it is a URL or an existing file, else the matching file in params/configs/."""
  if '://' in name or os.path.isfile(name):
    return name
  for candidate in (os.path.join(CONFIG_DIR, name), os.path.join(CONFIG_DIR, name + '.yaml')):
    if os.path.isfile(candidate):
      return candidate
  available = ', '.join(sorted(f[:-5] for f in os.listdir(CONFIG_DIR) if f.endswith('.yaml')))
  raise ValueError(f'--config_file {name!r}: no such file, nor in {CONFIG_DIR} (available there: {available}).')


@contextlib.contextmanager
def _labelled_errors(label: str) -> Iterator[None]:
  """Prefixes a KeyError/ValueError raised inside with ``label`` (the flag it came from), keeping its type."""
  try:
    yield
  except (KeyError, ValueError) as e:
    message = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
    try:
      labelled = type(e)(f'{label}: {message}')
    except TypeError:  # An exception type with a different constructor, e.g. UnicodeDecodeError.
      labelled = ValueError(f'{label}: {message}')
    raise labelled from e


def explicit_param_flags(flag_values: flags.FlagValues = flags.FLAGS) -> Dict[str, Any]:
  """The params keys given by a flag whose value is not None."""
  return {key: flag_values[key].value for key in PARAMS_FLAG_NAMES
          if key in flag_values and flag_values[key].value is not None}


def params_from_flags(flag_values: flags.FlagValues = flags.FLAGS,
                      fill_from_data: bool = True) -> params_dict.ParamsDict:
  """Builds the run's params from parsed flags (see the module docstring for the order); validated and locked."""
  if not flag_values.is_parsed():
    raise ValueError('params_from_flags() needs parsed flags: call define_flags() and parse argv first.')
  params = params_dict.ParamsDict(RESNET_CFG, RESNET_RESTRICTIONS)
  for name in _flag_list(flag_values, 'config_file'):
    path = resolve_config_file(name)
    logging.info('Params: applying --config_file=%s', path)
    with _labelled_errors(f'--config_file={path}'):
      params.override(params_dict.read_yaml_to_params_dict(path), is_strict=True)
  for override in _flag_list(flag_values, 'params_override'):
    logging.info('Params: applying --params_override=%s', override)
    with _labelled_errors(f'--params_override={override}'):
      params_dict.override_params_dict(params, override, is_strict=True)
  explicit = explicit_param_flags(flag_values)
  if explicit:
    logging.info('Params: applying flags %s', explicit)
    with _labelled_errors('Flags'):
      params.override(explicit, is_strict=True)
  if fill_from_data:
    params.override(data_defaults(params.as_dict()), is_strict=True)
  params.validate()
  resnet_config.check_consistency(params)
  params.lock()
  return params


def data_defaults(values: Dict[str, Any]) -> Dict[str, Any]:
  """Values for the unset class and image counts: from data_dir/summary.json, else ImageNet's.

  A set value that contradicts the data is an error naming both values and the fix (a background class or an
  eval subset are warnings: they may be meant).
  """
  from official_input import dataset_info  # pylint: disable=g-import-not-at-top; imports TensorFlow
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  fills: Dict[str, Any] = {}
  try:
    info = dataset_info.read_dataset_info(values['data_dir'], values['labels_file'])
  except tf.errors.OpError as e:  # unreachable storage: the input pipeline will name the problem when it reads
    logging.warning('Could not read the dataset summary in %s (%s): using the params as given.',
                    values['data_dir'], e.message.splitlines()[0])
    info = None
  if info is not None:
    explicit = {k for k in dataset_info.CHECKED_PARAMS if values.get(k) is not None}
    filled, warnings, errors = dataset_info.check_params_against(info, values, explicit)
    if errors:
      raise ValueError('Params contradict the data: ' + ' '.join(errors))
    for warning in warnings:
      logging.warning('%s', warning)
    if filled:
      logging.info('From %s: %s', info.summary_path, ', '.join(f'{k}={v}' for k, v in sorted(filled.items())))
    fills.update(filled)
  for key, value in resnet_config.IMAGENET_COUNTS.items():
    if values[key] is None and key not in fills:
      fills[key] = value
      if not dataset_info.is_synthetic(values['data_dir']):
        logging.warning('%s is unset and %s has no summary.json: using ImageNet\'s %d.', key, values['data_dir'],
                        value)
  return fills


def _flag_list(flag_values: flags.FlagValues, name: str) -> List[str]:
  if name not in flag_values:
    return []
  value: Optional[Any] = flag_values[name].value
  if value is None:
    return []
  return [value] if isinstance(value, str) else list(value)
