"""float16 dynamic loss scaling on several replicas: one replica's overflow skips the step on every replica.

Keras' LossScaleOptimizer decides "finite" on the gradients it is given; the train step sums them over replicas
first (optimizers.sum_over_replicas), so every replica judges the same numbers. Without that, MirroredStrategy
takes replica 0's verdict and applies replica 1's Inf to every weight (shown here), and under XLA on GPUs or with
several workers the replicas branch differently around a collective and hang (tests/resnet/estimator/test_multi_worker.py).
"""
import numpy as np
import pytest
import tensorflow as tf

from tests.helpers import tiny

OVERFLOW = 1e6  # > float16's max (65504): the image is Inf in float16, and so are that replica's gradients


def _overflow_on_second_replica(params):
  """Per-replica batches in turn: replica 0 a normal batch, replica 1 one that overflows float16."""
  shape = [params['batch_size'], 32, 32, 3]
  normal = tf.random.stateless_uniform(shape, seed=[1, 2], minval=0.0, maxval=255.0)
  batches = tf.stack([normal, tf.fill(shape, OVERFLOW)])
  labels = tf.zeros([params['batch_size']], tf.int32)
  return tf.data.Dataset.from_tensor_slices(batches).map(lambda x: (tf.cast(x, tf.float16), labels)).repeat()


def _replica_values(strategy, variable):
  return [np.asarray(v) for v in strategy.experimental_local_results(variable.value)]


@pytest.mark.slow
@pytest.mark.parametrize('accumulate', [1, 2])  # 2: each replica's micro-batches summed, then over replicas
def test_one_replica_overflowing_skips_the_step_on_every_replica(tmp_path, accumulate):
  devices = tf.config.list_logical_devices('CPU')
  if len(devices) < 2:
    pytest.skip('needs two logical CPU devices (set up in conftest before TF initialises)')
  # Reduction through one device, not collectives: collective instance keys are process-global, and another
  # test's strategy in this process would clash with this one's.
  strategy = tf.distribute.MirroredStrategy([d.name for d in devices[:2]],
                                            cross_device_ops=tf.distribute.ReductionToOneDevice())
  params = tiny.resnet_params(str(tmp_path / 'run'), precision='float16', train_batch_size=4, train_steps=1,
                              gradient_accumulation_steps=accumulate)
  estimator = tiny.resnet_estimator(params, strategy)
  estimator.build('train')
  model, optimizer = estimator.scope.get('model'), estimator.scope.get('optimizer')
  before = {v.path: _replica_values(strategy, v)[0] for v in model.trainable_variables}
  scale = float(optimizer.dynamic_scale.numpy())

  estimator.train(_overflow_on_second_replica, max_steps=1)

  assert int(estimator.global_step.numpy()) == 1
  assert float(optimizer.dynamic_scale.numpy()) == scale / 2  # the overflow was seen: the scale halves
  for variable in model.trainable_variables:
    first, second = _replica_values(strategy, variable)
    assert np.isfinite(first).all(), variable.path
    np.testing.assert_array_equal(first, second, err_msg=variable.path)
    np.testing.assert_array_equal(first, before[variable.path], err_msg=f'{variable.path} moved: not skipped')
