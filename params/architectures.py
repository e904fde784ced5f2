"""The ResNet family's facts that both the model and the params table need, in pure Python (no TensorFlow).

Depths (block type and blocks per group, as the reference's ``model_params``), the normalisation-activation layers,
and the rule between them and the pre-activation variant; the ``Variant`` details in which other frameworks'
pretrained ResNets differ from the reference's, and the range checks of the model's options. ``resnet/model/``
builds from these; ``resnet_config`` offers them as choices and checks the rules before anything is built.
"""
import dataclasses
from typing import Any, Dict, NamedTuple, Optional


class BlockSpec(NamedTuple):
  kind: str                      # 'residual' (two 3x3) or 'bottleneck' (1x1-3x3-1x1)
  expansion: int                 # output channels = expansion * group filters
  blocks: tuple[int, int, int, int]


_RESIDUAL = ('residual', 1)
_BOTTLENECK = ('bottleneck', 4)
ARCHITECTURES: dict[int, BlockSpec] = {
    18: BlockSpec(*_RESIDUAL, (2, 2, 2, 2)),
    34: BlockSpec(*_RESIDUAL, (3, 4, 6, 3)),
    50: BlockSpec(*_BOTTLENECK, (3, 4, 6, 3)),
    101: BlockSpec(*_BOTTLENECK, (3, 4, 23, 3)),
    152: BlockSpec(*_BOTTLENECK, (3, 8, 36, 3)),
    200: BlockSpec(*_BOTTLENECK, (3, 24, 36, 3)),
    # ResNet-RS depths.
    270: BlockSpec(*_BOTTLENECK, (4, 29, 53, 4)),
    350: BlockSpec(*_BOTTLENECK, (4, 36, 72, 4)),
    420: BlockSpec(*_BOTTLENECK, (4, 44, 87, 4)),
}
SUPPORTED_DEPTHS = tuple(sorted(ARCHITECTURES))

NORM_ACT_LAYERS = ('bn_relu', 'evonorm_b0', 'evonorm_s0')


def architecture(resnet_depth: int) -> BlockSpec:
  """The block spec of a depth; ValueError names the supported depths (params validation shows it to users)."""
  try:
    return ARCHITECTURES[int(resnet_depth)]
  except (KeyError, TypeError, ValueError):
    raise ValueError(f'Unsupported resnet_depth {resnet_depth!r}; supported depths: '
                     f'{", ".join(map(str, SUPPORTED_DEPTHS))}.') from None


def norm_act_problem(norm_act_layer: str, pre_activation: bool) -> Optional[str]:
  """Why this norm-activation layer cannot be used, or None: EvoNorm is defined for the pre-activation ResNet."""
  if norm_act_layer not in NORM_ACT_LAYERS:
    return f'Unknown norm_act_layer {norm_act_layer!r}; use one of {", ".join(NORM_ACT_LAYERS)}.'
  if norm_act_layer != 'bn_relu' and not pre_activation:
    return (f'norm_act_layer={norm_act_layer!r} needs the pre-activation ResNet (v2), as in the reference: set '
            "pre_activation=true, or use norm_act_layer='bn_relu'.")
  return None


STEM_POOL_PADDINGS = ('same', 'symmetric')
INPUT_NORMALIZATIONS = ('imagenet', 'caffe_bgr')
PROJECTION_SHORTCUTS = ('every_group', 'shape_change')


@dataclasses.dataclass(frozen=True)
class Variant:
  """How a ResNet of the same depth and variables computes, where pretrained weights of other frameworks differ.

  The defaults are the reference's v1.5; Keras applications (v1) and torchvision/timm set the others. Shapes do not
  tell them apart, so they travel as params (resnet/weights/foreign_weights.py reads them from the weights file) and the
  built model carries them (``model.variant``) for the warm start to check. A conv bias before batch norm is no
  field: it folds exactly into the moving mean (resnet/weights/keras_weights.py).
  """
  bn_epsilon: float = 1e-5
  stride_in_1x1: bool = False              # Keras v1: a stage's stride on the first 1x1 conv, not on the 3x3
  stem_pool_padding: str = 'same'          # 'symmetric': one pixel on every side (Keras, torchvision, timm)
  input_normalization: str = 'imagenet'    # 'caffe_bgr': RGB -> BGR minus the caffe means, unscaled (Keras)
  projection_shortcut: str = 'every_group' # 'shape_change': identity where shapes allow (torchvision ResNet-18/34)

  def params(self) -> Dict[str, Any]:
    return dataclasses.asdict(self)


VARIANT_DEFAULTS: Dict[str, Any] = Variant().params()
VARIANT_PARAMS = tuple(VARIANT_DEFAULTS)


def variant_problem(resnet_depth: int, stride_in_1x1: bool) -> Optional[str]:
  """Why the variant cannot be built at this depth, or None: the 1x1 that could take the stride is bottleneck-only."""
  if stride_in_1x1 and resnet_depth in ARCHITECTURES and ARCHITECTURES[resnet_depth].kind != 'bottleneck':
    return (f'stride_in_1x1=true needs a bottleneck depth (50 and up); resnet_depth={resnet_depth} has basic '
            'blocks (two 3x3 convs)')
  return None


def check_norm_act_layer(norm_act_layer: str, pre_activation: bool) -> None:
  problem = norm_act_problem(norm_act_layer, pre_activation)
  if problem:
    raise ValueError(problem)


def check_se_ratio(se_ratio: Optional[float]) -> Optional[float]:
  """None or 0 turns squeeze-excitation off; otherwise it must be in (0, 1]."""
  if not se_ratio:
    return None
  if not 0.0 < float(se_ratio) <= 1.0:
    raise ValueError(f'se_ratio must be in (0, 1] (or None/0 for no squeeze-excitation), got {se_ratio!r}.')
  return float(se_ratio)


def check_drop_connect_rate(drop_connect_rate: Optional[float]) -> Optional[float]:
  """None or 0 turns stochastic depth off; otherwise it must be in (0, 1)."""
  if not drop_connect_rate:
    return None
  if not 0.0 < float(drop_connect_rate) < 1.0:
    raise ValueError(f'drop_connect_rate must be in [0, 1) (or None for no stochastic depth), '
                     f'got {drop_connect_rate!r}.')
  return float(drop_connect_rate)
