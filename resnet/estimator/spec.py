"""The model_fn / input_fn contract: modes, what they receive and return, and where persistent objects live.

``model_fn(features, labels, mode, params)`` and ``input_fn(params)`` get ``params`` as a :class:`RunParams`: the
run's settings plus ``params['batch_size']`` (per replica), read-only, as TPUEstimator passed them. What the
Estimator knows only at run time (mode, replica count, the object scope, the step counter, the tf.distribute
input context) is not a setting, so it travels beside them, typed, as ``params.context`` (:class:`RunContext`).

TF2 needs persistent objects (model, optimizer) created outside the compiled step, so a model_fn gets them from
``params.context.scope`` (an :class:`ObjectScope`) with ``get_or_create(name, factory)``. The estimator first calls
``model_fn(None, None, mode, params)`` eagerly inside the strategy scope: that call must create every object the
mode needs and may return None. Later calls run inside the compiled step, on real features, in replica context.
"""
import collections.abc
import contextlib
import dataclasses
from typing import Any, Callable, Dict, Iterator, Mapping, NamedTuple, Optional, Set, Tuple

import tensorflow as tf


class ModeKeys:
  TRAIN = 'train'
  EVAL = 'eval'
  PREDICT = 'predict'


class EstimatorSpec(NamedTuple):
  """What model_fn returns.

  TRAIN: ``loss`` (this replica's share: the mean over the GLOBAL batch, so the sum over replicas is the batch
    mean), ``scalars`` (per-replica values to log, averaged over replicas; a loop reports its last step's, e.g. the
    learning rate) and ``mean_scalars`` (the same, but averaged over the loop's steps as the loss is, e.g. a loss
    term). The update itself happens inside model_fn (TF2 has no train_op: side effects in a tf.function run in
    program order).
  EVAL: ``eval_metrics``: name -> (weighted sum, weight) per replica, float32; the estimator sums both over
    replicas and batches and reports sum/weight, so padded examples (weight 0) never count and the result is exact.
    ``eval_sums``: name -> float32 tensor of any static shape (e.g. a confusion matrix), summed over replicas and
    batches and reported as it is. ``eval_outputs``: name -> per-example tensor [B, ...], handed to eval hooks on
    the host batch by batch, beside the labels and the string features (file names) that never enter the step.
  PREDICT: ``predictions``: name -> tensor with a leading batch dimension.
  """
  mode: str
  loss: Optional[tf.Tensor] = None
  scalars: Optional[Dict[str, tf.Tensor]] = None
  eval_metrics: Optional[Dict[str, Tuple[tf.Tensor, tf.Tensor]]] = None
  eval_sums: Optional[Dict[str, tf.Tensor]] = None
  eval_outputs: Optional[Dict[str, tf.Tensor]] = None
  predictions: Optional[Dict[str, tf.Tensor]] = None
  mean_scalars: Optional[Dict[str, tf.Tensor]] = None


class ServingInput(NamedTuple):
  """A serving signature: its inputs as TensorSpecs by name, and how they become model_fn features.

  ``features_fn`` runs on the host (decoding strings); only model_fn's PREDICT computation is the device part.
  """
  input_signature: Dict[str, tf.TensorSpec]
  features_fn: Callable[..., Any]


class ObjectScope(tf.Module):
  """Named persistent objects (model, optimizer, ...) that model_fn creates once and reuses."""

  def __init__(self):
    super().__init__(name='scope')
    self._objects: Dict[str, Any] = {}
    self._unsaved: Set[str] = set()
    self._creating = False
    self._requested: Set[str] = set()

  def get_or_create(self, name: str, factory: Callable[[], Any], saved: bool = True) -> Any:
    """``saved=False``: an object checkpoints leave out (e.g. a frozen teacher model read from its own file)."""
    self._requested.add(name)
    if not saved:
      self._unsaved.add(name)
    if name not in self._objects:
      if not self._creating:
        raise RuntimeError(
            f'model_fn asked for a new object {name!r} inside the compiled step; create it in the first '
            f'call (features=None), which the estimator makes eagerly in the strategy scope.')
      self._objects[name] = factory()
    return self._objects[name]

  def get(self, name: str) -> Any:
    return self._objects.get(name)

  @property
  def objects(self) -> Dict[str, Any]:
    return dict(self._objects)

  @property
  def saved_objects(self) -> Dict[str, Any]:
    """The objects checkpoints hold."""
    return {name: value for name, value in self._objects.items() if name not in self._unsaved}

  @contextlib.contextmanager
  def creating(self) -> Iterator[Set[str]]:
    """Allows creation inside the block; yields the set of names requested in it (the mode's objects)."""
    self._creating, self._requested = True, set()
    try:
      yield self._requested
    finally:
      self._creating = False


@dataclasses.dataclass(frozen=True)
class RunContext:
  """The Estimator's run-time state that a model_fn or input_fn may need; set by the Estimator, never by params.

  ``scope`` and ``global_step`` are given to model_fn, ``input_context`` (which input pipeline this is, how many
  replicas it feeds) to input_fn; ``exporting``: PREDICT traced for a SavedModel's serving signatures, not run on
  data (a model_fn may serve less than it predicts with, e.g. without test-time augmentation). A training input_fn
  also gets ``start_step`` (the global step its first batch trains: a resumed run's, or a stage's first) and
  ``input_seed`` (the run's seed of the input order, saved in its checkpoints), so that it starts where the batches
  trained so far end and reads an unseeded run's epochs in the order they began.
  """
  mode: str
  num_replicas: int = 1
  scope: Optional[ObjectScope] = None
  global_step: Optional[tf.Variable] = None
  input_context: Optional[tf.distribute.InputContext] = None
  exporting: bool = False
  start_step: int = 0
  input_seed: Optional[int] = None


class RunParams(collections.abc.Mapping):
  """Read-only run settings plus the per-replica ``batch_size``; the run-time state on ``.context``."""

  def __init__(self, settings: Mapping[str, Any], batch_size: int, context: RunContext):
    self._values = dict(settings, batch_size=int(batch_size))
    self.context = context

  def __getitem__(self, key: str) -> Any:
    return self._values[key]

  def __iter__(self) -> Iterator[str]:
    return iter(self._values)

  def __len__(self) -> int:
    return len(self._values)

  def __repr__(self) -> str:
    return f'RunParams({self._values!r}, context={self.context!r})'


@dataclasses.dataclass(frozen=True)
class StagedInput:
  """Training input that changes at given global steps (progressive resizing: smaller images early on): ``stages``
  is ((first step, input_fn), ...), the first at step 0. Train loops end at each stage's first step, and the next
  loop reads the new input_fn through a new compiled loop (traced once there, as at a run's start; static shapes,
  so TPUs and XLA take it too); a resumed run starts in the stage of its step."""
  stages: Tuple[Tuple[int, Callable[..., Any]], ...]

  def __post_init__(self):
    starts = [start for start, _ in self.stages]
    if not starts or starts[0] != 0 or starts != sorted(set(starts)):
      raise ValueError(f'StagedInput needs stages starting at step 0 in increasing order, got starts {starts}.')

  def at(self, step: int) -> Callable[..., Any]:
    """The input_fn of the stage holding ``step``."""
    return [fn for start, fn in self.stages if start <= step][-1]

  def next_start(self, step: int) -> Optional[int]:
    """The first step of the next stage after ``step``, or None in the last stage."""
    return next((start for start, _ in self.stages if start > step), None)
