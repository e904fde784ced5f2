"""The run in TensorBoard's HParams dashboard: its params when training starts, its best metric when it ends.

``tensorboard --logdir runs/`` compares the runs under ``runs/`` by their params (table, parallel coordinates,
scatter plots) when each run's folder holds a session-start summary (``hp.hparams``). Each training run writes one,
at its start (step 0 of model_dir's own events), with the params that tell runs apart: ``KEY_PARAMS`` (the recipe's
key ones, always), and every other param whose value differs from the defaults, except ``NOT_COMPARED`` (where the
run is, where it writes, the cluster: they say where a run ran, not how it trained). Runs with equal params form one
session group, so that repeated unseeded runs of one setting show as one row with their spread.

The metrics are ordinary scalars the run writes anyway, paired by TensorBoard with the session of the folder above:
each evaluation's ``eval/top_1_accuracy`` (``mAP`` for multi-label runs), ``eval/loss`` and the rest (the dashboard
shows a metric's last value: the final evaluation), plus ``eval/best/<best_metric>``, written when training ends
from ``best/``'s record (the value of the checkpoint best/ keeps and export_best exports).

No experiment config (``hp.hparams_config``) is written: TensorBoard takes the first one it finds in the whole
logdir as the experiment's list of params, so runs that changed other params than that run would lose their
columns. Without one, the dashboard lists the union of every session's params and every scalar tag as metrics.

A resumed run keeps its session: a second session-start in the same folder would be a second row for one run (or
ignored, depending on the reader). ``SESSION_FILE`` records the session written, and its presence means "written".
Params changed on resume (e.g. a longer train_steps) are in params_history/ (``model_dir``), not in the session.
"""
import json
import os
import time
from typing import Any, Dict, Mapping, Optional, Union

from absl import logging
import numpy as np

from params import resnet_config
from resnet.estimator import best_checkpoint
from resnet.estimator import files

SESSION_FILE = 'hparams_session.json'
BEST_TAG = 'best/{metric}'   # in the eval writer's folder (eval/), beside the evaluations' own scalars
# The recipe's key params: a column in every run's row, whether or not the run changed them.
KEY_PARAMS = ('resnet_depth', 'image_size', 'train_batch_size', 'train_steps', 'optimizer', 'base_learning_rate',
              'lr_schedule', 'weight_decay', 'label_smoothing')
# Where the run is, what it writes besides training, the cluster and the profiler: not how it trained.
NOT_COMPARED = ('model_dir', 'export_dir', 'eval_checkpoint', 'eval_timeout', 'predict_input', 'predict_output',
                'predict_top_k', 'predict_tflite', 'predict_onnx', 'tpu', 'gcp_project', 'tpu_zone', 'num_cores',
                'worker_hosts', 'task_index', 'profiler_port', 'profile_every_n_steps', 'profile_duration_ms',
                'profile_steps')
HParamValue = Union[bool, int, float, str]


def _value(value: Any) -> HParamValue:
  """A params value as the dashboard takes it (bool, number or string): unset is 'null', a list its JSON."""
  if isinstance(value, (bool, int, float, str)):
    return value
  if value is None:
    return 'null'
  return json.dumps(value)


def run_hparams(params: Mapping[str, Any]) -> Dict[str, HParamValue]:
  """The params a run shows in the dashboard: KEY_PARAMS, and those that differ from the defaults."""
  values = params.as_dict() if hasattr(params, 'as_dict') else dict(params)
  shown = {key: values[key] for key in KEY_PARAMS if key in values}
  shown.update({key: value for key, value in values.items()
                if key not in NOT_COMPARED and value != resnet_config.RESNET_CFG.get(key)})
  return {key: _value(value) for key, value in sorted(shown.items())}


def read_session(model_dir: str) -> Optional[Dict[str, Any]]:
  """The session this run wrote (SESSION_FILE), or None."""
  return files.read_json_record(os.path.join(model_dir, SESSION_FILE), 'hparams session record').value


def write_session(estimator: Any, params: Mapping[str, Any]) -> bool:
  """Writes the run's session-start summary to model_dir's events (the chief's; a no-op writer elsewhere), once per
  run: False when SESSION_FILE says it was written by an earlier start of this run."""
  from tensorboard.plugins.hparams import summary_v2  # pylint: disable=g-import-not-at-top
  model_dir = params['model_dir']
  if read_session(model_dir) is not None:
    logging.info('%s: the run\'s HParams session was written when it started; kept.',
                 os.path.join(model_dir, SESSION_FILE))
    return False
  hparams, start = run_hparams(params), time.time()
  value = summary_v2.hparams_pb(hparams, start_time_secs=start).value[0]
  estimator.write_tensors('train', 0, {value.tag: (np.zeros([0], np.float32), value.metadata)})
  files.atomic_write(os.path.join(model_dir, SESSION_FILE),
                     json.dumps({'start_time_secs': start, 'hparams': hparams}, indent=1, sort_keys=True))
  logging.info('HParams session for TensorBoard (%s): %s.', os.path.join(model_dir, SESSION_FILE),
               ', '.join(f'{k}={v}' for k, v in hparams.items()))
  return True


def write_best(estimator: Any, params: Mapping[str, Any], step: int) -> Optional[float]:
  """Writes ``eval/best/<metric>`` at ``step`` from best/'s record (what best/ keeps); None when there is none."""
  record = files.read_json_record(os.path.join(params['model_dir'], best_checkpoint.BEST_DIR,
                                               best_checkpoint.RESULTS_FILE), 'best checkpoint record').value
  metric = record.get('best_metric') if isinstance(record, dict) else None
  if metric is None or not isinstance(record.get(metric), (int, float)):
    return None
  estimator.write_scalars('eval', step, {BEST_TAG.format(metric=metric): float(record[metric])})
  return float(record[metric])
