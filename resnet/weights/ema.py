"""Exponential moving average (EMA) of a Keras model's weights, as the reference's ``moving_average_decay``.

What is averaged: every trainable variable and every batch-norm moving statistic (``moving_mean``,
``moving_variance``) -- the reference's trainable + ``moving_vars`` set. Not averaged: non-trainable bookkeeping such
as the DropBlock keep probability or RNG state. The decay at update ``s`` is ``min(decay, (1 + s) / (10 + s))``
(TF1 ``ExponentialMovingAverage`` with ``num_updates``): small at the start, so the average forgets the random
initialisation quickly, ``decay`` later. Shadows start as copies of the variables.

Distribution: shadows are created eagerly (under the strategy's scope when the caller is in it) as
``ONLY_FIRST_REPLICA`` variables. ``update`` may run in a replica context (inside ``strategy.run``, after
``apply_gradients``): every replica computes the same new value from its synchronised weights, and the first
replica's value is written to every copy, so the shadows never diverge between replicas. (Batch-norm statistics are
per replica in this trainer; the shadow follows the first replica's, which is also what a checkpoint stores.)

Checkpoints: ``ModelEMA`` is a ``tf.Module`` whose only tracked state is ``shadows``, a dict keyed by
the variable's Keras path (``conv2d_7/kernel``, equal to the TF1 name for this ResNet), so a checkpoint written as
``tf.train.Checkpoint(model=model, ema=ema)`` holds the raw and the averaged weights, and the averaged ones can be
found by name without a live model (``warm_start(..., use_moving_average=True)`` does that).
"""
import contextlib
from typing import Dict, Iterator, List, Optional, Sequence

from absl import logging
import keras
import tensorflow as tf

CHECKPOINT_NAME = 'ema'          # the key the EMA object must have in the training checkpoint
SHADOWS_ATTRIBUTE = 'shadows'    # the tracked dict of shadow variables inside it
MOVING_STATISTICS = ('moving_mean', 'moving_variance')


def effective_decay(step, decay: float) -> tf.Tensor:
  """``min(decay, (1 + step) / (10 + step))`` as float32."""
  step = tf.cast(step, tf.float32)
  return tf.minimum(tf.constant(decay, tf.float32), (1.0 + step) / (10.0 + step))


def averaged_variables(model: keras.Model) -> List[keras.Variable]:
  """The variables an EMA of ``model`` covers: trainable ones, then batch-norm moving statistics."""
  stats = [v for v in model.non_trainable_variables if v.name in MOVING_STATISTICS]
  return list(model.trainable_variables) + stats


class _Untracked:
  """Holds references a tf.Module must not track (the model's own variables would be checkpointed twice)."""

  def __init__(self, value):
    self.value = value


class ModelEMA(tf.Module):
  """Shadow copies of a model's weights, updated as ``shadow -= (1 - d) * (shadow - weight)``.

  Create it eagerly, inside ``strategy.scope()`` when training distributed, after the model is built:
    ema = ModelEMA(model, decay=0.9999)
  In the train step, after ``apply_gradients``: ``ema.update(num_updates)`` (the reference's ``num_updates`` is the
  global step after this step's increment). Evaluate or export with ``with ema.averaged_weights(): ...``, or
  ``ema.assign_to_model()`` for a model that will not train again. After overwriting the model's weights by other
  means (a warm start), call ``reset()`` so the average starts from them.
  """

  def __init__(self, model: keras.Model, decay: float, variables: Optional[Sequence[keras.Variable]] = None,
               name: str = 'ema'):
    super().__init__(name=name)
    if not 0.0 < decay < 1.0:
      raise ValueError(f'moving_average_decay must be in (0, 1) to use an EMA, got {decay} (0 turns EMA off; '
                       f'0.9999 is the usual value).')
    variables = averaged_variables(model) if variables is None else list(variables)
    if not variables:
      raise ValueError(f'Model {model.name!r} has no variables to average: build it before creating the EMA.')
    paths = [_path(v) for v in variables]
    duplicates = sorted({p for p in paths if paths.count(p) > 1})
    if duplicates:
      raise ValueError(f'EMA shadows are keyed by variable path, and these paths repeat: {duplicates[:5]}. Give '
                       f'the layers unique names.')
    self.decay = float(decay)
    self._sources = _Untracked(variables)
    shadows: Dict[str, tf.Variable] = {}
    for path, variable in zip(paths, variables):
      shadows[path] = tf.Variable(
          _read(variable), trainable=False, name=path.replace('/', '_') + '_ema',
          synchronization=tf.VariableSynchronization.ON_WRITE,
          aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
    self.shadows = shadows
    self._pairs = _Untracked([(v, shadows[p]) for p, v in zip(paths, variables)])
    logging.info('EMA of %d variables of %s, decay %g.', len(variables), model.name, decay)

  @property
  def paths(self) -> List[str]:
    return [_path(v) for v, _ in self._pairs.value]

  def shadow_of(self, variable) -> tf.Variable:
    return self.shadows[_path(variable)]

  def update(self, num_updates) -> tf.Tensor:
    """Moves every shadow toward its variable; returns the decay used. Works eagerly, in a tf.function, in a
    replica context (``strategy.run``) and in a cross-replica one."""
    decay = effective_decay(num_updates, self.decay)
    for variable, shadow in self._pairs.value:
      value = tf.cast(tf.convert_to_tensor(variable), shadow.dtype)
      shadow.assign_sub((1.0 - tf.cast(decay, shadow.dtype)) * (shadow - value))
    return decay

  def not_in_checkpoint(self, path: str) -> None:
    """Called after restoring a checkpoint without averages (trained with moving_average_decay unset): the
    shadows would keep the random initial weights; they start from the restored weights instead."""
    logging.warning('%s has no moving averages: they start from its weights.', path)
    self.reset()

  def reset(self) -> None:
    """Sets every shadow to its variable's current value (after a warm start or a manual assignment)."""
    for variable, shadow in self._pairs.value:
      shadow.assign(_read(variable))

  def swap(self) -> None:
    """Exchanges model weights and shadows; calling it twice restores both. Call in a cross-replica context."""
    for variable, shadow in self._pairs.value:
      raw = tf.identity(_read(variable))
      variable.assign(tf.cast(shadow, variable.dtype))
      shadow.assign(tf.cast(raw, shadow.dtype))

  @contextlib.contextmanager
  def averaged_weights(self) -> Iterator[None]:
    """The model holds the averaged weights inside the block, its own ones again after it (even on error).

    Do not save a checkpoint inside the block: model and shadows are exchanged there.
    """
    self.swap()
    try:
      yield
    finally:
      self.swap()

  def assign_to_model(self) -> None:
    """Overwrites the model's weights with the averages, for export or a final evaluation (not undone)."""
    for variable, shadow in self._pairs.value:
      variable.assign(tf.cast(shadow, variable.dtype))


def _path(variable) -> str:
  return getattr(variable, 'path', None) or variable.name.split(':')[0]


def _read(variable) -> tf.Tensor:
  """The variable's value in a cross-replica context (a MirroredVariable reads as its first replica's copy)."""
  return tf.identity(tf.convert_to_tensor(variable))
