"""ResNet's model_fn: model, loss, optimizer, learning rate and metrics, for the Estimator.

What the labels mean (targets, class weights, the loss, eval's metrics, predictions) is the run's task's
(resnet/task/: ``tasks.for_params``); this module composes it with the model, the optimizer and the step.
The reference's recipe: softmax cross-entropy with label smoothing; weight decay ``wd * sum(w^2)/2`` over every
non-normalisation variable (conv kernels, dense kernel and bias); TF1 Nesterov momentum, or LARS (which applies
the weight decay itself); per-replica batch norm; optional moving averages of the weights; eval metrics
top_1_accuracy, top_5_accuracy and loss (single-label). Precision follows ``params['precision']``: bfloat16 and float16 run the
network in 16 bits with float32 variables and logits; float16 adds dynamic loss scaling.

Everything inside the replica step is TPU-clean: numeric dtypes only (no float64, no strings) and static shapes.
"""
import contextlib
import math
from typing import Any, Callable, ContextManager, Dict, List, Mapping, Optional, Tuple

from absl import logging
import keras
import tensorflow as tf

from official_input import resnet_preprocessing
from params.model_config import ModelConfig
from resnet.task import tasks
from resnet.training import distillation
from resnet.training import fine_tuning
from resnet.training import lr_schedules
from resnet.training import mixing
from resnet.training import optimizers
from resnet.model import resnet_model
from resnet.model import layers
from resnet.model import tf1_names
from resnet.weights import ema as ema_lib
from resnet.estimator.spec import EstimatorSpec, ModeKeys, ObjectScope, RunParams, ServingInput

MODEL, OPTIMIZER = 'model', 'optimizer'
# The training loss's data term (the loss without weight decay), a train scalar: what the divergence check reads.
CROSS_ENTROPY = 'cross_entropy'
# How much the logits vary across a replica's batch (their standard deviation over the batch, averaged over the
# classes), a train scalar: near 0 means the model answers every input alike (a collapse the divergence check names).
OUTPUT_SPREAD = 'output_spread'


def dtype_policy(precision: str) -> str:
  """Keras policy for a precision param: compute in it, keep variables float32."""
  return 'float32' if precision == 'float32' else f'mixed_{precision}'


def build_model(params: Mapping[str, Any]) -> keras.Model:
  model = resnet_model.resnet(ModelConfig.from_params(params), dtype_policy(params['precision']))
  if params['loss'] == 'binary_cross_entropy':
    # Each sigmoid starts at the class prior 1/K (RetinaNet's prior init), not 0.5: an untrained head then scores
    # what the divergence guard calls chance, and BCE's small per-class gradients need not first pull K biases down
    # from 0. A warm start that copies a head replaces it; a checkpoint restore too.
    tf1_names.tf1_variable_map(model)['dense/bias'].assign(
        tf.fill([params['num_label_classes']], -math.log(max(params['num_label_classes'] - 1, 1))))
  fine_tuning.log_settings(params)
  if params['freeze_batch_norm']:
    frozen = fine_tuning.freeze_batch_norm_statistics(model)
    logging.info('freeze_batch_norm: %d batch-norm layers keep their moving statistics while training.', frozen)
  return model


def build_optimizer(params: Mapping[str, Any], model: keras.Model) -> keras.optimizers.Optimizer:
  # The step assigns the learning rate once per step (the same value the summaries show).
  # The train step sums the gradients over replicas itself (see optimizers.ReplicaSumOptimizer).
  # clip_grad_norm is the step's (optimizers.clip_then_decay), not Keras': Keras would clip the L2 term's gradient too.
  if params['enable_lars']:  # the reference's LARS has no Nesterov variant: use_nesterov is for momentum only
    optimizer = optimizers.LARSMomentum(learning_rate=0.0, momentum=params['momentum'],
                                        weight_decay=params['weight_decay'], nesterov=False, gradients_summed=True)
  elif params['optimizer'] in ('adamw', 'lamb', 'muon'):
    decayed = {v.path for v in tf1_names.weight_decay_variables(model, params['weight_decay_biases'])}
    adaptive = {'adamw': optimizers.AdamW, 'lamb': optimizers.Lamb, 'muon': optimizers.Muon}[params['optimizer']]
    muon = (dict(momentum=params['muon_momentum'], nesterov=params['use_nesterov'], ns_steps=params['muon_ns_steps'],
                 adamw_lr_ratio=params['muon_adamw_lr_ratio']) if params['optimizer'] == 'muon' else {})
    optimizer = adaptive(learning_rate=0.0, beta_1=params['adam_beta1'], beta_2=params['adam_beta2'],
                         epsilon=params['adam_epsilon'], weight_decay=params['weight_decay'],
                         decayed=decayed.__contains__, gradients_summed=True, **muon)
  else:
    optimizer = optimizers.TF1Momentum(learning_rate=0.0, momentum=params['momentum'],
                                       nesterov=params['use_nesterov'], gradients_summed=True)
  if params['precision'] == 'float16':
    optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
  # Build slots now, eagerly: Keras 3 creates them lazily, which fails inside a distributed tf.function.
  optimizer.build(model.trainable_variables)
  return optimizer


def moving_average(scope: ObjectScope) -> Optional[ema_lib.ModelEMA]:
  return scope.get(ema_lib.CHECKPOINT_NAME)


def averaged_weights(scope: ObjectScope) -> Callable[[], ContextManager]:
  """A context in which the model holds its moving-average weights (a no-op without moving averages)."""
  def context() -> ContextManager:
    ema = moving_average(scope)
    return ema.averaged_weights() if ema is not None else contextlib.nullcontext()
  return context


def _weight_decay(model: keras.Model, params: Mapping[str, Any]) -> tf.Tensor:
  """The loss's L2 term; none under LARS, AdamW, LAMB and Muon, which apply the weight decay themselves (so eval's loss
  equals train's)."""
  weight_decay = params['weight_decay']
  if not weight_decay or params['enable_lars'] or params['optimizer'] != 'momentum':
    return tf.constant(0.0, tf.float32)
  return weight_decay * tf.add_n([tf.nn.l2_loss(tf.cast(v, tf.float32))
                                  for v in tf1_names.weight_decay_variables(model, params['weight_decay_biases'])])


def _images(features: Any) -> tf.Tensor:
  return features['image'] if isinstance(features, dict) else features


# Written in tensor ops (tf.cond, tf.where) with Python ifs on params only: AutoGraph converting it and all it calls
# (model, loss, optimizer, schedules) cost ~3 s at every start. The runner keeps AutoGraph for other model_fns.
@tf.autograph.experimental.do_not_convert
def resnet_model_fn(features: Any, labels: Optional[tf.Tensor], mode: str,
                    params: RunParams) -> Optional[EstimatorSpec]:
  """TPUEstimator-style model_fn. features: images [B,S,S,3] (0..255) or {'image': ...}."""
  scope = params.context.scope
  model = scope.get_or_create(MODEL, lambda: build_model(params))
  if params['moving_average_decay']:
    scope.get_or_create(ema_lib.CHECKPOINT_NAME, lambda: ema_lib.ModelEMA(model, params['moving_average_decay']))
  task = tasks.for_params(params)
  if mode == ModeKeys.PREDICT:
    task.predict_objects(scope)
  if mode == ModeKeys.TRAIN:
    scope.get_or_create(OPTIMIZER, lambda: build_optimizer(params, model))
    if distillation.enabled(params):  # read from its source at every start: never saved with the student
      scope.get_or_create(distillation.TEACHER,
                          lambda: distillation.build_teacher(params, dtype_policy(params['precision'])), saved=False)
  if features is None:  # the estimator's build call: the objects exist now
    return None
  images = _images(features)

  if mode == ModeKeys.PREDICT:
    return EstimatorSpec(mode, predictions=task.predictions(inference_logits(model, images, params), scope))
  if mode == ModeKeys.TRAIN:
    return _train_step(scope, images, labels, params)

  logits = inference_logits(model, images, params)
  per_example = task.per_example_loss(logits, task.targets(labels)) + _weight_decay(model, params)
  metrics, sums, outputs = task.eval_parts(logits, labels, per_example)
  return EstimatorSpec(mode, eval_metrics=metrics, eval_sums=sums, eval_outputs=outputs)


def inference_logits(model: keras.Model, images: tf.Tensor, params: RunParams) -> tf.Tensor:
  """Eval's and predict's logits. With test-time augmentation (timm's --tta, torchvision's FiveCrop/TenCrop): the
  probabilities the loss models, averaged over the views, as logits the loss reads back: softmax's class
  probabilities (log of the mean), or binary_cross_entropy's per-class sigmoids (logit of the mean). Argmax, the
  loss and predict then read the average. Views: flip = the image and its mirror image; five_crop = the centre and
  the four corner S x S crops of the larger image the input gives (resnet_preprocessing.eval_view); ten_crop = those
  and their mirror images. A SavedModel serves the single view (its TFLite and ONNX files are checked against it)."""
  if resnet_preprocessing.served_tta(params, deployed=params.context.exporting) == 'none':
    return model(images, training=False)
  views = resnet_preprocessing.tta_views(images, params)
  count = len(views)
  logits = model(tf.concat(views, axis=0), training=False)   # one call: views are equal-sized batches
  views = tf.stack(tf.split(tf.cast(logits, tf.float32), count, axis=0))
  # Means of probabilities from log-probabilities: finite where a probability underflows in every view.
  log_mean = lambda log_probabilities: tf.reduce_logsumexp(log_probabilities, axis=0) - math.log(float(count))
  if params['loss'] == 'binary_cross_entropy':
    # log(p) - log(1 - p), p the mean sigmoid; log sigmoid(z) = -softplus(-z).
    return log_mean(-tf.nn.softplus(-views)) - log_mean(-tf.nn.softplus(views))
  return log_mean(tf.nn.log_softmax(views))


def _train_step(scope: ObjectScope, images: tf.Tensor, labels: tf.Tensor, params: RunParams) -> EstimatorSpec:
  model, optimizer = scope.get(MODEL), scope.get(OPTIMIZER)
  step = params.context.global_step
  replicas = params.context.num_replicas
  keep_prob_var = getattr(model, 'dropblock_keep_prob', None)
  if keep_prob_var is not None:
    keep_prob_var.assign(layers.scheduled_dropblock_keep_prob(step, params['train_steps'],
                                                                    params['dropblock_keep_prob']))
  task = tasks.for_params(params)
  labels = task.check_labels(labels)
  lr = lr_schedules.learning_rate(step, params)
  optimizer.learning_rate.assign(lr)
  targets = task.targets(labels, training=True)   # with the class weights where the task puts them
  mix = mixing.MixConfig.from_params(params)
  if mix.enabled:
    images, targets = mixing.mix(images, targets, mix, mixing.mix_seed(step, params['random_seed']))
  denominator = _loss_denominator(targets, params, replicas)
  loss_of = _data_loss(scope, params)

  loss_scaled = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)

  def scaled_loss(data_sum: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
    """(loss, loss as the optimizer differentiates it): this replica's share of the batch mean. The weight decay is
    not in it: its gradient joins after clipping (optimizers.clip_then_decay)."""
    loss = data_sum / denominator
    return loss, optimizer.scale_loss(loss) if loss_scaled else loss

  variables = model.trainable_variables
  forward = fine_tuning.training_forward(model, step, params)
  accumulate = params['gradient_accumulation_steps']
  if accumulate > 1:
    loss, task_sum, spread, gradients = _accumulated_gradients(forward, variables, images, targets, accumulate,
                                                               loss_of, scaled_loss)
  else:
    with tf.GradientTape() as tape:
      logits = forward(images)
      data_sum, task_sum = loss_of(images, logits, targets)
      loss, scaled = scaled_loss(data_sum)
    gradients = tape.gradient(scaled, variables)
    spread = _output_spread(logits)
  with tf.GradientTape() as tape:   # the L2 term (none under LARS, AdamW, LAMB, Muon): its value and gradient, once
    decay = _weight_decay(model, params)
  decay_gradients = tape.gradient(decay, variables)
  loss += decay / replicas   # this replica's share, so that the sum over replicas is one term
  cross_entropy = task_sum / denominator
  # Summed here, before a loss-scale optimizer looks at them: every replica then judges the same gradients
  # finite or not, and applies or skips the step together.
  gradients = optimizers.sum_over_replicas(gradients)
  # Head-only steps and layer-wise decay: constant factors per variable (fine_tuning.py says why that is exact).
  scales = fine_tuning.gradient_scales(model, step, params)
  gradients = optimizers.clip_then_decay(fine_tuning.scale(gradients, scales),
                                         fine_tuning.scale(decay_gradients, scales), params['clip_grad_norm'],
                                         optimizer.dynamic_scale if loss_scaled else None)
  optimizer.apply_gradients(zip(gradients, variables))
  ema = moving_average(scope)
  if ema is not None:
    ema.update(step + 1)  # the reference's num_updates: the global step after this update
  epoch = tf.cast(step, tf.float32) / lr_schedules.params_steps_per_epoch(params)
  # Scalars are averaged over replicas: each reports its share of the cross-entropy times the replica count. The
  # cross-entropy is averaged over the loop's steps too, as the loss is (the divergence check reads it).
  means = {CROSS_ENTROPY: cross_entropy * replicas}
  if spread is not None:
    means[OUTPUT_SPREAD] = spread
  return EstimatorSpec(ModeKeys.TRAIN, loss=loss, scalars={'learning_rate': lr, 'current_epoch': epoch},
                       mean_scalars=means)


LossOf = Callable[[tf.Tensor, tf.Tensor, tf.Tensor], Tuple[tf.Tensor, tf.Tensor]]


def _data_loss(scope: ObjectScope, params: Mapping[str, Any]) -> LossOf:
  """``loss_of(images, logits, targets)``: the (micro-)batch's summed (data loss, task loss), the task loss being
  against the labels alone (the CROSS_ENTROPY scalar, which the divergence guard reads). A distillation teacher
  answers the same (mixed) images there, one micro-batch at a time under gradient accumulation."""
  teacher = scope.get(distillation.TEACHER)
  task = tasks.for_params(params)

  def loss_of(images: tf.Tensor, logits: tf.Tensor, targets: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
    hard = task.per_example_loss(logits, targets, training=True)
    task_sum = tf.reduce_sum(hard)
    if teacher is None:
      return task_sum, task_sum
    soft = distillation.soft_loss(logits, distillation.teacher_logits(teacher, images), params['distill_temperature'])
    return tf.reduce_sum(distillation.combine(hard, soft, task.example_weights(targets), params)), task_sum
  return loss_of


def _output_spread(logits: tf.Tensor) -> Optional[tf.Tensor]:
  """OUTPUT_SPREAD of one batch; None for a batch of one (nothing to vary across). Two-pass (mean first), so equal
  rows give 0 up to the mean's rounding, whatever the logits' size."""
  if logits.shape[0] is not None and logits.shape[0] < 2:
    return None
  return tf.reduce_mean(tf.math.reduce_std(tf.cast(logits, tf.float32), axis=0))


def _loss_denominator(targets: tf.Tensor, params: Mapping[str, Any], replicas: int) -> tf.Tensor:
  """What the summed cross-entropy is divided by: the global batch, or with class_weight_normalization=weight_sum
  the global batch's sum of weights (each target row sums to its example's weight, mixed ones to the mixed
  weight), summed over replicas inside the step so every replica divides by the same number."""
  global_batch = tf.constant(float(params['batch_size'] * replicas))
  if params['class_weights'] is None or params['class_weight_normalization'] == 'batch_size':
    return global_batch
  weight_sum = optimizers.sum_over_replicas([tf.reduce_sum(tf.stop_gradient(targets))])[0]
  # All-zero weights in a batch (only zero-weight classes drawn): no loss rather than 0/0.
  return tf.maximum(weight_sum, 1e-12)


def _accumulated_gradients(forward: Callable[[tf.Tensor], tf.Tensor], variables: List[tf.Variable],
                           images: tf.Tensor, targets: tf.Tensor, steps: int, loss_of: LossOf,
                           scaled_loss: Callable[..., Tuple[tf.Tensor, tf.Tensor]]
                           ) -> Tuple[tf.Tensor, tf.Tensor, Optional[tf.Tensor], List[tf.Tensor]]:
  """(loss, the summed task loss, the output spread, gradients) of the replica's batch in ``steps`` micro-batches,
  one after another (a while loop: one micro-batch's activations in memory at a time), their gradients summed (the
  step adds the weight decay's once): the same gradients as one batch wherever batch norm cannot tell (it normalises
  each micro-batch). The spread is the micro-batches' mean (None for micro-batches of one)."""
  batch = images.shape[0]
  if batch is None or batch % steps:
    raise ValueError(f'gradient_accumulation_steps={steps} must divide the per-replica batch ({batch}): '
                     'train_batch_size must be a multiple of replicas x gradient_accumulation_steps.')
  micro = batch // steps

  def body(i, loss_sum, task_total, spread_sum, gradient_sums):
    start = i * micro
    x = tf.slice(images, [start, 0, 0, 0], [micro, -1, -1, -1])
    y = tf.slice(targets, [start, 0], [micro, -1])
    with tf.GradientTape() as tape:
      logits = forward(x)
      data_sum, task_sum = loss_of(x, logits, y)
      loss, scaled = scaled_loss(data_sum)
    gradients = tape.gradient(scaled, variables)
    spread = _output_spread(logits)
    spread_sum += tf.stop_gradient(spread) if spread is not None else 0.0
    return (i + 1, loss_sum + loss, task_total + tf.stop_gradient(task_sum), spread_sum,
            [_plus(s, g) for s, g in zip(gradient_sums, gradients)])

  zeros = [tf.zeros(v.shape, v.dtype) for v in variables]
  _, loss, task_sum, spread_sum, gradients = tf.while_loop(
      lambda i, *_: i < steps, body, (tf.constant(0), tf.constant(0.0), tf.constant(0.0), tf.constant(0.0), zeros))
  spread = spread_sum / steps if micro >= 2 else None
  return loss, task_sum, spread, gradients


def _plus(total: tf.Tensor, gradient: Optional[tf.Tensor]) -> tf.Tensor:
  """A gradient added to a running sum; None (a variable the loss does not reach, e.g. decay on batch norm) adds
  nothing."""
  return total if gradient is None else total + tf.cast(gradient, total.dtype)


def serving_inputs(params: Mapping[str, Any]) -> Dict[str, ServingInput]:
  """Export signatures: encoded JPEG/PNG bytes (``serving_default``) and float images (``serving_images``)."""
  size = resnet_preprocessing.image_size(params, training=False)
  dtype = tf.as_dtype(params['precision'])

  def from_bytes(input):  # pylint: disable=redefined-builtin
    def one(image_bytes):
      return resnet_preprocessing.preprocess_image(image_bytes, is_training=False, image_size=size, dtype=dtype)
    return tf.map_fn(one, input, fn_output_signature=tf.TensorSpec([size, size, 3], dtype))

  def from_images(images):
    return tf.cast(images, dtype)

  return {
      'serving_default': ServingInput({'input': tf.TensorSpec([None], tf.string, name='input')}, from_bytes),
      'serving_images': ServingInput(
          {'images': tf.TensorSpec([None, size, size, 3], tf.float32, name='images')}, from_images),
  }
