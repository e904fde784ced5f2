"""A ResNet's size and cost from its ModelConfig alone, without building it: the layer plan, the parameter count
and the FLOPs (``tools/model_report.py``, the benchmarks, the checkpoint check); tests check them against the built
model.
"""
from typing import NamedTuple

from params.architectures import architecture
from params.model_config import ModelConfig
from resnet.model.layers import GROUP_FILTERS, GROUP_STRIDES, RESNETD_STEM_FILTERS, STEM_FILTERS, se_filters

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


def layer_plan(config: ModelConfig) -> list[ConvShape | NormShape]:
  """Every conv and norm-activation layer in creation order, as resnet() creates them."""
  spec = config.spec
  pre_activation, se_ratio = config.pre_activation, config.se_ratio
  plan: list[ConvShape | NormShape] = []
  if config.use_resnetd_stem:
    (f1, f2, f3) = RESNETD_STEM_FILTERS
    plan += [ConvShape(3, 3, f1, 2, 2), NormShape(f1, True), ConvShape(3, f1, f2, 1, 2), NormShape(f2, True),
             ConvShape(3, f2, f3, 1, 2)]
    cin = f3
  else:
    plan.append(ConvShape(7, 3, STEM_FILTERS, 2, 2))
    cin = STEM_FILTERS
  if not pre_activation:
    plan.append(NormShape(cin, True))
  if config.replace_stem_max_pool:
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
      if block == 0 and (config.projection_shortcut == 'every_group' or s != 1 or cin != cout):
        plan.append(ConvShape(1, cin, cout, 1 if config.resnetd_shortcut and s == 2 else s, out))
        if not pre_activation:
          plan.append(NormShape(cout, False))
      if spec.kind == 'bottleneck':
        first = (ConvShape(1, cin, filters, s, out) if config.stride_in_1x1
                 else ConvShape(1, cin, filters, 1, reduction))
        plan += [first, NormShape(filters, True), ConvShape(3, filters, filters, 1 if config.stride_in_1x1 else s, out),
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


def conv_shapes(config: ModelConfig) -> list[ConvShape]:
  """Every conv in creation order (== TF1 ``conv2d[_i]`` order)."""
  return [c for c in layer_plan(config) if isinstance(c, ConvShape)]


def bn_channels(config: ModelConfig) -> list[int]:
  """Channel count of every norm layer (BN or EvoNorm) in creation order."""
  return [n.channels for n in layer_plan(config) if isinstance(n, NormShape)]


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


def count_params(config: ModelConfig, include_bn_statistics: bool = False) -> int:
  """Parameters: conv kernels (+ SE biases) + norm parameters (+ their moving statistics if asked) + dense."""
  total = num_features(config.resnet_depth) * config.num_label_classes + config.num_label_classes
  for layer in layer_plan(config):
    if isinstance(layer, ConvShape):
      total += layer.kernel * layer.kernel * layer.cin * layer.cout + (layer.cout if layer.bias else 0)
    else:
      trainable, statistics = _norm_params(layer, config.norm_act_layer)
      total += trainable + (statistics if include_bn_statistics else 0)
  return total


def feature_size(image_size: int, reduction: int) -> int:
  """Map width at an output stride: fixed padding + VALID and SAME both give ceil(n / stride) per layer."""
  return -(-image_size // reduction)


def count_flops(config: ModelConfig, image_size: int = 224) -> int:
  """Forward FLOPs for one image, convs + dense only, FLOPs = 2 x multiply-adds (norms, ReLU, pool, adds, biases
  and the SE gating ignored)."""
  macs = sum(c.kernel * c.kernel * c.cin * c.cout * (1 if c.pooled else feature_size(image_size, c.reduction) ** 2)
             for c in conv_shapes(config))
  return 2 * (macs + num_features(config.resnet_depth) * config.num_label_classes)
