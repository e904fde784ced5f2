"""Learning-rate schedules, as pure functions of the global step.

- ``stepwise``: the reference's: peak ``base_lr * B / 256``, linear warm-up from 0 over ``lr_warmup_epochs``
  epochs, then x0.1 at 30, 60 and 80 of 90 epochs. Decay boundaries are fractions of ``train_steps`` (identical to
  the reference for its 90-epoch runs; the reference floors them to whole epochs, which erases the warm-up of any
  run shorter than 18 epochs -- we don't).
- ``cosine``: the same warm-up, then half a cosine down to 0 at ``train_steps``.
- ``exponential``: the Keras flowers-on-TPU tutorial's ramp-up / sustain / exponential decay, per whole epoch (as its
  LearningRateScheduler callback):
  ``lr_start`` ramps linearly to the peak over ``lr_rampup_epochs``, holds ``lr_sustain_epochs``, then decays as
  ``(peak - lr_min) * lr_exp_decay ** k + lr_min``.
"""
import math
from typing import Any, Mapping

import tensorflow as tf

# The reference's stepwise table: (multiplier, start of the phase as a fraction of a 90-epoch run).
STEPWISE_DECAYS = ((0.1, 30.0 / 90.0), (0.01, 60.0 / 90.0), (0.001, 80.0 / 90.0))
REFERENCE_EPOCHS = 90.0


def peak_learning_rate(params: Mapping[str, Any]) -> float:
  return params['base_learning_rate'] * params['train_batch_size'] / 256.0


def steps_per_epoch(params: Mapping[str, Any]) -> float:
  return params['num_train_images'] / params['train_batch_size']


def _warmup_steps(params: Mapping[str, Any]) -> float:
  return params['lr_warmup_epochs'] * steps_per_epoch(params)


def learning_rate(step: tf.Tensor, params: Mapping[str, Any]) -> tf.Tensor:
  """The learning rate at global ``step`` (any numeric tensor) for ``params['lr_schedule']``."""
  step = tf.cast(step, tf.float32)
  schedule = params['lr_schedule']
  if schedule == 'stepwise':
    return _stepwise(step, params)
  if schedule == 'cosine':
    return _cosine(step, params)
  if schedule == 'exponential':
    return _exponential(step, params)
  raise ValueError(f"Unknown lr_schedule {schedule!r}: use 'stepwise', 'cosine' or 'exponential'.")


def _linear_warmup(step: tf.Tensor, peak: float, warmup: float, after: tf.Tensor) -> tf.Tensor:
  if warmup <= 0:
    return after
  return tf.where(step < warmup, peak * step / warmup, after)


def _stepwise(step: tf.Tensor, params: Mapping[str, Any]) -> tf.Tensor:
  peak = peak_learning_rate(params)
  lr = tf.constant(peak, tf.float32)
  for multiplier, fraction in STEPWISE_DECAYS:
    lr = tf.where(step >= params['train_steps'] * fraction, peak * multiplier, lr)
  return _linear_warmup(step, peak, _warmup_steps(params), lr)


def _cosine(step: tf.Tensor, params: Mapping[str, Any]) -> tf.Tensor:
  peak = peak_learning_rate(params)
  warmup = _warmup_steps(params)
  span = max(params['train_steps'] - warmup, 1.0)
  progress = tf.clip_by_value((step - warmup) / span, 0.0, 1.0)
  lr = 0.5 * peak * (1.0 + tf.cos(math.pi * progress))
  return _linear_warmup(step, peak, warmup, lr)


def _exponential(step: tf.Tensor, params: Mapping[str, Any]) -> tf.Tensor:
  peak = peak_learning_rate(params)
  start, floor = params['lr_start'], params['lr_min']
  rampup, sustain = params['lr_rampup_epochs'], params['lr_sustain_epochs']
  epoch = tf.floor(step / steps_per_epoch(params))
  ramp = (peak - start) / rampup * epoch + start if rampup > 0 else tf.constant(peak, tf.float32)
  decay = (peak - floor) * tf.pow(params['lr_exp_decay'], tf.maximum(epoch - rampup - sustain, 0.0)) + floor
  return tf.where(epoch < rampup, ramp, tf.where(epoch < rampup + sustain, peak, decay))
