"""Mixup and CutMix: each training batch blended with itself reversed, its targets blended by the same amount.

As timm's ``Mixup`` in its default 'batch' mode: one draw per (replica) batch of lambda ~ Beta(alpha, alpha); with
both enabled, CutMix is chosen with ``switch_prob``, and either is applied with probability ``prob``. Targets are
the label-smoothed one-hots, mixed: ``lambda * y + (1 - lambda) * y_reversed``. CutMix pastes one box of the
reversed batch whose area is ``1 - lambda`` (clipped at the image border; lambda is then recomputed from the box
actually pasted, so targets match pixels).

Draws are stateless, from (random_seed, global step, replica): a resumed run mixes the same way as an
uninterrupted one, and replicas do not all draw the same box.
"""
import dataclasses
from typing import Any, Mapping, Optional, Tuple

import tensorflow as tf

MIX_SEED_SALT = 0x313C  # separates these draws from other streams seeded with the same random_seed


@dataclasses.dataclass(frozen=True)
class MixConfig:
  """The params of the same names; alphas of 0 switch that kind off."""
  mixup_alpha: float = 0.0
  cutmix_alpha: float = 0.0
  mix_prob: float = 1.0
  mix_switch_prob: float = 0.5

  def __post_init__(self):
    for name in ('mixup_alpha', 'cutmix_alpha'):
      if not getattr(self, name) >= 0:
        raise ValueError(f'{name} must be >= 0 (0 = off), got {getattr(self, name)!r}.')
    for name in ('mix_prob', 'mix_switch_prob'):
      if not 0.0 <= getattr(self, name) <= 1.0:
        raise ValueError(f'{name} must be in [0, 1], got {getattr(self, name)!r}.')

  @property
  def enabled(self) -> bool:
    return (self.mixup_alpha > 0 or self.cutmix_alpha > 0) and self.mix_prob > 0

  @classmethod
  def from_params(cls, params: Mapping[str, Any]) -> 'MixConfig':
    return cls(**{f.name: params[f.name] for f in dataclasses.fields(cls)})


def mix_seed(step: tf.Tensor, random_seed: Optional[int]) -> tf.Tensor:
  """A stateless seed [2] for this step on this replica."""
  seed = tf.constant([random_seed or 0, MIX_SEED_SALT], tf.int64)
  seed = tf.random.experimental.stateless_fold_in(seed, tf.cast(step, tf.int64))
  context = tf.distribute.get_replica_context()
  replica = context.replica_id_in_sync_group if context is not None else 0
  return tf.random.experimental.stateless_fold_in(seed, tf.cast(replica, tf.int64))


def _beta(alpha: float, seed: tf.Tensor) -> tf.Tensor:
  seeds = tf.random.experimental.stateless_split(seed, 2)
  a = tf.random.stateless_gamma([], seeds[0], alpha=alpha)
  b = tf.random.stateless_gamma([], seeds[1], alpha=alpha)
  return a / tf.maximum(a + b, 1e-12)


def cutmix_box(height: int, width: int, lam: tf.Tensor, seed: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
  """A [H, W] bool mask of the pasted box (area ~ 1 - lam, centred uniformly, clipped) and the lambda it gives."""
  ratio = tf.sqrt(1.0 - lam)
  cut_h = tf.cast(tf.cast(height, tf.float32) * ratio, tf.int32)
  cut_w = tf.cast(tf.cast(width, tf.float32) * ratio, tf.int32)
  centre = tf.random.stateless_uniform([2], seed, minval=0, maxval=tf.int32.max, dtype=tf.int32)
  cy, cx = centre[0] % height, centre[1] % width
  y0, y1 = tf.clip_by_value(cy - cut_h // 2, 0, height), tf.clip_by_value(cy + cut_h // 2, 0, height)
  x0, x1 = tf.clip_by_value(cx - cut_w // 2, 0, width), tf.clip_by_value(cx + cut_w // 2, 0, width)
  rows = tf.logical_and(tf.range(height) >= y0, tf.range(height) < y1)
  cols = tf.logical_and(tf.range(width) >= x0, tf.range(width) < x1)
  mask = tf.logical_and(rows[:, None], cols[None, :])
  pasted = tf.cast((y1 - y0) * (x1 - x0), tf.float32) / float(height * width)
  return mask, 1.0 - pasted


def mix(images: tf.Tensor, targets: tf.Tensor, config: MixConfig, seed: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
  """(images [B, H, W, C], targets [B, K]) blended with the batch reversed; returns the same shapes and dtypes."""
  if not config.enabled:
    return images, targets
  seeds = tf.random.experimental.stateless_split(seed, 4)
  apply = tf.random.stateless_uniform([], seeds[0]) < config.mix_prob
  if config.mixup_alpha > 0 and config.cutmix_alpha > 0:
    use_cutmix = tf.random.stateless_uniform([], seeds[1]) < config.mix_switch_prob
  else:
    use_cutmix = tf.constant(config.cutmix_alpha > 0)
  height, width = images.shape[1], images.shape[2]
  pixels = tf.cast(images, tf.float32)
  reversed_pixels = tf.reverse(pixels, [0])

  def _mixup() -> Tuple[tf.Tensor, tf.Tensor]:
    lam = _beta(config.mixup_alpha, seeds[2]) if config.mixup_alpha > 0 else tf.constant(1.0)
    return pixels * lam + reversed_pixels * (1.0 - lam), lam

  def _cutmix() -> Tuple[tf.Tensor, tf.Tensor]:
    lam = _beta(config.cutmix_alpha, seeds[2]) if config.cutmix_alpha > 0 else tf.constant(1.0)
    mask, lam = cutmix_box(height, width, lam, seeds[3])
    return tf.where(mask[None, :, :, None], reversed_pixels, pixels), lam

  mixed, lam = tf.cond(use_cutmix, _cutmix, _mixup)
  lam = tf.where(apply, lam, 1.0)
  mixed = tf.where(apply, mixed, pixels)
  mixed_targets = targets * lam + tf.reverse(targets, [0]) * (1.0 - lam)
  return tf.cast(mixed, images.dtype), mixed_targets
