"""What the readers of foreign weights (keras_weights.py, torch_weights.py) give foreign_weights.py: the file's
``Header`` (format, depth, the Variant its framework computes with) and its ``Layer``s in this model's creation
order. A module of its own so that the readers and foreign_weights.py, which calls them, do not import each other.
"""
import dataclasses
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from params import architectures

# Formats, as the log names them.
KERAS_H5 = 'legacy Keras HDF5 weights (.h5)'
KERAS_WEIGHTS_H5 = 'Keras 3 weights (.weights.h5)'
KERAS_ZIP = 'Keras 3 model (.keras)'
SAFETENSORS = 'safetensors'
TORCH_PICKLE = 'torch pickle (.pth)'


@dataclasses.dataclass
class Header:
  """What a weights file holds, from its names and shapes alone."""
  path: str
  format: str
  framework: str                       # 'Keras applications' | 'torchvision/timm'
  blocks: Tuple[int, ...]              # blocks per group, as the file has them
  kind: str                            # 'bottleneck' | 'residual'
  num_classes: Optional[int]           # None: no classifier head in the file
  variant: Dict[str, Any]              # the Variant params its framework computes with
  notes: List[str] = dataclasses.field(default_factory=list)

  @property
  def depth(self) -> Optional[int]:
    for depth, spec in architectures.ARCHITECTURES.items():
      if spec.kind == self.kind and tuple(spec.blocks) == tuple(self.blocks):
        return depth
    return None

  def title(self) -> str:
    depth = f'ResNet-{self.depth}' if self.depth else f'ResNet with {self.kind} blocks {list(self.blocks)}'
    return f'{self.framework} {depth}, {self.format}'

  def describe(self) -> str:
    head = f'{self.num_classes}-class head' if self.num_classes else 'no classifier head'
    variant = ', '.join(f'{k}={v!r}' for k, v in self.variant.items())
    notes = ''.join(f'; {note}' for note in self.notes)
    return f'{self.path}: {self.title()}, {head}; computes with {variant}{notes}'


@dataclasses.dataclass
class Layer:
  """One conv, batch norm or dense layer of the file, in this model's creation order, with its tensors under our
  variable names (kernel, bias, gamma, ...) and in our layouts (HWIO kernels, [in, out] dense); missing ones absent."""
  kind: str                            # 'conv' | 'bn' | 'dense'
  source: str                          # the file's name for it: conv2_block1_0_conv, layer1.0.downsample.0
  tensors: Dict[str, np.ndarray]
