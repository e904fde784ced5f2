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

Here: the builder (``resnet``). Beside it in ``resnet/model/``: ``layers`` (the custom layers), ``tf1_names`` (TF1
names, and the head, weight-decay and BN variable sets chosen by them), ``plan`` (parameter and FLOP counts
without building); ``params/architectures.py`` (depths and options, pure Python).

Known differences from the reference: Keras BN updates the moving variance with the biased batch variance (TF1's
fused BN applies Bessel's correction, a factor n/(n-1) with n = batch*H*W >= thousands, i.e. < 0.1%); the head
Dropout (if any) keeps a Keras RNG state variable that is not a TF1 variable; the dense layer computes in float32.
"""
import sys
from typing import Callable, Sequence

from absl import logging
import keras

from params.architectures import (  # pylint: disable=g-multiple-import
    INPUT_NORMALIZATIONS, PROJECTION_SHORTCUTS, STEM_POOL_PADDINGS, Variant, architecture, check_drop_connect_rate,
    check_norm_act_layer, check_se_ratio, variant_problem)
from resnet.model.layers import (  # pylint: disable=g-multiple-import
    DROPBLOCK_VARIABLE_NAME, GROUP_FILTERS, GROUP_STRIDES, RESNETD_STEM_FILTERS, STAGE_ATTRIBUTE, STEM_FILTERS,
    BorderPadding, Conv2D, DropBlock, Dropout, EvoNorm, FusedBatchNormalization, NormalizeImages, ResidualAddReLU,
    StochasticDepth,
    drop_connect_rate_for_group, se_filters)


# --------------------------------------------------------------------------------------------------------------
# Builder: owns the TF1 name counters and the shared layer settings.


class _Builder:
  """Creates layers in reference order, named with their TF1 names (``conv2d[_i]``, ``batch_normalization[_i]``,
  ``evonorm[_i]``) and stamped with their creation rank, which orders ``tf1_variable_map`` like the reference."""

  def __init__(self, data_format: str, bn_momentum: float, bn_epsilon: float, dtype_policy,
               dropblock_keep_prob_var, dropblock_groups: Sequence[int], dropblock_size: int,
               norm_act_layer: str = 'bn_relu', se_ratio: float | None = None, resnetd_shortcut: bool = False,
               stride_in_1x1: bool = False, projection_shortcut: str = 'every_group',
               matmul_filter_grad: bool = False, xla_add_relu: bool = False):
    self.data_format = data_format
    self.matmul_filter_grad = matmul_filter_grad
    self.xla_add_relu = xla_add_relu
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
    return self._register(Conv2D(
        filters, kernel_size, strides=strides, padding='same' if strides == 1 else 'valid', use_bias=use_bias,
        kernel_initializer=keras.initializers.VarianceScaling(1.0, 'fan_in', 'truncated_normal'),
        bias_initializer='zeros', data_format=self.data_format, dtype=self.dtype, name=name,
        matmul_filter_grad=self.matmul_filter_grad))(x)

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
    if relu and self.xla_add_relu:  # two layers as before, so every layer keeps its position in checkpoints
      x = ResidualAddReLU(dtype=self.dtype, name=f'{name}_add')([x, shortcut])
      return keras.layers.Identity(dtype=self.dtype, name=f'{name}_out')(x)
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


def _check_variant(variant: Variant, resnet_depth: int) -> None:
  for value, allowed, name in ((variant.stem_pool_padding, STEM_POOL_PADDINGS, 'stem_pool_padding'),
                               (variant.input_normalization, INPUT_NORMALIZATIONS, 'input_normalization'),
                               (variant.projection_shortcut, PROJECTION_SHORTCUTS, 'projection_shortcut')):
    if value not in allowed:
      raise ValueError(f'{name} must be one of {list(allowed)}, got {value!r}.')
  problem = variant_problem(resnet_depth, variant.stride_in_1x1)
  if problem:
    raise ValueError(problem + '.')


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
           projection_shortcut: str = 'every_group',
           matmul_filter_grad: bool = False,
           xla_add_relu: bool = False) -> keras.Model:
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
      weights from other frameworks (params/architectures.py); ``model.variant`` records them with bn_epsilon.
    matmul_filter_grad: 1x1 convs take their weight gradient from a matmul (``layers.Conv2D``; channels_last):
      the same gradient, faster in bfloat16 on CPUs. Forward results and variables do not change.
    xla_add_relu: each v1 block's final ``relu(x + shortcut)`` runs as one XLA-compiled function in training
      (``layers.ResidualAddReLU``): the same results, faster in bfloat16 on CPUs.
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
               stride_in_1x1=stride_in_1x1, projection_shortcut=projection_shortcut,
               matmul_filter_grad=matmul_filter_grad, xla_add_relu=xla_add_relu)
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
  if matmul_filter_grad and data_format == 'channels_last':
    options.append('1x1 weight gradients as matmuls')
  if xla_add_relu and not pre_activation:
    options.append('residual add + ReLU in XLA')
  options += [f'{k}={v}' for k, v in variant.params().items() if k != 'bn_epsilon' and v != getattr(Variant, k)]
  logging.info('Built ResNet-%d (%s, %s%s%s): %d convs, %d BNs, %d EvoNorms, %d weights.', resnet_depth, spec.kind,
               data_format, ', v2' if pre_activation else '', ''.join(', ' + o for o in options), b.num_convs,
               b.num_bns, b.num_evonorms, len(model.weights))
  return model
