r"""Train, evaluate, predict with and export ResNet: the whole program, top to bottom.

  python resnet/resnet_main.py --mode=train_and_eval --data_dir=DIR --model_dir=RUN \
      --param_overrides=train_steps=42,iterations_per_loop=6 --resnet_checkpoint=CKPT --export_dir=EXPORT

flags -> params (defaults < --config_file < --param_overrides < explicit flags; filled from the data, validated,
locked) -> model_dir check and params.yaml -> determinism (with random_seed) -> strategy -> Estimator(resnet_model_fn)
-> one call per mode.
"""
import contextlib
import logging as py_logging
import math
import os
import re
import sys

if __package__ in (None, ''):  # `python resnet/resnet_main.py` from anywhere: import from the repo root.
  _ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  sys.path[:] = [p for p in sys.path if os.path.abspath(p or '.') != os.path.dirname(os.path.abspath(__file__))]
  sys.path.insert(0, _ROOT)
# TensorFlow's C++ INFO and WARNING lines (start-up banner, graph-optimizer notes such as 'Skipping loop
# optimization' or 'GeneratorDatasetOp ... will not be optimized') name internals a user cannot act on. Errors stay,
# and so do the input pipeline's own warnings (written to stderr directly). TF_CPP_MIN_LOG_LEVEL=0 shows all.
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
# oneDNN kernels: TensorFlow turns them on by itself only on CPUs with AVX-512 VNNI/BF16 or AMX. On AVX2-only CPUs
# (many laptops and older servers) training runs ~5x slower without them (--config_file=small_data, ResNet-18 at
# 64 px, batch 64: 19 vs 104 img/s on a 2-core AVX2 EPYC) and channels_first convolutions fail to run.
# TF_ENABLE_ONEDNN_OPTS=0 turns them off.
os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '1')

from typing import Any, List, Optional  # pylint: disable=g-import-not-at-top

from absl import app
from absl import flags
from absl import logging
import tensorflow as tf

from official_input import imagenet_input
from official_input import resnet_preprocessing
from params import params_dict
from params import params_yaml
from params import resnet_config
from resnet import determinism
from resnet import model_dir as model_dir_lib
from resnet import resnet_flags
from resnet import run_lock
from resnet import run_params
from resnet.estimator import best_checkpoint as best_checkpoint_lib
from resnet.estimator import checkpoints as checkpoints_lib
from resnet.estimator import distribution
from resnet.estimator import files
from resnet.estimator import hooks as hooks_lib
from resnet.estimator.estimator import Estimator, NoCheckpointError, TrainingInterrupted
from resnet.estimator.run_config import RunConfig
from resnet.evaluation import class_names
from resnet.evaluation import predictions as predictions_lib
from resnet.training import lr_schedules
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
  warm_start_if_new(estimator, params)
  source = input_source(params, 'train')
  advise_on_recipe(params)
  estimator.train(source.input_fn, max_steps=params.train_steps, hooks=make_hooks(params, estimator, source))
  export(estimator, params)


def train_and_eval(estimator: Estimator, params: Params) -> None:
  warm_start_if_new(estimator, params)
  source = input_source(params, 'train')
  advise_on_recipe(params)
  best = best_checkpoint(estimator, params)
  estimator.train_and_evaluate(source.input_fn, eval_source(params).input_fn,
                               max_steps=params.train_steps, steps_per_eval=params.steps_per_eval,
                               hooks=make_hooks(params, estimator, source), eval_weights=eval_weights(estimator),
                               eval_hooks=eval_hooks(params), best=best,
                               early_stopping_evals=params.early_stopping_evals)
  export(estimator, params, best)


def evaluate(estimator: Estimator, params: Params) -> None:
  eval_input = eval_source(params).input_fn
  if params.eval_checkpoint:  # one-shot
    estimator.evaluate(eval_input, checkpoint_path=checkpoints_lib.resolve(params.eval_checkpoint),
                       weights=eval_weights(estimator), hooks=eval_hooks(params))
    return
  try:
    estimator.evaluate_continuously(eval_input, timeout=params.eval_timeout, stop_at_step=params.train_steps,
                                    weights=eval_weights(estimator), hooks=eval_hooks(params),
                                    best=best_checkpoint(estimator, params))
  except NoCheckpointError as e:
    raise NoCheckpointError(f'{e} Raise --eval_timeout to wait longer, or set --eval_checkpoint.') from None


def predict(estimator: Estimator, params: Params) -> str:
  class_names.check_class_names_against_training(params, model_dir_lib.recorded_params(params.model_dir))
  size = resnet_preprocessing.image_size(params, training=False)
  dtype = tf.float32 if params.predict_tflite else tf.as_dtype(params.precision)  # a .tflite takes float32
  if params.predict_input:
    source = imagenet_input.ImageFilesInput(params.predict_input, image_size=size, dtype=dtype)
  else:
    split = 'test' if tf.io.gfile.glob(os.path.join(params.data_dir or '', 'test-*')) else 'validation'
    source = imagenet_input.ImageNetInput.from_params(params, split=split, include_filename=True, dtype=dtype)
  output = params.predict_output or os.path.join(params.model_dir, 'predictions.csv')
  labelled = predictions_lib.LabelledPredictions(params)
  if params.predict_tflite:
    predictions = predictions_lib.tflite_predictions(params.predict_tflite, source.input_fn, size,
                                                     params.predict_batch_size, params.num_label_classes)
  else:
    predictions = estimator.predict(source.input_fn)
  rows = predictions_lib.write_predictions(predictions, output, params, labelled)
  print(f'Wrote {rows} predictions to {output}')
  report = labelled.write(output)
  if report:
    print(f'Labelled data: per-class report in {report}')
  return output


def export_only(estimator: Estimator, params: Params) -> Optional[str]:
  """--mode=export: model_dir's latest checkpoint; in a new model_dir, the --resnet_checkpoint weights as they are
  (a Keras/torchvision/timm file becomes a SavedModel without training). Those are saved first as model_dir's
  step-0 checkpoint, so the export and any later eval or predict of model_dir read the same weights."""
  if not estimator.latest_checkpoint():
    if not params.resnet_checkpoint:
      raise NoCheckpointError(f'--mode=export: {params.model_dir} holds no checkpoint to export. Point --model_dir '
                              'at a trained run, or give --resnet_checkpoint to export those weights as they are.')
    warm_start_if_new(estimator, params)
    logging.info('Saved the warm-started weights as %s.', estimator.save())
  return export(estimator, params)


MODES = {'train': train, 'train_and_eval': train_and_eval, 'eval': evaluate, 'predict': predict,
         'export': export_only}


# ------------------------------------------------------------------------------------------------ set-up
def make_estimator(params: Params, strategy: tf.distribute.Strategy) -> Estimator:
  return Estimator(resnet_model_fn.resnet_model_fn, RunConfig.from_params(params), params.as_dict(), strategy)


def input_source(params: Params, split: str) -> imagenet_input.ImageNetInput:
  return imagenet_input.ImageNetInput.from_params(params, split=split)


def eval_source(params: Params) -> imagenet_input.ImageNetInput:
  """The validation split, with file names when misclassified images are listed (they stay on the host)."""
  return imagenet_input.ImageNetInput.from_params(params, split='validation',
                                                  include_filename=params.max_misclassified_rows > 0)


def eval_hooks(params: Params) -> List[Any]:
  if not (resnet_model_fn.per_class_metrics(params) or params.max_misclassified_rows):
    return []
  from resnet.evaluation import eval_report  # pylint: disable=g-import-not-at-top
  return [eval_report.ClassificationReport(class_names.read_class_names(params), class_names.has_background(params),
                                           params.max_misclassified_rows)]


def best_checkpoint(estimator: Estimator, params: Params) -> Optional[best_checkpoint_lib.BestCheckpoint]:
  """model_dir/best/ by best_metric, when kept (or needed: early stopping and export_best compare against it)."""
  if not (params.keep_best_checkpoint or params.early_stopping_evals or params.export_best):
    return None
  return best_checkpoint_lib.BestCheckpoint(params.model_dir, params.best_metric, params.best_metric_goal,
                                            role='writer' if estimator.is_chief else 'follower',
                                            share=estimator.from_chief, companions=(model_dir_lib.PARAMS_FILE,))


def advise_on_recipe(params: Params) -> None:
  """Once per run: small data trained with the ImageNet recipe (its crop and 90-epoch stepwise schedule) does
  much worse than with the small-data or fine-tuning configs."""
  advice = run_params.recipe_advice(params)
  if advice:
    logging.warning('%s', advice)


def make_hooks(params: Params, estimator: Estimator,
               train_source: imagenet_input.ImageNetInput) -> List[hooks_lib.LoopHook]:
  from resnet import profiling  # pylint: disable=g-import-not-at-top
  hooks: List[hooks_lib.LoopHook] = [
      hooks_lib.ExamplesPerSecond(params.train_batch_size, name='images_per_sec', unit='img/s'),
      hooks_lib.CounterLogger('corrupt records skipped', lambda: train_source.skipped_records),
      hooks_lib.CounterLogger('records lost to damaged shards', lambda: train_source.lost_records)]
  if params.stop_on_nan:
    hooks.append(hooks_lib.NanGuard())
  if params.on_divergence != 'off':
    hooks.append(divergence_guard(params))
  profiler = profiling.make_profiler_hook(params) if estimator.is_chief else None
  if profiler is not None:
    hooks.append(profiler)
  return hooks


def divergence_guard(params: Params) -> hooks_lib.DivergenceGuard:
  """Watches the cross-entropy (the loss less weight decay) against a uniform guess: ln(classes), times the class
  weights' mean where they scale the loss (class_weight_normalization=batch_size)."""
  weights = params.class_weights
  scale = 1.0
  if weights and params.class_weight_normalization == 'batch_size':
    scale = max(1.0, sum(weights) / len(weights))
  fixes = [f'a lower base_learning_rate (now {params.base_learning_rate:g})']
  if weights:
    fixes.append('milder class_weights' + (' or class_weight_normalization=weight_sum'
                                            if params.class_weight_normalization == 'batch_size' else ''))
  if params.precision != 'float32':
    fixes.append(f'precision=float32 (now {params.precision})')
  stop = params.on_divergence == 'stop'
  advice = f'Try {", ".join(fixes)}.'
  if stop:
    advice = f'The run stops here: no checkpoint of this loop, nothing exported. {advice} on_divergence=warn goes on.'

  chance = math.log(max(params.num_label_classes, 2)) * scale
  return hooks_lib.DivergenceGuard(chance, lr_schedules.warmup_steps(params), stop=stop,
                                   key=resnet_model_fn.CROSS_ENTROPY, advice=advice)


def eval_weights(estimator: Estimator):
  """Evaluate with the moving-average weights when the run keeps them (as the reference does). A checkpoint
  without averages has them reset to its weights when restored (ema.ModelEMA.not_in_checkpoint)."""
  return resnet_model_fn.averaged_weights(estimator.scope) if estimator.params['moving_average_decay'] else None


def warm_start_if_new(estimator: Estimator, params: Params) -> None:
  """``--resnet_checkpoint`` applies only to a fresh model_dir; a resumed run keeps its own weights."""
  if not params.resnet_checkpoint:
    return
  if estimator.latest_checkpoint():
    logging.info('model_dir already has %s: resuming it, not warm-starting from %s.',
                 estimator.latest_checkpoint(), params.resnet_checkpoint)
    return
  from resnet.weights import warm_start  # pylint: disable=g-import-not-at-top
  estimator.build('train')
  warm_start.warm_start(estimator.scope.get(resnet_model_fn.MODEL), params.resnet_checkpoint,
                        allow_partial=params.allow_partial_warm_start)
  ema = resnet_model_fn.moving_average(estimator.scope)
  if ema is not None:
    ema.reset()  # the average starts from the warm-started weights


def export(estimator: Estimator, params: Params,
           best: Optional[best_checkpoint_lib.BestCheckpoint] = None) -> Optional[str]:
  if not params.export_dir or not estimator.is_chief:
    return None
  checkpoint = None
  if params.export_best:
    if best is None:  # reading only: another job may be updating best/
      best = best_checkpoint_lib.BestCheckpoint(params.model_dir, params.best_metric, params.best_metric_goal,
                                                role='reader')
    checkpoint = best.checkpoint_path
    if checkpoint is None and not best.damaged:
      raise ValueError(f'export_best=true but {params.model_dir}/best/ holds no checkpoint: it is kept by '
                       'train_and_eval (and continuous eval); use mode=train_and_eval, or export_best=false.')
    if checkpoint is not None and tf.io.gfile.exists(checkpoint + '.index'):
      logging.info('Exporting the best checkpoint %s (%s=%.4f).', checkpoint, best.metric, best.value)
    else:
      gone = f'its checkpoint {checkpoint} is gone (removed during the run?)' if checkpoint else 'it is damaged'
      logging.warning('export_best: %s/best/: %s; exporting the latest checkpoint of %s instead.',
                      params.model_dir, gone, params.model_dir)
      checkpoint = None
  assets = None
  if params.add_warmup_requests:
    from resnet.export import serving_warmup  # pylint: disable=g-import-not-at-top

    def warmup_requests(export_dir: str) -> None:
      serving_warmup.write_warmup_requests(export_dir, params.model_name, 'serving_default', 'input',
                                           params.inference_batch_sizes,
                                           resnet_preprocessing.image_size(params, training=False))
    assets = warmup_requests
  weights = resnet_model_fn.averaged_weights(estimator.scope) if params.export_moving_average else None
  quantized = quantized_exports(params)  # the run's images read first: a missing split writes nothing
  path = estimator.export_saved_model(params.export_dir, resnet_model_fn.serving_inputs(params),
                                      checkpoint_path=checkpoint, assets_extra_fn=assets, weights=weights)
  print(f'Exported SavedModel: {path}')
  if params.export_tflite or params.tflite_quantizations:
    export_tflite(estimator, params, path, weights, quantized)
  return path


def quantized_exports(params: Params):
  """What the quantized files need from the run's records (None without tflite_quantizations)."""
  if not params.tflite_quantizations:
    return None
  from resnet.export import host_images  # pylint: disable=g-import-not-at-top
  from resnet.export import tflite_export  # pylint: disable=g-import-not-at-top
  images, labels = host_images.host_images(params, 'validation', params.tflite_eval_images)
  calibration = (host_images.host_images(params, 'train', params.tflite_calibration_images)[0]
                 if 'int8' in params.tflite_quantizations else None)
  return tflite_export.QuantizedExports(params.tflite_quantizations, calibration, images, labels,
                                        params.tflite_min_agreement, params.tflite_int8_io,
                                        params.tflite_float_fallback)


def export_tflite(estimator: Estimator, params: Params, saved_model_dir: str, weights, quantized) -> None:
  """model.tflite, then the quantized files, each measured on the run's own validation images."""
  from resnet.export import tflite_export  # pylint: disable=g-import-not-at-top
  from resnet.export import tflite_report  # pylint: disable=g-import-not-at-top
  report = tflite_export.export_tflite(
      saved_model_dir, estimator.scope.get(resnet_model_fn.MODEL),
      lambda: resnet_model_fn.build_model({**params, 'precision': 'float32'}),
      resnet_preprocessing.image_size(params, training=False), params.precision, weights, quantized)
  print(f'Exported TFLite: {report.path} ({report.bytes / 1e6:.1f} MB, {report.ops} ops; max |probability '
        f'difference| {report.max_difference:.2g} vs its float32 weights, {report.saved_model_difference:.2g} vs '
        f'the SavedModel)')
  if report.measured:
    print(tflite_report.table(report.measured, len(quantized.images)), end='')


# ------------------------------------------------------------------------------------------------ helpers
def _op_error_summary(error: tf.errors.OpError) -> str:
  """The line of a TensorFlow runtime error that says what went wrong (not 'Graph execution error:')."""
  asserted = re.search(r'assertion failed: \[(.*?)\]\s*$', error.message, re.MULTILINE)
  if asserted:  # the input pipeline's own checks (accounting.py) say what is wrong and what to do
    return asserted.group(1).replace("\\'", "'")
  lines = [line.strip() for line in error.message.splitlines() if line.strip()]
  for line in lines:
    if line.split(':', 1)[0].endswith(('Error', 'Exception')) and len(line.split(':', 1)) == 2:
      return line
  informative = [line for line in lines if not line.startswith('[') and not line.endswith(':')]
  return informative[0] if informative else error.message


class _LibraryInfoFilter(py_logging.Filter):
  """Drops INFO records logged from inside TensorFlow/Keras (saver timings, export notes): noise to users."""

  _DIR = os.path.dirname(tf.__file__)
  _PREFIXES = tuple({_DIR + os.sep, os.path.realpath(_DIR) + os.sep})

  def filter(self, record: py_logging.LogRecord) -> bool:
    return record.levelno > py_logging.INFO or not record.pathname.startswith(self._PREFIXES)


def quiet_library_info_logs() -> None:
  logging.get_absl_handler().addFilter(_LibraryInfoFilter())
  py_logging.getLogger('tensorflow').setLevel(py_logging.WARNING)


def _print_profile_verdict(params: Params) -> None:
  if not (params.profile_every_n_steps or params.profile_steps):
    return
  from resnet.estimator import profile_analysis  # pylint: disable=g-import-not-at-top
  try:
    print(profile_analysis.format_report(profile_analysis.analyze_profile(params.model_dir)))
  except profile_analysis.ProfileAnalysisError as e:
    logging.warning('Could not analyse the captured profile: %s', e)


def _exit_on_op_error(e: tf.errors.OpError) -> None:
  logging.error('%s', e.message)
  print(f'error: {_op_error_summary(e)}', file=sys.stderr)
  # tf.data threads may still be inside the pipeline's Python hook; a normal interpreter shutdown can wait on them
  # forever, so leave at once (checkpoints are already on disk or were never written).
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(1)  # pylint: disable=protected-access


# ------------------------------------------------------------------------------------------------ main
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
  quiet_library_info_logs()
  try:
    params = resnet_flags.params_from_flags(FLAGS)
  except (KeyError, ValueError) as e:
    sys.exit(f'error: {e.args[0] if isinstance(e, KeyError) and e.args else e}')
  if FLAGS.dump_params:
    print(params_yaml.params_to_yaml_string(params), end='')
    return
  if not params.model_dir:
    raise app.UsageError('--model_dir is required (checkpoints, summaries and params.yaml go there).')
  logging.info('Effective params:\n%s', params_yaml.params_to_yaml_string(params))
  mode = FLAGS.mode
  for unused in resnet_config.unused_in_mode(resnet_flags.given_param_keys(FLAGS), mode):
    logging.warning('%s: remove it, or run that mode.', unused)
  if mode == 'export' and not params.export_dir:
    sys.exit('error: --mode=export needs --export_dir (where the SavedModel goes).')
  try:
    distribution.configure_cluster(params.worker_hosts, params.task_index)
    # A new model_dir's export writes the warm-started weights as its first checkpoint: a run like training's.
    training = mode in ('train', 'train_and_eval') or (mode == 'export'
                                                       and not tf.train.latest_checkpoint(params.model_dir))
    # One training run per model_dir: its chief holds the lock (the other workers are the same run).
    lock = (run_lock.training_lock(params.model_dir) if training and distribution.is_chief_task()
            else contextlib.nullcontext())
    with lock:
      # Refuses a model_dir that holds another model, before anything is written; training records its params.
      model_dir_lib.check_and_record(params, record=training)
      run(mode, params)
  except TrainingInterrupted as e:  # SIGTERM/SIGINT: a checkpoint was saved; a clean exit
    logging.warning('%s', e)
    print(e)
    return
  except (hooks_lib.DivergenceError, FileNotFoundError, files.WriteError, model_dir_lib.ModelDirMismatch,
          run_lock.ModelDirLocked, RuntimeError, ValueError) as e:
    logging.error('%s', e)
    sys.exit(f'error: {e}')
  except tf.errors.OpError as e:  # raised inside the input pipeline or the step: data or config mismatch
    _exit_on_op_error(e)
  if mode in ('train', 'train_and_eval'):
    _print_profile_verdict(params)
    print(f'TensorBoard logs: tensorboard --logdir {params.model_dir}')


def run_main() -> None:
  app.run(main)


if __name__ == '__main__':
  run_main()
