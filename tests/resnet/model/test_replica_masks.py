"""Dropout and stochastic depth draw a different mask on each replica (the seed folded with the replica id)."""
import numpy as np
import pytest
import tensorflow as tf
from resnet.model import layers
from tests.helpers import tiny


@pytest.mark.parametrize('make_layer, shape', [
    (lambda: layers.StochasticDepth(0.5, seed=3, name='sd'), (64, 2, 2, 4)),
    (lambda: layers.Dropout(0.5, seed=3, name='dropout'), (64, 16)),
])
def test_each_replica_draws_its_own_mask_and_a_seed_repeats_them(make_layer, shape):
  strategy = tiny.two_replicas()

  def masks():
    with strategy.scope():
      layer = make_layer()
    step = tf.function(lambda: strategy.run(lambda: layer(tf.ones(shape), training=True)))
    first, second = (np.asarray(v) for v in strategy.experimental_local_results(step()))
    return first, second

  first, second = masks()
  assert set(np.unique(first)) == {0.0, 2.0}  # kept and scaled by 1 / (1 - rate), or dropped
  assert not np.array_equal(first, second)
  again = masks()  # a fresh layer with the same seed: the same per-replica masks (reproducible runs)
  np.testing.assert_array_equal(again[0], first)
  np.testing.assert_array_equal(again[1], second)


def test_one_device_keeps_the_keep_rate():
  layer = layers.StochasticDepth(0.25, seed=1)
  kept = np.mean(layer(tf.ones([4000, 1, 1, 1]), training=True).numpy() > 0)
  assert kept == pytest.approx(0.75, abs=0.03)
