"""Which of a built model's variables are which: their TF1 names, the classifier head, normalisation, weight decay.

Every conv, BN, EvoNorm and dense layer is named with its TF1 name from creation counters, in the reference's
creation order, so a TF1 checkpoint maps onto the model by ``<layer name>/<variable name>`` without parsing Keras
auto names (``tf1_variable_map``); the warm start, the optimizer's weight decay and fine-tuning select by it.
"""
import keras

from resnet.model.layers import DROPBLOCK_VARIABLE_NAME, EvoNorm

_TF1_LAYER_TYPES = (keras.layers.Conv2D, keras.layers.BatchNormalization, EvoNorm, keras.layers.Dense)


def _creation_order(layer: keras.layers.Layer) -> tuple[float, int]:
  """Sort key giving the reference's creation order.

  model.layers is topological, which puts a projection shortcut after its main path. resnet() stamps each layer
  with its creation rank; without the stamp (a model rebuilt from a config) the TF1 names' counters give the
  order for v1 without squeeze-excitation: conv_i, then batch_normalization_i / evonorm_i; dense last.
  """
  rank = getattr(layer, '_tf1_creation_rank', None)
  if rank is not None:
    return (float(rank), 0)
  if isinstance(layer, keras.layers.Dense):
    return (float('inf'), 0)
  _, _, suffix = layer.name.rpartition('_') if layer.name[-1].isdigit() else ('', '', '0')
  return (int(suffix), 0 if isinstance(layer, keras.layers.Conv2D) else 1)


def tf1_variable_map(model: keras.Model) -> dict[str, keras.Variable]:
  """TF1 reference name -> model variable, in creation order, covering every TF1-style weight exactly once.

  Names come from the layer names given at build time (``conv2d_7/kernel``, ``conv2d_8/bias`` (squeeze-excitation),
  ``batch_normalization_7/gamma``, ``evonorm_3/v``, ``dense/bias``). ``dropblock_keep_prob`` (and the RNG states of
  Dropout and stochastic depth, which are not model weights) are not TF1 variables and are left out.
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


def is_normalization(tf1_name: str) -> bool:
  """Batch norm or EvoNorm: the reference's weight-decay skip list (names containing either)."""
  return is_batch_norm(tf1_name) or 'evonorm' in tf1_name


def batch_norm_variables(model: keras.Model) -> list[keras.Variable]:
  """All BN variables (gamma, beta, moving stats)."""
  return [v for k, v in tf1_variable_map(model).items() if is_batch_norm(k)]


def weight_decay_variables(model: keras.Model, biases: bool = True) -> list[keras.Variable]:
  """The reference's L2 set: every trainable variable whose TF1 name has neither ``batch_normalization`` nor
  ``evonorm``.

  That is all conv kernels, the squeeze-excitation conv biases, ``dense/kernel`` and ``dense/bias`` (biases are
  decayed too, as in the reference); ``biases=False`` leaves the biases out (kernels only, timm's default).
  """
  return [v for k, v in tf1_variable_map(model).items()
          if v.trainable and not is_normalization(k) and (biases or not k.endswith('/bias'))]
