"""The Estimator: TPUEstimator's contract (model_fn, input_fn, params) on tf.distribute, and *when* things happen.

It trains to ``max_steps`` (resuming from ``model_dir``), evaluates, alternates the two, evaluates each new
checkpoint as it appears, predicts and exports. Between compiled loops it saves checkpoints, writes TensorBoard
scalars, logs progress, runs hooks and handles stop requests. *What* a step computes is in ``loops.py``. It knows
nothing about images or ResNet, and changes no process-wide setting: seeding and deterministic ops (which cannot be
undone) are the calling program's decision, not a side effect of constructing an Estimator.
"""
import contextlib
import json
import math
import os
import random
import threading
import time
from typing import Any, Callable, ContextManager, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from absl import logging
import numpy as np
import tensorflow as tf

from resnet.estimator import best_checkpoint
from resnet.estimator import checkpoints as checkpoints_lib
from resnet.estimator import distribution
from resnet.estimator import export as export_lib
from resnet.estimator import files
from resnet.estimator import hooks as hooks_lib
from resnet.estimator import loops
from resnet.estimator.run_config import RunConfig
from resnet.estimator.spec import ModeKeys, ObjectScope, RunContext, RunParams, ServingInput, StagedInput
from resnet.estimator.stopping import StopControl

InputFn = Callable[[RunParams], tf.data.Dataset]
# How long a non-chief worker waits for the chief's checkpoint of the step both just trained.
CHIEF_CHECKPOINT_WAIT_S = 600.0
_BATCH_SIZE_NAMES = {ModeKeys.TRAIN: 'train_batch_size', ModeKeys.EVAL: 'eval_batch_size',
                     ModeKeys.PREDICT: 'predict_batch_size'}


class TrainingInterrupted(Exception):
  """Training stopped early on request (SIGTERM, SIGINT, a hook); a checkpoint at ``step`` was saved."""

  def __init__(self, step: int, reason: str):
    super().__init__(f'Training interrupted ({reason}) at step {step}; checkpoint saved. Run the same '
                     f'command again to continue.')
    self.step = step
    self.reason = reason


class NoCheckpointError(FileNotFoundError):
  """Evaluation or prediction asked for weights that do not exist."""


class ChiefFailed(RuntimeError):
  """The chief failed at something it does for every worker (a write): the other workers stop with it."""


class Estimator:
  """Runs model_fn/input_fn under a strategy: train, evaluate, predict, export."""

  def __init__(self, model_fn: Callable[..., Any], config: RunConfig, params: Mapping[str, Any],
               strategy: Optional[tf.distribute.Strategy] = None,
               restore_check: Optional[Callable[[str, Mapping[str, Any]], None]] = None):
    """``restore_check(path, objects)``: raises when checkpoint ``path`` cannot fit the objects model_fn created
    (naming what differs), before anything is restored; or returns the objects to restore instead (stand-ins that
    read the checkpoint's layout into the same variables), or None."""
    self.model_fn = model_fn
    self.config = config
    self.params = dict(params)
    self.strategy = strategy or tf.distribute.get_strategy()
    self.model_dir = config.model_dir
    self.is_chief = distribution.is_chief(self.strategy)
    self.num_replicas = self.strategy.num_replicas_in_sync
    tf.io.gfile.makedirs(self.model_dir)
    with self.strategy.scope():
      self.global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name='global_step',
                                     aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
      # The seed of the training input's order where the run gives none: drawn at a run's first start (the chief's,
      # _prepare_training), then restored from its checkpoints.
      self.input_seed = tf.Variable(0, dtype=tf.int64, trainable=False, name='input_seed',
                                    aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
      # The training input's layout (input_place): global batch, input pipelines, the step it began at and the
      # records the run's input gave before it; zeros: none saved (a new run, or a checkpoint from before it).
      self.input_layout = tf.Variable([0, 0, 0, 0], dtype=tf.int64, trainable=False, name='input_layout',
                                      aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
      self.scope = ObjectScope()
    self.checkpoints = checkpoints_lib.Checkpoints(self.model_dir, self.is_chief, config.keep_checkpoint_max,
                                                   self.global_step, lambda: self.scope.saved_objects, restore_check,
                                                   input_seed=self.input_seed, input_layout=self.input_layout)
    self.workers = distribution.num_workers(self.strategy)
    self.stop = StopControl(self.strategy, self.workers)
    self.replica_fns = loops.ReplicaFunctions(model_fn, self.mode_params, config.jit_compile, self.strategy)
    self._mode_objects: Dict[str, frozenset] = {}   # mode -> names of the scope objects its model_fn uses
    self._train_loop: Optional[loops.TrainLoop] = None
    self._train_input = None                         # (input_fn, iterator)
    self._eval_steps: Dict[str, Callable] = {}      # eval input spec -> compiled eval step
    self._writers: Dict[str, tf.summary.SummaryWriter] = {}
    self._max_steps: Optional[int] = None            # of the current train() call

  def from_chief(self, values: Sequence[float]) -> List[float]:
    """The chief's ``values`` on every worker, e.g. best/'s decisions (a collective with several workers)."""
    return distribution.from_chief(self.strategy, values)

  def on_chief(self, fn: Callable[[], Any], what: str) -> Any:
    """Runs ``fn`` on the chief alone (a write every worker counts on); with several workers, every worker learns
    whether it failed (a collective: every worker calls this at the same point) and stops with it, so that none
    waits in the next collective for a chief that is gone. Returns fn's result on the chief, None elsewhere."""
    result, error = None, None
    if self.is_chief:
      try:
        result = fn()
      except Exception as e:  # pylint: disable=broad-except  (shared first, raised below on every worker)
        error = e
    if self.workers > 1:
      failed, = self.from_chief([error is not None])
      if failed and error is None:
        raise ChiefFailed(f'The chief could not {what} (its log says why); this worker stops with it.')
    if error is not None:
      raise error
    return result

  # ------------------------------------------------------------------------------------------------ building
  def _global_batch(self, mode: str) -> int:
    """The global batch of ``mode``; checked only when the mode is used (a training run on 6 GPUs need not have
    a predict batch that divides by 6)."""
    name = _BATCH_SIZE_NAMES[mode]
    value = getattr(self.config, name)
    if value % self.num_replicas:
      raise ValueError(f'{name}={value} is not divisible by the {self.num_replicas} replicas of '
                       f'{type(self.strategy).__name__}; use a multiple of {self.num_replicas}.')
    return value

  def mode_params(self, mode: str, exporting: bool = False) -> RunParams:
    """The params model_fn sees in ``mode``: the run's params, the per-replica batch, the scope and step."""
    batch = getattr(self.config, _BATCH_SIZE_NAMES[mode])  # unchecked: export builds PREDICT with no data
    return RunParams(self.params, max(1, batch // self.num_replicas),
                     RunContext(mode, self.num_replicas, scope=self.scope, global_step=self.global_step,
                                exporting=exporting))

  def build(self, mode: str) -> None:
    """Creates the objects ``mode`` needs: model_fn's eager first call (features=None) in the strategy scope."""
    if mode in self._mode_objects:
      return
    before = set(self.scope.objects)
    with self.scope.creating() as requested, self.strategy.scope():
      self.model_fn(None, None, mode, self.mode_params(mode))
    self._mode_objects[mode] = frozenset(requested)
    if set(self.scope.objects) - before:
      self.checkpoints.objects_added()

  def latest_checkpoint(self) -> Optional[str]:
    return self.checkpoints.latest()

  def restore(self, checkpoint_path: Optional[str] = None) -> Optional[str]:
    """Restores ``checkpoint_path`` (default: model_dir's latest) into the built objects; returns the path."""
    return self.checkpoints.restore(checkpoint_path or self.latest_checkpoint())

  def save(self) -> str:
    try:
      return self.checkpoints.save()
    except (OSError, tf.errors.OpError) as e:
      raise files.WriteError(os.path.join(self.model_dir, checkpoints_lib.CHECKPOINT_NAME), e) from e

  def _load_weights(self, mode: str, checkpoint_path: Optional[str], what: str) -> Optional[str]:
    """Builds ``mode``'s objects and makes the variables hold ``checkpoint_path`` (default: the latest, or the
    weights trained in this process). No checkpoint and no training is a NoCheckpointError."""
    self.build(mode)
    holds = self.checkpoints.holds
    if checkpoint_path is None and self.checkpoints.holds_own_training:
      # This process's latest training, not model_dir's newest file (older, or not yet written, while the chief
      # saves). Trainable weights are equal on every worker, but batch-norm statistics are per worker: a
      # non-chief takes the chief's saved ones, once the chief has written them, so every worker evaluates what
      # the checkpoint holds.
      if holds == checkpoints_lib.TRAINED:
        return None
      if not self.is_chief:
        # Waits for the file, not for the chief: a chief-only export after training joins no collective.
        self.checkpoints.wait_for(holds, CHIEF_CHECKPOINT_WAIT_S)
        self.checkpoints.restore(holds)
      return holds
    path = checkpoint_path or self.latest_checkpoint()
    if path is None:
      raise NoCheckpointError(
          f'No checkpoint in {self.model_dir} to {what}: train first, point model_dir at a trained run, or give '
          f'a checkpoint path.')
    if path != holds:
      self.checkpoints.restore(path)
    return path

  # ------------------------------------------------------------------------------------------------ inputs
  def distribute(self, input_fn: InputFn, mode: str) -> tf.distribute.DistributedDataset:
    global_batch = self._global_batch(mode)

    # A training input starts where the batches of the steps trained so far end (checkpoints.py: what a resume
    # restores).
    where = (dict(start_step=self.input_place(global_batch), input_seed=int(self.input_seed.numpy()))
             if mode == ModeKeys.TRAIN else {})

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
      return input_fn(RunParams(self.params, context.get_per_replica_batch_size(global_batch),
                                RunContext(mode, self.num_replicas, input_context=context, **where)))

    # Eval and predict keep string features (file names) on the host; they never enter a replica function.
    options = tf.distribute.InputOptions(experimental_fetch_to_device=mode == ModeKeys.TRAIN)
    return self.strategy.distribute_datasets_from_function(dataset_fn, options)

  # ------------------------------------------------------------------------------------------------ summaries
  def _writer(self, name: str) -> tf.summary.SummaryWriter:
    if name not in self._writers:
      logdir = self.model_dir if name == 'train' else os.path.join(self.model_dir, name)
      self._writers[name] = (tf.summary.create_file_writer(logdir) if self.is_chief
                             else tf.summary.create_noop_writer())
    return self._writers[name]

  def write_scalars(self, name: str, step: int, values: Mapping[str, float]) -> None:
    with self._writer(name).as_default(step=step):
      for key, value in values.items():
        tf.summary.scalar(key, value)
    self._writer(name).flush()

  def write_images(self, name: str, step: int, images: Mapping[str, np.ndarray]) -> None:
    with self._writer(name).as_default(step=step):
      for key, image in images.items():
        tf.summary.image(key, image[None], step=step)
    self._writer(name).flush()

  def write_tensors(self, name: str, step: int, tensors: Mapping[str, Tuple[np.ndarray, Any]]) -> None:
    """Summaries of other TensorBoard plugins: tag -> (tensor, the plugin's SummaryMetadata)."""
    with self._writer(name).as_default(step=step):
      for key, (tensor, metadata) in tensors.items():
        tf.summary.write(key, tf.constant(tensor), step=step, metadata=metadata)
    self._writer(name).flush()

  # ------------------------------------------------------------------------------------------------ train
  def _prepare_training(self, input_fn: Union[InputFn, StagedInput]) -> None:
    """Builds, restores where nothing is held yet, and makes the train loop read ``input_fn`` (a StagedInput:
    the stage of the current step)."""
    self.build(ModeKeys.TRAIN)
    if self.checkpoints.holds is None:
      path = self.latest_checkpoint()
      # Saving goes on from the checkpoint resumed, not from one that is gone (every worker calls: a collective).
      self.on_chief(lambda: path and checkpoints_lib.repair_state(self.model_dir, path),
                    'repair the checkpoint state file')
      self.input_seed.assign(self._drawn_input_seed())
      self.input_layout.assign([0, 0, 0, 0])
      self.restore(path)  # a checkpoint's input seed (checkpoints from before it was saved keep the drawn one)
    self._use_input(input_fn.at(int(self.global_step.numpy())) if isinstance(input_fn, StagedInput) else input_fn)

  def input_place(self, global_batch: int) -> int:
    """The step whose place (step x this global batch) the training input starts at, and records this layout.

    The input finds its place as step x the current batch, exact while the run keeps its layout. When the global
    batch or the number of input pipelines changed since the checkpoint, the records the run's input gave are
    (records before the saved layout began) + (steps since) x (its global batch); the input goes on at the step of
    this batch nearest below that count, with a warning: exact when only the batch changed and the count divides,
    otherwise some records of this epoch are read twice or not at all (each pipeline reads another share).
    """
    step = int(self.global_step.numpy())
    pipelines = self.workers
    old_batch, old_pipelines, began, before = (int(v) for v in self.input_layout.numpy())
    if not old_batch:   # a new run, or a checkpoint from before layouts were saved: this layout from step 0
      self.input_layout.assign([global_batch, pipelines, 0, 0])
      return step
    records = before + (step - began) * old_batch
    if (old_batch, old_pipelines) == (global_batch, pipelines):
      return records // global_batch
    place, extra = divmod(records, global_batch)
    exact = pipelines == old_pipelines and not extra
    logging.warning(
        'The training input\'s layout changed since the checkpoint of step %d: a global batch of %d on %d input '
        'pipeline(s) then, %d on %d now. The run\'s input gave %d records, so it goes on at the place of step %d '
        'of the new batch%s.', step, old_batch, old_pipelines, global_batch, pipelines, records, place,
        ' (the same place: an exact resume)' if exact else
        ': NOT an exact resume, some records of this epoch are read twice or not at all (%s)' % (
            'each pipeline now reads another share of the data' if pipelines != old_pipelines else
            f'{extra} records of the count do not fill a batch'))
    self.input_layout.assign([global_batch, pipelines, step, place * global_batch])   # where the input starts
    return place

  def _drawn_input_seed(self) -> int:
    """A new run's input seed: the chief's draw on every worker (their pipelines must agree on one order when they
    share files by record). Python's generator, which a seeded program seeds (determinism.py): a seeded run draws
    the same seed whether or not it is resumed (its order follows random_seed anyway), an unseeded one a new one."""
    seed = random.randrange(1, 2 ** 31)
    return int(round(self.from_chief([seed])[0])) if self.workers > 1 else seed

  def _use_input(self, input_fn: InputFn) -> None:
    """Makes the train loop read ``input_fn``: a new one gets its iterator and a new compiled loop."""
    if self._train_input is None or self._train_input[0] is not input_fn:
      self._train_input = (input_fn, iter(self.distribute(input_fn, ModeKeys.TRAIN)))
      self._train_loop = None
    if self._train_loop is None:
      self._train_loop = loops.TrainLoop(self.strategy, self.replica_fns.train(), self._train_input[1],
                                         self.global_step, self.stop.flag,
                                         check_stop_each_step=self.stop.num_workers == 1)

  @staticmethod
  def _next_multiple(step: int, every: int) -> int:
    """Loop boundaries sit at absolute multiples, so every worker shares them whatever its hooks ask."""
    return (step // every + 1) * every

  def _at_common_boundary(self, step: int, max_steps: int) -> bool:
    return (step >= max_steps or step % self.config.iterations_per_loop == 0
            or step % self.config.save_checkpoints_steps == 0)

  def common_boundary(self, step: int) -> bool:
    """Whether a loop of the current train() call ending at ``step`` ends where every worker's does (whatever
    shorter loops a hook asked for on one of them): where hooks that must decide as one decide."""
    return self._at_common_boundary(step, self._max_steps if self._max_steps is not None else step)

  def train(self, input_fn: Union[InputFn, StagedInput], max_steps: int, hooks: Sequence[hooks_lib.LoopHook] = (),
            total_steps: Optional[int] = None) -> Dict[str, float]:
    """Trains until the global step reaches ``max_steps``, resuming from model_dir's latest checkpoint.

    ``total_steps`` (default max_steps) is what the progress line counts towards, e.g. train_steps while
    train_and_evaluate trains in chunks. A StagedInput switches input_fn at its stages' first steps.
    """
    self._prepare_training(input_fn)
    self._max_steps = max_steps
    step = int(self.global_step.numpy())
    if step >= max_steps:
      logging.info('Global step %d already reaches max_steps=%d: nothing to train.', step, max_steps)
      return {}
    progress = _Progress(step, total_steps or max_steps,
                         next((h for h in hooks if isinstance(h, hooks_lib.ExamplesPerSecond)), None))
    logs: Dict[str, float] = {}
    self.stop.clear()
    # Each save writes these hooks' states; while the variables hold the checkpoint last restored (nothing trained
    # since), the hooks take back the states it saved (a resume decides as the uninterrupted run would).
    state = self.checkpoints.run_state
    state.current = lambda: hooks_lib.loop_hook_states(hooks)
    if state.restored_from is not None and self.checkpoints.holds == state.restored_from:
      hooks_lib.restore_loop_hook_states(hooks, state.restored)
    for hook in hooks:
      hook.begin(self, step)
    try:
      with self.stop.signals_handled():
        while step < max_steps:
          boundaries = [max_steps, self._next_multiple(step, self.config.iterations_per_loop),
                        self._next_multiple(step, self.config.save_checkpoints_steps)]
          if isinstance(input_fn, StagedInput):   # a loop ends where the next stage starts, which reads its input
            self._use_input(input_fn.at(step))
            boundaries += [b for b in (input_fn.next_start(step),) if b is not None]
          boundaries += [b for b in (h.next_boundary(step) for h in hooks) if b is not None and b > step]
          num_steps = min(boundaries) - step
          for hook in hooks:
            hook.before_loop(step, num_steps)
          start = time.time()
          loss, scalars = self._run_in_thread(step, num_steps, any(h.step_markers for h in hooks))
          seconds = max(time.time() - start, 1e-9)
          self.checkpoints.holds = checkpoints_lib.TRAINED
          ran = int(self.global_step.numpy()) - step  # fewer if a stop was requested mid-loop
          step += ran
          logs = {'loss': loss, **scalars, 'steps_per_sec': ran / seconds}
          for hook in hooks:
            hook.after_loop(step, logs)
          if not self.config.skip_train_summaries:
            self.write_scalars('train', step, logs)
          logging.info('%s', progress.line(step, logs))
          stop = self.stop.agreed(self._at_common_boundary(step, max_steps))
          if stop or step >= max_steps or step % self.config.save_checkpoints_steps == 0:
            self.save()
          if stop:
            raise TrainingInterrupted(step, self.stop.reason or 'another worker was stopped')
        # A signal that came while the last loop's checkpoint was being saved found the check above already made:
        # where more chunks follow (train_and_eval), honour it here (that checkpoint is at this step), or the next
        # chunk would clear it and train on. A run whose training is done goes on to its evaluation or export.
        # Every worker ends its loops at max_steps, a common boundary, with the same total, so votes stay in step.
        if step < (total_steps or max_steps) and self.stop.agreed(True):
          raise TrainingInterrupted(step, self.stop.reason or 'another worker was stopped')
    finally:
      for hook in hooks:
        hook.end(step)
    return logs

  def _run_in_thread(self, step: int, num_steps: int, markers: bool):
    """Runs one compiled loop in a worker thread, so the main thread stays free to handle SIGTERM/SIGINT."""
    result: Dict[str, Any] = {}

    def target():
      try:
        if markers:
          with tf.profiler.experimental.Trace('train', step_num=step, _r=1):
            result['out'] = self._train_loop.run(self._train_input[1], num_steps)
        else:
          result['out'] = self._train_loop.run(self._train_input[1], num_steps)
      except BaseException as e:  # pylint: disable=broad-except
        result['error'] = e

    thread = threading.Thread(target=target, name='train-loop', daemon=True)
    thread.start()
    thread.join()
    if 'error' in result:
      raise result['error']
    return result['out']

  def request_stop(self, reason: str = 'stop requested') -> None:
    """Ends training after the current step (single worker) or loop (multi-worker), with a checkpoint."""
    self.stop.request(reason)

  # ------------------------------------------------------------------------------------------------ evaluate
  def evaluate(self, input_fn: InputFn, checkpoint_path: Optional[str] = None, name: str = 'eval',
               weights: Optional[Callable[[], ContextManager]] = None,
               hooks: Sequence[hooks_lib.EvalHook] = ()) -> Dict[str, Any]:
    """Evaluates over the WHOLE finite eval set; restores ``checkpoint_path`` (default: latest) first.

    Metrics are exact sums over every example (weights mask padding), reduced over replicas; results also go
    to TensorBoard (``model_dir/<name>``) and, atomically replaced, to ``model_dir/<name>_results.json``.
    ``weights()``: a context in which the variables hold the weights to evaluate (e.g. moving averages).
    ``hooks`` see the per-example outputs on the host and may add results and TensorBoard images.
    """
    path = self._load_weights(ModeKeys.EVAL, checkpoint_path, 'evaluate')
    dataset = self.distribute(input_fn, ModeKeys.EVAL)
    for hook in hooks:
      hook.begin(self, name)
    start = time.time()
    with (weights() if weights else contextlib.nullcontext()):
      totals, sums = self._accumulate(dataset, hooks)
    results: Dict[str, Any] = {k: s / w if w else float('nan') for k, (s, w) in totals.items()}
    results.update(global_step=int(self.global_step.numpy()), checkpoint=path or '', seconds=time.time() - start,
                   num_examples=int(max(w for _, w in totals.values())))
    return self._publish(name, results, {k: results[k] for k in totals}, sums, hooks)

  def _accumulate(self, dataset, hooks: Sequence[hooks_lib.EvalHook]
                  ) -> Tuple[Dict[str, List[float]], Dict[str, np.ndarray]]:
    """Runs the compiled eval step over the whole dataset: per metric [sum, weight], and the float64 sums
    (exact counts past 2**24) the hooks asked for; the hooks see each batch's per-example outputs."""
    spec_key = repr(dataset.element_spec)  # one compiled step per input signature (another split, another spec)
    if spec_key not in self._eval_steps:
      self._eval_steps[spec_key] = loops.eval_step(self.strategy, self.replica_fns.eval(), dataset.element_spec)
    eval_step = self._eval_steps[spec_key]
    totals: Dict[str, List[float]] = {}
    sums: Dict[str, np.ndarray] = {}
    for element in dataset:
      metrics, batch_sums, examples = eval_step(element)
      for key, (s, w) in metrics.items():
        acc = totals.setdefault(key, [0.0, 0.0])
        acc[0] += float(s)
        acc[1] += float(w)
      for key, value in batch_sums.items():
        value = value.numpy().astype(np.float64)
        sums[key] = sums[key] + value if key in sums else value
      if hooks:
        batch = self._local_examples(examples)
        for hook in hooks:
          hook.after_batch(batch)
    if not totals:
      raise ValueError('The eval input produced no batches: is the eval split empty?')
    return totals, sums

  def _publish(self, name: str, results: Dict[str, Any], scalars: Dict[str, float], sums: Dict[str, np.ndarray],
               hooks: Sequence[hooks_lib.EvalHook]) -> Dict[str, Any]:
    """The hooks' reports added, then the log line, and (chief) TensorBoard and ``<name>_results.json``."""
    images: Dict[str, np.ndarray] = {}
    tensors: Dict[str, Any] = {}
    for hook in hooks:
      report = hook.end(results, sums)
      results.update(report.results)
      scalars.update({k: v for k, v in report.results.items() if isinstance(v, (int, float))})
      images.update(report.images)
      tensors.update(report.tensors)
    step = results['global_step']
    logging.info('Eval at step %d over %d examples: %s (%.1f s)', step, results['num_examples'],
                 ', '.join(f'{k}={scalars[k]:.4f}' for k in sorted(scalars)), results['seconds'])
    def write() -> None:
      self.write_scalars(name, step, scalars)
      if images:
        self.write_images(name, step, images)
      if tensors:
        self.write_tensors(name, step, tensors)
      files.atomic_write(os.path.join(self.model_dir, f'{name}_results.json'), _json(results))
    self.on_chief(write, f'write {os.path.join(self.model_dir, f"{name}_results.json")}')
    return results

  def _local_examples(self, examples: Mapping[str, Any]) -> Dict[str, np.ndarray]:
    """This worker's per-example values of one step, replicas concatenated in order."""
    local = self.strategy.experimental_local_results
    return {k: np.concatenate([np.asarray(t) for t in local(v)], axis=0) for k, v in examples.items()}

  def train_and_evaluate(self, train_input_fn: Union[InputFn, StagedInput], eval_input_fn: InputFn, max_steps: int,
                         steps_per_eval: int, hooks: Sequence[hooks_lib.LoopHook] = (),
                         eval_weights: Optional[Callable[[], ContextManager]] = None,
                         eval_hooks: Sequence[hooks_lib.EvalHook] = (),
                         best: Optional[best_checkpoint.BestCheckpoint] = None,
                         early_stopping_evals: int = 0) -> Dict[str, Any]:
    """Alternates training and a full evaluation at each multiple of ``steps_per_eval`` until ``max_steps``, or until
    ``early_stopping_evals`` evaluations in a row have not improved on ``best``."""
    self._global_batch(ModeKeys.EVAL)  # a bad eval batch fails now, not after the first training chunk
    if early_stopping_evals and best is None:
      raise ValueError('early_stopping_evals needs a best checkpoint to compare against (best_metric).')
    self._prepare_training(train_input_fn)
    step = int(self.global_step.numpy())
    results: Dict[str, Any] = {}
    if best is not None and self.is_chief and best.ahead_of(step):
      logging.warning('%s', best.ahead_of(step))
    # Evaluations fall at multiples of steps_per_eval (and max_steps), wherever a run was stopped, so that a resumed
    # run evaluates, keeps best/ and stops early at the steps the uninterrupted run does: a checkpoint a preempted run
    # saved at such a step but did not evaluate is evaluated now; one saved mid-chunk (SIGINT) is not.
    if best is not None and best.needs_evaluation(step) and (step % steps_per_eval == 0 or step >= max_steps):
      results = self.evaluate(eval_input_fn, weights=eval_weights, hooks=eval_hooks)
      best.update(results)
    while step < max_steps:
      if best is not None and best.should_stop(early_stopping_evals):
        logging.info('Early stopping at step %d: %d evaluations without improvement of %s. The best checkpoint '
                     'is %s (%s=%.4f at step %d).', step, best.evals_without_improvement, best.metric,
                     best.checkpoint_path, best.metric, best.value, best.best['global_step'])
        break
      step = min(self._next_multiple(step, steps_per_eval), max_steps)
      self.train(train_input_fn, max_steps=step, hooks=hooks, total_steps=max_steps)
      results = self.evaluate(eval_input_fn, weights=eval_weights, hooks=eval_hooks)
      if best is not None:
        best.update(results)
    worse = best.worse_since_first_evaluation() if best is not None else None
    if worse:
      logging.warning('%s', worse)
    return results

  def evaluate_continuously(self, input_fn: InputFn, timeout: Optional[float] = None,
                            stop_at_step: Union[int, Callable[[], Optional[int]], None] = None,
                            poll_seconds: float = 1.0,
                            log_every_seconds: float = 180.0,
                            weights: Optional[Callable[[], ContextManager]] = None,
                            hooks: Sequence[hooks_lib.EvalHook] = (),
                            best: Optional[best_checkpoint.BestCheckpoint] = None) -> Optional[Dict[str, Any]]:
    """Evaluates each new checkpoint of model_dir until one reaches ``stop_at_step`` (a callable is asked again
    after each evaluation and while waiting: a run may end early while this waits), or none appears within
    ``timeout`` seconds (None: wait forever). While waiting it logs where and how long, every few minutes."""
    last_path, results = None, None
    waiting_since = next_log = time.time()
    limit = 'forever (no timeout set)' if timeout is None else f'up to {timeout:g} s'
    while True:
      now = time.time()
      path, timed_out = self._poll(timeout is not None and now - waiting_since >= timeout)
      if path and path != last_path:
        last_path = path
        # Removed by keep_checkpoint_max while we waited, or between this check and the restore: every worker
        # skips it, or none does (one that raised alone would leave the others in the next collective).
        vanished = not tf.io.gfile.exists(path + '.index')
        if not vanished:
          try:
            self._load_weights(ModeKeys.EVAL, path, 'evaluate')
          except tf.errors.NotFoundError:
            vanished = True
        if distribution.any_worker(self.strategy, vanished):
          logging.info('Checkpoint %s vanished before it could be evaluated; skipping.', path)
          continue
        results = self.evaluate(input_fn, checkpoint_path=path, weights=weights, hooks=hooks)
        if best is not None:
          best.update(results)
        if self._ends(results, stop_at_step):
          logging.info('Evaluated the final step %d: done.', results['global_step'])
          return results
        waiting_since = next_log = time.time()
        continue
      if results is not None and self._ends(results, stop_at_step):
        logging.info('Training ended at step %d, evaluated already: done.', results['global_step'])
        return results
      if timed_out:
        if results is None:
          raise NoCheckpointError(
              f'No checkpoint appeared in {self.model_dir} within the timeout of {timeout:g} s: is the training '
              f'job writing to this model_dir?')
        logging.info('No new checkpoint within the timeout of %g s: stopping.', timeout)
        return results
      if now >= next_log:
        logging.info('Waiting for %s checkpoint in %s (waited %s so far; waiting %s).',
                     'a new' if last_path else 'a', self.model_dir, _format_seconds(now - waiting_since), limit)
        next_log = now + log_every_seconds
      time.sleep(poll_seconds)

  def _ends(self, results: Mapping[str, Any], stop_at_step: Union[int, Callable[[], Optional[int]], None]) -> bool:
    """Whether the evaluated step reaches the run's end; several workers take the chief's answer (each reads the
    end on its own, and one may read it before the others)."""
    target = stop_at_step() if callable(stop_at_step) else stop_at_step
    ends = target is not None and results['global_step'] >= target
    if self.workers > 1:
      ends, = self.from_chief([ends])
    return bool(ends)

  def _poll(self, timed_out: bool) -> Tuple[Optional[str], bool]:
    """model_dir's latest checkpoint and whether the wait timed out. Several workers take the chief's answer (its
    listing and its clock), so that they evaluate the same checkpoint and stop together."""
    path = None
    if self.is_chief:  # the others take its answer: a listing of theirs could only differ, or fail alone
      try:
        path = self.latest_checkpoint()
      except checkpoints_lib.IncompleteCheckpoints as e:  # a reader waits: the trainer may be writing its first one
        logging.log_every_n_seconds(logging.INFO, '%s', 180, e)
    if self.workers == 1:
      return path, timed_out
    step, timed_out = self.from_chief([checkpoints_lib.checkpoint_step(path) if path else -1, timed_out])
    return (self.checkpoints.path_for_step(int(step)) if step >= 0 else None), bool(timed_out)

  # ------------------------------------------------------------------------------------------------ predict
  def predict(self, input_fn: InputFn, checkpoint_path: Optional[str] = None,
              weights: Optional[Callable[[], ContextManager]] = None) -> Iterator[Dict[str, Any]]:
    """Yields one dict of numpy values per example (padding included: the caller knows its own marker).

    String features (file names) never enter the replica function: they are copied from the input on the host.
    ``weights()``: a context in which the variables hold the weights to predict with (as evaluate's).
    """
    self._load_weights(ModeKeys.PREDICT, checkpoint_path, 'predict with')
    step = loops.predict_step(self.strategy, self.replica_fns.predict())
    with (weights() if weights else contextlib.nullcontext()):
      for element in self.distribute(input_fn, ModeKeys.PREDICT):
        features, labels = loops.split_element(element)
        device, host = loops.split_host_features(features)
        outputs = dict(step(device, labels))
        if labels is not None:
          outputs['label'] = labels
        outputs.update(host)
        batch = self._local_examples(outputs)
        for i in range(len(next(iter(batch.values())))):
          yield {k: v[i] for k, v in batch.items()}

  # ------------------------------------------------------------------------------------------------ export
  def load_for_export(self, checkpoint_path: Optional[str] = None) -> Optional[str]:
    """Makes the variables hold what an export writes (default: the latest weights), on every worker: restoring
    is collective under MultiWorkerMirroredStrategy, while the export itself is the chief's alone."""
    return self._load_weights(ModeKeys.PREDICT, checkpoint_path, 'export')

  def export_saved_model(self, export_dir_base: str, serving_inputs: Mapping[str, ServingInput],
                         checkpoint_path: Optional[str] = None,
                         assets_extra_fn: Optional[Callable[[str], None]] = None,
                         weights: Optional[Callable[[], ContextManager]] = None) -> str:
    """Writes ``<export_dir_base>/<version>/`` (TF Serving layout) with one signature per serving input."""
    self._load_weights(ModeKeys.PREDICT, checkpoint_path, 'export')
    # Only what prediction uses (the model, not the optimizer and its slots: half the size for ResNet).
    objects = {k: v for k, v in self.scope.objects.items() if k in self._mode_objects[ModeKeys.PREDICT]}
    return export_lib.export_saved_model(export_dir_base, objects, self.model_fn, serving_inputs,
                                         self.mode_params(ModeKeys.PREDICT, exporting=True), assets_extra_fn,
                                         weights)


class _Progress:
  """One log line per loop: step/total, loss, lr, throughput (``rate``'s examples per second when given, else
  steps), ETA, and any other scalars (hooks may add some)."""

  _SHOWN = ('loss', 'learning_rate', 'steps_per_sec')

  def __init__(self, start_step: int, total_steps: int, rate: Optional[hooks_lib.ExamplesPerSecond] = None):
    self.start_step, self.total_steps, self.start_time = start_step, total_steps, time.time()
    self.rate = rate
    self.shown = self._SHOWN + ((rate.name,) if rate else ())

  def line(self, step: int, logs: Mapping[str, float]) -> str:
    done = step - self.start_step
    eta = (time.time() - self.start_time) / done * (self.total_steps - step) if done else float('nan')
    extras = ''.join(f' {k}={v:.4g}' for k, v in logs.items() if k not in self.shown)
    examples = logs.get(self.rate.name) if self.rate else None
    rate = f'{examples:.1f} {self.rate.unit}' if examples is not None else f'{logs["steps_per_sec"]:.3g} steps/s'
    return (f'step {step}/{self.total_steps} loss={logs["loss"]:.4f} lr={logs.get("learning_rate", math.nan):.4g} '
            f'{rate} ETA {_format_seconds(eta)}{extras}')


def _json(payload: Mapping[str, Any]) -> str:
  return json.dumps(payload, indent=2, sort_keys=True)


def _format_seconds(seconds: float) -> str:
  if not math.isfinite(seconds):
    return '?'
  seconds = int(seconds)
  hours, rest = divmod(seconds, 3600)
  minutes, secs = divmod(rest, 60)
  return f'{hours}:{minutes:02d}:{secs:02d}' if hours else f'{minutes}:{secs:02d}'
