"""The ResNet family's facts that both the model and the params table need, in pure Python (no TensorFlow).

Depths (block type and blocks per group, as the reference's ``model_params``), the normalisation-activation layers,
and the ``Variant`` details in which other frameworks' pretrained ResNets differ from the reference's.
``resnet/model/`` builds from these; ``resnet_config`` offers them as choices; ``model_config.ModelConfig`` checks
the rules between them.
"""
import dataclasses
from typing import Any, Dict, NamedTuple


class BlockSpec(NamedTuple):
  kind: str                      # 'residual' (two 3x3) or 'bottleneck' (1x1-3x3-1x1)
  expansion: int                 # output channels = expansion * group filters
  blocks: tuple[int, int, int, int]


_RESIDUAL = ('residual', 1)
_BOTTLENECK = ('bottleneck', 4)
ARCHITECTURES: dict[int, BlockSpec] = {
    # ResNet-10: one block a group, the smallest (small data, a laptop CPU, quick checks; half ResNet-18's build,
    # trace and step time). No other framework ships plain ResNet-10 weights (timm's resnet10t has another stem).
    10: BlockSpec(*_RESIDUAL, (1, 1, 1, 1)),
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
