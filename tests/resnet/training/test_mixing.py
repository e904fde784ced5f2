"""Mixup / CutMix (resnet/training/mixing.py): pixels and targets blended by the same amount, stateless, per replica."""
import numpy as np
import pytest
import tensorflow as tf

from resnet.training import mixing

B, H, W, K = 4, 8, 10, 5


def _batch():
  # Example i is the constant image i + 1 with label i: any pixel tells which examples it came from.
  images = tf.constant(np.arange(1, B + 1, dtype=np.float32)[:, None, None, None] * np.ones((B, H, W, 3), np.float32))
  targets = tf.one_hot(tf.range(B), K)
  return images, targets


def _seed(step, replica=0):
  return tf.random.experimental.stateless_fold_in(tf.constant([1, 2], tf.int64), step * 100 + replica)


def test_off_by_default():
  images, targets = _batch()
  out_images, out_targets = mixing.mix(images, targets, mixing.MixConfig(), _seed(0))
  assert out_images is images and out_targets is targets


def test_mixup_blends_pixels_and_targets_by_the_same_lambda():
  images, targets = _batch()
  config = mixing.MixConfig(mixup_alpha=0.4)
  lams = []
  for step in range(40):
    mixed, mixed_targets = mixing.mix(images, targets, config, _seed(step))
    lam = mixed_targets.numpy()[0, 0]  # example 0 keeps lam of its own class 0 (its partner is class B-1)
    np.testing.assert_allclose(mixed.numpy()[0], lam * 1 + (1 - lam) * B, rtol=1e-5)
    np.testing.assert_allclose(mixed_targets.numpy().sum(axis=1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(mixed_targets.numpy()[0, B - 1], 1 - lam, atol=1e-6)
    lams.append(lam)
  assert 0.0 <= min(lams) and max(lams) <= 1.0 and 0.3 < np.mean(lams) < 0.7  # Beta(a, a) is symmetric
  assert len(set(np.round(lams, 5))) > 30  # a new draw every step


def test_cutmix_pastes_a_box_whose_area_is_the_targets_share():
  images, targets = _batch()
  config = mixing.MixConfig(cutmix_alpha=1.0)
  pasted_any = False
  for step in range(20):
    mixed, mixed_targets = mixing.mix(images, targets, config, _seed(step))
    from_partner = np.mean(mixed.numpy()[0, :, :, 0] == B)  # example 0's pixels that came from example B-1
    np.testing.assert_allclose(mixed_targets.numpy()[0, B - 1], from_partner, atol=1e-6)
    np.testing.assert_allclose(mixed_targets.numpy()[0, 0], 1 - from_partner, atol=1e-6)
    values = set(np.unique(mixed.numpy()[0]))
    assert values <= {1.0, float(B)}  # pasted, never blended
    pasted_any |= from_partner > 0
  assert pasted_any


def test_switch_picks_either_kind_and_prob_zero_never_mixes():
  images, targets = _batch()
  kinds = set()
  for step in range(30):
    mixed, _ = mixing.mix(images, targets, mixing.MixConfig(mixup_alpha=1.0, cutmix_alpha=1.0), _seed(step))
    values = np.unique(mixed.numpy()[0])
    kinds.add('cutmix' if set(values) <= {1.0, float(B)} else 'mixup')
  assert kinds == {'cutmix', 'mixup'}
  never = mixing.MixConfig(mixup_alpha=1.0, mix_prob=0.0)
  assert not never.enabled


def test_the_same_seed_mixes_the_same_and_dtype_is_kept():
  images, targets = _batch()
  config = mixing.MixConfig(mixup_alpha=0.2, cutmix_alpha=1.0)
  first = mixing.mix(tf.cast(images, tf.bfloat16), targets, config, _seed(3))
  again = mixing.mix(tf.cast(images, tf.bfloat16), targets, config, _seed(3))
  assert first[0].dtype == tf.bfloat16 and first[1].dtype == tf.float32
  np.testing.assert_array_equal(first[0].numpy(), again[0].numpy())
  np.testing.assert_array_equal(first[1].numpy(), again[1].numpy())


def test_replicas_draw_differently_and_reproducibly():
  devices = [d.name for d in tf.config.list_logical_devices('CPU')][:2]
  if len(devices) < 2:
    pytest.skip('needs 2 logical CPU devices')
  strategy = tf.distribute.MirroredStrategy(devices, cross_device_ops=tf.distribute.ReductionToOneDevice())

  @tf.function
  def seeds(step):
    return strategy.run(lambda: mixing.mix_seed(step, 7))

  values = [strategy.experimental_local_results(seeds(tf.constant(5, tf.int64))) for _ in range(2)]
  first = [v.numpy().tolist() for v in values[0]]
  assert first[0] != first[1]
  assert first == [v.numpy().tolist() for v in values[1]]
  other_step = strategy.experimental_local_results(seeds(tf.constant(6, tf.int64)))
  assert other_step[0].numpy().tolist() != first[0]


def test_bad_settings_are_named():
  with pytest.raises(ValueError, match='mixup_alpha must be >= 0'):
    mixing.MixConfig(mixup_alpha=-1)
  with pytest.raises(ValueError, match=r'mix_prob must be in \[0, 1\]'):
    mixing.MixConfig(cutmix_alpha=1.0, mix_prob=2)
