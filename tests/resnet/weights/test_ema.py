"""Moving averages of the weights (resnet/weights/ema.py): decay schedule, updates, distribution, checkpoints, swapping."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from resnet.weights import ema as ema_lib
from tests.helpers import tiny


class Counter(keras.layers.Layer):
  """A layer with a non-trainable weight that is not a BN statistic (like DropBlock's keep probability)."""

  def build(self, input_shape):
    self.count = self.add_weight(shape=(), initializer='zeros', trainable=False, name='count')

  def call(self, x):
    return x


def tiny_model() -> keras.Model:
  inputs = keras.Input((2,))
  x = keras.layers.Dense(2, name='dense')(inputs)
  x = keras.layers.BatchNormalization(name='batch_normalization')(x)
  return keras.Model(inputs, Counter(name='counter')(x))


def set_all(model: keras.Model, value: float) -> None:
  for v in ema_lib.averaged_variables(model):
    v.assign(np.full(v.shape, value, np.float32))


def test_effective_decay_ramps_then_caps():
  # (1 + s) / (10 + s): s=0 -> 0.1, s=1 -> 2/11, s=90 -> 0.91, s=1000 -> 1001/1010 = 0.99109
  assert float(ema_lib.effective_decay(0, 0.9999)) == pytest.approx(0.1)
  assert float(ema_lib.effective_decay(1, 0.9999)) == pytest.approx(2 / 11)
  assert float(ema_lib.effective_decay(90, 0.9999)) == pytest.approx(0.91)
  assert float(ema_lib.effective_decay(90, 0.5)) == pytest.approx(0.5)
  assert float(ema_lib.effective_decay(1000, 0.99)) == pytest.approx(0.99)
  assert float(ema_lib.effective_decay(1000, 0.9999)) == pytest.approx(1001 / 1010)


def test_averages_trainable_weights_and_bn_statistics_only():
  model = tiny_model()
  ema = ema_lib.ModelEMA(model, 0.9)
  assert sorted(ema.shadows) == ['batch_normalization/beta', 'batch_normalization/gamma',
                                 'batch_normalization/moving_mean', 'batch_normalization/moving_variance',
                                 'dense/bias', 'dense/kernel']
  assert 'counter/count' in [v.path for v in model.weights]
  resnet = tiny.model(18, 3)
  assert len(ema_lib.ModelEMA(resnet, 0.9).shadows) == 65 + 2 * 21  # trainable + moving mean/variance per BN


def test_shadow_follows_hand_computed_values():
  model = tiny_model()
  set_all(model, 0.0)
  ema = ema_lib.ModelEMA(model, 0.9)  # shadows start at the weights: 0
  set_all(model, 10.0)
  assert float(ema.update(1)) == pytest.approx(2 / 11)
  # s=1: d = 2/11; shadow = 0 + (1 - 2/11) * (10 - 0) = 8.181818
  np.testing.assert_allclose(ema.shadows['dense/kernel'].numpy(), np.full((2, 2), 90 / 11), rtol=1e-6)
  ema.update(2)  # d = 3/12: shadow = 8.181818 + 0.75 * (10 - 8.181818) = 9.545454
  set_all(model, 0.0)
  ema.update(100)  # d = min(0.9, 101/110) = 0.9: shadow = 0.9 * 9.545454 = 8.590909
  for shadow in ema.shadows.values():
    np.testing.assert_allclose(shadow.numpy(), np.full(shadow.shape, 0.9 * 105 / 11), rtol=1e-6)


def test_update_inside_a_tf_function_matches_numpy_over_several_steps():
  model = tiny_model()
  rng = np.random.default_rng(0)
  ema = ema_lib.ModelEMA(model, 0.95)
  kernel = model.get_layer('dense').kernel
  expected = kernel.numpy().astype(np.float64)
  update = tf.function(ema.update)
  for step in range(1, 40):
    value = rng.normal(size=(2, 2)).astype(np.float32)
    kernel.assign(value)
    update(tf.constant(step, tf.int64))
    decay = min(0.95, (1 + step) / (10 + step))
    expected = decay * expected + (1 - decay) * value
  np.testing.assert_allclose(ema.shadows['dense/kernel'].numpy(), expected, rtol=1e-5)


def test_mirrored_replicas_get_the_first_replicas_average():
  devices = tf.config.list_logical_devices('CPU')
  if len(devices) < 2:
    pytest.skip('needs two logical CPU devices (set up in conftest before TF initialises)')
  strategy = tf.distribute.MirroredStrategy([d.name for d in devices[:2]])
  with strategy.scope():
    model = tiny_model()
    set_all(model, 0.0)
    ema = ema_lib.ModelEMA(model, 0.9)
  moving_mean = model.get_layer('batch_normalization').moving_mean
  kernel = model.get_layer('dense').kernel
  kernel.assign(np.full((2, 2), 10.0, np.float32))

  def step():
    # BN statistics are per replica: replica r holds 10 * (r + 1), as after a step on different data.
    replica = tf.distribute.get_replica_context().replica_id_in_sync_group
    moving_mean.assign(tf.fill([2], 10.0 * tf.cast(replica + 1, tf.float32)))
    return ema.update(1)

  tf.function(lambda: strategy.run(step))()
  # d = 2/11: shadow = (9/11) * value; the first replica's value (10) on every replica, not 20, not the mean 15.
  for shadow in (ema.shadows['batch_normalization/moving_mean'], ema.shadows['dense/kernel']):
    copies = strategy.experimental_local_results(shadow)
    assert len(copies) == 2
    for copy in copies:
      np.testing.assert_allclose(copy.numpy(), np.full(shadow.shape, 90 / 11), rtol=1e-6)


def test_checkpoint_holds_raw_and_averaged_weights(tmp_path):
  model = tiny_model()
  set_all(model, 1.0)
  ema = ema_lib.ModelEMA(model, 0.9)
  set_all(model, 3.0)  # raw 3, shadows 1
  path = tf.train.Checkpoint(model=model, ema=ema).save(str(tmp_path / 'ckpt'))
  names = [n for n, _ in tf.train.list_variables(path)]
  assert any(n.startswith('ema/shadows/dense.Skernel') for n in names)

  other = tiny_model()
  set_all(other, 0.0)
  other_ema = ema_lib.ModelEMA(other, 0.9)
  tf.train.Checkpoint(model=other, ema=other_ema).restore(path).assert_consumed()
  np.testing.assert_array_equal(other.get_layer('dense').kernel.numpy(), np.full((2, 2), 3.0))
  np.testing.assert_array_equal(other_ema.shadows['dense/kernel'].numpy(), np.full((2, 2), 1.0))
  np.testing.assert_array_equal(other_ema.shadows['batch_normalization/moving_variance'].numpy(), [1.0, 1.0])


def test_averaged_weights_swaps_in_and_restores_the_raw_weights():
  model = tiny_model()
  set_all(model, 1.0)
  ema = ema_lib.ModelEMA(model, 0.9)
  set_all(model, 3.0)
  x = np.ones((1, 2), np.float32)
  raw_output = model(x, training=False).numpy()
  with ema.averaged_weights():
    np.testing.assert_array_equal(model.get_layer('dense').kernel.numpy(), np.full((2, 2), 1.0))
    assert not np.allclose(model(x, training=False).numpy(), raw_output)
  np.testing.assert_array_equal(model.get_layer('dense').kernel.numpy(), np.full((2, 2), 3.0))
  np.testing.assert_array_equal(ema.shadows['dense/kernel'].numpy(), np.full((2, 2), 1.0))
  with pytest.raises(RuntimeError, match='boom'):
    with ema.averaged_weights():
      raise RuntimeError('boom')
  np.testing.assert_array_equal(model.get_layer('batch_normalization').moving_mean.numpy(), [3.0, 3.0])


def test_assign_to_model_and_reset():
  model = tiny_model()
  set_all(model, 1.0)
  ema = ema_lib.ModelEMA(model, 0.9)
  set_all(model, 3.0)
  ema.reset()  # after a warm start: the average restarts from the current weights
  np.testing.assert_array_equal(ema.shadows['dense/bias'].numpy(), [3.0, 3.0])
  ema.shadows['dense/bias'].assign([5.0, 6.0])
  ema.assign_to_model()
  np.testing.assert_array_equal(model.get_layer('dense').bias.numpy(), [5.0, 6.0])


def test_bad_decay_is_rejected():
  with pytest.raises(ValueError, match='moving_average_decay must be in'):
    ema_lib.ModelEMA(tiny_model(), 1.0)
  with pytest.raises(ValueError, match='moving_average_decay must be in'):
    ema_lib.ModelEMA(tiny_model(), 0.0)


@pytest.mark.slow
def test_eval_with_averages_on_a_checkpoint_without_them_evaluates_the_raw_weights(tmp_path, caplog):
  """A checkpoint trained without moving averages, evaluated with moving_average_decay set: its raw weights,
  with a warning, not the uninitialised shadows."""
  import logging as py_logging  # pylint: disable=import-outside-toplevel
  from official_input import imagenet_input  # pylint: disable=import-outside-toplevel
  from resnet.training import resnet_model_fn  # pylint: disable=import-outside-toplevel
  from tests.helpers import tiny  # pylint: disable=import-outside-toplevel
  params = tiny.resnet_params(str(tmp_path / 'plain'), train_steps=2, data_dir=None, num_eval_images=4)

  def eval_input(unused_params):
    images = tf.random.stateless_uniform([4, 32, 32, 3], seed=[3, 4], maxval=255.0)
    return tf.data.Dataset.from_tensor_slices((images, tf.constant([0, 1, 1, 0]))).batch(2)
  plain = tiny.resnet_estimator(params)
  plain.train(imagenet_input.ImageNetInput.from_params(params, 'train').input_fn, max_steps=2)
  checkpoint = plain.latest_checkpoint()
  raw = plain.evaluate(eval_input, checkpoint_path=checkpoint)

  averaging = tiny.resnet_estimator(tiny.resnet_params(str(tmp_path / 'eval'), train_steps=2, data_dir=None,
                                                       num_eval_images=4, moving_average_decay=0.9))
  with caplog.at_level(py_logging.WARNING):
    results = averaging.evaluate(eval_input, checkpoint_path=checkpoint,
                                 weights=resnet_model_fn.averaged_weights(averaging.scope))
  assert 'has no moving averages: they start from its weights' in caplog.text
  for key in ('loss', 'top_1_accuracy'):
    assert results[key] == pytest.approx(raw[key], rel=1e-5), key
  # Resuming such a run with averages on: they start from the restored weights, not the random initial ones.
  ema = averaging.scope.get('ema')
  for variable in averaging.scope.get('model').weights[:5]:
    np.testing.assert_array_equal(ema.shadow_of(variable).numpy(), variable.numpy())
