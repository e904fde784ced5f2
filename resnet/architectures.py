"""The ResNet family's facts that both the model and the params table need, in pure Python (no TensorFlow).

Depths (block type and blocks per group, as the reference's ``model_params``), the normalisation-activation layers,
and the rule between them and the pre-activation variant. ``resnet_model`` builds from these; ``params/
resnet_config`` offers them as choices and checks the rule before anything is built.
"""
from typing import NamedTuple, Optional


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
