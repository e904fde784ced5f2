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
- with ``enable_lars``: the reference's LARS schedule (``lars_learning_rate``), whatever ``lr_schedule`` says.
"""
import math
from typing import Any, Mapping, Tuple

from absl import logging
import tensorflow as tf

# The reference's stepwise table: (multiplier, start of the phase as a fraction of a 90-epoch run).
STEPWISE_DECAYS = ((0.1, 30.0 / 90.0), (0.01, 60.0 / 90.0), (0.001, 80.0 / 90.0))
REFERENCE_EPOCHS = 90.0


def peak_learning_rate(params: Mapping[str, Any]) -> float:
  return params['base_learning_rate'] * params['train_batch_size'] / 256.0


def steps_per_epoch(num_train_images: int, train_batch_size: int) -> float:
  """Steps of one real epoch (not floored): every schedule counts epochs with it."""
  return num_train_images / train_batch_size


def params_steps_per_epoch(params: Mapping[str, Any]) -> float:
  return steps_per_epoch(params['num_train_images'], params['train_batch_size'])


def _warmup_steps(params: Mapping[str, Any]) -> float:
  return params['lr_warmup_epochs'] * params_steps_per_epoch(params)


def warmup_steps(params: Mapping[str, Any]) -> float:
  """Steps until the schedule first reaches its peak, whichever schedule ``params`` pick (LARS's own included)."""
  if params['enable_lars']:
    return lars_peak_and_warmup(params['train_batch_size'])[1] * params_steps_per_epoch(params)
  if params['lr_schedule'] == 'exponential':
    return params['lr_rampup_epochs'] * params_steps_per_epoch(params)
  return _warmup_steps(params)


def learning_rate(step: tf.Tensor, params: Mapping[str, Any]) -> tf.Tensor:
  """The learning rate at global ``step`` (any numeric tensor): LARS's own with ``enable_lars``, else
  ``params['lr_schedule']``."""
  if params['enable_lars']:
    return lars_learning_rate(step, params['train_batch_size'], params['num_train_images'], params['train_steps'],
                              params['poly_rate'])
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
  epoch = tf.floor(step / params_steps_per_epoch(params))
  ramp = (peak - start) / rampup * epoch + start if rampup > 0 else tf.constant(peak, tf.float32)
  decay = (peak - floor) * tf.pow(params['lr_exp_decay'], tf.maximum(epoch - rampup - sustain, 0.0)) + floor
  return tf.where(epoch < rampup, ramp, tf.where(epoch < rampup + sustain, peak, decay))


# The reference's LARS peak learning rate and warm-up epochs by global batch size: (batch below, peak, epochs).
LARS_SCHEDULE_TABLE = ((16384, 10.0, 5), (32768, 25.0, 5), (65536, 32.0, 14), (None, 35.6, 40))
LARS_MIN_RECOMMENDED_BATCH = 2000
LARS_END_LEARNING_RATE = 1e-4
_WARNED_BATCH_SIZES = set()


def lars_peak_and_warmup(train_batch_size: int) -> Tuple[float, int]:
  """The reference's LARS (peak learning rate, warm-up epochs) for a global batch size."""
  if train_batch_size <= 0:
    raise ValueError(f'train_batch_size must be positive, got {train_batch_size}')
  if train_batch_size < LARS_MIN_RECOMMENDED_BATCH and train_batch_size not in _WARNED_BATCH_SIZES:
    _WARNED_BATCH_SIZES.add(train_batch_size)  # once, not at every trace of the schedule
    logging.warning('LARS is meant for large batches; train_batch_size=%d is below %d.', train_batch_size,
                    LARS_MIN_RECOMMENDED_BATCH)
  for below, peak, epochs in LARS_SCHEDULE_TABLE:
    if below is None or train_batch_size < below:
      return peak, epochs
  raise AssertionError('unreachable')


def lars_learning_rate(step, train_batch_size: int, num_train_images: int, train_steps: int,
                       poly_rate: float = 0.0, end_learning_rate: float = LARS_END_LEARNING_RATE) -> tf.Tensor:
  """The reference's LARS schedule at global ``step``: linear warm-up, then polynomial (power 2) decay.

  With peak ``p`` and warm-up ``w`` epochs from ``lars_peak_and_warmup`` (``poly_rate > 0`` replaces ``p``),
  ``epoch = step * B / N`` (not floored) and ``w_steps = floor(w * N / B)``:
    epoch <= w:  p * epoch / w
    otherwise:   (p - end) * (1 - min(k, D) / D) ** 2 + end,  k = max(1, step - w_steps),  D = train_steps - w_steps + 1
  When ``train_steps <= w_steps`` the decay phase is never reached; ``D`` is clamped to 1 so that the unused branch
  stays finite (the reference divided by a non-positive span there).
  """
  if num_train_images <= 0 or train_steps <= 0:
    raise ValueError(f'num_train_images and train_steps must be positive, got {num_train_images} and {train_steps}')
  if poly_rate < 0:
    raise ValueError(f'poly_rate must be >= 0 (0 = the batch-size table), got {poly_rate}')
  peak, warmup_epochs = lars_peak_and_warmup(train_batch_size)
  if poly_rate > 0.0:
    peak = poly_rate
  step = tf.cast(step, tf.float32)
  epoch = step / steps_per_epoch(num_train_images, train_batch_size)
  warmup_steps = warmup_epochs * num_train_images // train_batch_size  # floored, as the reference
  span = float(max(1, train_steps - warmup_steps + 1))
  decay_step = tf.minimum(tf.maximum(1.0, step - warmup_steps), span)
  decayed = (peak - end_learning_rate) * tf.square(1.0 - decay_step / span) + end_learning_rate
  return tf.where(epoch <= warmup_epochs, peak * epoch / warmup_epochs, decayed)
