"""What the modes hand the runner: the input of each split, the hooks of training and evaluation, model_dir/best/,
the warm start of a new run, the weights eval reads, and the run's records of its own start and end.

Each is made from the locked params alone, so that ``resnet_main``'s modes stay a few lines that say what runs.
"""
import dataclasses
from typing import Any, Callable, List, Optional, Tuple, Union

from absl import logging

from official_input import imagenet_input
from official_input import resnet_preprocessing
from params.params_dict import ParamsDict as Params
from resnet.run_setup import finished_run
from resnet.run_dir import hparams
from resnet.run_dir import model_dir as model_dir_lib
from resnet.run_dir import run_start
from resnet.run_setup import run_params
from resnet.estimator import best_checkpoint as best_checkpoint_lib
from resnet.estimator import checkpoints as checkpoints_lib
from resnet.estimator import hooks as hooks_lib
from resnet.estimator.estimator import Estimator
from resnet.estimator.spec import StagedInput
from resnet.evaluation import class_names
from resnet.task import tasks
from resnet.training import distillation
from resnet.training import divergence
from resnet.training import resnet_model_fn


def input_source(params: Params, split: str) -> imagenet_input.ImageNetInput:
  return imagenet_input.ImageNetInput.from_params(params, split=split)


@dataclasses.dataclass
class TrainInput:
  """The training input: one source, or one per stage of train_size_schedule (progressive resizing)."""
  sources: List[imagenet_input.ImageNetInput]
  input_fn: Union[Callable[..., Any], StagedInput]

  @property
  def skipped_records(self) -> int:
    return sum(source.skipped_records for source in self.sources)

  @property
  def lost_records(self) -> int:
    return sum(source.lost_records for source in self.sources)


SIZE_STAGES = 'size_stages'   # run_start.json's entry: the stages a run planned at its first start
_KEPT_LOGGED = set()   # (model_dir, train_steps) whose kept stages were logged (once a start, not at each ask)


def size_stages(params: Params) -> List[Tuple[int, int]]:
  """(first step, image size) of each stage of train_size_schedule: equal shares of train_steps, in order, as the run
  planned them at its first start (run_start.json). A resume with another train_steps keeps them (equal shares of
  the new count would move the boundaries, and a longer run would go back to a smaller size): the last stage takes
  the steps added or loses those removed; one that would end before the last stage starts is refused. A changed
  schedule is a new plan, over the train_steps it is given with."""
  sizes = [int(size) for size in params.train_size_schedule or []]
  planned = [(params.train_steps * i // len(sizes), size) for i, size in enumerate(sizes)]
  if not sizes or not checkpoints_lib.has_checkpoint(params.model_dir):
    return planned
  recorded = run_start.read(params.model_dir).get(SIZE_STAGES) or {}
  if recorded.get('sizes') != sizes:
    return planned
  stages = [(int(start), int(size)) for start, size in recorded['stages']]
  try:
    reached = max(checkpoints_lib.checkpoint_step(checkpoints_lib.latest(params.model_dir) or ''), 0)
  except checkpoints_lib.IncompleteCheckpoints:   # the runner names those when it restores
    reached = 0
  if reached < params.train_steps <= stages[-1][0]:   # steps to train, none of them at the last size
    raise ValueError(
        f'train_steps={params.train_steps} ends before the last stage of progressive resizing in '
        f'{params.model_dir}: its train_size_schedule={sizes} was planned at the run\'s start over train_steps='
        f'{recorded["train_steps"]} ({_described(stages)}), so {stages[-1][1]} px would start at step '
        f'{stages[-1][0]} and never train. Resume with train_steps above {stages[-1][0]} (e.g. '
        f'{recorded["train_steps"]}), or start a new --model_dir.')
  if stages != planned and (params.model_dir, params.train_steps) not in _KEPT_LOGGED:
    _KEPT_LOGGED.add((params.model_dir, params.train_steps))
    logging.info('Progressive resizing keeps the stages this run planned at its start over train_steps=%d (%s); '
                 'train_steps=%d now: %d px trains to the end.', recorded['train_steps'], _described(stages),
                 params.train_steps, stages[-1][1])
  return stages


def _described(stages: List[Tuple[int, int]]) -> str:
  return ', '.join(f'{size} px from step {start}' for start, size in stages)


def check_resume(params: Params) -> None:
  """Before a training run writes anything: what its first start fixed must still hold (size stages that the new
  train_steps reaches, a pinned teacher checkpoint that is still there); raises naming the fix."""
  size_stages(params)
  if distillation.enabled(params):
    distillation.teacher_path(params, resolve=not checkpoints_lib.has_checkpoint(params.model_dir))


def record_run_start(params: Params) -> None:
  """(chief) What this start fixed, for every later one: the size stages, the teacher's checkpoint."""
  entries = {}
  if params.train_size_schedule:
    sizes, stages = [int(s) for s in params.train_size_schedule], size_stages(params)
    recorded = run_start.read(params.model_dir).get(SIZE_STAGES) or {}
    if recorded.get('sizes') != sizes or [tuple(s) for s in recorded.get('stages', [])] != stages:  # a new plan
      entries[SIZE_STAGES] = dict(sizes=sizes, train_steps=params.train_steps, stages=[list(s) for s in stages])
  if distillation.enabled(params):
    entries[distillation.PINNED] = dict(
        given=params.teacher_checkpoint,
        checkpoint=distillation.teacher_path(params, resolve=not checkpoints_lib.has_checkpoint(params.model_dir)))
  if entries:
    run_start.record(params.model_dir, **entries)


def train_input(params: Params) -> TrainInput:
  stages = size_stages(params)
  if not stages:
    source = input_source(params, 'train')
    return TrainInput([source], source.input_fn)
  # Every stage reads the one order (a later stage goes on at its first step's place in the same permutation, so an
  # epoch across a stage boundary reads each record once); a seeded run salts only each stage's augmentation draws.
  seed = lambda i: None if params.random_seed is None else params.random_seed + i
  sources = [imagenet_input.ImageNetInput.from_params(params, split='train', image_size=size,
                                                      seed=params.random_seed, augment_seed=seed(i))
             for i, (_, size) in enumerate(stages)]
  logging.info('Progressive resizing (train_size_schedule): %s; eval at %d px.', _described(stages),
               resnet_preprocessing.image_size(params, training=False))
  return TrainInput(sources, StagedInput(tuple((start, source.input_fn)
                                               for (start, _), source in zip(stages, sources))))


def eval_source(params: Params) -> imagenet_input.ImageNetInput:
  """The validation split, with file names when misclassified images are listed (they stay on the host)."""
  return imagenet_input.ImageNetInput.from_params(params, split='validation',
                                                  include_filename=params.max_misclassified_rows > 0)


def train_hooks(params: Params, estimator: Estimator,
                train_source: TrainInput) -> List[hooks_lib.LoopHook]:
  from resnet import profiling  # pylint: disable=g-import-not-at-top
  hooks: List[hooks_lib.LoopHook] = [
      hooks_lib.ExamplesPerSecond(params.train_batch_size, name='images_per_sec', unit='img/s'),
      hooks_lib.CounterLogger('corrupt records skipped', lambda: train_source.skipped_records),
      hooks_lib.CounterLogger('records lost to damaged shards', lambda: train_source.lost_records)]
  if params.stop_on_nan:
    hooks.append(hooks_lib.NanGuard())
  if params.on_divergence != 'off':
    hooks.append(divergence.guard(params))
  # Every worker: the chief records, the others keep its loop boundaries (see ProfilerHook).
  profiler = profiling.make_profiler_hook(params, records=estimator.is_chief)
  if profiler is not None:
    hooks.append(profiler)
  return hooks


def eval_hooks(params: Params) -> List[Any]:
  """The task's report of each evaluation (class names read only where it has one)."""
  return tasks.for_params(params).eval_hooks(lambda: class_names.read_class_names(params),
                                             lambda: class_names.has_background(params))


def best_checkpoint(estimator: Estimator, params: Params) -> Optional[best_checkpoint_lib.BestCheckpoint]:
  """model_dir/best/ by best_metric, when kept (or needed: early stopping and export_best compare against it)."""
  if not (params.keep_best_checkpoint or params.early_stopping_evals or params.export_best):
    return None
  return best_checkpoint_lib.BestCheckpoint(
      params.model_dir, params.best_metric, params.best_metric_goal,
      role='writer' if estimator.is_chief else 'follower', share=estimator.from_chief,
      companions=(model_dir_lib.PARAMS_FILE, model_dir_lib.CLASS_NAMES_FILE))


def eval_weights(estimator: Estimator):
  """Evaluate with the moving-average weights when the run keeps them (as the reference does). A checkpoint
  without averages has them reset to its weights when restored (ema.ModelEMA.not_in_checkpoint)."""
  return resnet_model_fn.averaged_weights(estimator.scope) if estimator.params['moving_average_decay'] else None


def training_starts(estimator: Estimator, params: Params) -> None:
  """Before training: the warm start of a new run, the recipe advice, and (chief) the run's record that it is not
  finished, of the class names it trains with and of its params in TensorBoard's HParams dashboard (once a run)."""
  warm_start_if_new(estimator, params)
  advice = run_params.recipe_advice(params)
  if advice:
    logging.warning('%s', advice)

  def record() -> None:
    finished_run.clear_end(params.model_dir)
    model_dir_lib.record_class_names(params.model_dir, class_names.data_labels_path(params))
    record_run_start(params)
    hparams.write_session(estimator, params)
  estimator.on_chief(record, f'record the run in {params.model_dir}')


def training_ended(estimator: Estimator, params: Params) -> None:
  """After training ended on its own (train_steps, or early stopping): continuous eval of this run ends after the
  step it reached; the HParams dashboard gets the run's best metric (best/'s)."""
  step = int(estimator.global_step.numpy())
  why = 'train_steps reached' if step >= params.train_steps else 'early stopping'

  def record() -> None:
    finished_run.record_end(params.model_dir, step, why)
    hparams.write_best(estimator, params, step)
  estimator.on_chief(record, 'record the end of training')


def warm_start_if_new(estimator: Estimator, params: Params) -> None:
  """``--resnet_checkpoint`` applies only to a fresh model_dir; a resumed run keeps its own weights."""
  if not params.resnet_checkpoint:
    return
  if estimator.latest_checkpoint():
    logging.info('model_dir already has %s: resuming it, not warm-starting from %s.',
                 estimator.latest_checkpoint(), params.resnet_checkpoint)
    return
  from resnet.weights import warm_start  # pylint: disable=g-import-not-at-top
  # The model alone: --mode=export of warm-start weights must not need training's objects (a teacher's file).
  estimator.build('predict')
  warm_start.warm_start(estimator.scope.get(resnet_model_fn.MODEL), params.resnet_checkpoint,
                        allow_partial=params.allow_partial_warm_start)
  ema = resnet_model_fn.moving_average(estimator.scope)
  if ema is not None:
    ema.reset()  # the average starts from the warm-started weights
