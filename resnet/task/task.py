"""The task: what a run's labels are, and everything that follows from it, in one object chosen once from params.

Single-label (one class per image: a softmax) and multi-label (any number of classes: a sigmoid per class, tuned
thresholds) differ in the targets a label gives, what a class weight means, the loss, the eval metrics and their
report, the predictions, how they are decided and written, the loss a guess scores (the divergence guard's
baseline), whether a model can teach another, and what a deployed file answers. The model_fn, eval, predict, the
divergence guard, distillation and the exports ask the run's ``Task`` (``for_params``) and never test which task
it is, so a new task (say, regression of a score) is one new subclass, registered with ``register``
(``tasks.for_params`` chooses among the registered ones; tasks.py imports the built-in ones), and its name among
the choices of the ``task`` param (params/ is below the program and cannot ask the registry).

A task is a plain object over the params (no TensorFlow state of its own): the model_fn builds one per call, as
cheaply as it reads a param. What it keeps between steps (multi-label thresholds) lives in the runner's object
scope, made by ``predict_objects``.
"""
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Type

import tensorflow as tf

DEFAULT = 'single_label'
_TASKS: Dict[str, Type['Task']] = {}

# (sum, count) pairs of exact eval metrics, sums of [..] tensors, per-example outputs for eval hooks.
EvalParts = Tuple[Dict[str, Tuple[tf.Tensor, tf.Tensor]], Dict[str, tf.Tensor], Dict[str, tf.Tensor]]


class Task:
  """The interface; every method a run calls. ``name`` is the value of the ``task`` param that selects it."""

  name = ''
  # What unset params become for this task (run_params fills them): the loss, the metric best/ keeps.
  defaults: Dict[str, Any] = {}

  def __init__(self, params: Mapping[str, Any]):
    self.params = params

  @property
  def num_classes(self) -> int:
    return int(self.params['num_label_classes'])

  # ---------------------------------------------------------------------------------------------- training
  def check_labels(self, labels: tf.Tensor) -> tf.Tensor:
    """The training labels, checked where a wrong one would train silently on nothing."""
    return labels

  def targets(self, labels: tf.Tensor, training: bool = False) -> tf.Tensor:
    """[B, K] float32 targets of the loss (what mixup/CutMix mix); ``training``: with the class weights where
    this task puts them in the targets."""
    raise NotImplementedError

  def per_example_loss(self, logits: tf.Tensor, targets: tf.Tensor, training: bool = False) -> tf.Tensor:
    """[B] loss of each example against its targets; ``training``: with the class weights where this task puts
    them in the loss."""
    raise NotImplementedError

  def example_weights(self, targets: tf.Tensor) -> tf.Tensor:
    """[B] each example's weight in the loss (1 without class weights): distillation weighs its soft term so."""
    return tf.ones(tf.shape(targets)[:1], tf.float32)

  def balanced_class_weights(self, counts: Sequence[int], num_images: int) -> List[float]:
    """``class_weights=balanced`` from the training counts of each model class."""
    raise NotImplementedError

  def chance_loss(self, counts: Optional[Sequence[int]], num_images: int) -> Tuple[float, str]:
    """(the training loss of a guess that ignores the image, how it was reckoned): the divergence guard's
    baseline. ``counts``: the training images of each model class (None where the data does not say)."""
    raise NotImplementedError

  def uninformed_loss(self, counts: Optional[Sequence[int]], num_images: int) -> Optional[float]:
    """The training loss of outputs that say nothing (logits 0), or None: where a run whose head was not
    initialised at the chance level (a copied head, a changed loss) may start. The divergence guard takes a start
    up to it as the run's baseline, so that a loss that cannot fall to chance at once is not called diverged."""
    return None

  def divergence_fixes(self) -> List[str]:
    """What to try besides a lower learning rate when the loss explodes (class weights, this task's way)."""
    return []

  @property
  def teacher_refusal(self) -> Optional[str]:
    """Why a model of this task cannot teach by distillation (a softmax over the classes), or None."""
    return None

  # ---------------------------------------------------------------------------------------------- eval
  def eval_parts(self, logits: tf.Tensor, labels: tf.Tensor, per_example_loss: tf.Tensor) -> EvalParts:
    """(eval_metrics, eval_sums, eval_outputs) of a batch whose padding rows carry label -1."""
    raise NotImplementedError

  def eval_hooks(self, class_names: Callable[[], List[str]], background: Callable[[], bool]) -> List[Any]:
    """The Estimator eval hooks that turn the sums into this task's report (names are read only when needed)."""
    return []

  # ---------------------------------------------------------------------------------------------- serving
  def predict_objects(self, scope) -> None:
    """Objects predict needs beside the model, made in the runner's scope (never saved in checkpoints)."""

  def predictions(self, logits: tf.Tensor, scope) -> Dict[str, tf.Tensor]:
    """What predict and every export signature output for these logits."""
    raise NotImplementedError

  def decisions(self, estimator, checkpoint: Optional[str], best: bool = False, averaged: bool = True,
                single_view: bool = False) -> Any:
    """What the served predictions decide with for ``checkpoint`` (set in the estimator's scope, logged), an
    opaque value the writers, deployed files and exports below take; None where the task decides alone."""
    return None

  def deployed_decisions(self, path: str, decisions: Any) -> Any:
    """What a deployed file at ``path`` decides with: those exported beside it, else the run's."""
    return decisions

  def prediction_writer(self, decisions: Any, class_names: List[str]):
    """The predictions CSV's rows and the report on labelled data (``evaluation/predictions.py``)."""
    raise NotImplementedError

  def answers(self, decisions: Any):
    """How a deployed file's probabilities are decided, scored and compared (``Answers``)."""
    raise NotImplementedError

  def write_export_records(self, export_dir: str, decisions: Any,
                           class_names: Callable[[], List[str]]) -> Optional[str]:
    """Files an app needs beside the exported model to decide as predict does (class names read only when
    written); the path written, or None."""
    return None


def register(cls: Type[Task]) -> Type[Task]:
  """Registers a Task subclass under its ``name`` (a class decorator)."""
  if not cls.name:
    raise ValueError(f'{cls.__name__} has no name: set the class attribute `name` (the task param selecting it).')
  _TASKS[cls.name] = cls
  return cls


def registered() -> List[str]:
  return sorted(_TASKS)


def lookup(name: Optional[str]) -> Type[Task]:
  """The Task class of a ``task`` param's value (unset: single-label)."""
  name = name or DEFAULT
  if name not in _TASKS:
    raise ValueError(f'task={name!r} is not a task of this program; the tasks are {", ".join(registered())}.')
  return _TASKS[name]
