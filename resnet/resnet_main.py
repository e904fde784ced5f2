r"""Train, evaluate, predict with and export ResNet: the whole program, top to bottom.

  python resnet/resnet_main.py --mode=train_and_eval --data_dir=DIR --model_dir=RUN \
      --param_overrides=train_steps=42,iterations_per_loop=6 --resnet_checkpoint=CKPT --export_dir=EXPORT

flags -> params (defaults < --config_file < --param_overrides < explicit flags; filled from the data, or for eval,
predict and export from the finished run; validated, locked) -> model_dir check and params.yaml -> determinism (with
random_seed) -> strategy -> Estimator(resnet_model_fn) -> one call per mode. What each mode hands the runner
(inputs, hooks, best/) is made in ``wiring``; the export in ``export/exporting``; errors reach the console through
``console``.
"""
import contextlib
import os
import sys

if __package__ in (None, ''):  # `python resnet/resnet_main.py` from anywhere: import from the repo root.
  _ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  sys.path[:] = [p for p in sys.path if os.path.abspath(p or '.') != os.path.dirname(os.path.abspath(__file__))]
  sys.path.insert(0, _ROOT)
from resnet import process_env  # pylint: disable=g-import-not-at-top,unused-import  # before TensorFlow

from typing import Any, Optional  # pylint: disable=g-import-not-at-top,g-bad-import-order

from absl import app
from absl import flags
from absl import logging
import tensorflow as tf

from params import params_dict
from params import params_yaml
from params import resnet_config
from resnet.run_setup import checkpoint_fit
from resnet import console
from resnet import determinism
from resnet.run_setup import finished_run
from resnet.run_dir import model_dir as model_dir_lib
from resnet import resnet_flags
from resnet.run_dir import run_lock
from resnet import wiring
from resnet.estimator import checkpoints as checkpoints_lib
from resnet.estimator import distribution
from resnet.estimator.estimator import Estimator, NoCheckpointError
from resnet.estimator.run_config import RunConfig
from resnet.evaluation import class_names
from resnet.evaluation import predictions as predictions_lib
from resnet.predict import source as prediction_source
from resnet.export import exporting
from resnet.training import resnet_model_fn

FLAGS = flags.FLAGS
resnet_flags.define_flags()
flags.adopt_module_key_flags(resnet_flags)  # so that --help lists them, not only --helpfull

Params = params_dict.ParamsDict


# ------------------------------------------------------------------------------------------------ modes
def train(estimator: Estimator, params: Params) -> None:
  if params.export_best:
    raise ValueError('export_best=true needs evaluations to pick the best checkpoint: use mode=train_and_eval, or '
                     'export the best of a finished run with --mode=export --export_best=true.')
  wiring.training_starts(estimator, params)
  source = wiring.train_input(params)
  estimator.train(source.input_fn, max_steps=params.train_steps, hooks=wiring.train_hooks(params, estimator, source))
  wiring.training_ended(estimator, params)
  exporting.export(estimator, params)


def train_and_eval(estimator: Estimator, params: Params) -> None:
  wiring.training_starts(estimator, params)
  source = wiring.train_input(params)
  best = wiring.best_checkpoint(estimator, params)
  estimator.train_and_evaluate(source.input_fn, wiring.eval_source(params).input_fn,
                               max_steps=params.train_steps, steps_per_eval=params.steps_per_eval,
                               hooks=wiring.train_hooks(params, estimator, source),
                               eval_weights=wiring.eval_weights(estimator), eval_hooks=wiring.eval_hooks(params),
                               best=best, early_stopping_evals=params.early_stopping_evals)
  wiring.training_ended(estimator, params)
  exporting.export(estimator, params, best)


def evaluate(estimator: Estimator, params: Params) -> None:
  eval_input = wiring.eval_source(params).input_fn
  if params.eval_checkpoint:  # one-shot
    estimator.evaluate(eval_input, checkpoint_path=checkpoints_lib.resolve(params.eval_checkpoint),
                       weights=wiring.eval_weights(estimator), hooks=wiring.eval_hooks(params))
    return
  try:
    estimator.evaluate_continuously(eval_input, timeout=params.eval_timeout,
                                    stop_at_step=lambda: finished_run.final_step(params),
                                    weights=wiring.eval_weights(estimator), hooks=wiring.eval_hooks(params),
                                    best=wiring.best_checkpoint(estimator, params))
  except NoCheckpointError as e:
    raise NoCheckpointError(f'{e} Raise --eval_timeout to wait longer, or set --eval_checkpoint.') from None


def predict(estimator: Estimator, params: Params) -> str:
  source = prediction_source.PredictionSource(estimator, params)   # the images, the weights or file, the decisions
  rows = source.task.prediction_writer(source.decisions, class_names.read_class_names(params))
  written = predictions_lib.write(source.predictions(wiring.eval_weights(estimator)), source.output, rows,
                                  source.limit)
  print(f'Wrote {written} predictions to {source.output}')
  report = rows.labelled.write(source.output)
  if report:
    print(f'Labelled data: per-class report in {report}')
  return source.output


def export_only(estimator: Estimator, params: Params) -> Optional[str]:
  """--mode=export: model_dir's latest checkpoint; in a new model_dir, the --resnet_checkpoint weights as they are
  (a Keras/torchvision/timm file becomes a SavedModel without training). Those are saved first as model_dir's
  step-0 checkpoint, so the export and any later eval or predict of model_dir read the same weights."""
  if not estimator.latest_checkpoint():
    if not params.resnet_checkpoint:
      raise NoCheckpointError(f'--mode=export: {params.model_dir} holds no checkpoint to export. Point --model_dir '
                              'at a trained run, or give --resnet_checkpoint to export those weights as they are.')
    wiring.warm_start_if_new(estimator, params)
    logging.info('Saved the warm-started weights as %s.', estimator.save())
  return exporting.export(estimator, params)


MODES = {'train': train, 'train_and_eval': train_and_eval, 'eval': evaluate, 'predict': predict,
         'export': export_only}


# ------------------------------------------------------------------------------------------------ set-up
def make_estimator(params: Params, strategy: tf.distribute.Strategy) -> Estimator:
  return Estimator(resnet_model_fn.resnet_model_fn, RunConfig.from_params(params), params.as_dict(), strategy,
                   restore_check=checkpoint_fit.restore_check(params))


def run(mode: str, params: Params) -> None:
  """One run of ``mode``: determinism (with a random_seed), strategy, estimator, then the mode's function."""
  if params.random_seed is not None:  # before anything draws a random number or builds a kernel
    determinism.make_deterministic(params.random_seed)
  try:
    strategy = distribution.get_strategy(params.strategy, tpu=params.tpu, use_tpu=params.use_tpu,
                                         zone=params.tpu_zone, project=params.gcp_project,
                                         num_cores=params.num_cores)
  except distribution.TPUUnreachableError as e:  # name our flags
    raise distribution.TPUUnreachableError(
        f'{e} The flags: --tpu, --tpu_zone, --gcp_project; --use_tpu=false runs locally.') from e
  estimator = make_estimator(params, strategy)
  if params.profiler_port:
    from resnet import profiling  # pylint: disable=g-import-not-at-top
    profiling.start_profiler_server(params.profiler_port)
  MODES[mode](estimator, params)


def main(argv: Any) -> None:
  del argv
  console.quiet_library_info_logs()
  mode = FLAGS.mode
  with console.reported_errors(also=(KeyError,)):  # an unknown params key: named with the close ones
    params = resnet_flags.params_from_flags(FLAGS)
    if FLAGS.dump_params:
      print(params_yaml.params_to_yaml_string(params), end='')
      return
    if not params.model_dir:
      raise app.UsageError('--model_dir is required (checkpoints, summaries and params.yaml go there).')
    logging.info('Effective params:\n%s', params_yaml.params_to_yaml_string(params))
    for unused in resnet_config.unused_in_mode(resnet_flags.given_param_keys(FLAGS), mode):
      logging.warning('%s: remove it, or run that mode.', unused)
    if mode == 'export' and not params.export_dir:
      raise ValueError('--mode=export needs --export_dir (where the SavedModel goes).')
  with console.reported_errors() as outcome:
    distribution.configure_cluster(params.worker_hosts, params.task_index)
    exporting.check_needs(params, mode, chief=distribution.is_chief_task())  # before anything trains
    # A new model_dir's export writes the warm-started weights as its first checkpoint: a run like training's.
    training = mode in ('train', 'train_and_eval') or (mode == 'export' and not checkpoints_lib.has_checkpoint(
        params.model_dir))
    # One training run per model_dir: its chief holds the lock (the other workers are the same run).
    lock = (run_lock.training_lock(params.model_dir) if training and distribution.is_chief_task()
            else contextlib.nullcontext())
    with lock:
      # Refuses a model_dir that holds another model, or a resume its first start's choices do not fit, before
      # anything is written; training records its params.
      if training:
        wiring.check_resume(params)
      model_dir_lib.check_and_record(params, record=training)
      finished_run.check_data(params, mode)
      run(mode, params)
  if outcome.completed and mode in ('train', 'train_and_eval'):
    console.print_profile_verdict(params.model_dir, bool(params.profile_every_n_steps or params.profile_steps))
    print(f'TensorBoard logs: tensorboard --logdir {params.model_dir}')


def run_main() -> None:
  app.run(main)


if __name__ == '__main__':
  run_main()
