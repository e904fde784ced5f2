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
from resnet.run_dir import model_dir as model_dir_lib
from resnet.run_setup import run_params
from resnet.estimator import best_checkpoint as best_checkpoint_lib
from resnet.estimator import hooks as hooks_lib
from resnet.estimator.estimator import Estimator
from resnet.estimator.spec import StagedInput
from resnet.evaluation import class_names
from resnet.task import tasks
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


def size_stages(params: Params) -> List[Tuple[int, int]]:
  """(first step, image size) of each stage of train_size_schedule: equal shares of train_steps, in order."""
  sizes = list(params.train_size_schedule or [])
  return [(params.train_steps * i // len(sizes), int(size)) for i, size in enumerate(sizes)]


def train_input(params: Params) -> TrainInput:
  stages = size_stages(params)
  if not stages:
    source = input_source(params, 'train')
    return TrainInput([source], source.input_fn)
  # Each stage's pipeline starts afresh: a seeded run gives each its own seed, so that later stages do not replay
  # the first stage's order and augmentation draws.
  seed = lambda i: None if params.random_seed is None else params.random_seed + i
  sources = [imagenet_input.ImageNetInput.from_params(params, split='train', image_size=size, seed=seed(i))
             for i, (_, size) in enumerate(stages)]
  logging.info('Progressive resizing (train_size_schedule): %s; eval at %d px.',
               ', '.join(f'{size} px from step {start}' for start, size in stages),
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
  finished and of the class names it trains with."""
  warm_start_if_new(estimator, params)
  advice = run_params.recipe_advice(params)
  if advice:
    logging.warning('%s', advice)

  def record() -> None:
    finished_run.clear_end(params.model_dir)
    model_dir_lib.record_class_names(params.model_dir, class_names.data_labels_path(params))
  estimator.on_chief(record, f'record the run in {params.model_dir}')


def training_ended(estimator: Estimator, params: Params) -> None:
  """After training ended on its own (train_steps, or early stopping): continuous eval of this run ends after the
  step it reached."""
  step = int(estimator.global_step.numpy())
  why = 'train_steps reached' if step >= params.train_steps else 'early stopping'
  estimator.on_chief(lambda: finished_run.record_end(params.model_dir, step, why), 'record the end of training')


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
