"""A model_dir holds one run: the params that define the model cannot change under its checkpoints.

Before anything is written, a run in an existing model_dir compares the params that define the model's variables
(``resnet_config.MODEL_PARAMS``: depth, classes, v2, layout, ...) with the saved ``params.yaml``. A mismatch with
checkpoints present is one error naming each param, both values and the fix. Other changes (train_steps,
batch size, ...) are fine on resume: the new params.yaml is written, and the earlier one is kept under
``params_history/`` with a log line naming what changed.
"""
import datetime
import os
from typing import Any, Dict, List, Mapping, Optional, Tuple

from absl import logging
import tensorflow as tf

from params import params_yaml
from resnet import params_files
from params import resnet_config
from params import architectures
from resnet.estimator import files

PARAMS_FILE = 'params.yaml'
HISTORY_DIR = 'params_history'


class ModelDirMismatch(ValueError):
  """model_dir's checkpoints belong to a model defined by other params."""


def recorded_params(model_dir: str) -> Optional[Dict[str, Any]]:
  """The params the training run of ``model_dir`` recorded (params.yaml), or None."""
  return _read_saved(os.path.join(model_dir, PARAMS_FILE))


def _read_saved(path: str) -> Optional[Dict[str, Any]]:
  if not tf.io.gfile.exists(path):
    return None
  saved = params_files.read_params(path).as_dict()
  # A run recorded before a rename holds the reference's name (skip_host_call): compare it under ours.
  return {resnet_config.ALIASES.get(key, key): value for key, value in saved.items()}


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
  changed = _differences(saved, current) if saved is not None else []
  if saved is not None and tf.train.latest_checkpoint(model_dir):
    model_changes = [(k, old, new) for k, old, new in changed if k in resnet_config.MODEL_PARAMS]
    if model_changes:
      listed = '; '.join(f'{k}: {old!r} in {path}, {new!r} now' for k, old, new in model_changes)
      raise ModelDirMismatch(
          f'--model_dir={model_dir} holds checkpoints of another model ({listed}). Use a new --model_dir for this '
          f'model, or --resnet_checkpoint={model_dir} with a new --model_dir to warm-start from that run.')
  if not record or (saved is not None and not changed):
    return
  if saved is not None:
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime('%Y%m%dT%H%M%S.%fZ')
    kept = os.path.join(model_dir, HISTORY_DIR, f'params-{stamp}.yaml')
    files.atomic_write(kept, params_yaml.params_to_yaml_string(saved))
    logging.info('params changed since the last run (%s); previous params kept as %s.',
                 ', '.join(f'{k}: {old!r} -> {new!r}' for k, old, new in changed), kept)
  params_files.save_params(current, path)
