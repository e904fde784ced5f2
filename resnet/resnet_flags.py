"""Command-line flags of the ResNet trainer and the params they produce.

Every params key (``params/resnet_config.py``) has a flag of the same name that defaults to None, meaning "use
params", as in the reference; its help text shows the real default. Precedence, lowest to highest (the reference's
order, §1.2):

  RESNET_CFG < --config_file (in order) < --params_override / --param_overrides (in command-line order)
  < explicit params flags (any that is not None)

All of them are strict (an unknown key is an error) and type-checked against the current value. The result is
validated against RESNET_RESTRICTIONS and locked.

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
from params.resnet_config import RESNET_CFG, RESNET_RESTRICTIONS

CONFIG_DIR = os.path.join(os.path.dirname(os.path.abspath(params_dict.__file__)), 'configs')
MODES = ('train', 'eval', 'train_and_eval', 'predict')

# Help for the flag of each params key; the default is appended from RESNET_CFG.
_PARAM_HELP: Dict[str, str] = {
    # model
    'resnet_depth': 'ResNet depth: 18, 34, 50, 101, 152 or 200.',
    'num_label_classes': 'Width of the logits. 1001 keeps the stored 1-based labels (class 0 = background).',
    'data_format': 'channels_last or channels_first.',
    'pre_activation': 'Use ResNet v2 (pre-activation) blocks.',
    'bn_momentum': 'Batch-norm moving-average momentum.',
    'bn_epsilon': 'Batch-norm epsilon.',
    'dropout_rate': 'Dropout before the classifier; None or 0 = off.',
    'dropblock_groups': "Block groups (1..4) that use DropBlock, e.g. '3,4'; '' = off.",
    'dropblock_keep_prob': 'Final DropBlock keep probability; required when --dropblock_groups is set.',
    'dropblock_size': 'DropBlock block size.',
    'precision': 'Compute precision: float32, bfloat16 or float16 (float16 uses dynamic loss scaling).',
    'jit_compile': 'XLA-compile the train step (faster on GPU/TPU, ~2x slower on CPU).',
    # data
    'data_dir': "Directory of train-*/validation-*/test-* TFRecords (local or gs://); unset or 'null' = "
                'synthetic data.',
    'image_size': 'Train/eval crop size in pixels.',
    'num_train_images': 'Training-set size: steps per epoch and the LR schedule.',
    'num_eval_images': 'Validation-set size: number of eval steps.',
    'num_test_images': 'Predict mode: how many test images to predict (None = all).',
    'labels_file': 'Class names, one per line; None = <data_dir>/labels.txt if present.',
    'input_pipeline': "'optimized' or 'basic' (the seed's sequential pipeline, for comparison).",
    'synthetic_data': "'random' or 'constant': synthetic input used when --data_dir is unset.",
    'use_cache': 'Cache the decoded training set in host RAM (ImageNet needs ~150 GB).',
    'shuffle_buffer_size': 'Shuffle buffer (records) of the training set.',
    'min_crop_area': 'Smallest area (fraction of the image) of the training random crop; raise it (e.g. 0.35) '
                     'when objects are small or few classes differ by detail.',
    'num_parallel_calls': 'Parallel decode/preprocess calls; -1 = tf.data AUTOTUNE.',
    'transpose_input': "Reference TPU infeed transpose trick (HWCN); not useful with TF2's TPUStrategy.",
    # optimisation
    'train_batch_size': 'Global training batch size.',
    'eval_batch_size': 'Global eval batch size.',
    'predict_batch_size': 'Global predict batch size.',
    'train_steps': 'Total training steps (also sets the LR schedule and the DropBlock schedule).',
    'base_learning_rate': 'Learning rate for a global batch of 256, scaled linearly with the batch.',
    'lr_schedule': "'stepwise' (reference), 'cosine' or 'exponential' (the seeds' ramp-up/decay).",
    'lr_warmup_epochs': 'Stepwise/cosine warm-up, in epochs of a 90-epoch run (scaled to train_steps).',
    'lr_rampup_epochs': 'Exponential schedule: epochs of linear ramp from lr_start to the peak.',
    'lr_sustain_epochs': 'Exponential schedule: epochs held at the peak.',
    'lr_exp_decay': 'Exponential schedule: decay factor per epoch after the sustain.',
    'lr_start': 'Exponential schedule: first learning rate.',
    'lr_min': 'Exponential schedule: learning-rate floor.',
    'momentum': 'SGD momentum.',
    'use_nesterov': 'Nesterov momentum.',
    'weight_decay': 'L2 weight decay: wd * sum(w^2)/2 over non-batch-norm variables.',
    'label_smoothing': 'Label smoothing in [0, 1).',
    'random_seed': 'Seed for weights and input shuffling; None = nondeterministic.',
    # loop, checkpoints, summaries
    'strategy': 'auto, one_device, mirrored, multi_worker_mirrored or tpu.',
    'use_tpu': 'Run on a TPU (reference flag; see also --strategy).',
    'tpu': 'TPU name or address, e.g. grpc://10.0.0.2:8470.',
    'num_cores': 'TPU cores (reference configs); the replica count comes from the strategy.',
    'model_dir': 'Checkpoints, summaries, profiles and params.yaml (local or gs://); training resumes from it.',
    'iterations_per_loop': 'Steps per inner loop: one host round trip, one summary point.',
    'steps_per_eval': 'train_and_eval: training steps between evaluations.',
    'save_checkpoints_steps': 'Checkpoint interval in steps; None = max(5000, iterations_per_loop).',
    'keep_checkpoint_max': 'Checkpoints to keep.',
    'skip_host_call': 'Turn off the per-loop TensorBoard scalars.',
    'eval_timeout': 'Eval mode: seconds to wait for a new checkpoint; None = forever.',
    'stop_on_nan': 'Stop training when the loss becomes NaN.',
    # warm start, export, predict
    'resnet_checkpoint': 'Warm start from this checkpoint (file prefix or directory), e.g. ImageNet weights for '
                         'fine-tuning.',
    'export_dir': 'Export a SavedModel here after training.',
    'predict_top_k': 'Predict mode: classes reported per image.',
    # profiling
    'profile_every_n_steps': '> 0: capture a profile every N steps.',
    'tpu_profile_duration': 'Milliseconds per periodic profile capture.',
    'profile_steps': "'A,B': one profile capture of steps A..B.",
    'profiler_port': '> 0: start a profiler server on this port (listens on all interfaces).',
}

# Types of the params keys whose default is None (the others take the type of their default).
_NONE_DEFAULT_TYPES: Dict[str, type] = {
    'dropout_rate': float,
    'dropblock_keep_prob': float,
    'data_dir': str,
    'num_test_images': int,
    'labels_file': str,
    'random_seed': int,
    'tpu': str,
    'model_dir': str,
    'save_checkpoints_steps': int,
    'eval_timeout': int,
    'resnet_checkpoint': str,
    'export_dir': str,
}

PARAMS_FLAG_NAMES: Tuple[str, ...] = tuple(RESNET_CFG)
NON_PARAMS_FLAG_NAMES: Tuple[str, ...] = (
    'gcp_project', 'tpu_zone', 'mode', 'config_file', 'params_override', 'param_overrides', 'worker_hosts',
    'task_index', 'eval_checkpoint', 'predict_input', 'predict_output', 'dump_params')


def _param_type(key: str) -> type:
  default = RESNET_CFG[key]
  if default is None:
    return _NONE_DEFAULT_TYPES.get(key, str)
  return type(default)


def _define_param_flag(key: str, flag_values: flags.FlagValues) -> None:
  help_text = f'{_PARAM_HELP.get(key, "Params key " + key + ".")} [params default: {RESNET_CFG[key]!r}]'
  definer = {bool: flags.DEFINE_bool, int: flags.DEFINE_integer, float: flags.DEFINE_float}.get(
      _param_type(key), flags.DEFINE_string)
  definer(key, None, help_text, flag_values=flag_values)


def _define_other_flags(flag_values: flags.FlagValues) -> None:
  """Flags that steer the run but are not params keys."""
  fv = flag_values
  definitions = [
      ('gcp_project', lambda: flags.DEFINE_string(
          'gcp_project', None, 'GCP project of the TPU (for the cluster resolver).', flag_values=fv)),
      ('tpu_zone', lambda: flags.DEFINE_string(
          'tpu_zone', None, 'GCE zone of the TPU (for the cluster resolver).', flag_values=fv)),
      ('mode', lambda: flags.DEFINE_enum(
          'mode', 'train_and_eval', list(MODES), 'What to run.', flag_values=fv)),
      ('config_file', lambda: flags.DEFINE_multi_string(
          'config_file', None, 'YAML params override file, applied on top of the defaults (strict). Repeat to '
          'apply several in order. A name that is not a file is looked up in params/configs/ (e.g. '
          'resnet50_gpu).', flag_values=fv)),
      ('params_override', lambda: flags.DEFINE_multi_string(
          'params_override', None, "Params overrides applied after --config_file (strict): k=v CSV "
          "(train_steps=42,dropblock_groups='3,4'), a YAML/JSON string, or a YAML file path. Repeatable; "
          'applied in command-line order together with --param_overrides.', flag_values=fv)),
      ('param_overrides', lambda: flags.DEFINE_alias(
          'param_overrides', 'params_override', flag_values=fv)),
      ('worker_hosts', lambda: flags.DEFINE_string(
          'worker_hosts', None, 'Multi-worker: comma-separated host:port of every worker (writes TF_CONFIG '
          'unless it is set).', flag_values=fv)),
      ('task_index', lambda: flags.DEFINE_integer(
          'task_index', 0, 'Multi-worker: index of this worker in --worker_hosts.', flag_values=fv)),
      ('eval_checkpoint', lambda: flags.DEFINE_string(
          'eval_checkpoint', None, 'Evaluate this one checkpoint (prefix) once and exit.', flag_values=fv)),
      ('predict_input', lambda: flags.DEFINE_string(
          'predict_input', None, 'Predict mode: glob of raw image files to classify (instead of test-* '
          'TFRecords).', flag_values=fv)),
      ('predict_output', lambda: flags.DEFINE_string(
          'predict_output', None, 'Predict mode: write predictions to this CSV file.', flag_values=fv)),
      ('dump_params', lambda: flags.DEFINE_bool(
          'dump_params', False, 'Print the effective params as YAML and exit.', flag_values=fv)),
  ]
  for name, define in definitions:
    if name not in flag_values:
      define()


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """Defines every flag on ``flag_values``; flags already defined there are left alone (idempotent)."""
  for key in PARAMS_FLAG_NAMES:
    if key not in flag_values:
      _define_param_flag(key, flag_values)
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


def params_from_flags(flag_values: flags.FlagValues = flags.FLAGS) -> params_dict.ParamsDict:
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
  params.validate()
  params.lock()
  return params


def _flag_list(flag_values: flags.FlagValues, name: str) -> List[str]:
  if name not in flag_values:
    return []
  value: Optional[Any] = flag_values[name].value
  if value is None:
    return []
  return [value] if isinstance(value, str) else list(value)
