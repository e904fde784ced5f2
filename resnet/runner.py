"""The Estimator-style runner: TPUEstimator's contract (model_fn, input_fn, params) on tf.distribute.

``tf.estimator`` is gone from TensorFlow 2.16+. This module keeps its shape -- ``model_fn(features, labels, mode,
params)`` returning an :class:`EstimatorSpec`, ``input_fn(params)`` with a per-replica ``params['batch_size']`` --
and runs it the TF2 way: ``iterations_per_loop`` steps inside one compiled ``tf.function`` loop, a
``tf.train.CheckpointManager`` in ``model_dir`` (resume included), TensorBoard scalars per loop, and hooks
between loops. It knows nothing about images or ResNet.

TF2 needs persistent objects (model, optimizer) created outside the compiled step, so a model_fn gets them from
``params['scope']`` (an :class:`ObjectScope`) with ``get_or_create(name, factory)``. The runner first calls
``model_fn(None, None, mode, params)`` eagerly inside the strategy scope: that call must create every object the
mode needs and may return None. Later calls run inside the compiled step, on real features, in replica context.
"""
import atexit
import contextlib
import dataclasses
import json
import math
import os
import shutil
import signal
import tempfile
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from absl import logging
import numpy as np
import tensorflow as tf

from resnet import hooks as hooks_lib


class ModeKeys:
  TRAIN = 'train'
  EVAL = 'eval'
  PREDICT = 'predict'


class EstimatorSpec(NamedTuple):
  """What model_fn returns.

  TRAIN: ``loss`` (this replica's share: the mean over the GLOBAL batch, so the sum over replicas is the batch
    mean) and ``scalars`` (per-replica values to log, averaged over replicas). The update itself happens inside
    model_fn (TF2 has no train_op: side effects in a tf.function run in program order).
  EVAL: ``eval_metrics``: name -> (weighted sum, weight) per replica; the runner sums both over replicas and
    batches and reports sum/weight, so padded examples (weight 0) never count and the result is exact.
  PREDICT: ``predictions``: name -> tensor with a leading batch dimension.
  """
  mode: str
  loss: Optional[tf.Tensor] = None
  scalars: Optional[Dict[str, tf.Tensor]] = None
  eval_metrics: Optional[Dict[str, Tuple[tf.Tensor, tf.Tensor]]] = None
  predictions: Optional[Dict[str, tf.Tensor]] = None


class ObjectScope(tf.Module):
  """Named persistent objects (model, optimizer, ...) that model_fn creates once and reuses."""

  def __init__(self):
    super().__init__(name='scope')
    self._objects: Dict[str, Any] = {}
    self._creation_allowed = False
    self.requested: set = set()  # names asked for since the runner's last build call

  def get_or_create(self, name: str, factory: Callable[[], Any]) -> Any:
    self.requested.add(name)
    if name not in self._objects:
      if not self._creation_allowed:
        raise RuntimeError(
            f'model_fn asked for a new object {name!r} inside the compiled step; create it in the first '
            f'call (features=None), which the runner makes eagerly in the strategy scope.')
      self._objects[name] = factory()
    return self._objects[name]

  def get(self, name: str) -> Any:
    return self._objects.get(name)

  @property
  def objects(self) -> Dict[str, Any]:
    return dict(self._objects)


@dataclasses.dataclass
class RunConfig:
  """Loop, checkpoint and summary settings (TPUEstimator's RunConfig, trimmed to what TF2 needs)."""
  model_dir: str
  train_batch_size: int                  # global
  eval_batch_size: int                   # global
  predict_batch_size: int                # global
  iterations_per_loop: int = 100
  save_checkpoints_steps: Optional[int] = None   # None = max(5000, iterations_per_loop)
  keep_checkpoint_max: int = 5
  skip_host_call: bool = False           # True: no per-loop TensorBoard scalars
  jit_compile: bool = False
  log_every_loop: bool = True


class TrainingInterrupted(Exception):
  """Training stopped early on request (SIGTERM, SIGINT, a hook); a checkpoint at ``step`` was saved."""

  def __init__(self, step: int, reason: str):
    super().__init__(f'Training interrupted ({reason}) at step {step}; checkpoint saved. Run the same '
                     f'command again to continue.')
    self.step = step
    self.reason = reason


class NoCheckpointError(FileNotFoundError):
  """Evaluation or prediction asked for weights that do not exist."""


def _is_chief(strategy: tf.distribute.Strategy) -> bool:
  resolver = getattr(strategy, 'cluster_resolver', None)
  if resolver is None or not getattr(resolver, 'task_type', None):
    return True
  if isinstance(strategy, tf.distribute.TPUStrategy):
    return True
  return resolver.task_type == 'chief' or (resolver.task_type == 'worker' and resolver.task_id == 0)


def checkpoint_step(path: str) -> int:
  """The global step encoded in a checkpoint path ``.../model.ckpt-<step>``."""
  try:
    return int(path.rsplit('-', 1)[1])
  except (IndexError, ValueError):
    return -1


def write_json_atomic(path: str, payload: Mapping[str, Any]) -> None:
  """Writes JSON next to ``path`` under a temporary name, then renames: readers never see half a file."""
  tmp = f'{path}.tmp-{os.getpid()}'
  with tf.io.gfile.GFile(tmp, 'w') as f:
    f.write(json.dumps(payload, indent=2, sort_keys=True))
  tf.io.gfile.rename(tmp, path, overwrite=True)


class Runner:
  """Runs model_fn/input_fn under a strategy: train, evaluate, predict, export."""

  def __init__(self, model_fn: Callable[..., Optional[EstimatorSpec]], config: RunConfig,
               params: Mapping[str, Any], strategy: Optional[tf.distribute.Strategy] = None):
    self.model_fn = model_fn
    self.config = config
    self.params = dict(params)
    self.strategy = strategy or tf.distribute.get_strategy()
    self.model_dir = config.model_dir
    self.is_chief = _is_chief(self.strategy)
    self.num_replicas = self.strategy.num_replicas_in_sync
    for name in ('train_batch_size', 'eval_batch_size', 'predict_batch_size'):
      value = getattr(config, name)
      if value % self.num_replicas:
        raise ValueError(f'{name}={value} is not divisible by the {self.num_replicas} replicas of '
                         f'{type(self.strategy).__name__}; use a multiple of {self.num_replicas}.')
    if config.save_checkpoints_steps is None:
      config.save_checkpoints_steps = max(5000, config.iterations_per_loop)
    if config.save_checkpoints_steps <= 0:
      raise ValueError(f'save_checkpoints_steps must be > 0, got {config.save_checkpoints_steps}')
    tf.io.gfile.makedirs(self.model_dir)
    with self.strategy.scope():
      self.global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name='global_step',
                                     aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
      self.scope = ObjectScope()
    self._built_modes: set = set()
    self._mode_objects: Dict[str, frozenset] = {}  # mode -> names of the scope objects its model_fn uses
    self._manager: Optional[tf.train.CheckpointManager] = None
    self._manager_keys: Tuple[str, ...] = ()
    self._train_fn = None
    self._train_step_fn = None
    self._train_iterator = None
    self._train_input_fn = None
    self._eval_step = None
    self._synced_checkpoint: Optional[str] = None   # the checkpoint the variables currently equal
    self._writers: Dict[str, tf.summary.SummaryWriter] = {}
    self._restored = False
    self._stop_requested = tf.Variable(False, trainable=False, name='stop_requested')
    self._stop_reason = ''
    self._stop_all_reduce = None

  # ------------------------------------------------------------------------------------------------ building
  def _params_for(self, mode: str, global_batch: int) -> Dict[str, Any]:
    params = dict(self.params)
    params.update(batch_size=global_batch // self.num_replicas, scope=self.scope,
                  global_step=self.global_step, num_replicas_in_sync=self.num_replicas, mode=mode)
    return params

  def _global_batch(self, mode: str) -> int:
    return {ModeKeys.TRAIN: self.config.train_batch_size, ModeKeys.EVAL: self.config.eval_batch_size,
            ModeKeys.PREDICT: self.config.predict_batch_size}[mode]

  def build(self, mode: str) -> None:
    """Creates the objects ``mode`` needs (the model_fn's eager first call), then restores model_dir's latest."""
    if mode in self._built_modes:
      return
    self.scope._creation_allowed = True
    self.scope.requested = set()
    try:
      with self.strategy.scope():
        self.model_fn(None, None, mode, self._params_for(mode, self._global_batch(mode)))
    finally:
      self.scope._creation_allowed = False
    self._built_modes.add(mode)
    self._mode_objects[mode] = frozenset(self.scope.requested)
    self._manager = None  # the set of checkpointed objects may have grown

  def checkpoint(self) -> tf.train.Checkpoint:
    return tf.train.Checkpoint(global_step=self.global_step, **self.scope.objects)

  def checkpoint_manager(self) -> tf.train.CheckpointManager:
    keys = tuple(sorted(self.scope.objects))
    if self._manager is None or keys != self._manager_keys:
      directory, max_to_keep = self.model_dir, self.config.keep_checkpoint_max
      if not self.is_chief:
        # Every worker must take part in saving (sync-on-read variables), but only the chief's files count:
        # keep one throw-away copy (as orbit does) and delete it at exit, or every run leaves full checkpoints.
        directory, max_to_keep = tempfile.mkdtemp(prefix='resnet-worker-ckpt-'), 1
        atexit.register(shutil.rmtree, directory, ignore_errors=True)
      self._manager = tf.train.CheckpointManager(
          self.checkpoint(), directory, max_to_keep=max_to_keep,
          checkpoint_name='model.ckpt', step_counter=self.global_step)
      self._manager_keys = keys
    return self._manager

  def latest_checkpoint(self) -> Optional[str]:
    return tf.train.latest_checkpoint(self.model_dir)

  def restore(self, checkpoint_path: Optional[str] = None) -> Optional[str]:
    """Restores ``checkpoint_path`` (default: model_dir's latest) into the built objects; returns the path."""
    path = checkpoint_path or self.latest_checkpoint()
    self._restored = True
    if not path:
      return None
    status = self.checkpoint().restore(path)
    status.expect_partial()
    self._synced_checkpoint = path
    self._restored = True
    logging.info('Restored %s (global step %d).', path, int(self.global_step.numpy()))
    return path

  # ------------------------------------------------------------------------------------------------ datasets
  def _distribute(self, input_fn: Callable, mode: str) -> tf.distribute.DistributedDataset:
    global_batch = self._global_batch(mode)

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
      params = dict(self.params)
      params.update(batch_size=context.get_per_replica_batch_size(global_batch), context=context,
                    mode=mode)
      return input_fn(params)

    options = tf.distribute.InputOptions(experimental_fetch_to_device=True)
    return self.strategy.distribute_datasets_from_function(dataset_fn, options)

  # ------------------------------------------------------------------------------------------------ summaries
  def _writer(self, name: str) -> tf.summary.SummaryWriter:
    if name not in self._writers:
      logdir = self.model_dir if name == 'train' else os.path.join(self.model_dir, name)
      if not self.is_chief:
        self._writers[name] = tf.summary.create_noop_writer()
      else:
        self._writers[name] = tf.summary.create_file_writer(logdir)
    return self._writers[name]

  def write_scalars(self, name: str, step: int, values: Mapping[str, float]) -> None:
    with self._writer(name).as_default(step=step):
      for key, value in values.items():
        tf.summary.scalar(key, value)
    self._writer(name).flush()

  # ------------------------------------------------------------------------------------------------ train
  def _make_train_fn(self, iterator) -> Callable:
    params = self._params_for(ModeKeys.TRAIN, self.config.train_batch_size)
    strategy = self.strategy

    def step_fn(inputs):
      features, labels = inputs
      spec = self.model_fn(features, labels, ModeKeys.TRAIN, params)
      return spec.loss, dict(spec.scalars or {})

    # The loop carries the last step's scalars, so it needs their keys up front: trace one step (no run).
    probe = tf.function(lambda inputs: strategy.run(step_fn, args=(inputs,)))
    scalar_keys = sorted(probe.get_concrete_function(iterator.element_spec).structured_outputs[1])

    stop = self._stop_requested
    check_stop = self._num_workers() == 1  # workers must agree on the step count, so multi-worker stops at loop ends

    def loop_fn(iterator, num_steps):
      loss_sum = tf.constant(0.0, tf.float32)
      done = tf.constant(0.0, tf.float32)
      scalars = {k: tf.constant(0.0, tf.float32) for k in scalar_keys}
      for _ in tf.range(num_steps):
        if check_stop and stop:
          break
        done += 1.0
        loss, step_scalars = strategy.run(step_fn, args=(next(iterator),))
        loss_sum += tf.cast(strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None), tf.float32)
        scalars = {k: tf.cast(strategy.reduce(tf.distribute.ReduceOp.MEAN, step_scalars[k], axis=None),
                              tf.float32) for k in scalar_keys}
        self.global_step.assign_add(1)
      return loss_sum / tf.maximum(done, 1.0), scalars

    def single_step_fn(iterator):
      # No tf.range: profile tools group a while loop by iteration and would find no marked steps.
      loss, step_scalars = strategy.run(step_fn, args=(next(iterator),))
      self.global_step.assign_add(1)
      return (tf.cast(strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None), tf.float32),
              {k: tf.cast(strategy.reduce(tf.distribute.ReduceOp.MEAN, step_scalars[k], axis=None), tf.float32)
               for k in scalar_keys})

    jit = self.config.jit_compile or None
    return tf.function(loop_fn, jit_compile=jit), tf.function(single_step_fn, jit_compile=jit)

  @staticmethod
  def _next_multiple(step: int, every: int) -> int:
    """Loop boundaries sit at absolute multiples, so every worker shares them whatever its hooks ask."""
    return (step // every + 1) * every

  def train(self, input_fn: Callable, max_steps: int, hooks: Sequence[hooks_lib.LoopHook] = (),
            total_steps: Optional[int] = None) -> Dict[str, float]:
    """Trains until the global step reaches ``max_steps``, resuming from model_dir's latest checkpoint.

    ``total_steps`` (default max_steps) is what the progress line counts towards, e.g. train_steps while
    train_and_eval trains in chunks.
    """
    self.build(ModeKeys.TRAIN)
    if not self._restored:
      self.restore()
      self._restored = True
    step = int(self.global_step.numpy())
    if step >= max_steps:
      logging.info('Global step %d already reaches max_steps=%d: nothing to train.', step, max_steps)
      return {}
    if self._train_iterator is None or self._train_input_fn is not input_fn:
      self._train_iterator = iter(self._distribute(input_fn, ModeKeys.TRAIN))
      self._train_input_fn = input_fn
    if self._train_fn is None:
      self._train_fn, self._train_step_fn = self._make_train_fn(self._train_iterator)
    logs: Dict[str, float] = {}
    start_step, start_time = step, time.time()
    self._stop_requested.assign(False)
    previous_handlers = self._install_signal_handlers()
    for hook in hooks:
      hook.begin(self, step)
    try:
      while step < max_steps:
        boundaries = [max_steps, self._next_multiple(step, self.config.iterations_per_loop),
                      self._next_multiple(step, self.config.save_checkpoints_steps)]
        boundaries += [b for b in (h.next_boundary(step) for h in hooks) if b is not None and b > step]
        num_steps = min(boundaries) - step
        for hook in hooks:
          hook.before_loop(step, num_steps)
        loop_start = time.time()
        loss, scalars = self._run_loop(step, num_steps, any(h.step_markers for h in hooks))
        seconds = max(time.time() - loop_start, 1e-9)
        num_steps = int(self.global_step.numpy()) - step  # fewer if a stop was requested mid-loop
        step += num_steps
        logs = {'loss': loss, **scalars,
                'steps_per_sec': num_steps / seconds,
                'images_per_sec': num_steps * self.config.train_batch_size / seconds}
        for hook in hooks:
          hook.after_loop(step, logs)
        if not self.config.skip_host_call:
          self.write_scalars('train', step, logs)
        if self.config.log_every_loop:
          self._log_progress(step, max_steps, total_steps or max_steps, start_step, start_time, logs)
        stop = self._agreed_stop(step, max_steps)
        if stop or step >= max_steps or step % self.config.save_checkpoints_steps == 0:
          self.save()
        if stop:
          raise TrainingInterrupted(step, self._stop_reason or 'another worker was stopped')
    finally:
      for hook in hooks:
        hook.end(step)
      self._restore_signal_handlers(previous_handlers)
    return logs

  def _run_loop(self, step: int, num_steps: int, markers: bool) -> Tuple[float, Dict[str, float]]:
    """Runs one compiled loop in a worker thread, so the main thread stays free to handle SIGTERM/SIGINT."""
    result: Dict[str, Any] = {}

    def target():
      try:
        with (tf.profiler.experimental.Trace('train', step_num=step, _r=1) if markers
              else contextlib.nullcontext()):
          if num_steps == 1:  # hooks ask for 1-step loops to mark steps (profiling)
            loss, scalars = self._train_step_fn(self._train_iterator)
          else:
            loss, scalars = self._train_fn(self._train_iterator, tf.constant(num_steps, tf.int64))
          result['out'] = float(loss), {k: float(v) for k, v in scalars.items()}
      except BaseException as e:  # pylint: disable=broad-except
        result['error'] = e

    thread = threading.Thread(target=target, name='train-loop', daemon=True)
    thread.start()
    thread.join()
    if 'error' in result:
      raise result['error']
    return result['out']

  # ------------------------------------------------------------------------------------------------ stopping
  @property
  def stop_requested(self) -> bool:
    return bool(self._stop_requested.numpy())

  def request_stop(self, reason: str = 'stop requested') -> None:
    """Ends training after the current step (single worker) or loop (multi-worker), with a checkpoint."""
    self._stop_reason = reason
    self._stop_requested.assign(True)

  def _install_signal_handlers(self) -> Dict[int, Any]:
    if threading.current_thread() is not threading.main_thread():
      return {}
    previous = {}
    for sig in (signal.SIGTERM, signal.SIGINT):
      def handler(signum, frame, _self=self):  # pylint: disable=unused-argument
        name = signal.Signals(signum).name
        if _self.stop_requested and signum == signal.SIGINT:
          raise KeyboardInterrupt  # a second Ctrl-C: stop now, without a checkpoint
        logging.warning('%s received: saving a checkpoint at the current step, then exiting.', name)
        _self.request_stop(name)
      previous[sig] = signal.signal(sig, handler)
    return previous

  @staticmethod
  def _restore_signal_handlers(previous: Dict[int, Any]) -> None:
    for sig, handler in previous.items():
      signal.signal(sig, handler)

  def _agreed_stop(self, step: int, max_steps: int) -> bool:
    """Whether to stop now. A single worker reads its flag (the loop already broke at the current step).
    Multi-worker runs agree through one all-reduce at a boundary every worker reaches, so that their
    collectives stay in step: max_steps and multiples of iterations_per_loop and save_checkpoints_steps."""
    if self._num_workers() == 1:
      return self.stop_requested
    if not (step >= max_steps or step % self.config.iterations_per_loop == 0
            or step % self.config.save_checkpoints_steps == 0):
      return False
    if self._stop_all_reduce is None:
      strategy, flag = self.strategy, self._stop_requested

      @tf.function
      def any_stop():
        votes = strategy.run(lambda: tf.cast(flag.read_value(), tf.int32))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, votes, axis=None)  # > 0: someone asked

      self._stop_all_reduce = any_stop
    return int(self._stop_all_reduce().numpy()) > 0

  def _num_workers(self) -> int:
    extended = getattr(self.strategy, 'extended', None)
    workers = getattr(extended, '_num_workers', 1)
    return int(workers or 1)

  def save(self) -> Optional[str]:
    """Writes a checkpoint at the current global step (no-op if one exists for this step)."""
    manager = self.checkpoint_manager()
    step = int(self.global_step.numpy())
    if manager.latest_checkpoint and checkpoint_step(manager.latest_checkpoint) == step:
      return manager.latest_checkpoint
    path = manager.save(checkpoint_number=step)
    self._synced_checkpoint = path
    logging.info('Saved checkpoint %s', path)
    return path

  def _log_progress(self, step: int, max_steps: int, total_steps: int, start_step: int, start_time: float,
                    logs: Mapping[str, float]) -> None:
    elapsed = time.time() - start_time
    done = step - start_step
    eta = elapsed / done * (total_steps - step) if done else float('nan')
    extras = ''.join(f' {k}={v:.4g}' for k, v in logs.items()
                     if k not in ('loss', 'learning_rate', 'images_per_sec', 'steps_per_sec'))
    logging.info('step %d/%d loss=%.4f lr=%.4g %.1f img/s ETA %s%s', step, total_steps, logs['loss'],
                 logs.get('learning_rate', float('nan')), logs['images_per_sec'], _format_seconds(eta), extras)

  # ------------------------------------------------------------------------------------------------ evaluate
  def _make_eval_step(self) -> Callable:
    params = self._params_for(ModeKeys.EVAL, self.config.eval_batch_size)
    strategy = self.strategy

    def step_fn(inputs):
      features, labels = inputs
      spec = self.model_fn(features, labels, ModeKeys.EVAL, params)
      return {k: (tf.cast(s, tf.float64), tf.cast(w, tf.float64)) for k, (s, w) in spec.eval_metrics.items()}

    def eval_step(inputs):
      per_replica = strategy.run(step_fn, args=(inputs,))
      return {k: (strategy.reduce(tf.distribute.ReduceOp.SUM, s, axis=None),
                  strategy.reduce(tf.distribute.ReduceOp.SUM, w, axis=None))
              for k, (s, w) in per_replica.items()}

    return tf.function(eval_step)

  def evaluate(self, input_fn: Callable, checkpoint_path: Optional[str] = None,
               name: str = 'eval') -> Dict[str, float]:
    """Evaluates over the WHOLE finite eval set; restores ``checkpoint_path`` (default: latest) first.

    Metrics are exact sums over every example (weights mask padding), reduced over replicas; results also go
    to TensorBoard (``model_dir/<name>``) and, atomically replaced, to ``model_dir/<name>_results.json``.
    """
    path = self._load_weights(ModeKeys.EVAL, checkpoint_path, 'evaluate')
    if self._eval_step is None:
      self._eval_step = self._make_eval_step()
    start = time.time()
    totals: Dict[str, List[float]] = {}
    for inputs in self._distribute(input_fn, ModeKeys.EVAL):
      for key, (s, w) in self._eval_step(inputs).items():
        acc = totals.setdefault(key, [0.0, 0.0])
        acc[0] += float(s)
        acc[1] += float(w)
    if not totals:
      raise ValueError('The eval input produced no batches: is the eval split empty?')
    results: Dict[str, Any] = {k: s / w if w else float('nan') for k, (s, w) in totals.items()}
    step = int(self.global_step.numpy())
    results['global_step'] = step
    results['num_examples'] = int(max(w for _, w in totals.values()))
    results['seconds'] = time.time() - start
    logging.info('Eval at step %d over %d examples: %s (%.1f s)', step, results['num_examples'],
                 ', '.join(f'{k}={results[k]:.4f}' for k in sorted(totals)), results['seconds'])
    if self.is_chief:
      self.write_scalars(name, step, {k: results[k] for k in totals})
      write_json_atomic(os.path.join(self.model_dir, f'{name}_results.json'),
                        {**results, 'checkpoint': path or ''})
    return results

  def _load_weights(self, mode: str, checkpoint_path: Optional[str], what: str) -> Optional[str]:
    """Builds ``mode``'s objects and restores ``checkpoint_path`` (default: the latest) unless the variables
    already hold it (e.g. right after training). No checkpoint and no training is a NoCheckpointError."""
    self.build(mode)
    path = checkpoint_path or self.latest_checkpoint()
    if path is None and not self._has_trained():
      raise NoCheckpointError(
          f'No checkpoint in {self.model_dir} to {what}: train first (--mode=train or train_and_eval), '
          f'point --model_dir at a trained run, or pass --eval_checkpoint.')
    if path is not None and path != self._synced_checkpoint:
      self.restore(path)
    return path

  def _has_trained(self) -> bool:
    return ModeKeys.TRAIN in self._built_modes and int(self.global_step.numpy()) > 0

  # ------------------------------------------------------------------------------------------------ predict
  def predict(self, input_fn: Callable, checkpoint_path: Optional[str] = None) -> Iterator[Dict[str, Any]]:
    """Yields one dict of numpy values per example (padding included: the caller knows its own marker)."""
    self._load_weights(ModeKeys.PREDICT, checkpoint_path, 'predict with')
    params = self._params_for(ModeKeys.PREDICT, self.config.predict_batch_size)
    strategy = self.strategy

    def step_fn(features):
      if isinstance(features, tuple) and len(features) == 2:
        features, labels = features
      else:
        labels = None
      spec = self.model_fn(features, labels, ModeKeys.PREDICT, params)
      return spec.predictions

    @tf.function
    def predict_step(inputs):
      return strategy.run(step_fn, args=(inputs,))

    for inputs in self._distribute(input_fn, ModeKeys.PREDICT):
      outputs = predict_step(inputs)
      batch = {k: np.concatenate([np.asarray(t) for t in strategy.experimental_local_results(v)], axis=0)
               for k, v in outputs.items()}
      size = len(next(iter(batch.values())))
      for i in range(size):
        yield {k: v[i] for k, v in batch.items()}

  # ------------------------------------------------------------------------------------------------ export
  def export_saved_model(self, export_dir_base: str,
                         serving_input_fns: Mapping[str, 'ServingInput'],
                         checkpoint_path: Optional[str] = None) -> str:
    """Writes ``<export_dir_base>/<version>/`` (TF Serving layout) with one signature per serving input.

    The export is written under a temporary name and renamed when complete; an existing version directory
    is never overwritten.
    """
    self._load_weights(ModeKeys.PREDICT, checkpoint_path, 'export')
    params = self._params_for(ModeKeys.PREDICT, self.config.predict_batch_size)
    module = tf.Module()
    # Only what prediction uses (the model, not the optimizer and its slots: half the size for ResNet).
    module.objects = {k: v for k, v in self.scope.objects.items() if k in self._mode_objects[ModeKeys.PREDICT]}
    signatures = {}
    for name, serving in serving_input_fns.items():
      fn = _serving_function(self.model_fn, serving, params)
      setattr(module, f'fn_{name}', fn)
      signatures[name] = fn.get_concrete_function(**serving.input_signature)
    version = str(int(time.time()))
    final_dir = os.path.join(export_dir_base, version)
    while tf.io.gfile.exists(final_dir):
      version = str(int(version) + 1)
      final_dir = os.path.join(export_dir_base, version)
    tmp_dir = os.path.join(export_dir_base, f'.tmp-{version}')
    tf.io.gfile.makedirs(export_dir_base)
    if tf.io.gfile.exists(tmp_dir):
      tf.io.gfile.rmtree(tmp_dir)
    try:
      tf.saved_model.save(module, tmp_dir, signatures=signatures)
      tf.io.gfile.rename(tmp_dir, final_dir)
    except Exception:
      if tf.io.gfile.exists(tmp_dir):
        tf.io.gfile.rmtree(tmp_dir)
      raise
    logging.info('Exported SavedModel to %s (signatures: %s)', final_dir, ', '.join(signatures))
    return final_dir


class ServingInput(NamedTuple):
  """A serving signature's inputs: TensorSpecs by name, and how they become model_fn features."""
  input_signature: Dict[str, tf.TensorSpec]
  features_fn: Callable[..., Any]


def _serving_function(model_fn: Callable, serving: ServingInput, params: Dict[str, Any]):
  def serve(**inputs):
    features = serving.features_fn(**inputs)
    spec = model_fn(features, None, ModeKeys.PREDICT, params)
    return spec.predictions
  return tf.function(serve)


def _format_seconds(seconds: float) -> str:
  if not math.isfinite(seconds):
    return '?'
  seconds = int(seconds)
  hours, rest = divmod(seconds, 3600)
  minutes, secs = divmod(rest, 60)
  return f'{hours}:{minutes:02d}:{secs:02d}' if hours else f'{minutes}:{secs:02d}'
