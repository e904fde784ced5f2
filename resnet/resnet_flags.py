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
from typing import Any, Dict, List, Optional, Tuple

from absl import flags

from params import params_dict
from params import override_syntax
from params import resnet_config
from resnet.run_dir import params_files
from params.resnet_config import PARAMS, RESNET_CFG

CONFIG_DIR = resnet_config.CONFIG_DIR  # where --config_file looks up bare names
MODES = ('train', 'eval', 'train_and_eval', 'predict', 'export')
PARAMS_FLAG_NAMES: Tuple[str, ...] = tuple(RESNET_CFG)
NON_PARAMS_FLAG_NAMES: Tuple[str, ...] = ('mode', 'config_file', 'params_override', 'param_overrides',
                                          'dump_params')


class _ListParser(flags.ArgumentParser):
  """``a,b,c`` -> a list whose items are typed as in params YAML (``0.35,1`` -> [0.35, 1])."""

  syntactic_help = 'a comma-separated list'

  def __init__(self, words: Tuple[str, ...] = ()):
    super().__init__()
    self.words = words  # whole-flag words accepted as they are ('balanced')

  def parse(self, argument: Any) -> Any:
    if isinstance(argument, list) or argument in self.words:
      return argument
    return [override_syntax.parse_scalar(item.strip()) for item in str(argument).split(',') if item.strip()]

  def flag_type(self) -> str:
    return 'list'


def _define_param_flag(param: resnet_config.Param, flag_values: flags.FlagValues) -> None:
  allowed = f' One of: {", ".join(str(c) for c in param.choices)}.' if param.choices else ''
  help_text = f'{param.help}{allowed} [params default: {param.default!r}]'
  kind = param.value_type
  if kind is list:
    flags.DEFINE(_ListParser(param.words), param.name, None, help_text, flag_values=flag_values,
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
          'mode', 'train_and_eval', list(MODES), 'What to run. export: model_dir\'s latest checkpoint, or in a new '
          'model_dir the --resnet_checkpoint weights as they are, to --export_dir.', flag_values=fv)),
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
  for alias, name in resnet_config.ALIASES.items():  # the reference's flag names, as users type them
    if alias not in flag_values:
      flags.DEFINE_alias(alias, name, flag_values=flag_values)
  _define_other_flags(flag_values)


def explicit_param_flags(flag_values: flags.FlagValues = flags.FLAGS) -> Dict[str, Any]:
  """The params keys given by a flag whose value is not None."""
  return {key: flag_values[key].value for key in PARAMS_FLAG_NAMES
          if key in flag_values and flag_values[key].value is not None}


def given_param_keys(flag_values: flags.FlagValues = flags.FLAGS) -> List[str]:
  """The params keys the command line names, by flag or --param_overrides (config files are shared by every
  mode, so they are not the user asking for a param in this one)."""
  keys = list(explicit_param_flags(flag_values))
  for override in _flag_list(flag_values, 'params_override'):
    keys += list(override_syntax.parse_override_string(override, params_files.read_text))
  return keys


def params_from_flags(flag_values: flags.FlagValues = flags.FLAGS,
                      fill_from_data: bool = True) -> params_dict.ParamsDict:
  """The run's params from parsed flags (see the module docstring for the order): ``run_params.make_params``
  with the flags as overrides, each labelled with its flag; validated and locked."""
  if not flag_values.is_parsed():
    raise ValueError('params_from_flags() needs parsed flags: call define_flags() and parse argv first.')
  config_files = [(f'--config_file={name}', name) for name in _flag_list(flag_values, 'config_file')]
  overrides: List[Tuple[str, Any]] = [(f'--params_override={override}', override)
                                      for override in _flag_list(flag_values, 'params_override')]
  explicit = explicit_param_flags(flag_values)
  if explicit:
    overrides.append(('Flags', explicit))
  from resnet.run_setup import run_params  # pylint: disable=g-import-not-at-top; reads data and weights with TensorFlow
  # eval, predict and export take the model and its data from the finished run unless the user says otherwise.
  from_run = None
  if flag_values['mode'].value in ('eval', 'predict', 'export'):
    from_run = given_param_keys(flag_values)   # run_params adds the config files' keys
  return run_params.make_params(overrides, config_files=config_files, fill_from_data=fill_from_data,
                                from_run=from_run)


def _flag_list(flag_values: flags.FlagValues, name: str) -> List[str]:
  if name not in flag_values:
    return []
  value: Optional[Any] = flag_values[name].value
  if value is None:
    return []
  return [value] if isinstance(value, str) else list(value)
