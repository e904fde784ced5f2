"""Multi-label training and evaluation (``task=multi_label``): labels are multi-hot rows [B, K] (an image holds
any number of the classes; padding rows are -1), each class a sigmoid.

- Targets: the multi-hot row, label-smoothed towards 0.5 (``y (1 - e) + e / 2``: Keras' and TF Model Garden's
  binary label smoothing), mixed by mixup/CutMix as they are (a mixed row is the mix of two rows), and binarised by
  ``bce_target_threshold`` when set.
- Loss: binary cross-entropy per class averaged over the classes, with ``class_weights`` weighing each class's
  positives: the term of class c weighs ``1 + (w_c - 1) q`` (w_c on a positive, 1 on a negative, in between for a
  smoothed or mixed target). For hard targets that is PyTorch's ``pos_weight`` exactly; unlike ``pos_weight`` it
  keeps each term's optimum at its target q, so label smoothing and mixup still mean what they say (``pos_weight``
  would pull a rare class's smoothed negatives, q = e/2, towards w e / (w e + 2 - e), 0.84 at w = 99, e = 0.1).
  Examples all weigh 1 (``class_weight_normalization=weight_sum`` is refused).
- Eval: the loss, exact-match and precision@1 as exact sums, and each class's score histograms
  (``label_metrics``), from which the eval hook computes mAP, F1 and tuned thresholds.
- Predict and export: per-class probabilities, the decision at each class's threshold (``THRESHOLDS``, a variable
  the application sets from the evaluation of the checkpoint it serves), and the most probable class.
"""
from typing import Any, Dict, Mapping, Optional, Tuple

import tensorflow as tf

from resnet.evaluation import label_metrics

THRESHOLDS = 'label_thresholds'
HISTOGRAMS = 'label_score_histograms'


def targets(labels: tf.Tensor, smoothing: float) -> tf.Tensor:
  """Multi-hot labels [B, K] to smoothed binary targets (padding rows of -1, which only eval sees, read as 0; eval
  weighs their examples 0)."""
  y = tf.cast(tf.maximum(labels, 0), tf.float32)
  return y * (1.0 - smoothing) + smoothing / 2.0 if smoothing else y


def per_example_loss(logits: tf.Tensor, targets_: tf.Tensor, threshold: Optional[float],
                     positive_weights: Optional[tf.Tensor] = None) -> tf.Tensor:
  """The mean over classes of each class's binary cross-entropy, weighted ``1 + (w - 1) q`` with
  ``positive_weights`` w; one value per example."""
  if threshold:
    targets_ = tf.cast(targets_ > threshold, tf.float32)
  per_class = tf.nn.sigmoid_cross_entropy_with_logits(labels=targets_, logits=tf.cast(logits, tf.float32))
  if positive_weights is not None:
    per_class *= 1.0 + (positive_weights - 1.0) * targets_
  return tf.reduce_mean(per_class, axis=-1)


def thresholds_variable(num_classes: int) -> tf.Variable:
  """Each class's decision threshold on its probability (0.5 until the application sets the tuned ones)."""
  return tf.Variable(tf.fill([num_classes], 0.5), trainable=False, name=THRESHOLDS)


def predictions(logits: tf.Tensor, thresholds: tf.Variable) -> Dict[str, tf.Tensor]:
  probabilities = tf.sigmoid(tf.cast(logits, tf.float32))
  return {'probabilities': probabilities,
          'labels': tf.cast(probabilities >= tf.convert_to_tensor(thresholds), tf.int32),
          'classes': tf.argmax(logits, axis=-1)}


def score_histograms(logits: tf.Tensor, labels: tf.Tensor, num_classes: int) -> tf.Tensor:
  """[2, K, BINS] float32: this batch's positives and negatives per class and logit bin (label_metrics.score_bins);
  padding rows count nowhere. A segment sum over class x bin ids: O(B K), static shapes."""
  logits = tf.cast(logits, tf.float32)
  bins = tf.cast(tf.clip_by_value(tf.floor((logits + label_metrics.LOGIT_LIMIT) / label_metrics.WIDTH), 0,
                                  label_metrics.BINS - 1), tf.int32)
  ids = tf.reshape(bins + tf.range(num_classes)[None, :] * label_metrics.BINS, [-1])
  valid = tf.cast(labels[:, :1] >= 0, tf.float32)
  positive = tf.cast(labels > 0, tf.float32) * valid
  negative = (1.0 - positive) * valid
  segments = num_classes * label_metrics.BINS
  sums = [tf.math.unsorted_segment_sum(tf.reshape(w, [-1]), ids, segments) for w in (positive, negative)]
  return tf.reshape(tf.stack(sums), [2, num_classes, label_metrics.BINS])


def eval_metrics(logits: tf.Tensor, labels: tf.Tensor, loss: tf.Tensor
                 ) -> Tuple[Dict[str, Tuple[tf.Tensor, tf.Tensor]], Dict[str, tf.Tensor]]:
  """(eval_metrics, eval_sums) of a batch. ``exact_match``: every class decided right at 0.5 (subset accuracy);
  ``precision_at_1``: the most probable class is one of the image's, over images with at least one."""
  weights = tf.cast(labels[:, 0] >= 0, tf.float32)
  truth = tf.maximum(labels, 0)
  decided = tf.cast(tf.cast(logits, tf.float32) >= 0.0, tf.int32)
  exact = tf.cast(tf.reduce_all(tf.equal(decided, truth), axis=-1), tf.float32)
  has_labels = tf.cast(tf.reduce_any(truth > 0, axis=-1), tf.float32) * weights
  top = tf.argmax(logits, axis=-1, output_type=tf.int32)
  top_right = tf.cast(tf.gather(truth, top, batch_dims=1) > 0, tf.float32)
  count = tf.reduce_sum(weights)
  metrics = {'loss': (tf.reduce_sum(loss * weights), count),
             'exact_match': (tf.reduce_sum(exact * weights), count),
             'precision_at_1': (tf.reduce_sum(top_right * has_labels), tf.reduce_sum(has_labels))}
  return metrics, {HISTOGRAMS: score_histograms(logits, labels, int(logits.shape[-1]))}


def enabled(params: Mapping[str, Any]) -> bool:
  return params.get('task') == 'multi_label'
