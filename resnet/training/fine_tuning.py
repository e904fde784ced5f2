"""Fine-tuning controls, each a param and off by default: frozen batch-norm statistics, the head alone for the first
steps, and layer-wise learning-rate decay per stage (timm's ``--layer-decay`` for ResNets).

Stages: 0 the stem, 1-4 the block groups, 5 the head (and anything after the last block group). With
``layer_decay=d`` a variable of stage s learns at ``d ** (5 - s)`` times the learning rate: the head at the full
rate, the stem at ``d ** 5``. The schedules act on gradients, not on a per-variable learning rate: for (Nesterov)
momentum SGD a gradient scaled by a constant factor on every step is exactly that variable's learning rate scaled
by it (the weight decay lives in the loss, so it is scaled with it, as in timm's parameter groups). LARS
normalises each layer's gradient and would undo the scale, so the two do not combine.
"""
from typing import Any, Callable, List, Mapping, Optional

from absl import logging
import keras
import tensorflow as tf

from resnet.model import layers

HEAD_STAGE = 5
STAGE_NAMES = ('stem', 'group 1', 'group 2', 'group 3', 'group 4', 'head')


def variable_stages(model: keras.Model) -> List[int]:
  """The stage of each of ``model.trainable_variables``, from the stage resnet() stamps on each layer."""
  stages = {}
  for layer in model._flatten_layers(include_self=False):  # pylint: disable=protected-access
    stage = getattr(layer, layers.STAGE_ATTRIBUTE, None)
    if stage is None:
      continue
    for variable in layer.trainable_variables:
      stages[id(variable)] = stage
  missing = [v.path for v in model.trainable_variables if id(v) not in stages]
  if missing:
    raise ValueError(f'No stage known for {missing[:3]}: the model was not built by resnet_model.resnet().')
  return [stages[id(v)] for v in model.trainable_variables]


def gradient_scales(model: keras.Model, step: tf.Tensor, params: Mapping[str, Any]) -> Optional[tf.Tensor]:
  """One factor per trainable variable for this step, or None when no control is on."""
  decay = params['layer_decay']
  head_only = params['train_head_only_steps']
  if decay is None and not head_only:
    return None
  stages = variable_stages(model)
  scales = tf.constant([(decay ** (HEAD_STAGE - s)) if decay is not None else 1.0 for s in stages], tf.float32)
  if head_only:
    head = tf.constant([1.0 if s == HEAD_STAGE else 0.0 for s in stages], tf.float32)
    scales = tf.where(step < head_only, scales * head, scales)
  return scales


def training_forward(model: keras.Model, step: tf.Tensor,
                     params: Mapping[str, Any]) -> Callable[[tf.Tensor], tf.Tensor]:
  """The train step's forward pass. During train_head_only_steps the model runs in inference mode, as a linear
  probe on a frozen backbone (Keras' ``trainable=False`` fine-tuning recipe): batch norm keeps the checkpoint's
  moving statistics and normalises with them, dropout and stochastic depth are off; only the head learns. After
  it, ordinary training mode."""
  head_only = params['train_head_only_steps']
  if not head_only:
    return lambda images: model(images, training=True)
  return lambda images: tf.cond(step < head_only, lambda: model(images, training=False),
                                lambda: model(images, training=True))


def scale(gradients: List[Optional[tf.Tensor]], scales: Optional[tf.Tensor]) -> List[Optional[tf.Tensor]]:
  if scales is None:
    return gradients
  return [g if g is None else g * tf.cast(scales[i], g.dtype) for i, g in enumerate(gradients)]


def log_settings(params: Mapping[str, Any]) -> None:
  """What the controls will do, logged once when the model is built (not while tracing the step, which runs once
  per trace and, where AutoGraph converts it, has its lines attributed to TensorFlow and dropped by resnet_main's
  filter)."""
  decay = params['layer_decay']
  if decay is not None:
    factors = ', '.join(f'{name} {decay ** (HEAD_STAGE - s):.3g}' for s, name in enumerate(STAGE_NAMES))
    logging.info('layer_decay=%g: learning-rate factor per stage: %s.', decay, factors)
  if params['train_head_only_steps']:
    logging.info('train_head_only_steps=%d: only the classifier head learns before step %d, on the backbone in '
                 'inference mode.', params['train_head_only_steps'], params['train_head_only_steps'])
    if not params['resnet_checkpoint']:
      logging.warning('train_head_only_steps without resnet_checkpoint: the head learns on a random backbone with '
                      'untrained batch-norm statistics for %d steps. It is for fine-tuning pretrained weights.',
                      params['train_head_only_steps'])


def freeze_batch_norm_statistics(model: keras.Model) -> int:
  """Batch norm in inference mode while training (moving statistics fixed; gamma and beta still learn): for
  fine-tuning with batches too small for good batch statistics. Returns the number of layers frozen."""
  frozen = 0
  for layer in model._flatten_layers(include_self=False):  # pylint: disable=protected-access
    if isinstance(layer, keras.layers.BatchNormalization):
      layer.frozen_statistics = True
      frozen += 1
  return frozen
