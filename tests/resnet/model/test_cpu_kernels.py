"""The faster CPU kernels of bfloat16 training compute what TensorFlow's own ops compute.

1x1 convs with the matmul weight gradient (layers.Conv2D matmul_filter_grad, param conv1x1_filter_grad): the same
forward, input gradient and weights as TensorFlow's convolution, and the same weight gradient up to summation
order, in float32 and bfloat16, strided or not. The residual add + ReLU as one XLA function in training
(layers.ResidualAddReLU, param residual_add_relu): the same outputs and gradients, plain ops at inference. The
model keeps its variables and outputs. Runs in both kernel modes (test_kernel_modes)."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from params import merging
from resnet.model import cpu_kernels
from resnet.model import layers
from resnet.training import resnet_model_fn
from tests.helpers import tiny


def _gradients(fn, x, w):
  with tf.GradientTape() as tape:
    tape.watch([x, w])
    y = fn(x, w)
    loss = tf.reduce_sum(tf.cast(y, tf.float32) ** 2)
  return y, tape.gradient(loss, [x, w])


@pytest.mark.slow
@pytest.mark.parametrize('stride,size', [(1, 9), (2, 8), (2, 9)])
@pytest.mark.parametrize('dtype,rtol', [('float32', 1e-5), ('bfloat16', 2e-2)])
def test_matmul_filter_grad_equals_the_convolution_gradient(stride, size, dtype, rtol):
  rng = np.random.default_rng(stride * 10 + size)
  x = tf.cast(tf.constant(rng.normal(size=(3, size, size, 16)), tf.float32), dtype)
  w = tf.cast(tf.constant(rng.normal(size=(1, 1, 16, 24)) * 0.2, tf.float32), dtype)
  padding = 'SAME' if stride == 1 else 'VALID'  # as the builder: strided convs are VALID
  plain = tf.function(lambda a, b: _gradients(lambda u, v: tf.nn.conv2d(u, v, stride, padding), a, b))
  fast = tf.function(lambda a, b: _gradients(
      lambda u, v: layers.conv1x1_with_matmul_filter_grad(u, v, stride, padding), a, b))
  (y0, (dx0, dw0)), (y1, (dx1, dw1)) = plain(x, w), fast(x, w)
  np.testing.assert_array_equal(y1.numpy(), y0.numpy())     # the same forward op
  np.testing.assert_array_equal(dx1.numpy(), dx0.numpy())   # the same input-gradient op
  assert dw1.dtype == dw0.dtype and dw1.shape == dw0.shape == w.shape
  scale = float(tf.reduce_max(tf.abs(tf.cast(dw0, tf.float32))))
  np.testing.assert_allclose(tf.cast(dw1, tf.float32).numpy(), tf.cast(dw0, tf.float32).numpy(),
                             rtol=rtol, atol=rtol * scale)
  # The weight gradient really is the matmul: no backward-weights convolution in its graph.
  graph = fast.get_concrete_function(x, w).graph
  types = {op.type for op in graph.get_operations()}
  assert 'MatMul' in types and 'Conv2DBackpropFilter' not in types, types


def test_bfloat16_matmul_gradient_is_as_accurate_as_the_convolution():
  """25,088 positions per weight (32 images of 28x28), as a ResNet layer sums: the matmul accumulates in float32
  as the convolution does, so both stay as close to the float32 gradient of the same bfloat16 inputs."""
  rng = np.random.default_rng(5)
  x = tf.cast(tf.constant(rng.normal(size=(32, 28, 28, 64)), tf.float32), tf.bfloat16)
  dy = tf.cast(tf.constant(rng.normal(size=(32, 28, 28, 32)), tf.float32), tf.bfloat16)
  exact = tf.matmul(tf.reshape(tf.cast(x, tf.float32), [-1, 64]), tf.reshape(tf.cast(dy, tf.float32), [-1, 32]),
                    transpose_a=True).numpy()
  w = tf.zeros([1, 1, 64, 32], tf.bfloat16)

  def weight_grad(fn):
    with tf.GradientTape() as tape:
      tape.watch(w)
      y = fn(x, w)
    return tf.cast(tape.gradient(y, w, output_gradients=dy), tf.float32).numpy().reshape(64, 32)

  conv = weight_grad(lambda a, b: tf.nn.conv2d(a, b, 1, 'SAME'))
  fast = weight_grad(lambda a, b: layers.conv1x1_with_matmul_filter_grad(a, b, 1, 'SAME'))
  scale = np.abs(exact).max()
  conv_error, fast_error = np.abs(conv - exact).max() / scale, np.abs(fast - exact).max() / scale
  assert fast_error <= max(2 * conv_error, 1e-2), (fast_error, conv_error)


def _model(fast, dtype_policy='float32', data_format='channels_last'):
  keras.utils.set_random_seed(3)
  return tiny.model(50, 10, data_format=data_format, dtype_policy=dtype_policy, image_size=32,
                    conv1x1_filter_grad='matmul' if fast else 'conv', residual_add_relu='xla' if fast else 'ops')


@pytest.mark.slow
@pytest.mark.parametrize('policy', ['float32', 'mixed_bfloat16'])
def test_the_model_keeps_its_variables_outputs_and_gradients(policy):
  """float32: the gradients agree to 2e-4 (summation order). bfloat16: each form's error against the float32
  gradient of the same weights, for every variable: the matmul form is as accurate as TensorFlow's own (on CPUs
  without native bfloat16 both are far from exact, and differ from each other by as much)."""
  plain, fast = _model(False, policy), _model(True, policy)
  assert len([l for l in fast.layers if isinstance(l, layers.ResidualAddReLU)]) == 16
  assert not [l for l in plain.layers if isinstance(l, layers.ResidualAddReLU)]
  assert [(v.path, v.shape) for v in fast.weights] == [(v.path, v.shape) for v in plain.weights]
  fast.set_weights(plain.get_weights())
  images = tf.constant(np.random.default_rng(0).uniform(0, 255, (4, 32, 32, 3)), tf.float32)

  @tf.function
  def traced(model):
    with tf.GradientTape() as tape:
      logits = model(images, training=True)
      loss = tf.reduce_sum(tf.nn.log_softmax(logits)[:, 0])
    return logits, [tf.cast(g, tf.float32) for g in tape.gradient(loss, model.trainable_variables)]

  def step(model):
    logits, grads = traced(model)
    return logits, [g.numpy() for g in grads]

  (logits0, grads0), (logits1, grads1) = step(plain), step(fast)
  np.testing.assert_array_equal(logits1.numpy(), logits0.numpy())
  np.testing.assert_array_equal(fast(images, training=False).numpy(), plain(images, training=False).numpy())
  one_by_one = [i for i, v in enumerate(plain.trainable_variables) if v.path.endswith('kernel')
                and tuple(v.shape[:2]) == (1, 1)]
  assert len(one_by_one) == 36  # ResNet-50: two per block x 16 blocks, plus 4 projections
  if policy == 'float32':
    for i, (g0, g1) in enumerate(zip(grads0, grads1)):
      scale = float(np.abs(g0).max()) or 1.0
      np.testing.assert_allclose(g1, g0, rtol=2e-4, atol=2e-4 * scale, err_msg=plain.trainable_variables[i].path)
    return
  reference = _model(False, 'float32')
  reference.set_weights(plain.get_weights())
  _, exact = step(reference)
  for i in one_by_one:
    scale = max(np.linalg.norm(exact[i]), 1e-6)
    plain_error, fast_error = np.linalg.norm(grads0[i] - exact[i]), np.linalg.norm(grads1[i] - exact[i])
    assert fast_error <= max(2 * plain_error, 0.05 * scale), (plain.trainable_variables[i].path, fast_error,
                                                              plain_error)


@pytest.mark.slow
def test_checkpoints_and_exports_do_not_change(tmp_path):
  """Keras 3 checkpoints key layers by position (model/_operations/<j>): the fast model has the same keys, a
  checkpoint of one restores into the other, and its inference graph (what exports trace) has neither the custom
  gradient nor an XLA call."""
  plain, fast = _model(False), _model(True)
  keys = {}
  for name, model in (('plain', plain), ('fast', fast)):
    path = tf.train.Checkpoint(model=model).write(str(tmp_path / name / 'ckpt'))
    keys[name] = {(k, tuple(s)) for k, s in tf.train.list_variables(path)}
  assert keys['fast'] == keys['plain']
  status = tf.train.Checkpoint(model=fast).read(str(tmp_path / 'plain' / 'ckpt'))
  status.assert_existing_objects_matched()
  for a, b in zip(fast.weights, plain.weights):
    np.testing.assert_array_equal(a.numpy(), b.numpy())
  spec = tf.TensorSpec([2, 32, 32, 3], tf.float32)
  graph = tf.function(lambda t: fast(t, training=False)).get_concrete_function(spec).graph
  assert not [op for op in graph.get_operations() if op.type == 'IdentityN']
  assert not _xla_calls(lambda t: fast(t, training=False), spec)
  assert len(_xla_calls(lambda t: fast(t, training=True), spec)) == 16


def test_channels_first_and_other_kernels_keep_the_convolution():
  layer = layers.Conv2D(8, 1, data_format='channels_first', matmul_filter_grad=True)
  assert layer.get_config()['matmul_filter_grad'] is True
  x = tf.ones([2, 4, 5, 5])
  layer(x)
  graph = tf.function(lambda t: layer(t, training=True)).get_concrete_function(tf.TensorSpec([2, 4, 5, 5])).graph
  assert not [op for op in graph.get_operations() if op.type == 'IdentityN']  # no custom gradient
  three = layers.Conv2D(8, 3, padding='same', matmul_filter_grad=True)
  graph = tf.function(lambda t: three(t, training=True)).get_concrete_function(tf.TensorSpec([2, 5, 5, 4])).graph
  assert not [op for op in graph.get_operations() if op.type == 'IdentityN']
  one = layers.Conv2D(8, 1, matmul_filter_grad=True)
  graph = tf.function(lambda t: one(t, training=True)).get_concrete_function(tf.TensorSpec([2, 5, 5, 4])).graph
  assert [op for op in graph.get_operations() if op.type == 'IdentityN']  # custom_gradient's marker
  graph = tf.function(lambda t: one(t, training=False)).get_concrete_function(tf.TensorSpec([2, 5, 5, 4])).graph
  assert not [op for op in graph.get_operations() if op.type == 'IdentityN']  # inference: Keras' convolution


def _xla_calls(fn, spec):
  graph = tf.function(fn).get_concrete_function(spec).graph
  return [op for op in graph.get_operations()
          if op.type in ('PartitionedCall', 'StatefulPartitionedCall') and op.get_attr('_XlaMustCompile')]


def test_residual_add_relu_compiles_in_training_only_and_equals_the_ops():
  layer = layers.ResidualAddReLU(dtype='mixed_bfloat16')
  spec = tf.TensorSpec([2, 6, 6, 8], tf.bfloat16)
  assert len(_xla_calls(lambda x: layer([x, -x * 0.5], training=True), spec)) == 1
  assert not _xla_calls(lambda x: layer([x, -x * 0.5], training=False), spec)  # inference and exports: plain ops
  rng = np.random.default_rng(1)
  for dtype, policy in (('float32', 'float32'), ('bfloat16', 'mixed_bfloat16')):
    layer = layers.ResidualAddReLU(dtype=policy)
    a = tf.cast(tf.constant(rng.normal(size=(2, 6, 6, 8)), tf.float32), dtype)
    b = tf.cast(tf.constant(rng.normal(size=(2, 6, 6, 8)), tf.float32), dtype)
    with tf.GradientTape(persistent=True) as tape:
      tape.watch([a, b])
      fused = layer([a, b], training=True)
      plain = tf.nn.relu(a + b)
      weights = tf.cast(tf.reshape(tf.range(2 * 6 * 6 * 8) % 5, [2, 6, 6, 8]), dtype)
      fused_loss, plain_loss = tf.reduce_sum(fused * weights), tf.reduce_sum(plain * weights)
    np.testing.assert_array_equal(tf.cast(fused, tf.float32).numpy(), tf.cast(plain, tf.float32).numpy())
    for f, p in zip(tape.gradient(fused_loss, [a, b]), tape.gradient(plain_loss, [a, b])):
      np.testing.assert_array_equal(tf.cast(f, tf.float32).numpy(), tf.cast(p, tf.float32).numpy())


@pytest.mark.parametrize('name,faster,plain', [('conv1x1_filter_grad', 'matmul', 'conv'),
                                               ('residual_add_relu', 'xla', 'ops')])
def test_auto_chooses_the_kernels_measured_faster_on_each_cpu_kind(name, faster, plain, monkeypatch):
  def choice(precision, **options):
    chosen = cpu_kernels.choose(options.get('conv1x1_filter_grad', 'auto'), options.get('residual_add_relu', 'auto'),
                                resnet_model_fn.dtype_policy(precision))
    return chosen.matmul_filter_grad if name == 'conv1x1_filter_grad' else chosen.xla_add_relu
  devices = {'GPU': [], 'TPU': []}
  monkeypatch.setattr(tf.config, 'list_logical_devices', lambda kind: devices[kind])
  monkeypatch.setattr(cpu_kernels, 'cpu_has_amx', lambda: True)
  assert choice(precision='bfloat16') is True
  devices['GPU'] = ['/device:GPU:0']
  assert choice(precision='bfloat16') is False            # GPUs keep cuDNN's kernels
  devices['GPU'] = []
  monkeypatch.setattr(cpu_kernels, 'cpu_has_amx', lambda: False)
  assert choice(precision='bfloat16') is False            # not measured there
  monkeypatch.setattr(cpu_kernels, 'cpu_has_amx', lambda: True)
  assert choice(precision='float32') is False
  assert choice(precision='float16') is False
  assert choice(precision='float32', **{name: faster}) is True
  assert choice(precision='bfloat16', **{name: plain}) is False
  # float32 on AVX-512 CPUs without AMX: the 1x1 weight gradients only (measured faster there, the rest not).
  monkeypatch.setattr(cpu_kernels, 'cpu_has_avx512', lambda: True)
  monkeypatch.setattr(cpu_kernels, 'cpu_has_amx', lambda: False)
  assert choice(precision='float32') is (name == 'conv1x1_filter_grad')
  assert choice(precision='mixed_float16') is False and choice(precision='bfloat16') is False
  assert choice(precision='float32', **{name: plain}) is False
  devices['GPU'] = ['/device:GPU:0']
  assert choice(precision='float32') is False
  devices['GPU'] = []
  # No policy given: the layers follow Keras' global policy, and so does the choice (it read '' and chose conv).
  monkeypatch.setattr(keras.config, 'dtype_policy', lambda: keras.DTypePolicy('float32'))
  assert cpu_kernels.choose('auto', 'auto', None).matmul_filter_grad is True
  monkeypatch.setattr(keras.config, 'dtype_policy', lambda: keras.DTypePolicy('mixed_float16'))
  assert cpu_kernels.choose('auto', 'auto', None).matmul_filter_grad is False
  monkeypatch.setattr(cpu_kernels, 'cpu_has_avx512', lambda: False)   # AVX2 only: not measured there
  assert choice(precision='float32') is False
  with pytest.raises(ValueError, match=name):
    merging.make_params({name: 'gemm'})
