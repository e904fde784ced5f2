"""Tests for resnet/model/resnet_model.py and tools/model_report.py.

Tiny inputs (32-64 px, batch 1-2) keep the module fast on a couple of CPU cores; ImageNet-size shapes are checked
symbolically (a functional model with a static image size computes no activations).
"""
import functools
import inspect
import os
import sys

import numpy as np
import pytest

import keras
import tensorflow as tf

from params import architectures
from resnet.model import layers
from resnet.model import plan
from resnet.model import tf1_names
from tools import model_report
from tests.helpers import tiny

# The expected table, written out independently of params/architectures.py (the reference's model_params).
BLOCKS = {10: [1, 1, 1, 1], 18: [2, 2, 2, 2], 34: [3, 4, 6, 3], 50: [3, 4, 6, 3], 101: [3, 4, 23, 3], 152: [3, 8, 36, 3],
          200: [3, 24, 36, 3], 270: [4, 29, 53, 4], 350: [4, 36, 72, 4], 420: [4, 44, 87, 4]}
RS_DEPTHS = (270, 350, 420)
DEPTHS = tuple(d for d in BLOCKS if d not in RS_DEPTHS)


def _images(batch: int, size: int, seed: int = 0) -> np.ndarray:
  return np.random.default_rng(seed).uniform(0, 255, (batch, size, size, 3)).astype(np.float32)


def _randomize(model: keras.Model, seed: int = 0) -> None:
  """Non-trivial BN parameters and statistics: with zero gammas every block would reduce to its shortcut."""
  rng = np.random.default_rng(seed)
  for name, var in tf1_names.tf1_variable_map(model).items():
    shape = tuple(var.shape)
    if name.endswith(('/gamma', '/moving_variance')):
      var.assign(rng.uniform(0.5, 1.5, shape).astype(np.float32))
    elif name.endswith(('/beta', '/moving_mean', 'dense/bias')):
      var.assign(rng.normal(0.0, 0.1, shape).astype(np.float32))


def _copy_by_tf1_name(source: keras.Model, target: keras.Model) -> None:
  src = tf1_names.tf1_variable_map(source)
  for name, var in tf1_names.tf1_variable_map(target).items():
    var.assign(src[name])


@functools.lru_cache(maxsize=None)
def _model_1000(depth: int) -> keras.Model:
  """Each depth with the ImageNet head and dynamic spatial size, built once for the whole module."""
  return tiny.model(depth, 1000)


@pytest.fixture(scope='module', autouse=True)
def _release_models():
  yield
  _model_1000.cache_clear()


@pytest.fixture(scope='module')
def resnet50_224():
  """Static 224 px ResNet-50: symbolic shapes only."""
  return tiny.model(50, 1000, image_size=224)


@pytest.fixture(scope='module')
def resnet18_small():
  return tiny.model(18, 10)


# --- shapes -----------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize('depth', DEPTHS)
def test_every_depth_gives_float32_logits_of_shape_batch_by_classes(depth):
  model = _model_1000(depth)
  logits = model(_images(2, 32), training=False)
  assert logits.shape == (2, 1000)
  assert logits.dtype == tf.float32
  assert np.all(np.isfinite(logits.numpy()))


def test_training_call_also_gives_logits(resnet18_small):
  logits = resnet18_small(_images(2, 32), training=True)
  assert logits.shape == (2, 10) and logits.dtype == tf.float32


@pytest.mark.parametrize('size', [33, 64])
def test_any_square_size_from_32_works_thanks_to_global_pooling(resnet18_small, size):
  assert resnet18_small(_images(1, size), training=False).shape == (1, 10)


def test_input_dtype_does_not_change_logits(resnet18_small):
  """Pixels are integers 0..255, exact in uint8, float16 and bfloat16: the logits must not depend on the dtype."""
  pixels = np.round(_images(1, 32))
  expected = resnet18_small(pixels, training=False).numpy()
  for dtype in (tf.uint8, tf.float16, tf.bfloat16):
    got = resnet18_small(tf.cast(pixels, dtype), training=False).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_normalisation_is_the_first_op_with_imagenet_mean_and_std(resnet18_small):
  normalize = keras.Model(resnet18_small.input, resnet18_small.get_layer('normalize').output)
  mean_image = np.broadcast_to(np.array(layers.MEAN_RGB, np.float32), (1, 32, 32, 3))
  np.testing.assert_allclose(normalize(mean_image).numpy(), 0.0, atol=1e-5)
  white = np.full((1, 32, 32, 3), 255.0, np.float32)
  expected = (255.0 - np.array(layers.MEAN_RGB)) / np.array(layers.STDDEV_RGB)
  np.testing.assert_allclose(normalize(white).numpy()[0, 0, 0], expected, rtol=1e-5)
  assert resnet18_small.layers[1].name == 'normalize'


def _out(model: keras.Model, layer_name: str) -> int:
  shape = model.get_layer(layer_name).output.shape
  assert shape[1] == shape[2]
  return shape[1]


@pytest.mark.parametrize('depth,image_size,expected', [
    (50, 224, (112, 56, 56, 28, 14, 7)),
    (18, 225, (113, 57, 57, 29, 15, 8)),
])
def test_fixed_padding_gives_reference_feature_map_sizes(resnet50_224, depth, image_size, expected):
  model = resnet50_224 if depth == 50 else tiny.model(depth, 10, image_size=image_size)
  last = [f'block_group{g}_block{n}_out' for g, n in enumerate(BLOCKS[depth], start=1)]
  sizes = tuple(_out(model, name) for name in ['conv2d', 'initial_max_pool'] + last)
  assert sizes == expected
  assert model.get_layer('conv2d_pad').padding == ((3, 3), (3, 3))  # 7x7/2 stem: pad_total 6, beg 3, end 3
  assert model.get_layer('conv2d').padding == 'valid'
  assert model.get_layer('conv2d_2').padding == 'same'  # stride 1


# --- architecture details ---------------------------------------------------------------------------------------


def test_unsupported_depth_raises_value_error_listing_supported_depths():
  with pytest.raises(ValueError, match='10, 18, 34, 50, 101, 152, 200'):
    tiny.model(42, 10)
  with pytest.raises(ValueError, match='resnet_depth must be one of'):
    plan.count_params(tiny.config(26, 1000))


@pytest.mark.parametrize('depth', [18, 50])
def test_last_bn_gamma_of_each_block_is_zero(depth):
  model = _model_1000(depth)
  expected = {18: [3, 5, 8, 10, 13, 15, 18, 20],
              50: [4, 7, 10, 14, 17, 20, 23, 27, 30, 33, 36, 39, 42, 46, 49, 52]}[depth]
  names = tf1_names.tf1_variable_map(model)
  num_bn = 21 if depth == 18 else 53
  for i in range(num_bn):
    gamma = names['batch_normalization' + (f'_{i}' if i else '') + '/gamma'].numpy()
    assert np.all(gamma == (0.0 if i in expected else 1.0)), i


def test_initializers_match_the_reference():
  model = _model_1000(50)
  conv = model.get_layer('conv2d_11')
  init = conv.kernel_initializer
  assert isinstance(init, keras.initializers.VarianceScaling)
  assert (init.scale, init.mode, init.distribution) == (1.0, 'fan_in', 'truncated_normal')
  assert not conv.use_bias
  dense = model.get_layer('dense')
  assert isinstance(dense.kernel_initializer, keras.initializers.RandomNormal)
  assert dense.kernel_initializer.stddev == 0.01
  assert np.all(dense.bias.numpy() == 0)
  bn = model.get_layer('batch_normalization_3')
  assert (bn.momentum, bn.epsilon) == (0.9, 1e-5)
  std = np.std(model.get_layer('conv2d_5').kernel.numpy())  # fan_in 256: std ~ 1/sqrt(256)
  assert 0.8 / 16 < std < 1.2 / 16


def test_bn_settings_come_from_the_arguments():
  model = tiny.model(18, 10, bn_momentum=0.0, bn_epsilon=1e-3)
  bn = model.get_layer('batch_normalization_7')
  assert (bn.momentum, bn.epsilon) == (0.0, 1e-3)


# --- parameter counts -------------------------------------------------------------------------------------------


def _expected_params(depth: int, num_classes: int) -> tuple[int, int]:
  """(trainable, all) for v1, from per-block closed forms, independent of the model and of plan.count_params."""
  bottleneck = depth >= 50
  trainable = 7 * 7 * 3 * 64 + 2 * 64
  stats = 2 * 64
  cin = 64
  for f, n in zip((64, 128, 256, 512), BLOCKS[depth]):
    if bottleneck:
      cout = 4 * f
      projection = cin * cout + 2 * cout
      first = cin * f + 9 * f * f + f * cout + 2 * (f + f + cout)
      other = cout * f + 9 * f * f + f * cout + 2 * (f + f + cout)
      bn_channels = cout + (f + f + cout) * n
    else:
      cout = f
      projection = cin * f + 2 * f
      first = 9 * cin * f + 9 * f * f + 2 * (2 * f)
      other = 18 * f * f + 2 * (2 * f)
      bn_channels = f + 2 * f * n
    trainable += projection + first + other * (n - 1)
    stats += 2 * bn_channels
    cin = cout
  trainable += cin * num_classes + num_classes
  return trainable, trainable + stats


@pytest.mark.parametrize('depth', DEPTHS)
def test_parameter_counts_match_an_independent_formula(depth):
  model = _model_1000(depth)
  trainable, total = _expected_params(depth, 1000)
  assert sum(int(np.prod(v.shape)) for v in model.trainable_variables) == trainable
  assert model.count_params() == total
  assert plan.count_params(tiny.config(depth, 1000)) == trainable
  assert plan.count_params(tiny.config(depth, 1000), include_bn_statistics=True) == total


# Published counts: torchvision's resnet{18,34,50,101,152} have the same layers, except that the reference (and
# this model) also puts a projection (1x1 conv 64->64 + BN: 4096 + 128 params) in group 1 of ResNet-18/34.
PUBLISHED_TRAINABLE = {18: 11_689_512 + 4_224, 34: 21_797_672 + 4_224, 50: 25_557_032, 101: 44_549_160,
                       152: 60_192_808}


@pytest.mark.parametrize('depth', sorted(PUBLISHED_TRAINABLE))
def test_parameter_counts_match_published_numbers(depth):
  model = _model_1000(depth)
  assert sum(int(np.prod(v.shape)) for v in model.trainable_variables) == PUBLISHED_TRAINABLE[depth]
  if depth == 50:
    assert model.count_params() == 25_557_032 + 2 * 26_560  # + moving mean/variance of 26,560 BN channels


# --- TF1 names, weight decay ------------------------------------------------------------------------------------


def test_tf1_variable_map_covers_every_resnet50_variable_once_with_reference_shapes():
  model = _model_1000(50)
  names = tf1_names.tf1_variable_map(model)
  assert len(names) == 267 == len(model.weights)
  assert sorted(id(v) for v in names.values()) == sorted(id(v) for v in model.weights)
  assert sum(v.trainable for v in names.values()) == 161
  expected = {
      'conv2d/kernel': [7, 7, 3, 64],
      'conv2d_1/kernel': [1, 1, 64, 256],
      'conv2d_2/kernel': [1, 1, 64, 64],
      'conv2d_3/kernel': [3, 3, 64, 64],
      'conv2d_4/kernel': [1, 1, 64, 256],
      'conv2d_5/kernel': [1, 1, 256, 64],
      'conv2d_11/kernel': [1, 1, 256, 512],
      'conv2d_13/kernel': [3, 3, 128, 128],
      'conv2d_24/kernel': [1, 1, 512, 1024],
      'conv2d_43/kernel': [1, 1, 1024, 2048],
      'conv2d_52/kernel': [1, 1, 512, 2048],
      'batch_normalization/gamma': [64],
      'batch_normalization_1/moving_mean': [256],
      'batch_normalization_52/gamma': [2048],
      'batch_normalization_52/moving_variance': [2048],
      'dense/kernel': [2048, 1000],
      'dense/bias': [1000],
  }
  for name, shape in expected.items():
    assert list(names[name].shape) == shape, name
  # Every conv and BN index 0..52 exists, in the reference's creation order.
  assert list(names)[:10] == ['conv2d/kernel'] + [f'batch_normalization/{v}' for v in (
      'gamma', 'beta', 'moving_mean', 'moving_variance')] + ['conv2d_1/kernel'] + [
          f'batch_normalization_1/{v}' for v in ('gamma', 'beta', 'moving_mean', 'moving_variance')]
  assert list(names)[-2:] == ['dense/kernel', 'dense/bias']
  convs = [f'conv2d_{i}/kernel' if i else 'conv2d/kernel' for i in range(53)]
  assert [n for n in names if n.startswith('conv2d')] == convs
  # Shapes follow the analytic conv table, so the table (report) and the model agree too.
  for name, conv in zip(convs, plan.conv_shapes(tiny.config(50))):
    assert tuple(names[name].shape) == (conv.kernel, conv.kernel, conv.cin, conv.cout)


def test_weight_decay_covers_conv_kernels_and_the_whole_dense_layer_but_no_batch_norm():
  model = _model_1000(50)
  decayed = tf1_names.weight_decay_variables(model)
  names = {id(v): n for n, v in tf1_names.tf1_variable_map(model).items()}
  decayed_names = [names[id(v)] for v in decayed]
  assert len(decayed) == 55
  assert 'dense/bias' in decayed_names and 'dense/kernel' in decayed_names
  assert not any('batch_normalization' in n for n in decayed_names)
  assert len(tf1_names.batch_norm_variables(model)) == 53 * 4
  assert tf1_names.is_classifier_head('dense/kernel') and tf1_names.is_classifier_head('dense/bias')
  assert not tf1_names.is_classifier_head('conv2d/kernel')
  assert not tf1_names.is_classifier_head('batch_normalization_52/gamma')


def test_weight_decay_biases_false_decays_kernels_only_in_the_loss():
  """timm's default (and torchvision's --bias-weight-decay=0): no decay on the classifier's and SE convs' biases."""
  from resnet.training import resnet_model_fn  # pylint: disable=import-outside-toplevel
  model = tiny.model(18, 10, se_ratio=0.25)
  names = {id(v): n for n, v in tf1_names.tf1_variable_map(model).items()}
  every = [names[id(v)] for v in tf1_names.weight_decay_variables(model)]
  kernels = tf1_names.weight_decay_variables(model, biases=False)
  assert [names[id(v)] for v in kernels] == [n for n in every if not n.endswith('/bias')]
  assert len(every) - len(kernels) == 1 + 8 * 2   # dense/bias, and the 2 SE convs' biases in each of 8 blocks
  params = {'weight_decay': 0.1, 'enable_lars': False, 'optimizer': 'momentum', 'weight_decay_biases': False}
  term = resnet_model_fn._weight_decay(model, params)  # pylint: disable=protected-access
  np.testing.assert_allclose(float(term), 0.1 * sum(0.5 * float(np.sum(np.square(v.numpy()))) for v in kernels),
                             rtol=1e-5)


# --- layout and precision ---------------------------------------------------------------------------------------


@pytest.mark.slow
def test_channels_first_gives_the_same_logits_as_channels_last():
  """Same weights, NHWC vs NCHW body: inference and training (batch statistics) logits agree."""
  last = tiny.model(50, 10, data_format='channels_last')
  first = tiny.model(50, 10, data_format='channels_first')
  _randomize(last)
  _copy_by_tf1_name(last, first)
  images = _images(2, 64)
  for training in (False, True):
    expected = last(images, training=training).numpy()
    got = first(images, training=training).numpy()
    # 50 layers of float32 convolutions in two layouts (other kernels, other summation orders) differ by ~1e-4 of
    # the logits' scale (a tolerance of 1e-4 absolute failed once in ~20 runs); a wrong layout differs by ~1.
    np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-3 * np.abs(expected).max())
  # The body really runs NCHW: channels on axis 1 after the transpose.
  assert first.get_layer('conv2d_52').output.shape[1] == 2048
  assert first.get_layer('batch_normalization_52').axis in (1, [1])


@pytest.mark.parametrize('policy,compute', [('mixed_bfloat16', 'bfloat16'), ('mixed_float16', 'float16')])
def test_mixed_precision_keeps_float32_variables_and_logits(policy, compute):
  model = tiny.model(18, 10, dtype_policy=policy)
  assert keras.config.dtype_policy().name == 'float32'  # no global state touched
  assert all(v.dtype == 'float32' for v in model.weights)
  conv_out = keras.Model(model.input, [model.get_layer('conv2d_5').output, model.output])
  features, logits = conv_out(_images(2, 32), training=True)
  assert features.dtype == compute
  assert logits.dtype == tf.float32
  assert np.all(np.isfinite(logits.numpy()))


def test_global_mixed_bfloat16_policy_is_honoured():
  keras.mixed_precision.set_dtype_policy('mixed_bfloat16')
  try:
    model = tiny.model(18, 10)
  finally:
    keras.mixed_precision.set_dtype_policy('float32')
  assert model.get_layer('conv2d_3').compute_dtype == 'bfloat16'
  assert model.get_layer('conv2d_3').kernel.dtype == 'float32'
  assert model(_images(1, 32), training=False).dtype == tf.float32


# --- DropBlock, v2 ----------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_dropblock_changes_outputs_in_training_but_not_in_inference():
  # 64 px: group 3 is 4x4 (block 3: min-pool path), group 4 is 2x2 (block 2: whole-map path).
  plain = tiny.model(50, 10)
  dropped = tiny.model(50, 10, dropblock_groups='3,4', dropblock_keep_prob=0.5, dropblock_size=3)
  _randomize(plain)
  _copy_by_tf1_name(plain, dropped)
  assert not hasattr(plain, 'dropblock_keep_prob')
  assert dropped.dropblock_keep_prob.name == 'dropblock_keep_prob'
  assert not dropped.dropblock_keep_prob.trainable
  assert sum(v is dropped.dropblock_keep_prob for v in dropped.non_trainable_variables) == 1
  assert len(tf1_names.tf1_variable_map(dropped)) == len(dropped.weights) - 1
  images = _images(2, 64)

  np.testing.assert_allclose(dropped(images, training=False), plain(images, training=False), rtol=1e-5,
                             atol=1e-5)
  reference = plain(images, training=True).numpy()
  first = dropped(images, training=True).numpy()
  second = dropped(images, training=True).numpy()
  assert np.abs(first - reference).max() > 1e-3
  assert np.abs(first - second).max() > 1e-3  # random blocks

  dropped.dropblock_keep_prob.assign(1.0)  # the schedule's start: nothing dropped
  np.testing.assert_allclose(dropped(images, training=True), reference, rtol=1e-4, atol=1e-4)


def test_head_dropout_is_training_only_and_adds_no_tf1_weight():
  model = tiny.model(18, 10, dropout_rate=0.5)
  assert isinstance(model.get_layer('dropout'), layers.Dropout)  # one mask per replica (test_replica_masks.py)
  assert len(tf1_names.tf1_variable_map(model)) == len(model.weights)
  images = _images(2, 32)
  np.testing.assert_array_equal(model(images, training=False), model(images, training=False))
  model.get_layer('dense').kernel.assign(np.ones((512, 10), np.float32))  # make the head see every feature
  assert np.abs(model(images, training=True).numpy() - model(images, training=True).numpy()).max() > 0


def test_dropblock_group_keep_prob_and_schedule():
  assert layers.group_keep_prob(0.9, 4) == pytest.approx(0.9)
  assert layers.group_keep_prob(0.9, 3) == pytest.approx(1 - 0.1 / 4)
  assert layers.group_keep_prob(0.9, 1) == pytest.approx(1 - 0.1 / 64)
  assert float(layers.scheduled_dropblock_keep_prob(0, 100, 0.9)) == pytest.approx(1.0)
  assert float(layers.scheduled_dropblock_keep_prob(50, 100, 0.9)) == pytest.approx(0.95)
  assert float(layers.scheduled_dropblock_keep_prob(100, 100, 0.9)) == pytest.approx(0.9)


def test_dropblock_rejects_bad_settings():
  with pytest.raises(ValueError, match='keep_prob'):
    tiny.model(50, 10, dropblock_groups=(4,))
  with pytest.raises(ValueError, match='1..4'):
    tiny.model(50, 10, dropblock_groups=(5,), dropblock_keep_prob=0.9)
  with pytest.raises(ValueError, match='bottleneck'):
    tiny.model(18, 10, dropblock_groups=(4,), dropblock_keep_prob=0.9)


def test_projection_shortcut_is_created_first_and_takes_the_block_input():
  model = _model_1000(50)
  assert model.get_layer('conv2d_1').input is model.get_layer('initial_max_pool').output
  assert model.get_layer('conv2d_2').input is model.get_layer('initial_max_pool').output
  assert model.get_layer('conv2d_11').input is model.get_layer('block_group1_block3_out').output
  assert model.get_layer('conv2d_11').strides == (2, 2) and model.get_layer('conv2d_12').strides == (1, 1)
  assert model.get_layer('conv2d_13').strides == (2, 2)  # v1.5: the stride sits on the 3x3


def test_pre_activation_v2_wiring():
  model = tiny.model(50, 10, pre_activation=True)
  names = tf1_names.tf1_variable_map(model)
  # No stem BN: the first BN is block 1's pre-activation, and the projection reads its (ReLU'd) output.
  assert model.get_layer('initial_max_pool').input is model.get_layer('conv2d').output
  assert model.get_layer('conv2d_1').input is model.get_layer('batch_normalization_relu').output
  assert model.get_layer('conv2d_2').input is model.get_layer('batch_normalization_relu').output
  bn_widths = [names[f'batch_normalization{f"_{i}" if i else ""}/gamma'].shape[0] for i in range(49)]
  assert bn_widths[:7] == [64, 64, 64, 256, 64, 64, 256]
  assert bn_widths[-1] == 2048  # final BN-ReLU after group 4
  assert model.get_layer('final_avg_pool').input is model.get_layer('batch_normalization_48_relu').output
  assert isinstance(model.get_layer('block_group1_block1_add'), keras.layers.Add)
  with pytest.raises(ValueError):
    model.get_layer('block_group1_block1_out')  # v2 blocks end without a ReLU
  assert bn_widths == plan.bn_channels(tiny.config(50, pre_activation=True))


@pytest.mark.parametrize('depth,num_bn', [(18, 17), (50, 49)])
def test_pre_activation_v2_has_its_own_bn_layout_and_still_maps_to_tf1_names(depth, num_bn):
  model = tiny.model(depth, 10, pre_activation=True)
  names = tf1_names.tf1_variable_map(model)
  assert len(names) == len(model.weights)
  bn_layers = {n.split('/')[0] for n in names if n.startswith('batch_normalization')}
  assert len(bn_layers) == num_bn  # one per block input + between main-path convs, plus the final one
  assert all(np.all(v.numpy() == 1.0) for n, v in names.items() if n.endswith('/gamma'))  # no zero-init in v2
  assert model.count_params() == plan.count_params(tiny.config(depth, 10, pre_activation=True), include_bn_statistics=True)
  assert list(names['batch_normalization/gamma'].shape) == [64]  # first BN: block 1's input, no stem BN
  assert model(_images(1, 32), training=True).shape == (1, 10)


# --- checkpoints, export ----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_checkpoint_round_trip_and_saved_model_export(tmp_path, resnet18_small):
  model = resnet18_small
  _randomize(model, seed=1)
  images = _images(1, 32)
  expected = model(images, training=False).numpy()
  prefix = tf.train.Checkpoint(model=model).save(str(tmp_path / 'ckpt'))

  restored = tiny.model(18, 10)
  tf.train.Checkpoint(model=restored).restore(prefix).assert_existing_objects_matched()
  np.testing.assert_allclose(restored(images, training=False), expected, rtol=1e-6)

  class Serving(tf.Module):

    def __init__(self, net):
      super().__init__()
      self.net = net

    @tf.function(input_signature=[tf.TensorSpec([None, 32, 32, 3], tf.float32)])
    def __call__(self, x):
      return self.net(x, training=False)

  tf.saved_model.save(Serving(model), str(tmp_path / 'export'))
  loaded = tf.saved_model.load(str(tmp_path / 'export'))
  np.testing.assert_allclose(loaded(tf.constant(images)), expected, rtol=1e-5, atol=1e-6)


# --- FLOPs, report ----------------------------------------------------------------------------------------------


def _layer_flops(model: keras.Model) -> int:
  """2 x MACs read off the built layers' kernels and static output shapes."""
  total = 0
  for layer in model.layers:
    if isinstance(layer, keras.layers.Conv2D):
      kh, kw, cin, cout = layer.kernel.shape
      _, h, w, _ = layer.output.shape
      total += 2 * kh * kw * cin * cout * h * w
    elif isinstance(layer, keras.layers.Dense):
      total += 2 * int(np.prod(layer.kernel.shape))
  return total


def test_analytic_flops_match_a_count_from_the_built_layers(resnet50_224):
  assert _layer_flops(resnet50_224) == plan.count_flops(tiny.config(50, 1000), 224)
  assert plan.count_flops(tiny.config(50, 1000), 224) == pytest.approx(8.18e9, rel=0.01)  # the usual "4.1 GMACs"
  odd = tiny.model(34, 7, image_size=97)
  assert _layer_flops(odd) == plan.count_flops(tiny.config(34, 7), 97)


def test_analytic_flops_agree_with_the_tf_profiler(resnet18_small):
  from tensorflow.python.profiler import model_analyzer, option_builder  # pylint: disable=g-import-not-at-top
  fn = tf.function(lambda x: resnet18_small(x, training=False))
  graph = fn.get_concrete_function(tf.TensorSpec([1, 64, 64, 3], tf.float32)).graph
  options = option_builder.ProfileOptionBuilder(
      option_builder.ProfileOptionBuilder.float_operation()).with_empty_output().build()
  profiled = model_analyzer.profile(graph, options=options).total_float_ops
  # The profiler also counts BN, bias and residual adds: a little more than convs + dense.
  assert plan.count_flops(tiny.config(18, 10), 64) <= profiled <= 1.02 * plan.count_flops(tiny.config(18, 10), 64)


def test_model_report_prints_one_row_per_depth():
  rows = model_report.report_rows(224, 1000)
  assert [r['depth'] for r in rows] == list(DEPTHS) + list(RS_DEPTHS)
  table = model_report.format_table(rows, 224)
  assert 'GFLOPs @224' in table
  assert '|    50 | bottleneck |     25.557 |' in table
  assert len(table.splitlines()) == 2 + len(DEPTHS) + len(RS_DEPTHS)


@pytest.mark.parametrize('axis', [3, 1])
def test_fused_batch_norm_matches_keras_batch_norm(axis):
  x = np.random.RandomState(0).randn(4, 6, 6, 5).astype('float32') * 3 + 1
  if axis == 1:
    x = np.transpose(x, [0, 3, 1, 2])
  fused = layers.FusedBatchNormalization(axis=axis, momentum=0.9, epsilon=1e-5)
  plain = keras.layers.BatchNormalization(axis=axis, momentum=0.9, epsilon=1e-5)
  for layer in (fused, plain):
    layer.build(x.shape)
    layer.gamma.assign(np.linspace(0.5, 1.5, 5))
    layer.beta.assign(np.linspace(-1, 1, 5))
  np.testing.assert_allclose(fused(x, training=True), plain(x, training=True), rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(fused.moving_mean, plain.moving_mean, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(fused.moving_variance, plain.moving_variance, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(fused(x, training=False), plain(x, training=False), rtol=1e-4, atol=1e-4)


# --- ResNet-RS options: SE, ResNet-D, stem, stochastic depth, depths 270-420 -------------------------------------

RS_OPTIONS = dict(se_ratio=0.25, resnetd_shortcut=True, use_resnetd_stem=True, replace_stem_max_pool=True)


@pytest.fixture(scope='module')
def rs18():
  """ResNet-18 with every ResNet-RS option, static 33 px (odd: ceil rounding shows), randomised norms."""
  model = tiny.model(18, 10, image_size=33, drop_connect_rate=0.2, **RS_OPTIONS)
  _randomize(model, seed=3)
  return model


@pytest.fixture(scope='module')
def rs50_160():
  """ResNet-RS-50 at 160 px with the ImageNet head: symbolic shapes and counts only."""
  return tiny.model(50, 1000, image_size=160, **RS_OPTIONS)


def _consumer(model: keras.Model, tensor) -> keras.layers.Layer:
  """The one layer of the model that reads ``tensor``."""
  readers = [layer for layer in model.layers if any(t is tensor for t in tf.nest.flatten(layer.input))]
  assert len(readers) == 1, [r.name for r in readers]
  return readers[0]


def _trainable(model: keras.Model) -> int:
  return sum(int(np.prod(v.shape)) for v in model.trainable_variables)


def test_option_parameter_counts_match_hand_values(resnet18_small, rs18):
  """Hand counts for ResNet-18 (10 classes), trainable parameters added by each option.

  SE, ratio 0.25, on each block's output C: reduce conv C*C/4 + C/4 bias, expand conv C/4*C + C bias:
    C=64: 1024 + 16 + 1024 + 64 = 2128;   C=128: 4096 + 32 + 4096 + 128 = 8352;
    C=256: 16384 + 64 + 16384 + 256 = 33088;   C=512: 65536 + 128 + 65536 + 512 = 131712;
    two blocks per group: 2 * (2128 + 8352 + 33088 + 131712) = 350560.
  (A ResNet-50 group-1 block, C=256 -> 64 -> 256, adds 33088 the same way.)
  ResNet-D stem: 3x3x3x32 + 3x3x32x32 + 3x3x32x64 = 864 + 9216 + 18432 = 28512 kernel weights and two BN(32)
    gamma/beta = 128, replacing the 7x7x3x64 = 9408 conv: +19232.
  replace_stem_max_pool: 3x3x64x64 = 36864 + BN(64) 128 = +36992.
  ResNet-D shortcut: the same 1x1 convs, after an average pool: +0.
  """
  base = plan.count_params(tiny.config(18, 10))
  assert plan.count_params(tiny.config(18, 10, se_ratio=0.25)) - base == 350560
  assert plan.count_params(tiny.config(50, 10, se_ratio=0.25)) - plan.count_params(tiny.config(50, 10)) == (
      3 * 33088 + 4 * (512 * 128 + 128 + 128 * 512 + 512) + 6 * (1024 * 256 + 256 + 256 * 1024 + 1024)
      + 3 * (2048 * 512 + 512 + 512 * 2048 + 2048))
  assert plan.count_params(tiny.config(18, 10, use_resnetd_stem=True)) - base == 19232
  assert plan.count_params(tiny.config(18, 10, replace_stem_max_pool=True)) - base == 36992
  assert plan.count_params(tiny.config(18, 10, resnetd_shortcut=True)) == base
  # The built models: Keras' own counts agree with the hand values and with the analytic count.
  assert _trainable(rs18) - _trainable(resnet18_small) == 350560 + 19232 + 36992
  assert rs18.count_params() == plan.count_params(tiny.config(18, 10, **RS_OPTIONS), include_bn_statistics=True)


# Bello et al. 2021, "Revisiting ResNets", Table 7: ResNet-RS parameter counts (millions, 1000 classes).
PUBLISHED_RS_PARAMS_M = {50: 35.7, 101: 63.6, 152: 86.6, 200: 93.2, 270: 129.9, 350: 164.0, 420: 191.9}


def test_resnet_rs_parameter_counts_match_the_published_ones(rs50_160):
  assert round(_trainable(rs50_160) / 1e6, 1) == 35.7
  assert _trainable(rs50_160) == plan.count_params(tiny.config(50, 1000, **RS_OPTIONS))
  assert rs50_160.count_params() == plan.count_params(tiny.config(50, 1000, **RS_OPTIONS), include_bn_statistics=True)
  for depth, millions in PUBLISHED_RS_PARAMS_M.items():
    assert round(plan.count_params(tiny.config(depth, 1000, **RS_OPTIONS)) / 1e6, 1) == millions, depth
  # The same paper gives 4.6 GFLOPs for ResNet-RS-50 at 160 px (2 x multiply-adds).
  assert _layer_flops(rs50_160) == plan.count_flops(tiny.config(50, 1000, **RS_OPTIONS), 160)
  assert plan.count_flops(tiny.config(50, 1000, **RS_OPTIONS), 160) == pytest.approx(4.6e9, rel=0.01)


def test_conv_table_and_tf1_names_follow_creation_order_with_se(rs50_160):
  names = tf1_names.tf1_variable_map(rs50_160)
  assert len(names) == len(rs50_160.weights)
  convs = [n for n in names if n.startswith('conv2d') and n.endswith('/kernel')]
  assert len(convs) == len(plan.conv_shapes(tiny.config(50, **RS_OPTIONS))) == 4 + 52 + 2 * 16  # stem, blocks, SE
  for name, conv in zip(convs, plan.conv_shapes(tiny.config(50, **RS_OPTIONS))):
    assert tuple(names[name].shape) == (conv.kernel, conv.kernel, conv.cin, conv.cout), name
  order = list(names)
  # Stem: conv2d 3x3x3x32 s2 (+ batch_normalization), ... the replacement conv conv2d_3; block 1: projection
  # conv2d_4, main path conv2d_5..7, last BN (batch_normalization_7, zero gamma), then SE: reduce conv2d_8 and
  # expand conv2d_9.
  assert tuple(names['conv2d/kernel'].shape) == (3, 3, 3, 32)
  assert tuple(names['conv2d_3/kernel'].shape) == (3, 3, 64, 64)
  assert tuple(names['conv2d_8/kernel'].shape) == (1, 1, 256, 64) and tuple(names['conv2d_8/bias'].shape) == (64,)
  assert tuple(names['conv2d_9/kernel'].shape) == (1, 1, 64, 256)
  assert np.all(names['batch_normalization_7/gamma'].numpy() == 0)
  i = order.index('batch_normalization_7/moving_variance')
  assert order[i + 1:i + 6] == ['conv2d_8/kernel', 'conv2d_8/bias', 'conv2d_9/kernel', 'conv2d_9/bias',
                                'conv2d_10/kernel']
  decayed = {id(v) for v in tf1_names.weight_decay_variables(rs50_160)}
  assert id(names['conv2d_8/bias']) in decayed and id(names['conv2d_9/kernel']) in decayed
  assert len(decayed) == len(convs) + 2 * 16 + 2  # kernels, SE biases, dense kernel and bias


def test_squeeze_excitation_matches_a_numpy_implementation_and_rescales_the_branch(rs18):
  block = 'block_group2_block2'
  squeeze = rs18.get_layer(f'{block}_se_squeeze')
  reduce_conv = _consumer(rs18, squeeze.output)
  expand_conv = _consumer(rs18, rs18.get_layer(f'{block}_se_relu').output)
  assert (reduce_conv.filters, expand_conv.filters) == (32, 128)  # max(1, int(128 * 0.25))
  rng = np.random.default_rng(5)
  for conv in (reduce_conv, expand_conv):
    conv.bias.assign(rng.normal(0, 0.5, conv.bias.shape).astype(np.float32))
  probe = keras.Model(rs18.input, [squeeze.input, rs18.get_layer(f'{block}_se_excite').output])
  x, got = (t.numpy().astype(np.float64) for t in probe(_images(2, 33), training=False))
  pooled = x.mean(axis=(1, 2))                                               # [N, C]
  hidden = np.maximum(pooled @ reduce_conv.kernel.numpy()[0, 0] + reduce_conv.bias.numpy(), 0)
  gate = 1 / (1 + np.exp(-(hidden @ expand_conv.kernel.numpy()[0, 0] + expand_conv.bias.numpy())))
  np.testing.assert_allclose(got, x * gate[:, None, None, :], rtol=1e-4, atol=1e-5)
  assert np.abs(got - x).max() > 1e-2  # the gate really changes the branch
  assert _consumer(rs18, rs18.get_layer(f'{block}_se_excite').output).name == f'{block}_drop_connect'


def test_resnetd_shortcut_average_pools_before_a_stride_1_projection(rs18):
  for group in (2, 3, 4):
    pool = rs18.get_layer(f'block_group{group}_block1_shortcut_avg_pool')
    assert isinstance(pool, keras.layers.AveragePooling2D) and pool.pool_size == (2, 2) and pool.strides == (2, 2)
    projection = _consumer(rs18, pool.output)
    assert isinstance(projection, keras.layers.Conv2D)
    assert projection.strides == (1, 1) and projection.kernel_size == (1, 1)
    assert projection.output.shape == rs18.get_layer(f'block_group{group}_block1_se_excite').output.shape
  with pytest.raises(ValueError):
    rs18.get_layer('block_group1_block1_shortcut_avg_pool')  # stride-1 group: plain projection
  plain = tiny.model(18, 10, image_size=33, resnetd_shortcut=False, **{k: v for k, v in RS_OPTIONS.items()
                                                                       if k != 'resnetd_shortcut'})
  assert not any(isinstance(layer, keras.layers.AveragePooling2D) for layer in plain.layers)
  # Stem convs 0-3; group 1: 4-8 and 9-12 (SE convs included); group 2's projection is conv2d_13.
  assert plain.get_layer('conv2d_13').strides == (2, 2) and plain.get_layer('conv2d_13').kernel_size == (1, 1)


def test_stem_variants_give_reference_feature_map_sizes(rs18):
  # 33 px: 3x3/2 conv -> ceil(33/2) = 17, two stride-1 3x3 convs keep 17, the 3x3/2 conv replacing the max pool
  # -> 9, then groups 9, 5, 3, 2.
  sizes = [_out(rs18, name) for name in ('conv2d', 'conv2d_1', 'conv2d_2', 'conv2d_3')]
  assert sizes == [17, 17, 17, 9]
  assert [rs18.get_layer(n).output.shape[-1] for n in ('conv2d', 'conv2d_1', 'conv2d_2', 'conv2d_3')] == [
      32, 32, 64, 64]
  assert rs18.get_layer('conv2d').strides == (2, 2) and rs18.get_layer('conv2d_3').strides == (2, 2)
  assert [_out(rs18, f'block_group{g}_block2_out') for g in (1, 2, 3, 4)] == [9, 5, 3, 2]
  with pytest.raises(ValueError):
    rs18.get_layer('initial_max_pool')
  # The stem's own BN-ReLU (v1) follows the third conv; the replacement conv has one too.
  assert _consumer(rs18, rs18.get_layer('conv2d_2').output).name == 'batch_normalization_2'
  assert _consumer(rs18, rs18.get_layer('conv2d_3').output).name == 'batch_normalization_3'


def test_stochastic_depth_rates_grow_linearly_per_group(rs18):
  # rate * (group + 1) / 5 with rate 0.2: group 1 (first block) 0.08, group 2 0.12, group 3 0.16, group 4 0.2.
  rates = {name: rs18.get_layer(f'{name}_drop_connect').rate
           for name in ('block_group1_block1', 'block_group2_block2', 'block_group3_block1', 'block_group4_block2')}
  assert rates == pytest.approx({'block_group1_block1': 0.08, 'block_group2_block2': 0.12,
                                 'block_group3_block1': 0.16, 'block_group4_block2': 0.2})
  assert layers.drop_connect_rate_for_group(None, 4) == 0.0
  plain = tiny.model(18, 10, drop_connect_rate=0.0)
  assert not any(isinstance(layer, layers.StochasticDepth) for layer in plain.layers)


def test_stochastic_depth_is_random_in_training_and_identity_in_inference(rs18):
  images = _images(4, 33)
  np.testing.assert_array_equal(rs18(images, training=False), rs18(images, training=False))
  first, second = rs18(images, training=True).numpy(), rs18(images, training=True).numpy()
  assert np.abs(first - second).max() > 1e-4


def test_stochastic_depth_layer_drops_whole_examples_and_rescales_the_kept_ones():
  x = np.ones((2000, 2, 2, 3), np.float32)
  keras.utils.set_random_seed(11)
  layer = layers.StochasticDepth(0.25)
  y = layer(x, training=True).numpy()
  per_example = y.reshape(2000, -1)
  assert np.all(per_example.min(axis=1) == per_example.max(axis=1))  # one draw per example
  assert set(np.unique(y)) == {0.0, np.float32(1 / 0.75)}
  assert abs((per_example[:, 0] > 0).mean() - 0.75) < 0.04  # ~N(0.75, 0.01)
  np.testing.assert_array_equal(layer(x, training=False), x)
  keras.utils.set_random_seed(11)
  np.testing.assert_array_equal(layers.StochasticDepth(0.25)(x, training=True), y)  # reproducible from the seed


# --- EvoNorm ----------------------------------------------------------------------------------------------------


def _np_evonorm(x, kind, v, gamma, beta, eps=1e-5, groups=None, variance=None):
  """Independent NHWC float64 EvoNorm: S0 = x sigmoid(vx) / group_std; B0 = x / max(batch_std, vx + inst_std)."""
  if kind == 's0':
    n, h, w, c = x.shape
    grouped = x.reshape(n, h, w, groups, c // groups)
    std = np.sqrt(grouped.var(axis=(1, 2, 4), keepdims=True) + eps)
    y = x / (1 + np.exp(-v * x)) / np.broadcast_to(std, grouped.shape).reshape(x.shape)
  else:
    batch_var = x.var(axis=(0, 1, 2)) if variance is None else variance
    instance_std = np.sqrt(x.var(axis=(1, 2), keepdims=True) + eps)
    y = x / np.maximum(np.sqrt(batch_var + eps), v * x + instance_std)
  return y * gamma + beta


@pytest.mark.parametrize('kind,channels,groups', [('s0', 40, 20), ('s0', 64, 32), ('b0', 6, None)])
def test_evonorm_matches_a_numpy_implementation(kind, channels, groups):
  # S0 groups: 32, reduced until they divide C -- 40 channels: 31..21 do not divide, 20 does.
  rng = np.random.default_rng(1)
  x = (rng.normal(size=(2, 3, 3, channels)) * 2 + 0.5).astype(np.float32)
  layer = layers.EvoNorm(kind, momentum=0.9, epsilon=1e-5)
  layer.build(x.shape)
  params = {name: rng.uniform(0.5, 1.5, (1, 1, 1, channels)).astype(np.float32) for name in ('v', 'gamma')}
  params['beta'] = rng.normal(0, 0.3, (1, 1, 1, channels)).astype(np.float32)
  for name, value in params.items():
    getattr(layer, name).assign(value)
  assert [w.name for w in layer.weights] == ['beta', 'gamma', 'v'] + (['moving_variance'] if kind == 'b0' else [])
  x64 = x.astype(np.float64)
  expected = _np_evonorm(x64, kind, groups=groups, **params)
  np.testing.assert_allclose(layer(x, training=True), expected, rtol=1e-4, atol=1e-5)
  if kind == 'b0':
    batch_var = x64.var(axis=(0, 1, 2))
    np.testing.assert_allclose(layer.moving_variance.numpy().ravel(), 0.9 + 0.1 * batch_var, rtol=1e-5)
    expected = _np_evonorm(x64, kind, variance=0.9 + 0.1 * batch_var, **params)
  np.testing.assert_allclose(layer(x, training=False), expected, rtol=1e-4, atol=1e-5)
  # channels_first: same variables (shape [1,1,1,C]), transposed result.
  first = layers.EvoNorm(kind, data_format='channels_first')
  first.build((2, channels, 3, 3))
  for name in params:
    getattr(first, name).assign(getattr(layer, name))
  if kind == 'b0':
    first.moving_variance.assign(layer.moving_variance)
  np.testing.assert_allclose(first(np.transpose(x, (0, 3, 1, 2)), training=False),
                             np.transpose(expected, (0, 3, 1, 2)), rtol=1e-4, atol=1e-5)


def test_evonorm_needs_pre_activation_and_names_the_fix():
  for layer in ('evonorm_b0', 'evonorm_s0'):
    with pytest.raises(ValueError, match=r'pre_activation=true.*bn_relu'):
      tiny.model(18, 10, norm_act_layer=layer)
    with pytest.raises(ValueError, match='pre_activation=true'):
      plan.count_params(tiny.config(18, 10, norm_act_layer=layer))
  with pytest.raises(ValueError, match=r"norm_act_layer must be one of \['bn_relu', 'evonorm_b0', 'evonorm_s0'\]"):
    tiny.model(18, 10, pre_activation=True, norm_act_layer='group_norm')


def test_evonorm_b0_model_has_tf1_names_counts_and_no_weight_decay_on_evonorm():
  model = tiny.model(18, 10, pre_activation=True, norm_act_layer='evonorm_b0')
  names = tf1_names.tf1_variable_map(model)
  assert len(names) == len(model.weights)
  assert not any(n.startswith('batch_normalization') for n in names)
  assert list(names)[:6] == ['conv2d/kernel', 'evonorm/beta', 'evonorm/gamma', 'evonorm/v',
                             'evonorm/moving_variance', 'conv2d_1/kernel']
  assert tuple(names['evonorm/v'].shape) == (1, 1, 1, 64) and tuple(names['evonorm_16/gamma'].shape) == (1, 1, 1, 512)
  decayed = {id(v) for v in tf1_names.weight_decay_variables(model)}
  assert not any(id(v) in decayed for n, v in names.items() if n.startswith('evonorm'))
  assert len(decayed) == 21 + 2  # every conv kernel, the dense kernel and bias
  # Hand count: 17 EvoNorms (as v2's 17 BNs) with beta, gamma, v (+ moving_variance) per channel.
  # Channels: per block the input's pre-activation and the one between the convs; a final one after group 4.
  # (64+64 + 64+64) + (64+128 + 128+128) + (128+256 + 256+256) + (256+512 + 512+512) + 512 = 3904.
  channels = sum(plan.bn_channels(tiny.config(18, pre_activation=True)))
  assert channels == 3904
  assert model.count_params() == plan.count_params(tiny.config(18, 10, pre_activation=True)) + channels + channels
  assert model.count_params() == plan.count_params(tiny.config(18, 10, pre_activation=True, norm_act_layer='evonorm_b0'), include_bn_statistics=True)


# --- precision, layout, XLA -------------------------------------------------------------------------------------


def _cpu_runs_bfloat16_channels_first() -> bool:
  """TensorFlow's CPU kernels run NCHW bfloat16 convolutions only through oneDNN's bfloat16 path (AVX-512 BF16 or
  AMX); on an AVX2-only CPU the op is unimplemented, a fact of the machine, not of this code."""
  try:
    tf.nn.conv2d(tf.ones([1, 3, 4, 4], tf.bfloat16), tf.ones([1, 1, 3, 2], tf.bfloat16), 1, 'SAME',
                 data_format='NCHW')
    return True
  except (tf.errors.UnimplementedError, tf.errors.InvalidArgumentError):
    return False


def test_new_options_build_and_run_under_mixed_bfloat16_and_channels_first():
  if not _cpu_runs_bfloat16_channels_first():
    pytest.skip('this CPU has no bfloat16 NCHW convolution kernel (needs AVX-512 BF16 or AMX); the float32 '
                'channels_first tests run')
  model = tiny.model(18, 10, data_format='channels_first', dtype_policy='mixed_bfloat16', pre_activation=True,
                    norm_act_layer='evonorm_s0', drop_connect_rate=0.2, **RS_OPTIONS)
  assert all(v.dtype == 'float32' for v in model.weights)
  evonorm, se_conv = model.get_layer('evonorm_5'), model.get_layer('conv2d_7')  # conv2d_7: block 1's SE reduce
  assert (evonorm.compute_dtype, se_conv.compute_dtype) == ('bfloat16', 'bfloat16')
  assert se_conv.use_bias and se_conv.output.shape[1] == 16  # NCHW: channels on axis 1
  assert model.get_layer('block_group1_block1_drop_connect').compute_dtype == 'bfloat16'
  probe = keras.Model(model.input, [evonorm.output, model.output])
  features, logits = probe(_images(2, 32), training=True)
  assert features.dtype == tf.bfloat16 and logits.dtype == tf.float32
  assert np.all(np.isfinite(logits.numpy()))


@pytest.mark.slow
def test_channels_first_matches_channels_last_with_evonorm_se_and_resnetd():
  options = dict(pre_activation=True, norm_act_layer='evonorm_b0', se_ratio=0.25, resnetd_shortcut=True)
  last = tiny.model(18, 10, **options)
  first = tiny.model(18, 10, data_format='channels_first', **options)
  rng = np.random.default_rng(2)
  for name, var in tf1_names.tf1_variable_map(last).items():
    if name.startswith('evonorm') or name.endswith('/bias'):
      var.assign(rng.uniform(0.5, 1.5, tuple(var.shape)).astype(np.float32))
  _copy_by_tf1_name(last, first)
  # 64 px, batch 4: B0's batch std over 2 values of a 1x1 map (32 px, batch 2) is too ill-conditioned to compare.
  images = _images(4, 64)
  for training in (False, True):
    np.testing.assert_allclose(first(images, training=training), last(images, training=training), rtol=1e-3,
                               atol=1e-4)


@pytest.mark.slow
def test_xla_compiled_training_step_with_se_resnetd_and_stochastic_depth(rs18):
  variables = rs18.trainable_variables

  @tf.function(jit_compile=True)
  def step(images, labels):
    with tf.GradientTape() as tape:
      logits = rs18(images, training=True)
      loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True))
    return loss, tape.gradient(loss, variables)

  loss, grads = step(tf.constant(_images(4, 33)), tf.constant([0, 1, 2, 3]))
  assert np.isfinite(loss.numpy())
  assert all(g is not None and np.all(np.isfinite(g.numpy())) for g in grads)
  se_kernel = rs18.get_layer('conv2d_7').kernel  # stem convs 0-3, block 1: projection 4, main 5-6, SE 7-8
  assert np.abs(grads[[id(v) for v in variables].index(id(se_kernel))].numpy()).max() > 0


def test_bad_option_values_raise_clear_errors():
  with pytest.raises(ValueError, match=r'se_ratio must be > 0 and <= 1, got 1.5'):
    tiny.model(18, 10, se_ratio=1.5)
  with pytest.raises(ValueError, match=r'drop_connect_rate must be >= 0 and < 1, got 1.0'):
    tiny.model(18, 10, drop_connect_rate=1.0)
  with pytest.raises(ValueError, match='rate must be in'):
    layers.StochasticDepth(-0.1)


def test_model_report_counts_the_resnet_rs_options():
  rows = {r['depth']: r for r in model_report.report_rows(160, 1000, **RS_OPTIONS)}
  assert round(rows[50]['params'] / 1e6, 1) == 35.7
  assert rows[50]['params'] == plan.count_params(tiny.config(50, 1000, **RS_OPTIONS))
  evonorm = {r['depth']: r for r in model_report.report_rows(224, 1000, True, 'evonorm_s0')}
  assert evonorm[50]['bn_statistics'] == 0  # S0 keeps no statistics
  with pytest.raises(ValueError, match='pre_activation'):
    model_report.report_rows(224, 1000, norm_act_layer='evonorm_b0')


# --- depths 270-420 ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize('depth', RS_DEPTHS)
def test_resnet_rs_depths_follow_the_block_table(depth):
  assert list(architectures.architecture(depth).blocks) == BLOCKS[depth]
  trainable, total = _expected_params(depth, 1000)
  assert plan.count_params(tiny.config(depth, 1000)) == trainable
  assert plan.count_params(tiny.config(depth, 1000), include_bn_statistics=True) == total


def test_building_past_pythons_recursion_limit_works_and_restores_the_limit():
  """Keras maps a functional graph recursively; ResNet-350/420 are deeper than the default limit of 1000 frames.

  The same failure is provoked cheaply: ResNet-50 under a limit only ~120 frames above the current stack.
  """
  limit = sys.getrecursionlimit()
  low = len(inspect.stack()) + 120
  sys.setrecursionlimit(low)
  try:
    model = tiny.model(50, 10)
    assert sys.getrecursionlimit() == low
  finally:
    sys.setrecursionlimit(limit)
  assert model.count_params() == _expected_params(50, 10)[1]


@pytest.mark.skipif(not os.environ.get('RESNET_TEST_DEEP_MODELS'),
                    reason='builds ResNet-270/350/420 (~15-25 s each on 2 cores): set RESNET_TEST_DEEP_MODELS=1')
@pytest.mark.parametrize('depth', RS_DEPTHS)
def test_resnet_rs_depths_build_with_the_block_table_counts(depth):
  model = tiny.model(depth, 10, image_size=32)
  assert model.count_params() == _expected_params(depth, 10)[1]
  assert len(tf1_names.tf1_variable_map(model)) == len(model.weights)


# ------------------------------------------------------------------------------------------------ Variant
def _conv_strides(model: keras.Model) -> list:
  convs = [layer for layer in model.layers if isinstance(layer, keras.layers.Conv2D)]
  convs.sort(key=tf1_names._creation_order)  # pylint: disable=protected-access
  return [(conv.kernel_size[0], conv.strides[0]) for conv in convs]


@pytest.mark.slow
def test_variant_options_build_what_the_conv_table_says():
  """stride_in_1x1 moves each stage's stride to the first 1x1; 'shape_change' drops ResNet-18's group-1
  projection (torchvision has none); the analytic table and parameter counts follow."""
  plain = tiny.model(18, 10, image_size=32, projection_shortcut='shape_change', stem_pool_padding='symmetric')
  assert plain.count_params() == plan.count_params(tiny.config(18, 10, projection_shortcut='shape_change'), include_bn_statistics=True)
  assert len(plan.conv_shapes(tiny.config(18, projection_shortcut='shape_change'))) == len(plan.conv_shapes(tiny.config(18))) - 1 == 20
  assert _conv_strides(plain) == [(c.kernel, c.stride) for c in plan.conv_shapes(tiny.config(18, projection_shortcut='shape_change'))]
  v1 = tiny.model(50, 10, image_size=32, stride_in_1x1=True)
  table = plan.conv_shapes(tiny.config(50, stride_in_1x1=True))
  assert _conv_strides(v1) == [(c.kernel, c.stride) for c in table]
  assert [(c.kernel, c.stride) for c in table[11:15]] == [(1, 2), (1, 2), (3, 1), (1, 1)]  # group 2's first block
  assert plan.count_flops(tiny.config(50, 1000, stride_in_1x1=True), 224) < plan.count_flops(tiny.config(50, 1000), 224)  # its 3x3s run on smaller maps
  assert v1.variant.stride_in_1x1 and plain.variant.projection_shortcut == 'shape_change'
  with pytest.raises(ValueError, match='stride_in_1x1=true needs a bottleneck depth'):
    tiny.model(18, 10, stride_in_1x1=True)


def test_symmetric_stem_pool_and_caffe_normalisation():
  """The symmetric pool is a 3x3/2 max over a one-pixel border on every side (SAME pads only the end of even
  sizes); caffe_bgr is RGB -> BGR minus the caffe means, unscaled."""
  x = np.random.default_rng(0).normal(size=(1, 8, 8, 2)).astype(np.float32)
  pooled = keras.layers.MaxPooling2D(3, 2)(layers.BorderPadding('channels_last')(x)).numpy()
  padded = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)), constant_values=-np.inf)
  expected = np.array([[padded[0, 2 * i:2 * i + 3, 2 * j:2 * j + 3].max((0, 1)) for j in range(4)] for i in range(4)])
  np.testing.assert_array_equal(pooled[0], expected)
  assert not np.allclose(pooled, keras.layers.MaxPooling2D(3, 2, padding='same')(x).numpy())
  first = layers.BorderPadding('channels_first')(np.transpose(x, (0, 3, 1, 2))).numpy()
  np.testing.assert_array_equal(np.transpose(first, (0, 2, 3, 1)), padded)
  pixels = np.array([[[[10.0, 20.0, 30.0]]]], np.float32)
  np.testing.assert_allclose(layers.NormalizeImages('caffe_bgr')(pixels).numpy()[0, 0, 0],
                             [30 - 103.939, 20 - 116.779, 10 - 123.68], rtol=1e-6)
