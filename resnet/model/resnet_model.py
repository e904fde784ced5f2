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

- The ``Variant`` options (params/architectures.py; all off by default) compute as pretrained weights of other
  frameworks were trained: the stride on a stage's first 1x1 (Keras' ResNet v1), a stem max pool over a one-pixel
  border on every side (``BorderPadding``: Keras, torchvision, timm), caffe BGR input normalisation (Keras), no
  group-1 projection where shapes allow (torchvision's ResNet-18/34); ``model.variant`` records them, with the BN
  epsilon, for the warm start to check.

Batch norm is ``FusedBatchNormalization``: Keras' BN semantics and variables computed by TF's fused kernel, because
Keras 3's unfused BN was ~1/3 of a CPU training step.

Here: the builder (``resnet(config, dtype_policy)``: the stem, the block groups, the head). It reads a
``params.model_config.ModelConfig``, whose construction already checked every rule between the options (the params
table checks each option's own range), so it checks nothing again. Beside it in ``resnet/model/``: ``layers`` (the
custom layers), ``cpu_kernels`` (which CPU kernels 'auto' picks), ``tf1_names`` (TF1 names, and the head,
weight-decay and BN variable sets chosen by them), ``plan`` (parameter and FLOP counts without building);
``params/architectures.py`` (depths and options, pure Python).

Known differences from the reference: Keras BN updates the moving variance with the biased batch variance (TF1's
fused BN applies Bessel's correction, a factor n/(n-1) with n = batch*H*W >= thousands, i.e. < 0.1%); the head
Dropout (if any) keeps a Keras RNG state variable that is not a TF1 variable; the dense layer computes in float32.
"""
import sys
from typing import Callable, NamedTuple, Optional

from absl import logging
import keras

from params.architectures import Variant
from params.model_config import ModelConfig
from resnet.model import cpu_kernels
from resnet.model.layers import (  # pylint: disable=g-multiple-import
    DROPBLOCK_VARIABLE_NAME, GROUP_FILTERS, GROUP_STRIDES, RESNETD_STEM_FILTERS, STAGE_ATTRIBUTE, STEM_FILTERS,
    BorderPadding, Conv2D, DropBlock, Dropout, EvoNorm, FusedBatchNormalization, NormalizeImages, ResidualAddReLU,
    StochasticDepth, drop_connect_rate_for_group, se_filters)


# --------------------------------------------------------------------------------------------------------------
# Builder: owns the TF1 name counters and the shared layer settings.


class _Builder:
  """Creates layers in reference order, named with their TF1 names (``conv2d[_i]``, ``batch_normalization[_i]``,
  ``evonorm[_i]``) and stamped with their creation rank, which orders ``tf1_variable_map`` like the reference."""

  def __init__(self, config: ModelConfig, dtype_policy, keep_prob_var, kernels: cpu_kernels.Kernels):
    self.config = config
    self.dtype = dtype_policy
    self.keep_prob_var = keep_prob_var
    self.kernels = kernels
    self.channel_axis = -1 if config.data_format == 'channels_last' else 1
    self.num_convs = 0
    self.num_bns = 0
    self.num_evonorms = 0
    self.num_tf1_layers = 0
    self.stage = 0  # 0 stem, 1-4 block groups, 5 head: stamped on each layer (fine_tuning.py's layer decay)

  @staticmethod
  def _tf1_name(base: str, index: int) -> str:
    return base if index == 0 else f'{base}_{index}'

  def register(self, layer: keras.layers.Layer) -> keras.layers.Layer:
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
      x = keras.layers.ZeroPadding2D((pad, pad), data_format=self.config.data_format, dtype=self.dtype,
                                     name=f'{name}_pad')(x)
    return self.register(Conv2D(
        filters, kernel_size, strides=strides, padding='same' if strides == 1 else 'valid', use_bias=use_bias,
        kernel_initializer=keras.initializers.VarianceScaling(1.0, 'fan_in', 'truncated_normal'),
        bias_initializer='zeros', data_format=self.config.data_format, dtype=self.dtype, name=name,
        matmul_filter_grad=self.kernels.matmul_filter_grad))(x)

  def norm(self, x, relu: bool = True, zero_gamma: bool = False):
    """The normalisation-activation layer: BN (+ ReLU), or an EvoNorm (``relu=False``: its affine part only)."""
    if self.config.norm_act_layer == 'bn_relu':
      return self.bn(x, relu=relu, zero_gamma=zero_gamma)
    name = self._tf1_name('evonorm', self.num_evonorms)
    self.num_evonorms += 1
    return self.register(EvoNorm(
        self.config.norm_act_layer[-2:], nonlinearity=relu, data_format=self.config.data_format,
        momentum=self.config.bn_momentum, epsilon=self.config.bn_epsilon, zero_gamma=zero_gamma, dtype=self.dtype,
        name=name))(x)

  def bn(self, x, relu: bool = True, zero_gamma: bool = False):
    name = self._tf1_name('batch_normalization', self.num_bns)
    self.num_bns += 1
    x = self.register(FusedBatchNormalization(
        axis=self.channel_axis, momentum=self.config.bn_momentum, epsilon=self.config.bn_epsilon,
        gamma_initializer='zeros' if zero_gamma else 'ones', dtype=self.dtype, name=name))(x)
    if relu:
      x = keras.layers.ReLU(dtype=self.dtype, name=f'{name}_relu')(x)
    return x

  def projects(self, x, channels: int, strides: int) -> bool:
    """Whether a group's first block has a projection shortcut: always (the reference), or only where the identity
    cannot carry the input ('shape_change': torchvision and timm, whose ResNet-18/34 group 1 has none)."""
    return (self.config.projection_shortcut == 'every_group' or strides != 1
            or x.shape[self.channel_axis] != channels)

  def projection(self, x, filters: int, strides: int, name: str):
    """1x1 projection shortcut; ResNet-D (strided blocks only): 2x2/2 average pool, then a stride-1 1x1 conv."""
    if self.config.resnetd_shortcut and strides == 2:
      x = keras.layers.AveragePooling2D(2, 2, padding='same', data_format=self.config.data_format, dtype=self.dtype,
                                        name=f'{name}_shortcut_avg_pool')(x)
      strides = 1
    return self.conv(x, filters, 1, strides)

  def squeeze_excite(self, x, channels: int, name: str):
    """Squeeze-excitation: spatial mean -> 1x1 conv (+bias) to se_filters -> ReLU -> 1x1 conv (+bias) -> sigmoid."""
    if not self.config.se_ratio:
      return x
    s = keras.layers.GlobalAveragePooling2D(data_format=self.config.data_format, keepdims=True, dtype=self.dtype,
                                            name=f'{name}_se_squeeze')(x)
    s = self.conv(s, se_filters(channels, self.config.se_ratio), 1, 1, use_bias=True)
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
    if group not in self.config.dropblock_groups:
      return x
    return DropBlock(self.keep_prob_var, group, self.config.dropblock_size, self.config.data_format,
                     dtype=self.dtype, name=f'{name}_dropblock')(x)

  def add(self, x, shortcut, name: str, relu: bool):
    if relu and self.kernels.xla_add_relu:  # two layers as before, so every layer keeps its position in checkpoints
      x = ResidualAddReLU(dtype=self.dtype, name=f'{name}_add')([x, shortcut])
      return keras.layers.Identity(dtype=self.dtype, name=f'{name}_out')(x)
    x = keras.layers.Add(dtype=self.dtype, name=f'{name}_add')([x, shortcut])
    return keras.layers.ReLU(dtype=self.dtype, name=f'{name}_out')(x) if relu else x


class Block(NamedTuple):
  """One residual block's place in the network."""
  filters: int
  strides: int
  projection: bool        # a projection shortcut (the group's first block, where it projects)
  group: int              # 1..4
  name: str
  drop_connect_rate: float


def _residual_block(b: _Builder, x, block: Block):
  """Two 3x3 convs (ResNet-18/34). No DropBlock (as the reference).

  SE, ResNet-D and stochastic depth apply here too: the reference silently ignores them in these blocks.
  """
  pre_activation = b.config.pre_activation
  shortcut = x
  if pre_activation:
    x = b.norm(x)
  if block.projection:
    shortcut = b.projection(x, block.filters, block.strides, block.name)
    if not pre_activation:
      shortcut = b.norm(shortcut, relu=False)
  x = b.conv(x, block.filters, 3, block.strides)
  x = b.norm(x)
  x = b.conv(x, block.filters, 3, 1)
  if not pre_activation:
    x = b.norm(x, relu=False, zero_gamma=True)
  x = b.branch_end(x, block.filters, block.drop_connect_rate, block.name)
  return b.add(x, shortcut, block.name, relu=not pre_activation)


def _bottleneck_block(b: _Builder, x, block: Block):
  """1x1 -> 3x3 (strided: v1.5) -> 1x1 x4, DropBlock after every BN and on the shortcut, then SE and stochastic
  depth on the branch (reference; in v2 too, where the reference silently drops SE and stochastic depth)."""
  pre_activation, stride_in_1x1 = b.config.pre_activation, b.config.stride_in_1x1
  filters, strides, group, name = block.filters, block.strides, block.group, block.name
  shortcut = x
  if pre_activation:
    x = b.norm(x)
  if block.projection:
    shortcut = b.projection(x, 4 * filters, strides, name)
    if not pre_activation:
      shortcut = b.norm(shortcut, relu=False)
  shortcut = b.dropblock(shortcut, group, f'{name}_shortcut')
  x = b.conv(x, filters, 1, strides if stride_in_1x1 else 1)  # stride_in_1x1: ResNet v1 (Keras applications)
  x = b.dropblock(b.norm(x), group, f'{name}_conv1')
  x = b.conv(x, filters, 3, 1 if stride_in_1x1 else strides)
  x = b.dropblock(b.norm(x), group, f'{name}_conv2')
  x = b.conv(x, 4 * filters, 1, 1)
  if not pre_activation:
    x = b.dropblock(b.norm(x, relu=False, zero_gamma=True), group, f'{name}_conv3')
  x = b.branch_end(x, 4 * filters, block.drop_connect_rate, name)
  return b.add(x, shortcut, name, relu=not pre_activation)


BlockFn = Callable[[_Builder, object, Block], object]
_BLOCK_FNS: dict[str, BlockFn] = {'residual': _residual_block, 'bottleneck': _bottleneck_block}


def _stem(b: _Builder, images):
  """Normalisation (float32, NHWC), the layout's transpose, the 7x7/2 conv (or ResNet-D's three 3x3) and the max
  pool (or a strided conv)."""
  config = b.config
  x = NormalizeImages(config.input_normalization, name='normalize')(images)
  if config.data_format == 'channels_first':
    x = keras.layers.Permute((3, 1, 2), dtype='float32', name='to_channels_first')(x)
  if config.use_resnetd_stem:
    x = b.norm(b.conv(x, RESNETD_STEM_FILTERS[0], 3, 2))
    x = b.norm(b.conv(x, RESNETD_STEM_FILTERS[1], 3, 1))
    x = b.conv(x, RESNETD_STEM_FILTERS[2], 3, 1)
  else:
    x = b.conv(x, STEM_FILTERS, 7, 2)
  if not config.pre_activation:
    x = b.norm(x)
  if config.replace_stem_max_pool:
    # The reference always uses BN-ReLU here; with EvoNorm that would put the model's only batch norm in the
    # stem, so the chosen norm_act_layer is used instead.
    return b.norm(b.conv(x, STEM_FILTERS, 3, 2))
  if config.stem_pool_padding == 'symmetric':
    x = BorderPadding(config.data_format, dtype=b.dtype, name='initial_max_pool_pad')(x)
  return keras.layers.MaxPooling2D(3, 2, padding='same' if config.stem_pool_padding == 'same' else 'valid',
                                   data_format=config.data_format, dtype=b.dtype, name='initial_max_pool')(x)


def _groups(b: _Builder, x):
  """The four block groups (stages 1-4)."""
  spec = b.config.spec
  block_fn = _BLOCK_FNS[spec.kind]
  for group, (filters, strides, blocks) in enumerate(zip(GROUP_FILTERS, GROUP_STRIDES, spec.blocks), start=1):
    b.stage = group
    rate = drop_connect_rate_for_group(b.config.drop_connect_rate, group)
    for index in range(blocks):
      first = index == 0
      x = block_fn(b, x, Block(filters, strides if first else 1, first and b.projects(x, filters * spec.expansion,
                                                                                      strides),
                               group, f'block_group{group}_block{index + 1}', rate))
  if b.config.pre_activation:
    x = b.norm(x)
  return x


def _head(b: _Builder, x):
  """Global average pool, dropout and the classifier, in float32 whatever the policy: the logits keep full
  precision."""
  x = keras.layers.GlobalAveragePooling2D(data_format=b.config.data_format, dtype='float32',
                                          name='final_avg_pool')(x)
  if b.config.dropout_rate:
    x = Dropout(b.config.dropout_rate, dtype='float32', name='dropout')(x)
  b.stage = len(GROUP_FILTERS) + 1
  dense = b.register(keras.layers.Dense(
      b.config.num_label_classes, kernel_initializer=keras.initializers.RandomNormal(stddev=0.01),
      bias_initializer='zeros', dtype='float32', name='dense'))
  return dense(x)


def resnet(config: ModelConfig, dtype_policy: Optional[str | keras.DTypePolicy] = None,
           image_size: Optional[int] = None, name: str = 'resnet') -> keras.Model:
  """Builds ``config``'s ResNet: NHWC 0..255 images -> float32 logits [N, num_label_classes]; call with
  ``training=``.

  ``dtype_policy``: Keras dtype policy for the body ('mixed_bfloat16', 'mixed_float16', 'float32'); None = the
  global policy (variables stay float32 under the mixed policies). ``image_size`` fixes the input's spatial size
  (static shapes); None accepts any square size >= 32.
  """
  keep_prob_var = None
  if config.dropblock_groups:  # the schedule's base keep prob, assigned by the training step
    keep_prob_var = keras.Variable(float(config.dropblock_keep_prob), shape=(), dtype='float32', trainable=False,
                                   autocast=False, aggregation='only_first_replica', name=DROPBLOCK_VARIABLE_NAME)
  kernels = cpu_kernels.choose(config.conv1x1_filter_grad, config.residual_add_relu, dtype_policy)
  b = _Builder(config, dtype_policy, keep_prob_var, kernels)
  images = keras.Input((image_size, image_size, 3), name='images')
  logits = _head(b, _groups(b, _stem(b, images)))
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
  model.variant = config.variant  # a frozen dataclass: no checkpoint dependency
  model.config = config
  _log_built(config, kernels, b, model)
  return model


def _log_built(config: ModelConfig, kernels: cpu_kernels.Kernels, b: _Builder, model: keras.Model) -> None:
  options = [f'{k}={getattr(config, k)}' for k in ('se_ratio', 'resnetd_shortcut', 'use_resnetd_stem',
                                                   'replace_stem_max_pool', 'drop_connect_rate')
             if getattr(config, k)]
  if config.norm_act_layer != 'bn_relu':
    options.append(config.norm_act_layer)
  if kernels.matmul_filter_grad and config.data_format == 'channels_last':
    options.append('1x1 weight gradients as matmuls')
  if kernels.xla_add_relu and not config.pre_activation:
    options.append('residual add + ReLU in XLA')
  options += [f'{k}={v}' for k, v in config.variant.params().items() if k != 'bn_epsilon' and v != getattr(Variant, k)]
  logging.info('Built ResNet-%d (%s, %s%s%s): %d convs, %d BNs, %d EvoNorms, %d weights.', config.resnet_depth,
               config.spec.kind, config.data_format, ', v2' if config.pre_activation else '',
               ''.join(', ' + o for o in options), b.num_convs, b.num_bns, b.num_evonorms, len(model.weights))
