"""What a finished run supplies to eval, predict and export: one declared table, and the checks that keep those
modes on the run's own model, data and class names.

``--mode=eval|predict|export --model_dir=RUN`` needs nothing restated. Every value that changes what the model
computes, which data it reads or where eval ends comes from ``RUN/params.yaml`` (written when its training started)
unless the user gives it (a flag, an override or a config file). Each taken value is logged, and so is each given
one that differs from the run's. How the run ran (cluster, strategy, batch sizes, export and predict paths) is not
taken: another machine evaluates the same model.

Precision is the run's: eval measures, and export serves, what training computed (a bfloat16 run exports a
bfloat16 SavedModel, as the reference does); ``--precision=float32`` exports a float32 one from any run.
"""
import dataclasses
import json
import os
from typing import Any, Dict, Mapping, Optional, Sequence, Set, Tuple

from absl import logging

from official_input import dataset_info
from params import merging
from params import resnet_config
from resnet.evaluation import class_names
from resnet.run_dir import model_dir as model_dir_lib
from resnet.estimator import checkpoints
from resnet.estimator import files


@dataclasses.dataclass(frozen=True)
class RunValue:
  """A params key a finished run supplies, and why it matters to eval, predict or export."""
  key: str
  why: str
  # Taken only where the data does not say (its summary.json is gone): the data's own counts win.
  fallback: bool = False
  # Not taken when the user gives one of these keys (a count of the run's data does not describe other data).
  unless_given: Tuple[str, ...] = ()


SUPPLIED: Tuple[RunValue, ...] = (
    *(RunValue(key, 'the model: its variables and what they compute') for key in resnet_config.MODEL_PARAMS),
    RunValue('precision', 'the arithmetic the model trained in: eval measures, and export serves, that model'),
    RunValue('image_size', 'the size eval, predict and export preprocess to (with eval_image_size)'),
    RunValue('eval_image_size', 'the size eval, predict and export preprocess to'),
    RunValue('data_dir', 'the records it trained and evaluated on'),
    RunValue('labels_file', 'the class names it trained with'),
    RunValue('num_eval_images', 'the validation images its evaluations counted', unless_given=('data_dir',)),
    RunValue('num_train_images', 'the size of its training set', fallback=True),
    RunValue('train_steps', 'where eval of the run ends: after the checkpoint at its final step'),
    RunValue('moving_average_decay', 'whether eval and export read the moving-average weights'),
    RunValue('export_moving_average', 'which weights its export serves'),
    RunValue('label_smoothing', "the targets of the eval loss"),
    RunValue('task', 'what its labels are: one class per image, or any number (sigmoids, thresholds, mAP)'),
    RunValue('loss', 'the eval loss (and how TTA averages the views)'),
    RunValue('bce_target_threshold', "the targets of the eval loss", unless_given=('loss',)),
    RunValue('weight_decay', "the eval loss's weight-decay term"),
    RunValue('weight_decay_biases', "which variables the eval loss's weight-decay term covers"),
    RunValue('enable_lars', 'whether the eval loss has a weight-decay term (LARS applies it itself)'),
    RunValue('optimizer', 'whether the eval loss has a weight-decay term (AdamW and LAMB apply it themselves)'),
    RunValue('best_metric', 'the metric that chooses best/ (continuous eval updates it)'),
    RunValue('best_metric_goal', 'whether best_metric is better high or low'),
)
SUPPLIED_KEYS = tuple(entry.key for entry in SUPPLIED)
# The modes that read a finished run.
MODES = ('eval', 'predict', 'export')


def fills(given: Set[str]) -> Tuple[merging.Fill, merging.Fill]:
  """(run values, fallbacks): two params fills for a run's params. The first takes SUPPLIED's values the user did
  not give from model_dir's params.yaml and goes before the data is read; the second fills the ``fallback``
  entries the data left unset and goes after it."""
  def recorded(values: Mapping[str, Any]) -> Dict[str, Any]:
    model_dir = values['model_dir']
    return (model_dir_lib.recorded_params(model_dir) if model_dir else None) or {}

  def run_values(values: Mapping[str, Any]) -> Dict[str, Any]:
    run = recorded(values)
    if not run:
      return {}
    taken, kept = {}, []
    for entry in SUPPLIED:
      if entry.fallback or entry.key not in run:
        continue
      if entry.key in given:
        if run[entry.key] != values[entry.key]:
          kept.append(f'{entry.key}={values[entry.key]!r} (the run: {run[entry.key]!r})')
      elif not any(key in given for key in entry.unless_given):
        taken[entry.key] = run[entry.key]
    source = os.path.join(values['model_dir'], model_dir_lib.PARAMS_FILE)
    if taken:
      logging.info('From the run in %s: %s', source, ', '.join(f'{k}={v!r}' for k, v in taken.items()))
    if kept:
      logging.info('Given, instead of the run\'s value in %s: %s', source, ', '.join(kept))
    return taken

  def fallbacks(values: Mapping[str, Any]) -> Dict[str, Any]:
    run = recorded(values)
    taken = {entry.key: run[entry.key] for entry in SUPPLIED
             if entry.fallback and entry.key not in given and values[entry.key] is None
             and run.get(entry.key) is not None}
    if taken:
      logging.info('From the run in %s (its data says nothing): %s', values['model_dir'],
                   ', '.join(f'{k}={v!r}' for k, v in taken.items()))
    return taken

  return run_values, fallbacks


def check_data(params: Mapping[str, Any], mode: str) -> None:
  """Synthetic data is never a silent stand-in for a run's real data: eval, or predict without images, of a run that
  trained on records, with no data_dir now, is refused before anything is written to the run. Predict's class names
  must be the training run's (class_names.check_class_names_against_training)."""
  _check_real_data(params, mode)
  if mode == 'predict':
    class_names.check_class_names_against_training(params, model_dir_lib.recorded_params(params['model_dir']))


def _check_real_data(params: Mapping[str, Any], mode: str) -> None:
  reads_records = mode == 'eval' or (mode == 'predict' and not params['predict_input'])
  if not reads_records or not dataset_info.is_synthetic(params['data_dir']):
    return
  run = model_dir_lib.recorded_params(params['model_dir'])
  if run is None and checkpoints.has_checkpoint(params['model_dir']):
    raise ValueError(f'--mode={mode}: the run in {params["model_dir"]} has no readable params.yaml, so the data it '
                     'trained on is unknown, and this run has no data_dir (synthetic data): its metrics could describe '
                     'random images in place of the run\'s records. Give --data_dir (the run\'s records), or copy '
                     'its params.yaml back (a run that trained on synthetic data says data_dir: null there).')
  trained_on = (run or {}).get('data_dir')
  if not dataset_info.is_synthetic(trained_on):
    raise ValueError(f'--mode={mode}: the run in {params["model_dir"]} trained on the records in {trained_on}, but '
                     'this run has no data_dir (synthetic data): its metrics would describe random images and '
                     f'overwrite the run\'s records. Give --data_dir (where those records are now){"" if mode == "eval" else ", or --predict_input=GLOB"}.')
  logging.warning('--mode=%s on synthetic data (data_dir unset, as the run in %s trained): the numbers describe '
                  'random images, not any real data.', mode, params['model_dir'])


# ------------------------------------------------------------------------------------------------ the run's end
ENDED_FILE = 'training_ended.json'


def record_end(model_dir: str, step: int, why: str) -> None:
  """Written by the chief when training ends on its own (train_steps reached, early stopping): continuous eval of
  the run then ends after evaluating that step, whatever train_steps says."""
  files.atomic_write(os.path.join(model_dir, ENDED_FILE), json.dumps({'global_step': int(step), 'why': why}))


def clear_end(model_dir: str) -> None:
  """Training starts (or resumes): the run has not ended."""
  files.remove_quietly(os.path.join(model_dir, ENDED_FILE))


def final_step(params: Mapping[str, Any]) -> Optional[int]:
  """The step after which eval of the run ends: where its training ended on its own, else train_steps."""
  record = files.read_json_record(os.path.join(params['model_dir'], ENDED_FILE))
  if isinstance(record.value, dict) and isinstance(record.value.get('global_step'), int):
    return min(record.value['global_step'], params['train_steps'])
  if record.problem:
    logging.log_first_n(logging.WARNING, '%s: eval ends after the checkpoint at train_steps=%d.', 1, record.problem,
                        params['train_steps'])
  return params['train_steps']


def given_keys(given: Sequence[str], configs: Sequence[Mapping[str, Any]]) -> Set[str]:
  """The keys the user gave: on the command line and in config files (a config file is the user's choice too)."""
  return set(resnet_config.ALIASES.get(k, k) for k in given).union(*(set(c) for c in configs))
