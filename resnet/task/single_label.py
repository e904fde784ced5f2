"""Single-label classification (``task=single_label``, the default): one class per image, labels are class ids.

- Targets: label-smoothed one-hot rows (Keras' ``(1 - s) one_hot + s / K``); in training each row is scaled by its
  example's class weight, so the softmax cross-entropy (linear in its targets) weighs the example, and mixup/CutMix
  then give ``lam w_a CE_a + (1 - lam) w_b CE_b``, the weighted loss of each source.
- Loss: softmax cross-entropy, or (``loss=binary_cross_entropy``) timm's BinaryCrossEntropy over the classes.
- Eval: top-1, top-5 and the loss as exact sums; a confusion matrix (up to ``per_class_max_classes``) and the most
  confident misclassified images for the per-class report (``evaluation/eval_report.py``).
- Predict and export: each class's probability and the most probable class.
"""
import math
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from resnet.evaluation import predictions as predictions_lib
from resnet.task import answers
from resnet.task import task


def softmax_cross_entropy(logits: tf.Tensor, targets: tf.Tensor) -> tf.Tensor:
  """Cross-entropy ``-sum(targets * log_softmax(logits))`` against (soft) targets [B, K]: label-smoothed one-hots,
  scaled by class weights and mixed by mixup/CutMix in training. Targets summing to w give w times the loss, and
  w times its gradient (``w * softmax - targets``).

  Not ``keras.losses.categorical_crossentropy`` or ``tf.nn.softmax_cross_entropy_with_logits``: TensorFlow's fused
  kernel behind them returns ``softmax - targets`` as the gradient, right only for targets that sum to 1, so
  class-weighted targets trained on a wrong gradient unless deterministic ops (a random_seed) swapped the kernel.
  """
  return -tf.reduce_sum(targets * tf.nn.log_softmax(tf.cast(logits, tf.float32)), axis=-1)


def binary_cross_entropy(logits: tf.Tensor, targets: tf.Tensor, threshold: Optional[float]) -> tf.Tensor:
  """timm's BinaryCrossEntropy: a sigmoid per class against the targets, averaged over the classes. A target row
  sums to its example's weight w (1 without class weights; mixing keeps sums linear), so the loss is w times the
  BCE of the row / w: class weights weigh examples, as in the softmax loss. ``threshold`` (timm's
  target_threshold) binarises the smoothed, mixed targets."""
  weight = tf.reduce_sum(targets, axis=-1)
  targets = targets / tf.maximum(weight, 1e-12)[:, None]
  if threshold:
    targets = tf.cast(targets > threshold, tf.float32)
  per_class = tf.nn.sigmoid_cross_entropy_with_logits(labels=targets, logits=tf.cast(logits, tf.float32))
  return weight * tf.reduce_mean(per_class, axis=-1)


def smoothed_one_hot(labels: tf.Tensor, num_classes: int, smoothing: float) -> tf.Tensor:
  """Keras' label smoothing: ``(1 - s) * one_hot + s / num_classes``; negative (padding) labels give class 0."""
  one_hot = tf.one_hot(tf.maximum(labels, 0), num_classes, dtype=tf.float32)
  return one_hot * (1.0 - smoothing) + smoothing / num_classes if smoothing else one_hot


def confusion_matrix(labels: tf.Tensor, predicted: tf.Tensor, weights: tf.Tensor, num_classes: int) -> tf.Tensor:
  """[true, predicted] counts of the batch, float32: one-hot rows (weighted: padding 0) times one-hot columns. A
  matmul, not a scatter: static shapes for TPUs, and exact (0/1 products summed in float32, below 2**24)."""
  true = tf.one_hot(labels, num_classes, dtype=tf.float32) * weights[:, None]
  return tf.matmul(true, tf.one_hot(predicted, num_classes, dtype=tf.float32), transpose_a=True)


@task.register
class SingleLabel(task.Task):
  name = 'single_label'
  defaults = {'loss': 'softmax_cross_entropy', 'best_metric': 'top_1_accuracy'}

  def check_labels(self, labels: tf.Tensor) -> tf.Tensor:
    """Labels past the head would one-hot to zeros and train silently on nothing: fail loudly instead. (An
    Assert: XLA compiles it to nothing, so on TPUs the input pipeline's check is the one.)"""
    message = (f'a label >= num_label_classes={self.num_classes}: the data has more classes than the model. '
               f'Set num_label_classes to the number of classes in labels.txt (1001 keeps a background class).')
    with tf.control_dependencies([tf.debugging.assert_less(labels, self.num_classes, message=message)]):
      return tf.identity(labels)

  def targets(self, labels: tf.Tensor, training: bool = False) -> tf.Tensor:
    targets = smoothed_one_hot(labels, self.num_classes, self.params['label_smoothing'])
    weights = self.params['class_weights']
    if training and weights is not None:
      targets = targets * tf.gather(tf.constant(weights, tf.float32), labels)[:, None]
    return targets

  def per_example_loss(self, logits: tf.Tensor, targets: tf.Tensor, training: bool = False) -> tf.Tensor:
    if self.params['loss'] == 'binary_cross_entropy':
      return binary_cross_entropy(logits, targets, self.params['bce_target_threshold'])
    return softmax_cross_entropy(logits, targets)

  def example_weights(self, targets: tf.Tensor) -> tf.Tensor:
    return tf.reduce_sum(targets, axis=-1)   # each target row sums to its example's class weight

  def balanced_class_weights(self, counts: Sequence[int], num_images: int) -> List[float]:
    """n_images / (n_classes x n_class) over the classes with training images (scikit-learn's and Keras' users'
    'balanced'): every class then weighs as much in the loss; a class without images (background) keeps 1."""
    present = [c for c in counts if c > 0]
    total = sum(present)
    return [round(total / (len(present) * c), 6) if c > 0 else 1.0 for c in counts]

  def chance_loss(self, counts: Optional[Sequence[int]], num_images: int) -> Tuple[float, str]:
    """A model that answers 1/K for every class scores ``ln K * sum(targets)`` per example. Targets sum to 1
    (label smoothing keeps the sum), to the example's class weight w_y with ``class_weights``, and mixup/CutMix mix
    two examples' weights, whose expectation is again E[w_y]: so ``ln K`` with
    ``class_weight_normalization=weight_sum`` (the sum of weights divides), and ``ln K * E[w_y]`` with
    ``batch_size``, E over the classes' training frequencies (uniform where the data has none).

    Under ``loss=binary_cross_entropy`` the guess is a sigmoid of 1/K for every class (where the head's prior init
    starts): ``(ln K + (K - 1) ln(K / (K - 1))) / K`` per class against a one-hot, about ``(1 + ln K) / K``. (``ln
    2``, every sigmoid at 0.5, would be ~90 times a healthy 1000-class loss: the guard would miss an explosion.)"""
    classes = max(self.num_classes, 2)
    chance, named = math.log(classes), f'ln {classes}'
    if self.params.get('loss') == 'binary_cross_entropy':
      chance = (math.log(classes) + (classes - 1) * math.log(classes / (classes - 1))) / classes
      named = f'binary cross-entropy of sigmoids at 1/{classes}'
    mean, over = self._mean_weight(counts)
    if over is None:
      return chance, named
    return chance * mean, f'{named} x the mean class weight {mean:.4g} over {over}'

  def _mean_weight(self, counts: Optional[Sequence[int]]) -> Tuple[float, Optional[str]]:
    """(an example's expected class weight in the batch mean, what it is the mean over; None: every example
    weighs 1 there, as without weights, with 'balanced' unresolved, or class_weight_normalization=weight_sum)."""
    weights = self.params['class_weights']
    if not weights or isinstance(weights, str) or self.params['class_weight_normalization'] == 'weight_sum':
      return 1.0, None
    total = sum(counts or ())
    if not counts or len(counts) != len(weights) or not total:
      return sum(weights) / len(weights), 'the classes (no training counts to weigh them by)'
    return sum(c / total * w for c, w in zip(counts, weights)), 'the training images of each class'

  def uninformed_loss(self, counts: Optional[Sequence[int]], num_images: int) -> Optional[float]:
    """Logits 0: softmax's uniform guess, which chance_loss is; under binary cross-entropy every sigmoid at 0.5,
    ln 2 per class, times the mean class weight."""
    if self.params.get('loss') != 'binary_cross_entropy':
      return self.chance_loss(counts, num_images)[0]
    return math.log(2) * self._mean_weight(counts)[0]

  def divergence_fixes(self) -> List[str]:
    if not self.params['class_weights']:
      return []
    return ['milder class_weights' + (' or class_weight_normalization=weight_sum'
                                      if self.params['class_weight_normalization'] == 'batch_size' else '')]

  def per_class_metrics(self) -> bool:
    """Whether eval keeps a confusion matrix: a [C, C] sum per step, so up to per_class_max_classes classes."""
    return 0 < self.num_classes <= self.params['per_class_max_classes']

  def eval_parts(self, logits: tf.Tensor, labels: tf.Tensor, per_example_loss: tf.Tensor) -> task.EvalParts:
    weights = tf.cast(labels >= 0, tf.float32)  # padding of the last batch has label -1
    safe_labels = tf.maximum(labels, 0)
    predicted = tf.argmax(logits, -1, output_type=tf.int32)
    top_1 = tf.cast(tf.equal(predicted, safe_labels), tf.float32)
    top_5 = tf.cast(tf.math.in_top_k(safe_labels, logits, min(5, self.num_classes)), tf.float32)
    count = tf.reduce_sum(weights)
    sums, outputs = {}, {}
    if self.per_class_metrics():
      sums['confusion_matrix'] = confusion_matrix(safe_labels, predicted, weights, self.num_classes)
    if self.params['max_misclassified_rows']:
      outputs = {'predicted': predicted,
                 'probability': tf.reduce_max(tf.nn.softmax(tf.cast(logits, tf.float32)), axis=-1)}
    return {'top_1_accuracy': (tf.reduce_sum(top_1 * weights), count),
            'top_5_accuracy': (tf.reduce_sum(top_5 * weights), count),
            'loss': (tf.reduce_sum(per_example_loss * weights), count)}, sums, outputs

  def eval_hooks(self, class_names: Callable[[], List[str]], background: Callable[[], bool]) -> List[Any]:
    if not (self.per_class_metrics() or self.params['max_misclassified_rows']):
      return []
    from resnet.evaluation import eval_report  # pylint: disable=g-import-not-at-top
    return [eval_report.ClassificationReport(class_names(), background(), self.params['max_misclassified_rows'])]

  def predictions(self, logits: tf.Tensor, scope) -> Dict[str, tf.Tensor]:
    return {'classes': tf.argmax(logits, axis=-1), 'probabilities': tf.nn.softmax(tf.cast(logits, tf.float32))}

  def prediction_writer(self, decisions: Any, class_names: List[str]):
    return predictions_lib.SingleLabelRows(self.params, class_names)

  def answers(self, decisions: Any) -> answers.Answers:
    return answers.TopOne()
