"""A model_dir holds one run: the params that define the model cannot change under its checkpoints.

Before anything is written, a run in an existing model_dir compares the params that define the model's variables
(``resnet_config.MODEL_PARAMS``: depth, classes, v2, layout, ...) with the saved ``params.yaml``. A mismatch with
checkpoints present is one error naming each param, both values and the fix. Other changes (train_steps,
batch size, ...) are fine on resume: the new params.yaml is written, and the earlier one is kept under
``params_history/`` with a log line naming what changed. Training also records the class names it trains with
(``model_dir/labels.txt``), so that predict names the classes after the data has moved.

A damaged params.yaml (not text, not YAML, a directory) is a warning, never a crash: eval, predict and export then
take nothing from it, and the checkpoint's own shapes are checked before any restore (``checkpoint_fit``); training
keeps the damaged file in ``params_history/`` and writes a new one.
"""
import datetime
import os
from typing import Any, Dict, List, Mapping, Optional, Tuple

from absl import logging
import tensorflow as tf

from params import params_yaml
from resnet.run_dir import params_files
from params import resnet_config
from params import architectures
from resnet.estimator import checkpoints
from resnet.estimator import files

PARAMS_FILE = 'params.yaml'
HISTORY_DIR = 'params_history'
CLASS_NAMES_FILE = 'labels.txt'  # the class names the run trained with, as the data's labels.txt lists them
_warned_damaged = set()


class ModelDirMismatch(ValueError):
  """model_dir's checkpoints belong to a model defined by other params."""


def recorded_params(model_dir: str) -> Optional[Dict[str, Any]]:
  """The params the training run of ``model_dir`` recorded (params.yaml), or None (none, or damaged: a warning)."""
  return _read_saved(os.path.join(model_dir, PARAMS_FILE))


def _read_record(path: str) -> files.Record:
  return files.read_record(path, lambda text: params_yaml.yaml_mapping(text, f'file {path!r}'), 'params file')


def _read_saved(path: str) -> Optional[Dict[str, Any]]:
  record = _read_record(path)
  if record.damaged:
    if path not in _warned_damaged:
      _warned_damaged.add(path)
      logging.warning('%s: nothing is taken from it (the run\'s model is checked against its checkpoint instead). '
                      'Training in this model_dir keeps it in %s/ and writes a new one.', record.problem, HISTORY_DIR)
    return None
  if record.value is None:
    return None
  # A run recorded before a rename holds the reference's name (skip_host_call): compare it under ours.
  return {resnet_config.ALIASES.get(key, key): value for key, value in record.value.items()}


def recorded_class_names_path(model_dir: Optional[str]) -> Optional[str]:
  """model_dir/labels.txt, the class names its training recorded, if it is there."""
  if not model_dir:
    return None
  path = os.path.join(model_dir, CLASS_NAMES_FILE)
  return path if tf.io.gfile.exists(path) and not tf.io.gfile.isdir(path) else None


def record_class_names(model_dir: str, labels_path: Optional[str]) -> None:
  """Keeps the class names the run trains with (the data's labels file, as it is) in model_dir/labels.txt."""
  if not labels_path or os.path.abspath(labels_path) == os.path.abspath(os.path.join(model_dir, CLASS_NAMES_FILE)):
    return
  record = files.read_record(labels_path, lambda text: text, 'labels file')
  if record.value is None:
    return
  target = os.path.join(model_dir, CLASS_NAMES_FILE)
  if files.read_record(target, lambda text: text).value != record.value:
    files.atomic_write(target, record.value)
    logging.info('Class names of this run (from %s) kept in %s.', labels_path, target)


def _saved_value(saved: Mapping[str, Any], key: str) -> Any:
  """A key the run's params.yaml predates had the value that computed as before: the v1.5 architecture for the
  Variant params (stride_in_1x1, ...), else the default."""
  if key in saved:
    return saved[key]
  return architectures.VARIANT_DEFAULTS.get(key, resnet_config.RESNET_CFG.get(key))


def _differences(saved: Mapping[str, Any], current: Mapping[str, Any]) -> List[Tuple[str, Any, Any]]:
  return [(k, _saved_value(saved, k), current.get(k)) for k in sorted(set(saved) | set(current))
          if k in current and _saved_value(saved, k) != current.get(k)]


def check_and_record(params: Any, record: bool) -> None:
  """Raises ModelDirMismatch when model_dir's checkpoints were trained with other model params; with ``record``,
  writes params.yaml (keeping the previous one in params_history/ when it differs). Chief-only writes are not a
  concern here: every worker would write identical content atomically."""
  model_dir = params['model_dir']
  path = os.path.join(model_dir, PARAMS_FILE)
  current = params.as_dict() if hasattr(params, 'as_dict') else dict(params)
  saved = _read_saved(path)
  if record and _read_record(path).damaged:  # kept, never deleted: the new params.yaml replaces it
    kept = os.path.join(model_dir, HISTORY_DIR, f'params-{_stamp()}.damaged')
    tf.io.gfile.makedirs(os.path.dirname(kept))
    try:
      tf.io.gfile.rename(path, kept, overwrite=True)
      logging.warning('The damaged %s is kept as %s.', path, kept)
    except tf.errors.NotFoundError:  # another worker of this run set it aside first
      pass
  changed = _differences(saved, current) if saved is not None else []
  if saved is not None and checkpoints.has_checkpoint(model_dir):
    model_changes = [(k, old, new) for k, old, new in changed if k in resnet_config.MODEL_PARAMS]
    if model_changes:
      listed = '; '.join(f'{k}: {old!r} in {path}, {new!r} now' for k, old, new in model_changes)
      raise ModelDirMismatch(
          f'--model_dir={model_dir} holds checkpoints of another model ({listed}). Use a new --model_dir for this '
          f'model, or --resnet_checkpoint={model_dir} with a new --model_dir to warm-start from that run.')
  if record and saved is not None and checkpoints.has_checkpoint(model_dir):
    optimizer_changes = [(k, old, new) for k, old, new in changed if k in OPTIMIZER_STATE_PARAMS]
    if optimizer_changes:  # the checkpoint's slots belong to its optimizer: another would misread them
      listed = '; '.join(f'{k}: {old!r} in {path}, {new!r} now' for k, old, new in optimizer_changes)
      raise ModelDirMismatch(
          f'--model_dir={model_dir} holds checkpoints trained with another optimizer ({listed}), whose state (its '
          'slots and step count) this one cannot continue from. Resume with the run\'s optimizer, or start a new '
          f'--model_dir with --resnet_checkpoint={model_dir} (its weights, a fresh optimizer).')
  if not record or (saved is not None and not changed):
    return
  if saved is not None:
    kept = os.path.join(model_dir, HISTORY_DIR, f'params-{_stamp()}.yaml')
    files.atomic_write(kept, params_yaml.params_to_yaml_string(saved))
    logging.info('params changed since the last run (%s); previous params kept as %s.',
                 ', '.join(f'{k}: {old!r} -> {new!r}' for k, old, new in changed), kept)
  params_files.save_params(current, path)


# The params that decide what the optimizer's checkpointed state means: training may not resume under others.
OPTIMIZER_STATE_PARAMS = ('optimizer', 'enable_lars')


def _stamp() -> str:
  return datetime.datetime.now(datetime.timezone.utc).strftime('%Y%m%dT%H%M%S.%fZ')
