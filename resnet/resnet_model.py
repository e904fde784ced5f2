"""ResNet v1.5 (and v2) for ImageNet as a Keras 3 functional model, variable-compatible with the TF1 reference.

Why it looks the way it does:
- The reference (tensorflow/tpu ``models/official/resnet``) is the behaviour to match: fixed padding for strided
  convs, no conv bias, variance-scaling(1.0, fan_in) conv init, BN 0.9/1e-5, zero-init gamma on the last BN of each
  block, a projection shortcut in the first block of every group (group 1 included), stride on the 3x3 conv.
- Every conv, BN and dense layer is *named* with its TF1 name (``conv2d_7``, ``batch_normalization_7``, ``dense``)
  from creation counters, in the reference's creation order (projection before the main path). The TF1 name of a
  variable is therefore ``<layer name>/<variable name>`` and a TF1 checkpoint maps onto the model without any
  parsing of Keras auto names (``tf1_variable_map``). This holds for v2 (``pre_activation=True``) as well, whose
  reference creation order (pre-activation BN, then projection, then main path) is followed too.
- Pixels arrive in 0..255 NHWC. Normalisation is the model's first op and runs in float32 on the NHWC input; only
  then is the tensor transposed for ``channels_first``. (The reference transposes first and its ``[1,1,3]``
  constants then broadcast over W: NCHW is broken there.)
- Mixed precision: layers take a Keras dtype policy (``dtype_policy``); variables stay float32, the body computes in
  bfloat16/float16, BN statistics in float32 (Keras upcasts), and the pooling + classifier run in float32 so the
  logits are float32 whatever the policy.
- DropBlock's keep probability follows a schedule in the training step, so the model owns one non-trainable float32
  scalar, ``model.dropblock_keep_prob`` (variable name ``dropblock_keep_prob``), that the training loop assigns with
  the *base* keep prob kp(t) (see ``scheduled_dropblock_keep_prob``); group g then uses 1 - (1 - kp) / 4^(4 - g).
  The variable exists only when DropBlock is on and is not part of the TF1 mapping (the reference had none).
- ResNet-RS options (all off by default): squeeze-excitation (``se_ratio``), the ResNet-D shortcut and stem, a
  strided conv instead of the stem max pool, stochastic depth (``drop_connect_rate``, ``StochasticDepth``) and
  depths 270/350/420; ``norm_act_layer`` swaps BN-ReLU for EvoNorm-B0/S0 (``EvoNorm``, v2 only). TF1 names
  follow the reference's creation order: SE convs are ``conv2d_i`` (kernel and bias) right after their block's
  last conv/BN, EvoNorms are ``evonorm[_i]/{beta,gamma,v,moving_variance}``. Deliberate differences: SE,
  ResNet-D and stochastic depth apply in every block kind and in v2 (the reference silently ignores them in
  ResNet-18/34 and v2 blocks), SE pools over the right axes in ``channels_first`` (the reference hard-codes
  channels_last there), the stem conv replacing the max pool uses ``norm_act_layer`` (the reference always uses
  BN), stochastic depth draws float32 noise, and EvoNorm-B0's moving variance follows ``bn_momentum``/``bn_epsilon``
  (the reference fixes 0.9/1e-5, the defaults).

- The ``Variant`` options (resnet/architectures.py; all off by default) compute as pretrained weights of other
  frameworks were trained: the stride on a stage's first 1x1 (Keras' ResNet v1), a stem max pool over a one-pixel
  border on every side (``BorderPadding``: Keras, torchvision, timm), caffe BGR input normalisation (Keras), no
  group-1 projection where shapes allow (torchvision's ResNet-18/34); ``model.variant`` records them, with the BN
  epsilon, for the warm start to check.

Batch norm is ``FusedBatchNormalization``: Keras' BN semantics and variables computed by TF's fused kernel, because
Keras 3's unfused BN was ~1/3 of a CPU training step.

Known differences from the reference: Keras BN updates the moving variance with the biased batch variance (TF1's
fused BN applies Bessel's correction, a factor n/(n-1) with n = batch*H*W >= thousands, i.e. < 0.1%); the head
Dropout (if any) keeps a Keras RNG state variable that is not a TF1 variable; the dense layer computes in float32.
"""
import sys
from typing import Callable, NamedTuple, Sequence

from absl import logging
import keras
import tensorflow as tf

from resnet.architectures import (  # pylint: disable=unused-import (the model's public names, as before)
    ARCHITECTURES, INPUT_NORMALIZATIONS, NORM_ACT_LAYERS, PROJECTION_SHORTCUTS, STEM_POOL_PADDINGS, SUPPORTED_DEPTHS,
    BlockSpec, Variant, architecture, norm_act_problem, variant_problem)

MEAN_RGB = (0.485 * 255, 0.456 * 255, 0.406 * 255)
STDDEV_RGB = (0.229 * 255, 0.224 * 255, 0.225 * 255)
CAFFE_MEAN_BGR = (103.939, 116.779, 123.68)  # Keras applications' 'caffe' preprocessing, in BGR order

GROUP_FILTERS = (64, 128, 256, 512)
# Each layer's stage (0 stem, 1-4 block groups, 5 head), stamped by resnet(): fine_tuning.py's layer decay.
STAGE_ATTRIBUTE = '_resnet_stage'
GROUP_STRIDES = (1, 2, 2, 2)
STEM_FILTERS = 64
RESNETD_STEM_FILTERS = (32, 32, 64)  # use_resnetd_stem: three 3x3 convs, the first strided
DROPBLOCK_VARIABLE_NAME = 'dropblock_keep_prob'
EVONORM_GROUPS = 32  # EvoNorm-S0 groups, reduced until they divide the channel count


def group_keep_prob(keep_prob, group: int):
  """Per-group DropBlock keep prob, as the reference scales it: later groups drop more, group 4 uses kp itself."""
  if group not in (1, 2, 3, 4):
    raise ValueError(f'DropBlock group must be in 1..4, got {group!r}.')
  return 1.0 - (1.0 - keep_prob) / 4.0 ** (4 - group)


def drop_connect_rate_for_group(drop_connect_rate: float | None, group: int) -> float:
  """Stochastic-depth rate of every block of group g (1..4): ``rate * (g + 1) / 5``, the reference's rule.

  The rate grows linearly with the group's position among the five stages (stem, groups 1-4) and is constant
  within a group: group 1 drops with 0.4 x rate, group 4 with the full rate. None or 0 gives 0 (off).
  """
  if group not in (1, 2, 3, 4):
    raise ValueError(f'Stochastic depth group must be in 1..4, got {group!r}.')
  return float(drop_connect_rate or 0.0) * (group + 1) / 5.0


def se_filters(channels: int, se_ratio: float) -> int:
  """Width of the squeeze-excitation bottleneck: ``max(1, int(channels * se_ratio))`` of the block's output."""
  return max(1, int(channels * se_ratio))


def scheduled_dropblock_keep_prob(step, train_steps, final_keep_prob: float) -> tf.Tensor:
  """Base keep prob kp(t) = 1 - (step / train_steps) * (1 - final): no drop at step 0, ``final`` at the end.

  The training loop assigns this to ``model.dropblock_keep_prob`` every step.
  """
  progress = tf.cast(step, tf.float32) / tf.cast(tf.maximum(train_steps, 1), tf.float32)
  return 1.0 - progress * (1.0 - final_keep_prob)


# --------------------------------------------------------------------------------------------------------------
# Layers without TF1 variables.


@keras.saving.register_keras_serializable(package='resnet')
class NormalizeImages(keras.layers.Layer):
  """NHWC 0..255 RGB pixels -> what the first conv's weights were trained on, in float32 (bf16 cannot hold 0..255
  exactly enough).

  'imagenet': (pixels - MEAN_RGB) / STDDEV_RGB (the reference; torchvision and timm normalise the same way).
  'caffe_bgr': RGB -> BGR, minus CAFFE_MEAN_BGR, unscaled: Keras applications' ResNet ``preprocess_input``. It is
  part of the model, so the exported SavedModel takes the same 0..255 RGB images whatever the weights expect.
  """

  def __init__(self, mode: str = 'imagenet', **kwargs):
    kwargs['dtype'] = 'float32'
    super().__init__(**kwargs)
    if mode not in INPUT_NORMALIZATIONS:
      raise ValueError(f'input_normalization must be one of {list(INPUT_NORMALIZATIONS)}, got {mode!r}.')
    self.mode = mode

  def call(self, images):
    images = tf.cast(images, tf.float32)
    if self.mode == 'caffe_bgr':
      return tf.reverse(images, axis=[-1]) - tf.constant(CAFFE_MEAN_BGR, tf.float32)
    return (images - tf.constant(MEAN_RGB, tf.float32)) / tf.constant(STDDEV_RGB, tf.float32)

  def get_config(self):
    return {**super().get_config(), 'mode': self.mode}


@keras.saving.register_keras_serializable(package='resnet')
class BorderPadding(keras.layers.Layer):
  """Pads the spatial axes by one pixel on every side with -inf, for the symmetric stem max pool.

  Keras applications, torchvision and timm pool the stem over a one-pixel border on both sides; the reference's
  SAME pool pads only the end of an even-sized map, which shifts every pooling window by one pixel against their
  weights. -inf never wins a max, and every 3x3 window holds real pixels (Keras pads zeros after a ReLU: the same).
  """

  def __init__(self, data_format: str, **kwargs):
    super().__init__(**kwargs)
    self.data_format = data_format

  def call(self, x):
    border = ([[0, 0], [1, 1], [1, 1], [0, 0]] if self.data_format == 'channels_last'
              else [[0, 0], [0, 0], [1, 1], [1, 1]])
    return tf.pad(x, border, constant_values=float('-inf'))

  def compute_output_shape(self, input_shape):
    axes = (1, 2) if self.data_format == 'channels_last' else (2, 3)
    return tuple(d + 2 if i in axes and d is not None else d for i, d in enumerate(input_shape))

  def get_config(self):
    return {**super().get_config(), 'data_format': self.data_format}


class DropBlock(keras.layers.Layer):
  """DropBlock (Ghiasi et al. 2018) as in the reference; training only, identity at inference.

  ``keep_prob`` is the model's shared base keep-prob variable; this layer derives its group's keep prob from it at
  call time so a schedule assigned by the training loop takes effect without retracing. The spatial size must be
  static and square when training (the reference's constraint too).
  """

  def __init__(self, keep_prob: keras.Variable, group: int, block_size: int, data_format: str, **kwargs):
    super().__init__(**kwargs)
    group_keep_prob(1.0, group)  # validates the group
    self.keep_prob = keep_prob
    self.group = group
    self.block_size = int(block_size)
    self.data_format = data_format

  def call(self, x, training=None):
    if not training:
      return x
    spatial_axes = (1, 2) if self.data_format == 'channels_last' else (2, 3)
    height, width = (x.shape[a] for a in spatial_axes)
    if width is None or height is None:
      raise ValueError(f'{self.name}: DropBlock needs a static spatial size when training, got shape {x.shape}; '
                       'trace the training step with a fixed image size.')
    if width != height:
      raise ValueError(f'{self.name}: DropBlock needs a square feature map, got {height}x{width}.')
    size = min(self.block_size, width)
    keep_prob = group_keep_prob(tf.cast(self.keep_prob, tf.float32), self.group)
    seed_drop_rate = (1.0 - keep_prob) * width ** 2 / size ** 2 / (width - size + 1) ** 2
    # Block centres only where the whole block fits in the map.
    i, j = tf.meshgrid(tf.range(width), tf.range(width))
    lo, hi = size // 2, width - (size - 1) // 2
    valid = (i >= lo) & (i < hi) & (j >= lo) & (j < hi)
    valid = tf.reshape(tf.cast(valid, tf.float32), [1, width, width, 1] if self.data_format == 'channels_last'
                       else [1, 1, width, width])
    noise = tf.random.uniform(tf.shape(x), dtype=tf.float32)
    keep = tf.cast((1.0 - valid + (1.0 - seed_drop_rate) + noise) >= 1.0, tf.float32)
    if size == width:
      keep = tf.reduce_min(keep, axis=spatial_axes, keepdims=True)
    else:
      # Min-pool (as -max_pool(-x)) grows each dropped seed to a size x size block.
      keep = -tf.nn.max_pool2d(-keep, size, 1, 'SAME',
                               data_format='NHWC' if self.data_format == 'channels_last' else 'NCHW')
    kept_fraction = tf.reduce_mean(keep)
    return x / tf.cast(kept_fraction, x.dtype) * tf.cast(keep, x.dtype)

  def compute_output_shape(self, input_shape):
    return input_shape


@keras.saving.register_keras_serializable(package='resnet')
class FusedBatchNormalization(keras.layers.BatchNormalization):
  """keras.layers.BatchNormalization computed by TF's fused kernel: same variables, names, results and checkpoints.

  Why: Keras 3's BN (TF backend) is unfused -- upcast to float32, ``tf.nn.moments``, ``tf.nn.batch_normalization``,
  downcast -- a dozen ops per layer forward and backward, ~1/3 of a ResNet-50 training step on CPU.
  ``FusedBatchNormV3`` (oneDNN on CPU, cuDNN on GPU, XLA on TPU) takes the bf16/fp16 activations with float32
  statistics directly; measured on 2 Zen 5 cores, ResNet-50 training at 224 runs 1.6-1.7x faster (fp32 and bf16).
  The kernel's batch variance carries Bessel's correction n/(n-1); it is undone so the moving variance stays Keras'
  (biased) one. Masks, renorm, synchronized BN and non-4D inputs fall back to Keras' implementation.
  """

  # Set by fine_tuning.freeze_batch_norm_statistics: inference mode in training too (gamma and beta still learn).
  frozen_statistics = False

  def call(self, inputs, training=None, mask=None):
    if self.frozen_statistics:
      training = False
    rank = len(inputs.shape)
    axis = (self.axis if isinstance(self.axis, int) else self.axis[0]) % max(rank, 1)
    if (mask is not None or self.renorm or self.synchronized or rank != 4 or axis not in (1, 3)
        or self.compute_dtype == 'float64'):
      return super().call(inputs, training=training, mask=mask)
    x = tf.cast(inputs, self.compute_dtype)
    channels = x.shape[axis]
    gamma = tf.cast(self.gamma, tf.float32) if self.scale else tf.ones([channels], tf.float32)
    beta = tf.cast(self.beta, tf.float32) if self.center else tf.zeros([channels], tf.float32)
    data_format = 'NHWC' if axis == 3 else 'NCHW'
    if training and self.trainable:
      empty = tf.constant([], tf.float32)
      y, mean, variance, _, _, _ = tf.raw_ops.FusedBatchNormV3(
          x=x, scale=gamma, offset=beta, mean=empty, variance=empty, epsilon=self.epsilon,
          exponential_avg_factor=1.0, data_format=data_format, is_training=True)
      count = tf.cast(tf.size(x) // channels, tf.float32)
      variance = variance * (count - 1.0) / tf.maximum(count, 1.0)  # unbiased -> biased, as Keras
      decay = self.momentum
      self.moving_mean.assign(self.moving_mean * decay + mean * (1.0 - decay))
      self.moving_variance.assign(self.moving_variance * decay + variance * (1.0 - decay))
      return y
    y, _, _, _, _, _ = tf.raw_ops.FusedBatchNormV3(
        x=x, scale=gamma, offset=beta, mean=tf.cast(self.moving_mean, tf.float32),
        variance=tf.cast(self.moving_variance, tf.float32), epsilon=self.epsilon, data_format=data_format,
        is_training=False)
    return y


@keras.saving.register_keras_serializable(package='resnet')
class EvoNorm(keras.layers.Layer):
  """EvoNorm-B0 / -S0 (Liu et al. 2020), a normalisation-activation layer replacing BN-ReLU in ResNet v2.

  With ``nonlinearity``: S0 = x * sigmoid(v * x) / group_std(x), B0 = x / max(batch_std(x), v * x +
  instance_std(x)); then ``* gamma + beta`` (only the affine part without ``nonlinearity``). Standard deviations
  are sqrt(biased variance + epsilon); S0 uses ``num_groups`` groups, reduced until they divide the channels; B0
  keeps a ``moving_variance`` (updated with ``momentum`` when training, used at inference).

  Variables are named ``beta``, ``gamma``, ``v`` (, ``moving_variance``) with the reference's shape [1, 1, 1, C]
  whatever the data format (so checkpoints do not depend on the layout), float32 and never autocast: statistics
  and the normalisation run in float32, as Keras' batch norm does; input and output are in the compute dtype.
  """

  def __init__(self, kind: str, nonlinearity: bool = True, data_format: str = 'channels_last',
               momentum: float = 0.9, epsilon: float = 1e-5, num_groups: int = EVONORM_GROUPS,
               zero_gamma: bool = False, **kwargs):
    super().__init__(**kwargs)
    if kind not in ('b0', 's0'):
      raise ValueError(f"EvoNorm kind must be 'b0' or 's0', got {kind!r}.")
    if data_format not in ('channels_last', 'channels_first'):
      raise ValueError(f"data_format must be 'channels_last' or 'channels_first', got {data_format!r}.")
    self.kind = kind
    self.nonlinearity = bool(nonlinearity)
    self.data_format = data_format
    self.momentum = float(momentum)
    self.epsilon = float(epsilon)
    self.num_groups = int(num_groups)
    self.zero_gamma = bool(zero_gamma)

  def build(self, input_shape):
    if len(input_shape) != 4:
      raise ValueError(f'{self.name}: EvoNorm needs 4D inputs, got shape {input_shape}.')
    channels = input_shape[-1 if self.data_format == 'channels_last' else 1]
    if channels is None:
      raise ValueError(f'{self.name}: EvoNorm needs a static channel count, got shape {input_shape}.')
    self.channels = int(channels)
    shape = (1, 1, 1, self.channels)
    self.beta = self.add_weight(shape=shape, initializer='zeros', name='beta', autocast=False)
    self.gamma = self.add_weight(shape=shape, initializer='zeros' if self.zero_gamma else 'ones', name='gamma',
                                 autocast=False)
    if self.nonlinearity:
      self.v = self.add_weight(shape=shape, initializer='ones', name='v', autocast=False)
      if self.kind == 'b0':
        self.moving_variance = self.add_weight(shape=shape, initializer='ones', name='moving_variance',
                                               trainable=False, autocast=False)
    self.groups = self.num_groups
    while self.groups > 1 and self.channels % self.groups:
      self.groups -= 1

  def _param(self, variable) -> tf.Tensor:
    """A [1,1,1,C] variable as float32, broadcastable against the layer's layout."""
    value = tf.cast(variable, tf.float32)
    return value if self.data_format == 'channels_last' else tf.reshape(value, (1, self.channels, 1, 1))

  def _group_std(self, x):
    shape = tf.shape(x)
    if self.data_format == 'channels_last':
      grouped = tf.reshape(x, [shape[0], shape[1], shape[2], self.groups, self.channels // self.groups])
      axes = (1, 2, 4)
    else:
      grouped = tf.reshape(x, [shape[0], self.groups, self.channels // self.groups, shape[2], shape[3]])
      axes = (2, 3, 4)
    _, variance = tf.nn.moments(grouped, axes, keepdims=True)
    std = tf.broadcast_to(tf.sqrt(variance + self.epsilon), tf.shape(grouped))
    return tf.reshape(std, shape)

  def call(self, inputs, training=None):
    x = tf.cast(inputs, tf.float32)
    spatial = (1, 2) if self.data_format == 'channels_last' else (2, 3)
    if self.nonlinearity:
      v = self._param(self.v)
      if self.kind == 's0':
        x = x * tf.sigmoid(v * x) / self._group_std(x)
      else:
        if training:
          _, variance = tf.nn.moments(x, (0,) + spatial, keepdims=True)
          if self.data_format == 'channels_first':
            variance = tf.reshape(variance, (1, 1, 1, self.channels))
          self.moving_variance.assign(self.moving_variance * self.momentum + variance * (1.0 - self.momentum))
          variance = self._param(variance)
        else:
          variance = self._param(self.moving_variance)
        _, instance_variance = tf.nn.moments(x, spatial, keepdims=True)
        batch_std = tf.sqrt(variance + self.epsilon)
        instance_std = tf.sqrt(instance_variance + self.epsilon)
        x = x / tf.maximum(batch_std, v * x + instance_std)
    return tf.cast(x * self._param(self.gamma) + self._param(self.beta), self.compute_dtype)

  def compute_output_shape(self, input_shape):
    return input_shape

  def get_config(self):
    return {**super().get_config(), 'kind': self.kind, 'nonlinearity': self.nonlinearity,
            'data_format': self.data_format, 'momentum': self.momentum, 'epsilon': self.epsilon,
            'num_groups': self.num_groups, 'zero_gamma': self.zero_gamma}


def replica_noise(shape, seed_generator: keras.random.SeedGenerator) -> tf.Tensor:
  """U[0, 1) float32 noise that differs between replicas and workers.

  A Keras SeedGenerator's state is one mirrored variable: every replica would draw the same seed, hence the same
  mask, leaving fewer independent masks than the global batch suggests. The draw folds the seed with the replica's
  global id (``replica_id_in_sync_group``: across workers too), so it stays reproducible with a fixed seed.
  """
  seed = tf.cast(seed_generator.next(), tf.int64)
  context = tf.distribute.get_replica_context()
  replica = context.replica_id_in_sync_group if context is not None else 0
  seed = tf.random.experimental.stateless_fold_in(seed, tf.cast(replica, tf.int64))
  return tf.random.stateless_uniform(shape, seed=seed, dtype=tf.float32)


class _ReplicaMask(keras.layers.Layer):
  """A training-only random mask at ``rate``, drawn per replica (``replica_noise``) from the layer's
  ``seed_generator`` (the attribute Keras' Dropout has, so checkpoints keep their layout)."""

  WHAT = 'mask'

  def __init__(self, rate: float, seed: int | None = None, **kwargs):
    super().__init__(**kwargs)
    if not 0.0 <= float(rate) < 1.0:
      raise ValueError(f'{self.name}: the {self.WHAT} rate must be in [0, 1), got {rate!r}.')
    self.rate = float(rate)
    self.seed = seed
    self.seed_generator = keras.random.SeedGenerator(seed, name=f'{self.name}_seed_generator')

  def call(self, inputs, training=None):
    if not training or self.rate == 0.0:
      return inputs
    return self.masked(inputs)

  def masked(self, inputs):
    raise NotImplementedError

  def compute_output_shape(self, input_shape):
    return input_shape

  def get_config(self):
    return {**super().get_config(), 'rate': self.rate, 'seed': self.seed}


@keras.saving.register_keras_serializable(package='resnet')
class Dropout(_ReplicaMask):
  """Inverted dropout with a mask of its own on each replica; identity at inference (Keras' Dropout draws the same
  mask on every replica)."""

  WHAT = 'dropout'

  def masked(self, inputs):
    keep = tf.cast(replica_noise(tf.shape(inputs), self.seed_generator) >= self.rate, inputs.dtype)
    return inputs * keep / tf.cast(1.0 - self.rate, inputs.dtype)


@keras.saving.register_keras_serializable(package='resnet')
class StochasticDepth(_ReplicaMask):
  """Drop-connect on a residual branch (Huang et al. 2016): training only, identity at inference.

  Each example's branch is kept with probability 1 - rate and then scaled by 1 / (1 - rate):
  ``x / keep * floor(keep + U[0, 1))``. The uniform draw is float32 (a bfloat16 draw would round the keep
  probability) and comes from a Keras SeedGenerator folded with the replica id (``replica_noise``), so
  ``keras.utils.set_random_seed`` before building makes it reproducible, each replica draws its own, and it
  compiles under XLA.
  """

  WHAT = 'stochastic depth'

  def masked(self, inputs):
    keep = 1.0 - self.rate
    shape = [tf.shape(inputs)[0]] + [1] * (len(inputs.shape) - 1)
    scale = tf.floor(keep + replica_noise(shape, self.seed_generator)) / keep
    return inputs * tf.cast(scale, inputs.dtype)


# --------------------------------------------------------------------------------------------------------------
# Builder: owns the TF1 name counters and the shared layer settings.


class _Builder:
  """Creates layers in reference order, named with their TF1 names (``conv2d[_i]``, ``batch_normalization[_i]``,
  ``evonorm[_i]``) and stamped with their creation rank, which orders ``tf1_variable_map`` like the reference."""

  def __init__(self, data_format: str, bn_momentum: float, bn_epsilon: float, dtype_policy,
               dropblock_keep_prob_var, dropblock_groups: Sequence[int], dropblock_size: int,
               norm_act_layer: str = 'bn_relu', se_ratio: float | None = None, resnetd_shortcut: bool = False,
               stride_in_1x1: bool = False, projection_shortcut: str = 'every_group'):
    self.data_format = data_format
    self.channel_axis = -1 if data_format == 'channels_last' else 1
    self.bn_momentum = bn_momentum
    self.bn_epsilon = bn_epsilon
    self.dtype = dtype_policy
    self.keep_prob_var = dropblock_keep_prob_var
    self.dropblock_groups = frozenset(dropblock_groups)
    self.dropblock_size = dropblock_size
    self.norm_act_layer = norm_act_layer
    self.se_ratio = se_ratio
    self.resnetd_shortcut = resnetd_shortcut
    self.stride_in_1x1 = stride_in_1x1
    self.projection_shortcut = projection_shortcut
    self.num_convs = 0
    self.num_bns = 0
    self.num_evonorms = 0
    self.num_tf1_layers = 0
    self.stage = 0  # 0 stem, 1-4 block groups, 5 head: stamped on each layer (fine_tuning.py's layer decay)

  @staticmethod
  def _tf1_name(base: str, index: int) -> str:
    return base if index == 0 else f'{base}_{index}'

  def _register(self, layer: keras.layers.Layer) -> keras.layers.Layer:
    layer._tf1_creation_rank = self.num_tf1_layers  # pylint: disable=protected-access
    setattr(layer, STAGE_ATTRIBUTE, self.stage)
    self.num_tf1_layers += 1
    return layer

  def conv(self, x, filters: int, kernel_size: int, strides: int, use_bias: bool = False):
    """conv2d_fixed_padding: explicit symmetric padding + VALID when strided, SAME otherwise; no bias but in SE."""
    name = self._tf1_name('conv2d', self.num_convs)
    self.num_convs += 1
    if strides > 1 and kernel_size > 1:
      pad_total = kernel_size - 1
      pad_beg = pad_total // 2
      pad = (pad_beg, pad_total - pad_beg)
      x = keras.layers.ZeroPadding2D((pad, pad), data_format=self.data_format, dtype=self.dtype,
                                     name=f'{name}_pad')(x)
    return self._register(keras.layers.Conv2D(
        filters, kernel_size, strides=strides, padding='same' if strides == 1 else 'valid', use_bias=use_bias,
        kernel_initializer=keras.initializers.VarianceScaling(1.0, 'fan_in', 'truncated_normal'),
        bias_initializer='zeros', data_format=self.data_format, dtype=self.dtype, name=name))(x)

  def norm(self, x, relu: bool = True, zero_gamma: bool = False):
    """The normalisation-activation layer: BN (+ ReLU), or an EvoNorm (``relu=False``: its affine part only)."""
    if self.norm_act_layer == 'bn_relu':
      return self.bn(x, relu=relu, zero_gamma=zero_gamma)
    name = self._tf1_name('evonorm', self.num_evonorms)
    self.num_evonorms += 1
    return self._register(EvoNorm(
        self.norm_act_layer[-2:], nonlinearity=relu, data_format=self.data_format, momentum=self.bn_momentum,
        epsilon=self.bn_epsilon, zero_gamma=zero_gamma, dtype=self.dtype, name=name))(x)

  def bn(self, x, relu: bool = True, zero_gamma: bool = False):
    name = self._tf1_name('batch_normalization', self.num_bns)
    self.num_bns += 1
    x = self._register(FusedBatchNormalization(
        axis=self.channel_axis, momentum=self.bn_momentum, epsilon=self.bn_epsilon,
        gamma_initializer='zeros' if zero_gamma else 'ones', dtype=self.dtype, name=name))(x)
    if relu:
      x = keras.layers.ReLU(dtype=self.dtype, name=f'{name}_relu')(x)
    return x

  def projects(self, x, channels: int, strides: int) -> bool:
    """Whether a group's first block has a projection shortcut: always (the reference), or only where the identity
    cannot carry the input ('shape_change': torchvision and timm, whose ResNet-18/34 group 1 has none)."""
    return (self.projection_shortcut == 'every_group' or strides != 1
            or x.shape[self.channel_axis] != channels)

  def projection(self, x, filters: int, strides: int, name: str):
    """1x1 projection shortcut; ResNet-D (strided blocks only): 2x2/2 average pool, then a stride-1 1x1 conv."""
    if self.resnetd_shortcut and strides == 2:
      x = keras.layers.AveragePooling2D(2, 2, padding='same', data_format=self.data_format, dtype=self.dtype,
                                        name=f'{name}_shortcut_avg_pool')(x)
      strides = 1
    return self.conv(x, filters, 1, strides)

  def squeeze_excite(self, x, channels: int, name: str):
    """Squeeze-excitation: spatial mean -> 1x1 conv (+bias) to se_filters -> ReLU -> 1x1 conv (+bias) -> sigmoid."""
    if not self.se_ratio:
      return x
    s = keras.layers.GlobalAveragePooling2D(data_format=self.data_format, keepdims=True, dtype=self.dtype,
                                            name=f'{name}_se_squeeze')(x)
    s = self.conv(s, se_filters(channels, self.se_ratio), 1, 1, use_bias=True)
    s = keras.layers.ReLU(dtype=self.dtype, name=f'{name}_se_relu')(s)
    s = self.conv(s, channels, 1, 1, use_bias=True)
    s = keras.layers.Activation('sigmoid', dtype=self.dtype, name=f'{name}_se_sigmoid')(s)
    return keras.layers.Multiply(dtype=self.dtype, name=f'{name}_se_excite')([x, s])

  def branch_end(self, x, channels: int, drop_connect_rate: float, name: str):
    """End of the residual branch, before the add: squeeze-excitation, then stochastic depth."""
    x = self.squeeze_excite(x, channels, name)
    if drop_connect_rate:
      x = StochasticDepth(drop_connect_rate, dtype=self.dtype, name=f'{name}_drop_connect')(x)
    return x

  def dropblock(self, x, group: int, name: str):
    if group not in self.dropblock_groups:
      return x
    return DropBlock(self.keep_prob_var, group, self.dropblock_size, self.data_format, dtype=self.dtype,
                     name=f'{name}_dropblock')(x)

  def add(self, x, shortcut, name: str, relu: bool):
    x = keras.layers.Add(dtype=self.dtype, name=f'{name}_add')([x, shortcut])
    return keras.layers.ReLU(dtype=self.dtype, name=f'{name}_out')(x) if relu else x


BlockFn = Callable[[_Builder, object, int, int, bool, int, str, bool, float], object]


def _residual_block(b: _Builder, x, filters, strides, projection, group, name, pre_activation, drop_connect_rate):
  """Two 3x3 convs (ResNet-18/34). No DropBlock (as the reference).

  SE, ResNet-D and stochastic depth apply here too: the reference silently ignores them in these blocks.
  """
  shortcut = x
  if pre_activation:
    x = b.norm(x)
  if projection:
    shortcut = b.projection(x, filters, strides, name)
    if not pre_activation:
      shortcut = b.norm(shortcut, relu=False)
  x = b.conv(x, filters, 3, strides)
  x = b.norm(x)
  x = b.conv(x, filters, 3, 1)
  if not pre_activation:
    x = b.norm(x, relu=False, zero_gamma=True)
  x = b.branch_end(x, filters, drop_connect_rate, name)
  return b.add(x, shortcut, name, relu=not pre_activation)


def _bottleneck_block(b: _Builder, x, filters, strides, projection, group, name, pre_activation,
                      drop_connect_rate):
  """1x1 -> 3x3 (strided: v1.5) -> 1x1 x4, DropBlock after every BN and on the shortcut, then SE and stochastic
  depth on the branch (reference; in v2 too, where the reference silently drops SE and stochastic depth)."""
  shortcut = x
  if pre_activation:
    x = b.norm(x)
  if projection:
    shortcut = b.projection(x, 4 * filters, strides, name)
    if not pre_activation:
      shortcut = b.norm(shortcut, relu=False)
  shortcut = b.dropblock(shortcut, group, f'{name}_shortcut')
  x = b.conv(x, filters, 1, strides if b.stride_in_1x1 else 1)  # stride_in_1x1: ResNet v1 (Keras applications)
  x = b.dropblock(b.norm(x), group, f'{name}_conv1')
  x = b.conv(x, filters, 3, 1 if b.stride_in_1x1 else strides)
  x = b.dropblock(b.norm(x), group, f'{name}_conv2')
  x = b.conv(x, 4 * filters, 1, 1)
  if not pre_activation:
    x = b.dropblock(b.norm(x, relu=False, zero_gamma=True), group, f'{name}_conv3')
  x = b.branch_end(x, 4 * filters, drop_connect_rate, name)
  return b.add(x, shortcut, name, relu=not pre_activation)


_BLOCK_FNS: dict[str, BlockFn] = {'residual': _residual_block, 'bottleneck': _bottleneck_block}


def _parse_groups(dropblock_groups) -> tuple[int, ...]:
  """Accepts (3, 4), [3, 4], '3,4' or '' (the params file stores a string)."""
  if isinstance(dropblock_groups, str):
    dropblock_groups = [g for g in dropblock_groups.replace(' ', '').split(',') if g]
  groups = tuple(sorted({int(g) for g in (dropblock_groups or ())}))
  for g in groups:
    if g not in (1, 2, 3, 4):
      raise ValueError(f'dropblock_groups must be in 1..4, got {g}.')
  return groups


def check_norm_act_layer(norm_act_layer: str, pre_activation: bool) -> None:
  problem = norm_act_problem(norm_act_layer, pre_activation)
  if problem:
    raise ValueError(problem)


def _check_variant(variant: Variant, resnet_depth: int) -> None:
  for value, allowed, name in ((variant.stem_pool_padding, STEM_POOL_PADDINGS, 'stem_pool_padding'),
                               (variant.input_normalization, INPUT_NORMALIZATIONS, 'input_normalization'),
                               (variant.projection_shortcut, PROJECTION_SHORTCUTS, 'projection_shortcut')):
    if value not in allowed:
      raise ValueError(f'{name} must be one of {list(allowed)}, got {value!r}.')
  problem = variant_problem(resnet_depth, variant.stride_in_1x1)
  if problem:
    raise ValueError(problem + '.')


def check_se_ratio(se_ratio: float | None) -> float | None:
  """None or 0 turns squeeze-excitation off; otherwise it must be in (0, 1]."""
  if not se_ratio:
    return None
  if not 0.0 < float(se_ratio) <= 1.0:
    raise ValueError(f'se_ratio must be in (0, 1] (or None/0 for no squeeze-excitation), got {se_ratio!r}.')
  return float(se_ratio)


def check_drop_connect_rate(drop_connect_rate: float | None) -> float | None:
  """None or 0 turns stochastic depth off; otherwise it must be in (0, 1)."""
  if not drop_connect_rate:
    return None
  if not 0.0 < float(drop_connect_rate) < 1.0:
    raise ValueError(f'drop_connect_rate must be in [0, 1) (or None for no stochastic depth), '
                     f'got {drop_connect_rate!r}.')
  return float(drop_connect_rate)


def resnet(resnet_depth: int,
           num_classes: int,
           data_format: str = 'channels_last',
           bn_momentum: float = 0.9,
           bn_epsilon: float = 1e-5,
           pre_activation: bool = False,
           dropout_rate: float | None = None,
           dropblock_groups: Sequence[int] | str = (),
           dropblock_keep_prob: float | None = None,
           dropblock_size: int = 7,
           name: str = 'resnet',
           dtype_policy: str | keras.DTypePolicy | None = None,
           image_size: int | None = None,
           *,
           se_ratio: float | None = None,
           resnetd_shortcut: bool = False,
           use_resnetd_stem: bool = False,
           replace_stem_max_pool: bool = False,
           drop_connect_rate: float | None = None,
           norm_act_layer: str = 'bn_relu',
           stride_in_1x1: bool = False,
           stem_pool_padding: str = 'same',
           input_normalization: str = 'imagenet',
           projection_shortcut: str = 'every_group') -> keras.Model:
  """Builds the ResNet: NHWC 0..255 images -> float32 logits [N, num_classes]; call with ``training=``.

  Args:
    resnet_depth: one of SUPPORTED_DEPTHS.
    num_classes: classifier width.
    data_format: 'channels_last' or 'channels_first' (the input stays NHWC; the model transposes after
      normalising).
    bn_momentum, bn_epsilon: BatchNormalization settings (Keras momentum == TF1 decay); EvoNorm-B0's moving
      variance uses them too.
    pre_activation: ResNet v2 blocks.
    dropout_rate: dropout before the classifier; None or 0 = none.
    dropblock_groups: groups (1..4) with DropBlock; bottleneck depths only (the reference's residual block has none).
    dropblock_keep_prob: initial value of ``model.dropblock_keep_prob`` (the final keep prob of the schedule);
      required when dropblock_groups is set.
    dropblock_size: DropBlock block size.
    name: model name.
    dtype_policy: Keras dtype policy for the body ('mixed_bfloat16', 'mixed_float16', 'float32'); None = the
      global policy. Variables are float32 under the mixed policies.
    image_size: fixes the input's spatial size (static shapes); None accepts any square size >= 32.
    se_ratio: squeeze-excitation at the end of every block's residual branch, squeezing the block's output
      channels C to ``max(1, int(C * se_ratio))``; None or 0 = none, else in (0, 1].
    resnetd_shortcut: ResNet-D projection shortcut in strided blocks: 2x2/2 average pool, then a 1x1 conv.
    use_resnetd_stem: ResNet-D stem: 3x3 convs of 32 (stride 2), 32 and 64 filters instead of the 7x7/2 conv.
    replace_stem_max_pool: a 3x3/2 conv (64) + norm-activation instead of the stem's max pool.
    drop_connect_rate: stochastic depth on every residual branch, at ``drop_connect_rate_for_group`` (0.4x in
      group 1 up to 1x in group 4); training only; None or 0 = none.
    norm_act_layer: 'bn_relu', 'evonorm_b0' or 'evonorm_s0'; EvoNorm needs pre_activation=True.
    stride_in_1x1, stem_pool_padding, input_normalization, projection_shortcut: the ``Variant`` of pretrained
      weights from other frameworks (resnet/architectures.py); ``model.variant`` records them with bn_epsilon.
  """
  spec = architecture(resnet_depth)
  if data_format not in ('channels_last', 'channels_first'):
    raise ValueError(f"data_format must be 'channels_last' or 'channels_first', got {data_format!r}.")
  if num_classes <= 0:
    raise ValueError(f'num_classes must be positive, got {num_classes}.')
  check_norm_act_layer(norm_act_layer, pre_activation)
  variant = Variant(float(bn_epsilon), bool(stride_in_1x1), stem_pool_padding, input_normalization,
                    projection_shortcut)
  _check_variant(variant, resnet_depth)
  se_ratio = check_se_ratio(se_ratio)
  drop_connect_rate = check_drop_connect_rate(drop_connect_rate)
  groups = _parse_groups(dropblock_groups)
  keep_prob_var = None
  if groups:
    if spec.kind != 'bottleneck':
      raise ValueError(f'DropBlock (dropblock_groups={groups}) applies to bottleneck ResNets only (depth >= 50), '
                       f'as in the reference; got resnet_depth={resnet_depth}.')
    if dropblock_keep_prob is None or not 0.0 < dropblock_keep_prob <= 1.0:
      raise ValueError(f'dropblock_keep_prob must be in (0, 1] when dropblock_groups is set, '
                       f'got {dropblock_keep_prob!r}.')
    keep_prob_var = keras.Variable(float(dropblock_keep_prob), shape=(), dtype='float32', trainable=False,
                                   autocast=False, aggregation='only_first_replica', name=DROPBLOCK_VARIABLE_NAME)
  b = _Builder(data_format, bn_momentum, bn_epsilon, dtype_policy, keep_prob_var, groups, dropblock_size,
               norm_act_layer=norm_act_layer, se_ratio=se_ratio, resnetd_shortcut=resnetd_shortcut,
               stride_in_1x1=stride_in_1x1, projection_shortcut=projection_shortcut)
  block_fn = _BLOCK_FNS[spec.kind]

  images = keras.Input((image_size, image_size, 3), name='images')
  x = NormalizeImages(input_normalization, name='normalize')(images)
  if data_format == 'channels_first':
    x = keras.layers.Permute((3, 1, 2), dtype='float32', name='to_channels_first')(x)

  if use_resnetd_stem:
    x = b.norm(b.conv(x, RESNETD_STEM_FILTERS[0], 3, 2))
    x = b.norm(b.conv(x, RESNETD_STEM_FILTERS[1], 3, 1))
    x = b.conv(x, RESNETD_STEM_FILTERS[2], 3, 1)
  else:
    x = b.conv(x, STEM_FILTERS, 7, 2)
  if not pre_activation:
    x = b.norm(x)
  if replace_stem_max_pool:
    # The reference always uses BN-ReLU here; with EvoNorm that would put the model's only batch norm in the
    # stem, so the chosen norm_act_layer is used instead.
    x = b.norm(b.conv(x, STEM_FILTERS, 3, 2))
  else:
    if stem_pool_padding == 'symmetric':
      x = BorderPadding(data_format, dtype=b.dtype, name='initial_max_pool_pad')(x)
    x = keras.layers.MaxPooling2D(3, 2, padding='same' if stem_pool_padding == 'same' else 'valid',
                                  data_format=data_format, dtype=b.dtype, name='initial_max_pool')(x)

  for group, (filters, strides, blocks) in enumerate(zip(GROUP_FILTERS, GROUP_STRIDES, spec.blocks), start=1):
    b.stage = group
    rate = drop_connect_rate_for_group(drop_connect_rate, group)
    for block in range(blocks):
      projection = block == 0 and b.projects(x, filters * spec.expansion, strides)
      x = block_fn(b, x, filters, strides if block == 0 else 1, projection, group,
                   f'block_group{group}_block{block + 1}', pre_activation, rate)
  if pre_activation:
    x = b.norm(x)

  # float32 from here: the average over HxW and the logits keep full precision under mixed policies.
  x = keras.layers.GlobalAveragePooling2D(data_format=data_format, dtype='float32', name='final_avg_pool')(x)
  if dropout_rate:
    x = Dropout(dropout_rate, dtype='float32', name='dropout')(x)
  b.stage = len(GROUP_FILTERS) + 1
  dense = b._register(keras.layers.Dense(  # pylint: disable=protected-access
      num_classes, kernel_initializer=keras.initializers.RandomNormal(stddev=0.01), bias_initializer='zeros',
      dtype='float32', name='dense'))
  logits = dense(x)

  # Keras maps the functional graph recursively, about one Python frame per layer on the longest path: the
  # ResNet-RS depths (350, 420) go past Python's default limit of 1000 frames.
  limit = sys.getrecursionlimit()
  sys.setrecursionlimit(max(limit, 1000 + 16 * b.num_tf1_layers))
  try:
    model = keras.Model(images, logits, name=name)
  finally:
    sys.setrecursionlimit(limit)
  if keep_prob_var is not None:
    model.dropblock_keep_prob = keep_prob_var
  model.variant = variant  # a frozen dataclass: no checkpoint dependency
  options = [f'{k}={v}' for k, v in (('se_ratio', se_ratio), ('resnetd_shortcut', resnetd_shortcut),
                                      ('use_resnetd_stem', use_resnetd_stem),
                                      ('replace_stem_max_pool', replace_stem_max_pool),
                                      ('drop_connect_rate', drop_connect_rate)) if v]
  if norm_act_layer != 'bn_relu':
    options.append(norm_act_layer)
  options += [f'{k}={v}' for k, v in variant.params().items() if k != 'bn_epsilon' and v != getattr(Variant, k)]
  logging.info('Built ResNet-%d (%s, %s%s%s): %d convs, %d BNs, %d EvoNorms, %d weights.', resnet_depth, spec.kind,
               data_format, ', v2' if pre_activation else '', ''.join(', ' + o for o in options), b.num_convs,
               b.num_bns, b.num_evonorms, len(model.weights))
  return model


# --------------------------------------------------------------------------------------------------------------
# TF1 names, weight decay, warm start helpers.

_TF1_LAYER_TYPES = (keras.layers.Conv2D, keras.layers.BatchNormalization, EvoNorm, keras.layers.Dense)


def _creation_order(layer: keras.layers.Layer) -> tuple[float, int]:
  """Sort key giving the reference's creation order.

  model.layers is topological, which puts a projection shortcut after its main path. resnet() stamps each layer
  with its creation rank; without the stamp (a model rebuilt from a config) the TF1 names' counters give the
  order for v1 without squeeze-excitation: conv_i, then batch_normalization_i / evonorm_i; dense last.
  """
  rank = getattr(layer, '_tf1_creation_rank', None)
  if rank is not None:
    return (float(rank), 0)
  if isinstance(layer, keras.layers.Dense):
    return (float('inf'), 0)
  _, _, suffix = layer.name.rpartition('_') if layer.name[-1].isdigit() else ('', '', '0')
  return (int(suffix), 0 if isinstance(layer, keras.layers.Conv2D) else 1)


def tf1_variable_map(model: keras.Model) -> dict[str, keras.Variable]:
  """TF1 reference name -> model variable, in creation order, covering every TF1-style weight exactly once.

  Names come from the layer names given at build time (``conv2d_7/kernel``, ``conv2d_8/bias`` (squeeze-excitation),
  ``batch_normalization_7/gamma``, ``evonorm_3/v``, ``dense/bias``). ``dropblock_keep_prob`` (and the RNG states of
  Dropout and stochastic depth, which are not model weights) are not TF1 variables and are left out.
  Raises ValueError if any other weight of the model is not covered, so a layout change cannot go unnoticed.
  """
  mapping: dict[str, keras.Variable] = {}
  layers = sorted((layer for layer in model.layers if isinstance(layer, _TF1_LAYER_TYPES)), key=_creation_order)
  for layer in layers:
    for variable in layer.weights:
      key = f'{layer.name}/{variable.name}'
      if key in mapping:
        raise ValueError(f'Duplicate TF1 name {key}.')
      mapping[key] = variable
  covered = {id(v) for v in mapping.values()}
  missing = [v.path for v in model.weights if id(v) not in covered and v.name != DROPBLOCK_VARIABLE_NAME]
  if missing:
    raise ValueError(f'Model weights without a TF1 name: {missing}')
  return mapping


def is_classifier_head(tf1_name: str) -> bool:
  """True for the classifier (``dense/*``), which warm start skips when the class count differs."""
  return tf1_name.startswith('dense/')


def is_batch_norm(tf1_name: str) -> bool:
  return 'batch_normalization' in tf1_name


def is_normalization(tf1_name: str) -> bool:
  """Batch norm or EvoNorm: the reference's weight-decay skip list (names containing either)."""
  return is_batch_norm(tf1_name) or 'evonorm' in tf1_name


def batch_norm_variables(model: keras.Model) -> list[keras.Variable]:
  """All BN variables (gamma, beta, moving stats)."""
  return [v for k, v in tf1_variable_map(model).items() if is_batch_norm(k)]


def weight_decay_variables(model: keras.Model) -> list[keras.Variable]:
  """The reference's L2 set: every trainable variable whose TF1 name has neither ``batch_normalization`` nor
  ``evonorm``.

  That is all conv kernels, the squeeze-excitation conv biases, ``dense/kernel`` and ``dense/bias`` (biases are
  decayed too, as in the reference).
  """
  return [v for k, v in tf1_variable_map(model).items() if v.trainable and not is_normalization(k)]


# --------------------------------------------------------------------------------------------------------------
# Analytic size and cost, from ARCHITECTURES and the options alone.


class ConvShape(NamedTuple):
  kernel: int
  cin: int
  cout: int
  stride: int
  reduction: int  # output stride w.r.t. the image: the output map is ceil(image_size / reduction) wide
  bias: bool = False  # squeeze-excitation convs have one
  pooled: bool = False  # runs on the 1x1 globally pooled map (squeeze-excitation)


class NormShape(NamedTuple):
  channels: int
  activation: bool  # False: affine only (post-activation projection and last norm of a block)


def layer_plan(resnet_depth: int, pre_activation: bool = False, *, se_ratio: float | None = None,
               resnetd_shortcut: bool = False, use_resnetd_stem: bool = False,
               replace_stem_max_pool: bool = False, stride_in_1x1: bool = False,
               projection_shortcut: str = 'every_group') -> list[ConvShape | NormShape]:
  """Every conv and norm-activation layer in creation order, as resnet() creates them."""
  spec = architecture(resnet_depth)
  se_ratio = check_se_ratio(se_ratio)
  plan: list[ConvShape | NormShape] = []
  if use_resnetd_stem:
    (f1, f2, f3) = RESNETD_STEM_FILTERS
    plan += [ConvShape(3, 3, f1, 2, 2), NormShape(f1, True), ConvShape(3, f1, f2, 1, 2), NormShape(f2, True),
             ConvShape(3, f2, f3, 1, 2)]
    cin = f3
  else:
    plan.append(ConvShape(7, 3, STEM_FILTERS, 2, 2))
    cin = STEM_FILTERS
  if not pre_activation:
    plan.append(NormShape(cin, True))
  if replace_stem_max_pool:
    plan += [ConvShape(3, cin, STEM_FILTERS, 2, 4), NormShape(STEM_FILTERS, True)]
    cin = STEM_FILTERS
  reduction = 4  # the stem max pool (or its replacement conv) halves again
  for filters, group_stride, blocks in zip(GROUP_FILTERS, GROUP_STRIDES, spec.blocks):
    cout = filters * spec.expansion
    for block in range(blocks):
      s = group_stride if block == 0 else 1
      out = reduction * s
      if pre_activation:
        plan.append(NormShape(cin, True))
      if block == 0 and (projection_shortcut == 'every_group' or s != 1 or cin != cout):
        plan.append(ConvShape(1, cin, cout, 1 if resnetd_shortcut and s == 2 else s, out))
        if not pre_activation:
          plan.append(NormShape(cout, False))
      if spec.kind == 'bottleneck':
        first = ConvShape(1, cin, filters, s, out) if stride_in_1x1 else ConvShape(1, cin, filters, 1, reduction)
        plan += [first, NormShape(filters, True), ConvShape(3, filters, filters, 1 if stride_in_1x1 else s, out),
                 NormShape(filters, True), ConvShape(1, filters, cout, 1, out)]
      else:
        plan += [ConvShape(3, cin, filters, s, out), NormShape(filters, True), ConvShape(3, filters, filters, 1, out)]
      if not pre_activation:
        plan.append(NormShape(cout, False))
      if se_ratio:
        squeezed = se_filters(cout, se_ratio)
        plan += [ConvShape(1, cout, squeezed, 1, out, bias=True, pooled=True),
                 ConvShape(1, squeezed, cout, 1, out, bias=True, pooled=True)]
      cin, reduction = cout, out
  if pre_activation:
    plan.append(NormShape(cin, True))
  return plan


def conv_shapes(resnet_depth: int, **options) -> list[ConvShape]:
  """Every conv in creation order (== TF1 ``conv2d[_i]`` order). options: layer_plan's keyword arguments."""
  return [c for c in layer_plan(resnet_depth, **options) if isinstance(c, ConvShape)]


def bn_channels(resnet_depth: int, pre_activation: bool = False, **options) -> list[int]:
  """Channel count of every norm layer (BN or EvoNorm) in creation order."""
  return [n.channels for n in layer_plan(resnet_depth, pre_activation, **options) if isinstance(n, NormShape)]


def num_features(resnet_depth: int) -> int:
  """Width of the pooled features fed to the classifier (512 or 2048)."""
  spec = architecture(resnet_depth)
  return GROUP_FILTERS[-1] * spec.expansion


def _norm_params(norm: NormShape, norm_act_layer: str) -> tuple[int, int]:
  """(trainable, statistics) of one norm layer: BN gamma, beta + moving mean, variance; EvoNorm beta, gamma
  (+ v when it has the nonlinearity) + B0's moving variance."""
  c = norm.channels
  if norm_act_layer == 'bn_relu':
    return 2 * c, 2 * c
  if not norm.activation:
    return 2 * c, 0
  return 3 * c, (c if norm_act_layer == 'evonorm_b0' else 0)


def count_params(resnet_depth: int, num_classes: int = 1000, pre_activation: bool = False,
                 include_bn_statistics: bool = False, *, norm_act_layer: str = 'bn_relu', **options) -> int:
  """Parameters: conv kernels (+ SE biases) + norm parameters (+ their moving statistics if asked) + dense.

  options: layer_plan's keyword arguments (se_ratio, resnetd_shortcut, use_resnetd_stem, replace_stem_max_pool,
  stride_in_1x1, projection_shortcut).
  """
  check_norm_act_layer(norm_act_layer, pre_activation)
  total = num_features(resnet_depth) * num_classes + num_classes
  for layer in layer_plan(resnet_depth, pre_activation, **options):
    if isinstance(layer, ConvShape):
      total += layer.kernel * layer.kernel * layer.cin * layer.cout + (layer.cout if layer.bias else 0)
    else:
      trainable, statistics = _norm_params(layer, norm_act_layer)
      total += trainable + (statistics if include_bn_statistics else 0)
  return total


def feature_size(image_size: int, reduction: int) -> int:
  """Map width at an output stride: fixed padding + VALID and SAME both give ceil(n / stride) per layer."""
  return -(-image_size // reduction)


def count_flops(resnet_depth: int, image_size: int = 224, num_classes: int = 1000, **options) -> int:
  """Forward FLOPs for one image, convs + dense only, FLOPs = 2 x multiply-adds (norms, ReLU, pool, adds, biases
  and the SE gating ignored). options: layer_plan's keyword arguments (pre_activation changes no conv)."""
  options.pop('pre_activation', None)
  macs = sum(c.kernel * c.kernel * c.cin * c.cout * (1 if c.pooled else feature_size(image_size, c.reduction) ** 2)
             for c in conv_shapes(resnet_depth, **options))
  return 2 * (macs + num_features(resnet_depth) * num_classes)
