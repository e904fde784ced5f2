"""Keras applications ResNet50/101/152 weights (keras/src/applications/resnet.py) as foreign_layers.Layer lists.

Three files: the legacy HDF5 that keras.applications downloads (``resnet50_weights_tf_dim_ordering_tf_kernels.h5``,
``_notop``; layer name -> weights, read with h5py), Keras 3 ``.weights.h5`` (variables keyed by class-name counters
in ``model.layers`` order, no layer names: Keras itself loads it into a keras.applications model of the depth the
conv count gives) and ``.keras`` (Keras loads the whole model; a ResNet nested in a fine-tuning model is found by
its layer names). Kernels are HWIO and dense kernels [in, out] already, as ours.

What Keras' ResNet (v1) computes differently from ours, taken from its source: a stage's stride on the first 1x1 conv
of its first block; a bias on every conv (folded, see foreign_weights.fold_into_tf1); BN epsilon 1.001e-5; the stem
pool over a one-pixel zero border (after a ReLU: as -inf); inputs preprocessed in 'caffe' mode.
"""
import json
import re
import zipfile
from typing import Any, Callable, Dict, List, Tuple

import numpy as np

from params import architectures
from resnet.weights import foreign_layers as fl

KERAS_BN_EPSILON = 1.001e-5
VARIANT = {'bn_epsilon': KERAS_BN_EPSILON, 'stride_in_1x1': True, 'stem_pool_padding': 'symmetric',
           'input_normalization': 'caffe_bgr'}
BUILDERS = {50: 'ResNet50', 101: 'ResNet101', 152: 'ResNet152'}
HEAD = 'predictions'
FOLDED = 'conv biases folded into the batch-norm moving means'
_BLOCK_CONV = re.compile(r'^conv([2-5])_block(\d+)_1_conv$')
_KERAS3_CONV = re.compile(r'^conv2d(_\d+)?$')
_KERAS3_NORM = re.compile(r'^batch_normalization(_\d+)?$')
NOT_A_KERAS_RESNET = ('holds no keras.applications ResNet50/101/152 layers (conv1_conv, conv2_block1_1_conv, ...): '
                      'only those are read (ResNet50V2/ResNeXt and other models are not)')

LayerWeights = Dict[str, Dict[str, np.ndarray]]  # layer name -> variable name (kernel, gamma, ...) -> value


def h5_format(path: str) -> str:
  import h5py  # pylint: disable=g-import-not-at-top
  with h5py.File(path, 'r') as f:
    if 'layer_names' in f.attrs or 'model_weights' in f:
      return fl.KERAS_H5
    if 'layers' in f or 'vars' in f:
      return fl.KERAS_WEIGHTS_H5
    raise ValueError(f'{path} is an HDF5 file, but not one Keras writes (no layer_names attribute, model_weights '
                     f'or layers group; it holds {list(f.keys())[:5]}).')


# ------------------------------------------------------------------------------------------------ reading
def _decoded(names) -> List[str]:
  return [n.decode('utf-8') if isinstance(n, bytes) else str(n) for n in names]


def _legacy(path: str, read: Callable[[Any], Any]) -> Dict[str, Dict[str, Any]]:
  """Layer name -> variable name -> ``read(dataset)`` of a legacy HDF5 (weights only, or model.save's)."""
  import h5py  # pylint: disable=g-import-not-at-top
  with h5py.File(path, 'r') as f:
    root = f['model_weights'] if 'model_weights' in f else f
    return {layer: {_variable(w): read(root[layer][w]) for w in _decoded(root[layer].attrs['weight_names'])}
            for layer in _decoded(root.attrs['layer_names'])}


def _variable(weight_name: str) -> str:
  """'conv1_conv/kernel:0' (Keras 2) or 'conv1_conv/kernel' -> 'kernel'."""
  return weight_name.split('/')[-1].split(':')[0]


def _not_v2(path: str, v2: bool, depth: str = '50/101/152') -> None:
  if v2:
    raise ValueError(f'{path} holds a Keras applications ResNet{depth}V2 (pre-activation: preact_bn / post_bn '
                     'layers), which is not read here: only keras.applications ResNet50/101/152 (v1) are. Fine-tune '
                     'from a v1 or a torchvision/timm file, or train pre_activation=true from scratch.')


def _keras3_build(path: str) -> Tuple[int, int]:
  """(depth, classes or 0) of the keras.applications model that wrote a Keras 3 ``.weights.h5``."""
  import h5py  # pylint: disable=g-import-not-at-top
  with h5py.File(path, 'r') as f:
    layers = f['layers'] if 'layers' in f else {}
    convs = sum(1 for name in layers if _KERAS3_CONV.match(name))
    norms = sum(1 for name in layers if _KERAS3_NORM.match(name))
    classes = int(layers['dense/vars/1'].shape[0]) if 'dense' in layers and 'vars/1' in layers['dense'] else 0
  depths = {1 + 3 * sum(architectures.ARCHITECTURES[depth].blocks) + 4: depth for depth in BUILDERS}  # + projections
  if convs in depths:  # v1: a norm per conv; v2: one per block before it, two inside, one at the end
    _not_v2(path, norms == 3 * sum(architectures.ARCHITECTURES[depths[convs]].blocks) + 1, str(depths[convs]))
  if convs not in depths:
    raise ValueError(f'{path}: a Keras 3 .weights.h5 with {convs} top-level Conv2D layers, not the 53, 104 or 155 of '
                     'a keras.applications ResNet50/101/152 saved with save_weights (a ResNet inside another '
                     'model has no layer names there): save the model as .keras instead, whose layers are named.')
  return depths[convs], classes


def _model_weights(model) -> LayerWeights:
  """Layer name -> weights of every layer with weights, nested models included."""
  import keras  # pylint: disable=g-import-not-at-top
  out: LayerWeights = {}
  for layer in model.layers:
    if isinstance(layer, keras.Model):
      out.update(_model_weights(layer))
    elif layer.weights:
      out[layer.name] = {v.name: np.asarray(v.numpy()) for v in layer.weights}
  return out


def _keras3_weights(path: str) -> LayerWeights:
  import keras  # pylint: disable=g-import-not-at-top
  depth, classes = _keras3_build(path)
  builder = getattr(keras.applications, BUILDERS[depth])
  model = (builder(weights=None, classes=classes) if classes
           else builder(weights=None, include_top=False, input_shape=(None, None, 3)))
  model.load_weights(path)
  return _model_weights(model)


def _keras_zip_layers(path: str) -> Dict[str, Dict[str, Any]]:
  """Layer name -> {'class_name', 'config'} of every layer in a .keras file's config.json, nested ones included."""
  with zipfile.ZipFile(path) as archive:
    config = json.loads(archive.read('config.json').decode('utf-8'))
  layers: Dict[str, Dict[str, Any]] = {}

  def walk(node: Any) -> None:
    if isinstance(node, dict):
      inner = node.get('config')
      if isinstance(inner, dict) and 'name' in inner and 'class_name' in node:
        layers.setdefault(inner['name'], {'class_name': node['class_name'], 'config': inner})
      for value in node.values():
        walk(value)
    elif isinstance(node, list):
      for value in node:
        walk(value)

  walk(config)
  return layers


def _keras_zip_weights(path: str) -> LayerWeights:
  import keras  # pylint: disable=g-import-not-at-top
  return _model_weights(keras.saving.load_model(path, compile=False))


# ------------------------------------------------------------------------------------------------ structure
def _blocks(names) -> Tuple[int, ...]:
  counts = {stage: 0 for stage in range(2, 6)}
  for name in names:
    match = _BLOCK_CONV.match(name)
    if match:
      counts[int(match.group(1))] = max(counts[int(match.group(1))], int(match.group(2)))
  return tuple(counts[stage] for stage in range(2, 6))


def _header(path: str, file_format: str, names, head_units: int, epsilon: float) -> fl.Header:
  _not_v2(path, any(name.endswith('_preact_bn') or name == 'post_bn' for name in names))
  if 'conv1_conv' not in names or not all(_blocks(names)):
    raise ValueError(f'{path} ({file_format}) {NOT_A_KERAS_RESNET}; it has layers such as {sorted(names)[:5]}.')
  variant = dict(VARIANT, bn_epsilon=epsilon)
  return fl.Header(path, file_format, 'Keras applications', _blocks(names), 'bottleneck', head_units or None,
                   variant, [FOLDED])


def inspect(path: str, file_format: str) -> fl.Header:
  if file_format == fl.KERAS_H5:
    shapes = _legacy(path, lambda dataset: tuple(dataset.shape))
    head = shapes.get(HEAD, {}).get('bias', (0,))[0]
    return _header(path, file_format, set(shapes), head, KERAS_BN_EPSILON)
  if file_format == fl.KERAS_WEIGHTS_H5:
    depth, classes = _keras3_build(path)
    return fl.Header(path, file_format, 'Keras applications', architectures.ARCHITECTURES[depth].blocks,
                     'bottleneck', classes or None, dict(VARIANT), [FOLDED])
  layers = _keras_zip_layers(path)
  epsilons = {layer['config'].get('epsilon') for layer in layers.values()
              if layer['class_name'] == 'BatchNormalization'}
  if len(epsilons) > 1:
    raise ValueError(f'{path}: batch norms with different epsilons {sorted(epsilons)}; a keras.applications '
                     f'ResNet uses {KERAS_BN_EPSILON} throughout.')
  head = layers.get(HEAD, {}).get('config', {}).get('units', 0)
  return _header(path, file_format, set(layers), head, epsilons.pop() if epsilons else KERAS_BN_EPSILON)


def load(path: str, file_format: str) -> Tuple[fl.Header, List[fl.Layer], List[str]]:
  header = inspect(path, file_format)
  weights = {fl.KERAS_H5: lambda p: _legacy(p, np.asarray), fl.KERAS_WEIGHTS_H5: _keras3_weights,
             fl.KERAS_ZIP: _keras_zip_weights}[file_format](path)
  used = set()

  def layer(kind: str, name: str) -> fl.Layer:
    used.add(name)
    return fl.Layer(kind, name, dict(weights.get(name, {})))

  layers = [layer('conv', 'conv1_conv'), layer('bn', 'conv1_bn')]
  for stage, blocks in enumerate(header.blocks, start=2):
    for block in range(1, blocks + 1):
      for part in (('0', '1', '2', '3') if block == 1 else ('1', '2', '3')):  # projection first, as ours
        prefix = f'conv{stage}_block{block}_{part}'
        layers += [layer('conv', f'{prefix}_conv'), layer('bn', f'{prefix}_bn')]
  if HEAD in weights:
    layers.append(layer('dense', HEAD))
  unused = sorted(f'{name}/{variable}' for name in weights if name not in used for variable in weights[name])
  return header, layers, unused
