"""Measuring one row: our Estimator, or Keras ``compile``/``fit``, timed over windows after an untimed warm-up."""
import gc
import shutil
import tempfile
import time
import warnings
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from absl import logging

from tools.train_bench.machine import Mark, detect_peak
from tools.train_bench.rows import KERAS_POLICIES, VARIANT_OVERRIDES, BenchConfig, Row, row_name


def base_params(cfg: BenchConfig, precision: str, data_dir: Optional[str] = None,
                **overrides: Any) -> Mapping[str, Any]:
  """The params a production run of this shape would use (validated and locked, as the CLI makes them)."""
  from params import resnet_config  # pylint: disable=g-import-not-at-top
  from resnet.run_setup import run_params
  shape = dict(resnet_config.IMAGENET_COUNTS, resnet_depth=cfg.resnet_depth, image_size=cfg.image_size,
               num_label_classes=cfg.num_classes, precision=precision, train_batch_size=cfg.batch_size,
               data_dir=data_dir, random_seed=cfg.seed, strategy='one_device', iterations_per_loop=cfg.steps)
  return run_params.make_params({**shape, **overrides}, fill_from_data=False)


def _release_memory() -> None:
  import keras  # pylint: disable=g-import-not-at-top
  keras.backend.clear_session()
  gc.collect()


def bench_ours(cfg: BenchConfig, precision: str, data_dir: Optional[str] = None,
               profile_dir: Optional[str] = None, jit_compile: bool = False,
               deterministic: bool = False, recipe: Optional[str] = None) -> Tuple[Row, Optional[Any]]:
  """Our Estimator + resnet_model_fn on synthetic (data_dir None) or TFRecord input; returns the row and a profile.

  ``jit_compile``: XLA on each replica step. ``deterministic``: seeds and turns on deterministic ops, as
  ``resnet_main --random_seed`` does, for the rest of this process (so the caller runs it last, or in a child).
  ``recipe``: a VARIANT_OVERRIDES kind on top of ours (mixup/CutMix, gradient accumulation, a TensorFlow kernel).
  """
  from official_input import imagenet_input  # pylint: disable=g-import-not-at-top
  from resnet import determinism  # pylint: disable=g-import-not-at-top,g-multiple-import
  from resnet.training import resnet_model_fn  # pylint: disable=g-import-not-at-top,g-multiple-import
  from resnet.estimator import distribution, hooks as hooks_lib  # pylint: disable=g-import-not-at-top,g-multiple-import
  from resnet.estimator.estimator import Estimator  # pylint: disable=g-import-not-at-top
  from resnet.estimator.run_config import RunConfig  # pylint: disable=g-import-not-at-top

  data = 'synthetic' if data_dir is None else 'real'
  kind = recipe or ('ours_det' if deterministic else 'ours_xla' if jit_compile else 'ours')
  row = Row(name=row_name(cfg, kind, data), kind=kind, precision=precision, data=data)
  # The timer alone sets the loops: loop and checkpoint boundaries are pushed out of the way (one checkpoint, at the
  # end). Validated before the temporary model_dir exists, so a bad setting leaves nothing behind.
  settings = dict(eval_batch_size=cfg.batch_size, predict_batch_size=cfg.batch_size, iterations_per_loop=10 ** 9,
                  save_checkpoints_steps=10 ** 9, keep_checkpoint_max=1, skip_train_summaries=False,
                  jit_compile=jit_compile, **VARIANT_OVERRIDES.get(kind, {}))
  base_params(cfg, precision, data_dir, **settings)
  model_dir = tempfile.mkdtemp(prefix='train-benchmark-')
  params = base_params(cfg, precision, data_dir, model_dir=model_dir, **settings)
  cores = detect_peak().cores
  warmup = max(2, cfg.warmup_steps)  # a loop of >= 2 steps traces (and with XLA compiles) the timed loops' function
  total = warmup + cfg.steps * cfg.repeats
  loops: List[Tuple[int, Mark, Mark]] = []   # (steps, start, end) of every compiled loop

  class WindowTimer(hooks_lib.LoopHook):
    """Ends a loop after the warm-up and after every ``steps`` steps, and times each loop (the loop alone: the
    summaries and logging between loops and the checkpoint at the end are outside)."""

    def next_boundary(self, step: int) -> Optional[int]:
      return warmup if step < warmup else warmup + ((step - warmup) // cfg.steps + 1) * cfg.steps

    def before_loop(self, step: int, num_steps: int) -> None:
      loops.append((num_steps, Mark.now(), Mark.now()))

    def after_loop(self, step: int, logs: Dict[str, float]) -> None:
      loops[-1] = loops[-1][:2] + (Mark.now(),)

  report, runner = None, None
  try:
    if deterministic:  # before the strategy and model, as resnet_main does
      determinism.make_deterministic(cfg.seed)
    strategy = distribution.get_strategy('one_device')
    # The params' seed fixes the synthetic batch in every row; only the determinism row turned on deterministic
    # kernels (above): the RunConfig's random_seed turns on nothing.
    config = RunConfig.from_params(params)
    start = Mark.now()
    runner = Estimator(resnet_model_fn.resnet_model_fn, config, params, strategy)
    source = imagenet_input.ImageNetInput.from_params(params, split='train')
    runner.train(source.input_fn, max_steps=total, hooks=[WindowTimer()])
    row.compile_s = loops[0][2].wall - start.wall
    if [n for n, _, _ in loops] != [warmup] + [cfg.steps] * cfg.repeats:
      raise RuntimeError(f'Expected a {warmup}-step warm-up loop then {cfg.repeats} loops of {cfg.steps} steps; '
                         f'the Estimator ran loops of {[n for n, _, _ in loops]} steps.')
    for _, begin, end in loops[1:]:
      row.add_window(begin, end, cfg.steps * cfg.batch_size, cores)
    if profile_dir is not None:
      report = _profile(runner, source.input_fn, total, profile_dir)
    row.parameters = runner.scope.get(resnet_model_fn.MODEL).count_params()
    row.note = 'deterministic ops on' if determinism.op_determinism_enabled() else ''
  finally:
    shutil.rmtree(model_dir, ignore_errors=True)
    runner = None  # pylint: disable=unused-variable
    _release_memory()
  return row, report


def _profile(runner: Any, input_fn: Callable, step: int, logdir: str) -> Any:
  """A short window capture with the production profiler hook, analysed offline; None if unavailable."""
  from resnet.estimator import profile_analysis, profiler_hook  # pylint: disable=g-import-not-at-top,g-multiple-import
  try:
    profile_analysis.require_xprof()
  except profile_analysis.ProfileAnalysisError as e:
    logging.warning('No profile: %s', e)
    return None
  # One untimed 1-step loop first (the hook asks for it) traces the 1-step function outside the capture.
  hook = profiler_hook.ProfilerHook(profile_steps=f'{step + 2},{step + 5}', logdir=logdir)
  runner.train(input_fn, max_steps=step + 5, hooks=[hook])
  try:
    return profile_analysis.analyze_profile(logdir)
  except profile_analysis.ProfileAnalysisError as e:
    logging.warning('Could not analyse the profile: %s', e)
    return None


def synthetic_batch(cfg: BenchConfig, precision: str) -> Tuple[Any, Any]:
  """The batch our synthetic rows train on (ImageNetInput's synthetic mode, seeded), as float32 for Keras."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from official_input import imagenet_input  # pylint: disable=g-import-not-at-top
  source = imagenet_input.ImageNetInput.from_params(base_params(cfg, precision), split='train')
  images, labels = next(iter(source.input_fn({'batch_size': cfg.batch_size})))
  again, _ = next(iter(source.input_fn({'batch_size': cfg.batch_size})))
  if not bool(tf.reduce_all(tf.equal(images, again))):
    logging.warning('The synthetic input is not deterministic: Keras and our runner see different random batches.')
  return tf.cast(images, tf.float32), labels


def bench_keras(cfg: BenchConfig, precision: str, batch: Tuple[Any, Any], jit_compile: bool = False,
                model: str = 'application') -> Row:
  """``compile``/``fit`` as a user writes it, Keras defaults except jit_compile, on the batch our rows train on.

  model: 'application' (keras.applications, softmax output, under the precision's global Keras policy) or 'ours'
  (resnet_model_fn.build_model, logits, the precision policy on its layers as in our runner).
  """
  import keras  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from resnet.training import resnet_model_fn  # pylint: disable=g-import-not-at-top
  if model not in ('application', 'ours'):
    raise ValueError(f"model must be 'application' or 'ours', got {model!r}")
  kind = 'keras_ours' if model == 'ours' else 'keras_xla' if jit_compile else 'keras'
  if model == 'ours' and jit_compile:
    raise ValueError('Keras fit on our model runs without XLA (the XLA comparison is ours_xla vs ours).')
  row = Row(name=row_name(cfg, kind), kind=kind, precision=precision, data='synthetic')
  cores = detect_peak().cores
  warmup, timed = max(1, cfg.warmup_steps), cfg.steps * cfg.repeats
  marks: Dict[int, Mark] = {}

  class BatchTimer(keras.callbacks.Callback):
    """Marks the end of the last warm-up batch and of every timed window."""

    def on_train_begin(self, logs=None):
      self._start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
      done = batch + 1
      if done >= warmup and (done - warmup) % cfg.steps == 0:
        if logs and 'loss' in logs:
          float(logs['loss'])  # make sure the step really finished
        marks[done] = Mark.now()
        if done == warmup:
          row.compile_s = time.perf_counter() - self._start

  previous = keras.config.dtype_policy()
  net = None
  try:
    if model == 'application':
      keras.config.set_dtype_policy(KERAS_POLICIES[precision])
      builder = getattr(keras.applications, cfg.application)
      net = builder(weights=None, input_shape=(cfg.image_size, cfg.image_size, 3), classes=cfg.num_classes)
      loss = keras.losses.SparseCategoricalCrossentropy()
    else:
      net = resnet_model_fn.build_model(base_params(cfg, precision))
      loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    net.compile(optimizer=keras.optimizers.SGD(learning_rate=0.1, momentum=0.9), loss=loss, jit_compile=jit_compile)
    dataset = tf.data.Dataset.from_tensors(batch).repeat()
    with warnings.catch_warnings():  # "shuffle=True ... ignored" for a tf.data input: fit's default, harmless
      warnings.filterwarnings('ignore', message='.*shuffle.*', category=UserWarning)
      net.fit(dataset, epochs=1, steps_per_epoch=warmup + timed, verbose=0, callbacks=[BatchTimer()])
    row.parameters = net.count_params()
  finally:
    keras.config.set_dtype_policy(previous)
    net = None
    _release_memory()
  ends = sorted(marks)
  for a, b in zip(ends, ends[1:]):
    row.add_window(marks[a], marks[b], cfg.steps * cfg.batch_size, cores)
  return row


def make_fake_records(cfg: BenchConfig) -> Tuple[str, int]:
  """Fake ImageNet JPEG TFRecords (375..500 px sides, ~500x375 like ImageNet) in a temp dir, enough for the run."""
  from tools import make_fake_imagenet  # pylint: disable=g-import-not-at-top
  directory = tempfile.mkdtemp(prefix='train-benchmark-data-')
  count = min(2048, max(256, cfg.batch_size * (cfg.warmup_steps + cfg.steps * cfg.repeats + 6)))
  make_fake_imagenet.write_fake_imagenet(directory, num_train=count, num_validation=0, num_shards=8,
                                         num_classes=cfg.num_classes, min_size=375, max_size=500, seed=cfg.seed)
  return directory, count
