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

Batch norm is ``FusedBatchNormalization``: Keras' BN semantics and variables computed by TF's fused kernel, because
Keras 3's unfused BN was ~1/3 of a CPU training step.

Known differences from the reference: Keras BN updates the moving variance with the biased batch variance (TF1's
fused BN applies Bessel's correction, a factor n/(n-1) with n = batch*H*W >= thousands, i.e. < 0.1%); the head
Dropout (if any) keeps a Keras RNG state variable that is not a TF1 variable; the dense layer computes in float32.
"""
from typing import Callable, NamedTuple, Sequence

from absl import logging
import keras
import tensorflow as tf

MEAN_RGB = (0.485 * 255, 0.456 * 255, 0.406 * 255)
STDDEV_RGB = (0.229 * 255, 0.224 * 255, 0.225 * 255)

GROUP_FILTERS = (64, 128, 256, 512)
GROUP_STRIDES = (1, 2, 2, 2)
STEM_FILTERS = 64
DROPBLOCK_VARIABLE_NAME = 'dropblock_keep_prob'


class BlockSpec(NamedTuple):
  kind: str                      # 'residual' (two 3x3) or 'bottleneck' (1x1-3x3-1x1)
  expansion: int                 # output channels = expansion * group filters
  blocks: tuple[int, int, int, int]


# The only place depths are defined: block type and blocks per group (reference resnet_model.py model_params).
_RESIDUAL = ('residual', 1)
_BOTTLENECK = ('bottleneck', 4)
ARCHITECTURES: dict[int, BlockSpec] = {
    18: BlockSpec(*_RESIDUAL, (2, 2, 2, 2)),
    34: BlockSpec(*_RESIDUAL, (3, 4, 6, 3)),
    50: BlockSpec(*_BOTTLENECK, (3, 4, 6, 3)),
    101: BlockSpec(*_BOTTLENECK, (3, 4, 23, 3)),
    152: BlockSpec(*_BOTTLENECK, (3, 8, 36, 3)),
    200: BlockSpec(*_BOTTLENECK, (3, 24, 36, 3)),
}
SUPPORTED_DEPTHS = tuple(sorted(ARCHITECTURES))


def architecture(resnet_depth: int) -> BlockSpec:
  """The block spec of a depth; ValueError names the supported depths (params validation shows it to users)."""
  try:
    return ARCHITECTURES[int(resnet_depth)]
  except (KeyError, TypeError, ValueError):
    raise ValueError(f'Unsupported resnet_depth {resnet_depth!r}; supported depths: '
                     f'{", ".join(map(str, SUPPORTED_DEPTHS))}.') from None


def group_keep_prob(keep_prob, group: int):
  """Per-group DropBlock keep prob (reference §1.4 step 4): later groups drop more, group 4 uses kp itself."""
  if group not in (1, 2, 3, 4):
    raise ValueError(f'DropBlock group must be in 1..4, got {group!r}.')
  return 1.0 - (1.0 - keep_prob) / 4.0 ** (4 - group)


def scheduled_dropblock_keep_prob(step, train_steps, final_keep_prob: float) -> tf.Tensor:
  """Base keep prob kp(t) = 1 - (step / train_steps) * (1 - final): no drop at step 0, ``final`` at the end.

  The training loop assigns this to ``model.dropblock_keep_prob`` every step.
  """
  progress = tf.cast(step, tf.float32) / tf.cast(tf.maximum(train_steps, 1), tf.float32)
  return 1.0 - progress * (1.0 - final_keep_prob)


# --------------------------------------------------------------------------------------------------------------
# Layers without TF1 variables.


class NormalizeImages(keras.layers.Layer):
  """(pixels - MEAN_RGB) / STDDEV_RGB on NHWC 0..255 input, in float32 (bf16 cannot hold 0..255 exactly enough)."""

  def __init__(self, **kwargs):
    kwargs['dtype'] = 'float32'
    super().__init__(**kwargs)

  def call(self, images):
    images = tf.cast(images, tf.float32)
    return (images - tf.constant(MEAN_RGB, tf.float32)) / tf.constant(STDDEV_RGB, tf.float32)


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

  def call(self, inputs, training=None, mask=None):
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


# --------------------------------------------------------------------------------------------------------------
# Builder: owns the TF1 name counters and the shared layer settings.


class _Builder:
  """Creates layers in reference order, naming convs/BNs ``conv2d[_i]`` / ``batch_normalization[_i]``."""

  def __init__(self, data_format: str, bn_momentum: float, bn_epsilon: float, dtype_policy,
               dropblock_keep_prob_var, dropblock_groups: Sequence[int], dropblock_size: int):
    self.data_format = data_format
    self.channel_axis = -1 if data_format == 'channels_last' else 1
    self.bn_momentum = bn_momentum
    self.bn_epsilon = bn_epsilon
    self.dtype = dtype_policy
    self.keep_prob_var = dropblock_keep_prob_var
    self.dropblock_groups = frozenset(dropblock_groups)
    self.dropblock_size = dropblock_size
    self.num_convs = 0
    self.num_bns = 0

  @staticmethod
  def _tf1_name(base: str, index: int) -> str:
    return base if index == 0 else f'{base}_{index}'

  def conv(self, x, filters: int, kernel_size: int, strides: int):
    """conv2d_fixed_padding: explicit symmetric padding + VALID when strided, SAME otherwise; no bias."""
    name = self._tf1_name('conv2d', self.num_convs)
    self.num_convs += 1
    if strides > 1 and kernel_size > 1:
      pad_total = kernel_size - 1
      pad_beg = pad_total // 2
      pad = (pad_beg, pad_total - pad_beg)
      x = keras.layers.ZeroPadding2D((pad, pad), data_format=self.data_format, dtype=self.dtype,
                                     name=f'{name}_pad')(x)
    return keras.layers.Conv2D(
        filters, kernel_size, strides=strides, padding='same' if strides == 1 else 'valid', use_bias=False,
        kernel_initializer=keras.initializers.VarianceScaling(1.0, 'fan_in', 'truncated_normal'),
        data_format=self.data_format, dtype=self.dtype, name=name)(x)

  def bn(self, x, relu: bool = True, zero_gamma: bool = False):
    name = self._tf1_name('batch_normalization', self.num_bns)
    self.num_bns += 1
    x = FusedBatchNormalization(
        axis=self.channel_axis, momentum=self.bn_momentum, epsilon=self.bn_epsilon,
        gamma_initializer='zeros' if zero_gamma else 'ones', dtype=self.dtype, name=name)(x)
    if relu:
      x = keras.layers.ReLU(dtype=self.dtype, name=f'{name}_relu')(x)
    return x

  def dropblock(self, x, group: int, name: str):
    if group not in self.dropblock_groups:
      return x
    return DropBlock(self.keep_prob_var, group, self.dropblock_size, self.data_format, dtype=self.dtype,
                     name=f'{name}_dropblock')(x)

  def add(self, x, shortcut, name: str, relu: bool):
    x = keras.layers.Add(dtype=self.dtype, name=f'{name}_add')([x, shortcut])
    return keras.layers.ReLU(dtype=self.dtype, name=f'{name}_out')(x) if relu else x


BlockFn = Callable[[_Builder, object, int, int, bool, int, str, bool], object]


def _residual_block(b: _Builder, x, filters, strides, projection, group, name, pre_activation):
  """Two 3x3 convs (ResNet-18/34). The reference applies no DropBlock here."""
  shortcut = x
  if pre_activation:
    x = b.bn(x)
  if projection:
    shortcut = b.conv(x, filters, 1, strides)
    if not pre_activation:
      shortcut = b.bn(shortcut, relu=False)
  x = b.conv(x, filters, 3, strides)
  x = b.bn(x)
  x = b.conv(x, filters, 3, 1)
  if pre_activation:
    return b.add(x, shortcut, name, relu=False)
  x = b.bn(x, relu=False, zero_gamma=True)
  return b.add(x, shortcut, name, relu=True)


def _bottleneck_block(b: _Builder, x, filters, strides, projection, group, name, pre_activation):
  """1x1 -> 3x3 (strided: v1.5) -> 1x1 x4, DropBlock after every BN and on the shortcut (reference)."""
  shortcut = x
  if pre_activation:
    x = b.bn(x)
  if projection:
    shortcut = b.conv(x, 4 * filters, 1, strides)
    if not pre_activation:
      shortcut = b.bn(shortcut, relu=False)
  shortcut = b.dropblock(shortcut, group, f'{name}_shortcut')
  x = b.conv(x, filters, 1, 1)
  x = b.dropblock(b.bn(x), group, f'{name}_conv1')
  x = b.conv(x, filters, 3, strides)
  x = b.dropblock(b.bn(x), group, f'{name}_conv2')
  x = b.conv(x, 4 * filters, 1, 1)
  if pre_activation:
    return b.add(x, shortcut, name, relu=False)
  x = b.dropblock(b.bn(x, relu=False, zero_gamma=True), group, f'{name}_conv3')
  return b.add(x, shortcut, name, relu=True)


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
           image_size: int | None = None) -> keras.Model:
  """Builds the ResNet: NHWC 0..255 images -> float32 logits [N, num_classes]; call with ``training=``.

  Args:
    resnet_depth: one of SUPPORTED_DEPTHS.
    num_classes: classifier width.
    data_format: 'channels_last' or 'channels_first' (the input stays NHWC; the model transposes after
      normalising).
    bn_momentum, bn_epsilon: BatchNormalization settings (Keras momentum == TF1 decay).
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
  """
  spec = architecture(resnet_depth)
  if data_format not in ('channels_last', 'channels_first'):
    raise ValueError(f"data_format must be 'channels_last' or 'channels_first', got {data_format!r}.")
  if num_classes <= 0:
    raise ValueError(f'num_classes must be positive, got {num_classes}.')
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
  b = _Builder(data_format, bn_momentum, bn_epsilon, dtype_policy, keep_prob_var, groups, dropblock_size)
  block_fn = _BLOCK_FNS[spec.kind]

  images = keras.Input((image_size, image_size, 3), name='images')
  x = NormalizeImages(name='normalize')(images)
  if data_format == 'channels_first':
    x = keras.layers.Permute((3, 1, 2), dtype='float32', name='to_channels_first')(x)

  x = b.conv(x, STEM_FILTERS, 7, 2)
  if not pre_activation:
    x = b.bn(x)
  x = keras.layers.MaxPooling2D(3, 2, padding='same', data_format=data_format, dtype=b.dtype,
                                name='initial_max_pool')(x)

  for group, (filters, strides, blocks) in enumerate(zip(GROUP_FILTERS, GROUP_STRIDES, spec.blocks), start=1):
    for block in range(blocks):
      x = block_fn(b, x, filters, strides if block == 0 else 1, block == 0, group,
                   f'block_group{group}_block{block + 1}', pre_activation)
  if pre_activation:
    x = b.bn(x)

  # float32 from here: the average over HxW and the logits keep full precision under mixed policies.
  x = keras.layers.GlobalAveragePooling2D(data_format=data_format, dtype='float32', name='final_avg_pool')(x)
  if dropout_rate:
    x = keras.layers.Dropout(dropout_rate, dtype='float32', name='dropout')(x)
  logits = keras.layers.Dense(num_classes, kernel_initializer=keras.initializers.RandomNormal(stddev=0.01),
                              bias_initializer='zeros', dtype='float32', name='dense')(x)

  model = keras.Model(images, logits, name=name)
  if keep_prob_var is not None:
    model.dropblock_keep_prob = keep_prob_var
  logging.info('Built ResNet-%d (%s, %s%s): %d convs, %d BNs, %d weights.', resnet_depth, spec.kind, data_format,
               ', v2' if pre_activation else '', b.num_convs, b.num_bns, len(model.weights))
  return model


# --------------------------------------------------------------------------------------------------------------
# TF1 names, weight decay, warm start helpers.

_TF1_LAYER_TYPES = (keras.layers.Conv2D, keras.layers.BatchNormalization, keras.layers.Dense)


def _creation_order(layer: keras.layers.Layer) -> tuple[float, int]:
  """Sort key giving the reference's creation order for v1 (conv_i, then batch_normalization_i; dense last).

  model.layers is topological, which puts a projection shortcut after its main path; our own names carry the
  creation counter, so read it back.
  """
  if isinstance(layer, keras.layers.Dense):
    return (float('inf'), 0)
  _, _, suffix = layer.name.rpartition('_') if layer.name[-1].isdigit() else ('', '', '0')
  return (int(suffix), 0 if isinstance(layer, keras.layers.Conv2D) else 1)


def tf1_variable_map(model: keras.Model) -> dict[str, keras.Variable]:
  """TF1 reference name -> model variable, in creation order, covering every TF1-style weight exactly once.

  Names come from the layer names given at build time (``conv2d_7/kernel``, ``batch_normalization_7/gamma``,
  ``dense/bias``). ``dropblock_keep_prob`` (and a head Dropout's RNG state) are not TF1 variables and are left out.
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


def batch_norm_variables(model: keras.Model) -> list[keras.Variable]:
  """All BN variables (gamma, beta, moving stats)."""
  return [v for k, v in tf1_variable_map(model).items() if is_batch_norm(k)]


def weight_decay_variables(model: keras.Model) -> list[keras.Variable]:
  """The reference's L2 set: every trainable variable whose TF1 name lacks ``batch_normalization``.

  That is all conv kernels, ``dense/kernel`` and ``dense/bias`` (the bias is decayed too, as in the reference).
  """
  return [v for k, v in tf1_variable_map(model).items() if v.trainable and not is_batch_norm(k)]


# --------------------------------------------------------------------------------------------------------------
# Analytic size and cost, from ARCHITECTURES alone.


class ConvShape(NamedTuple):
  kernel: int
  cin: int
  cout: int
  stride: int
  reduction: int  # output stride w.r.t. the image: the output map is ceil(image_size / reduction) wide


def conv_shapes(resnet_depth: int) -> list[ConvShape]:
  """Every conv in creation order (== TF1 ``conv2d[_i]`` order)."""
  spec = architecture(resnet_depth)
  convs = [ConvShape(7, 3, STEM_FILTERS, 2, 2)]
  cin, reduction = STEM_FILTERS, 4  # the stem max pool halves again
  for filters, group_stride, blocks in zip(GROUP_FILTERS, GROUP_STRIDES, spec.blocks):
    cout = filters * spec.expansion
    for block in range(blocks):
      s = group_stride if block == 0 else 1
      if block == 0:
        convs.append(ConvShape(1, cin, cout, s, reduction * s))
      if spec.kind == 'bottleneck':
        convs += [ConvShape(1, cin, filters, 1, reduction), ConvShape(3, filters, filters, s, reduction * s),
                  ConvShape(1, filters, cout, 1, reduction * s)]
      else:
        convs += [ConvShape(3, cin, filters, s, reduction * s), ConvShape(3, filters, filters, 1, reduction * s)]
      cin, reduction = cout, reduction * s
  return convs


def bn_channels(resnet_depth: int, pre_activation: bool = False) -> list[int]:
  """Channel count of every BN in creation order."""
  convs = conv_shapes(resnet_depth)
  if not pre_activation:
    return [c.cout for c in convs]
  # v2: no BN after the stem or the projection; one on each block input and between main-path convs; a final one.
  spec = architecture(resnet_depth)
  per_block = 3 if spec.kind == 'bottleneck' else 2
  channels, i = [], 1
  for blocks in spec.blocks:
    for block in range(blocks):
      if block == 0:
        i += 1  # projection
      main = convs[i:i + per_block]
      channels += [main[0].cin] + [c.cout for c in main[:-1]]
      i += per_block
  return channels + [convs[-1].cout]


def num_features(resnet_depth: int) -> int:
  """Width of the pooled features fed to the classifier (512 or 2048)."""
  return conv_shapes(resnet_depth)[-1].cout


def count_params(resnet_depth: int, num_classes: int = 1000, pre_activation: bool = False,
                 include_bn_statistics: bool = False) -> int:
  """Parameters: conv kernels + BN gamma/beta (+ moving mean/var if asked) + dense kernel and bias."""
  conv = sum(c.kernel * c.kernel * c.cin * c.cout for c in conv_shapes(resnet_depth))
  bn = (4 if include_bn_statistics else 2) * sum(bn_channels(resnet_depth, pre_activation))
  return conv + bn + num_features(resnet_depth) * num_classes + num_classes


def feature_size(image_size: int, reduction: int) -> int:
  """Map width at an output stride: fixed padding + VALID and SAME both give ceil(n / stride) per layer."""
  return -(-image_size // reduction)


def count_flops(resnet_depth: int, image_size: int = 224, num_classes: int = 1000) -> int:
  """Forward FLOPs for one image, convs + dense only, FLOPs = 2 x multiply-adds (BN, ReLU, pool, adds ignored)."""
  macs = sum(c.kernel * c.kernel * c.cin * c.cout * feature_size(image_size, c.reduction) ** 2
             for c in conv_shapes(resnet_depth))
  return 2 * (macs + num_features(resnet_depth) * num_classes)
