"""torchvision / timm ResNet-18..152 state dicts (safetensors, or a torch .pth) as foreign_layers.Layer lists.

Keys (torchvision/models/resnet.py; timm's plain ResNets use the same): ``conv1``, ``bn1``,
``layer{1..4}.{i}.conv{1,2[,3]}`` / ``bn{...}``, ``layer{s}.0.downsample.{0: conv, 1: BN}``, ``fc``. Layouts: conv
OIHW -> HWIO is ``transpose(2, 3, 1, 0)``; ``fc.weight`` [classes, features] -> dense kernel is ``.T``. BN
``weight, bias, running_mean, running_var`` are gamma, beta and the moving statistics (``num_batches_tracked`` is
not a weight).

What they compute differently from ours: the stem max pool pads one pixel on every side (``padding=1``), and a
group's first block has a projection only where the shape changes (ResNet-18/34 group 1 has none). Like ours: v1.5
(stride on the 3x3), no conv biases, BN epsilon 1e-5, ImageNet mean/std on 0..1 RGB (= ours on 0..255).

safetensors is read with numpy, without torch. A ``.pth`` is a pickle that only torch reads: with torch importable
it is loaded (``weights_only``); otherwise the error gives the one-line conversion.
"""
from typing import Dict, List, Tuple

import numpy as np

from resnet.weights import foreign_layers as fl

CONVERT = ("python -c \"import torch, safetensors.torch as s; s.save_file(torch.load('x.pth'), "
           "'x.safetensors')\"")
BN = {'weight': 'gamma', 'bias': 'beta', 'running_mean': 'moving_mean', 'running_var': 'moving_variance'}
IGNORED = ('num_batches_tracked',)


# ------------------------------------------------------------------------------------------------ reading
def _shapes(path: str, file_format: str) -> Dict[str, Tuple[int, ...]]:
  if file_format == fl.SAFETENSORS:
    from safetensors import safe_open  # pylint: disable=g-import-not-at-top
    with safe_open(path, framework='numpy') as f:
      return {key: tuple(f.get_slice(key).get_shape()) for key in f.keys()}
  return {key: value.shape for key, value in _torch_state_dict(path).items()}


def _tensors(path: str, file_format: str) -> Dict[str, np.ndarray]:
  if file_format == fl.SAFETENSORS:
    from safetensors import numpy as safetensors_numpy  # pylint: disable=g-import-not-at-top
    return safetensors_numpy.load_file(path)
  return _torch_state_dict(path)


def _torch_state_dict(path: str) -> Dict[str, np.ndarray]:
  try:
    import torch  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise ValueError(f'{path} is a torch pickle (.pth), which only torch can read, and torch is not installed '
                     f'here. Convert it once where torch is, and pass the .safetensors file: {CONVERT}') from None
  state = torch.load(path, map_location='cpu', weights_only=True)
  for key in ('state_dict', 'model'):  # training checkpoints (timm, torchvision references) wrap the weights
    if isinstance(state, dict) and isinstance(state.get(key), dict):
      state = state[key]
  if not isinstance(state, dict):
    raise ValueError(f'{path} holds a {type(state).__name__}, not a state dict (name -> tensor).')
  return {key[len('module.'):] if key.startswith('module.') else key: value.float().numpy()
          for key, value in state.items() if hasattr(value, 'numpy')}


# ------------------------------------------------------------------------------------------------ structure
def _blocks(keys) -> Tuple[int, ...]:
  counts = [0, 0, 0, 0]
  for key in keys:
    parts = key.split('.')
    if len(parts) > 2 and parts[0] in ('layer1', 'layer2', 'layer3', 'layer4') and parts[1].isdigit():
      group = int(parts[0][-1]) - 1
      counts[group] = max(counts[group], int(parts[1]) + 1)
  return tuple(counts)


def _has_projection(keys, prefix: str) -> bool:
  return any(key.startswith(f'{prefix}.downsample.') for key in keys)


def inspect(path: str, file_format: str) -> fl.Header:
  shapes = _shapes(path, file_format)
  blocks = _blocks(shapes)
  if not all(blocks) or not any(key.startswith('conv1.') for key in shapes):
    raise ValueError(f'{path} ({file_format}) holds no torchvision/timm ResNet (conv1, layer1..layer4, fc); its '
                     f'tensors are e.g. {sorted(shapes)[:5]}.')
  kind = 'bottleneck' if 'layer1.0.conv3.weight' in shapes else 'residual'
  variant = {'bn_epsilon': 1e-5, 'stride_in_1x1': False, 'stem_pool_padding': 'symmetric',
             'input_normalization': 'imagenet'}
  if kind == 'residual':  # bottleneck group 1 widens 64 -> 256: a projection under either rule
    variant['projection_shortcut'] = 'every_group' if _has_projection(shapes, 'layer1.0') else 'shape_change'
  notes = []
  if 'conv1.weight' not in shapes:
    notes.append('a ResNet-D layout (timm resnet*d: deep stem conv1.0/conv1.1/..., average-pool shortcut '
                 'downsample.1/.2), which does not map onto this plain ResNet (torchvision layout only)')
  head = shapes.get('fc.weight', (0,))[0]
  return fl.Header(path, file_format, 'torchvision/timm', blocks, kind, head or None, variant, notes)


def load(path: str, file_format: str) -> Tuple[fl.Header, List[fl.Layer], List[str]]:
  header = inspect(path, file_format)
  state = _tensors(path, file_format)
  used = set()

  def take(key: str):
    used.add(key)
    return state.get(key)

  def conv(name: str) -> fl.Layer:
    kernel, bias = take(f'{name}.weight'), take(f'{name}.bias')
    tensors = {} if kernel is None else {'kernel': np.transpose(kernel, (2, 3, 1, 0)) if kernel.ndim == 4 else kernel}
    if bias is not None:
      tensors['bias'] = bias
    return fl.Layer('conv', name, tensors)

  def bn(name: str) -> fl.Layer:
    tensors = {ours: take(f'{name}.{theirs}') for theirs, ours in BN.items()}
    return fl.Layer('bn', name, {k: v for k, v in tensors.items() if v is not None})

  convs = 3 if header.kind == 'bottleneck' else 2
  layers = [conv('conv1'), bn('bn1')]
  for group, blocks in enumerate(header.blocks, start=1):
    for block in range(blocks):
      prefix = f'layer{group}.{block}'
      if block == 0 and _has_projection(state, prefix):  # projection first, as ours
        layers += [conv(f'{prefix}.downsample.0'), bn(f'{prefix}.downsample.1')]
      for i in range(1, convs + 1):
        layers += [conv(f'{prefix}.conv{i}'), bn(f'{prefix}.bn{i}')]
  if 'fc.weight' in state:
    weight, bias = take('fc.weight'), take('fc.bias')
    layers.append(fl.Layer('dense', 'fc', {'kernel': weight.T, **({'bias': bias} if bias is not None else {})}))
  unused = sorted(key for key in state if key not in used and not key.endswith(IGNORED))
  return header, layers, unused
