"""Multi-label training and evaluation (``task=multi_label``): labels are multi-hot rows [B, K] (an image holds
any number of the classes; padding rows are -1), each class a sigmoid.

- Targets: the multi-hot row, label-smoothed towards 0.5 (``y (1 - e) + e / 2``: Keras' and TF Model Garden's
  binary label smoothing), mixed by mixup/CutMix as they are (a mixed row is the mix of two rows), and binarised by
  ``bce_target_threshold`` when set.
- Loss: binary cross-entropy per class averaged over the classes, with ``class_weights`` weighing each class's
  positives: the term of class c weighs ``1 + (w_c - 1) y`` where y = (q - e/2) / (1 - e) is the target q with the
  label smoothing e taken off (the multi-hot label, or mixup's mix of two): w_c on a positive, exactly 1 on a
  negative, in between for a mixed target. Weighing by the smoothed q instead gave a negative 1 + (w - 1) e/2
  (17.6 for a class at 0.3% with e = 0.1, a loss ~17 times the unweighted one). For hard targets that is PyTorch's
  ``pos_weight`` exactly; unlike ``pos_weight`` it keeps each term's optimum at its target q, so label smoothing
  and mixup still mean what they say (``pos_weight`` would pull a rare class's smoothed negatives, q = e/2, towards
  w e / (w e + 2 - e), 0.84 at w = 99, e = 0.1). Examples all weigh 1 (``class_weight_normalization=weight_sum``
  is refused).
- Eval: the loss, exact-match and precision@1 as exact sums, each class's score histograms (``label_metrics``),
  and each image's logits (eval outputs), from which the eval hook computes mAP, F1 and tuned thresholds exactly
  (the histograms where it did not see every image: multi-worker eval).
- Predict and export: per-class probabilities, the decision at each class's threshold (``THRESHOLDS``, a variable
  ``decisions`` sets from the evaluation of the checkpoint served), and the most probable class; the thresholds are
  exported beside the files (``label_thresholds.json``) and deployed files decide with those.
"""
import math
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from absl import logging
import tensorflow as tf

from resnet.estimator import checkpoints
from resnet.estimator.spec import ModeKeys
from resnet.evaluation import label_metrics
from resnet.evaluation import multi_label_report
from resnet.evaluation import predictions as predictions_lib
from resnet.task import answers
from resnet.task import task

THRESHOLDS = 'label_thresholds'
HISTOGRAMS = label_metrics.HISTOGRAMS


def targets(labels: tf.Tensor, smoothing: float) -> tf.Tensor:
  """Multi-hot labels [B, K] to smoothed binary targets (padding rows of -1, which only eval sees, read as 0; eval
  weighs their examples 0)."""
  y = tf.cast(tf.maximum(labels, 0), tf.float32)
  return y * (1.0 - smoothing) + smoothing / 2.0 if smoothing else y


def positive_share(targets_: tf.Tensor, smoothing: float) -> tf.Tensor:
  """How much of a positive each target is: the target with the label smoothing taken off,
  ``(q - e/2) / (1 - e)`` (1 on a positive, 0 on a negative, lam on mixup's mix of a positive and a negative)."""
  if not smoothing:
    return targets_
  return tf.clip_by_value((targets_ - smoothing / 2.0) / (1.0 - smoothing), 0.0, 1.0)


def per_example_loss(logits: tf.Tensor, targets_: tf.Tensor, threshold: Optional[float],
                     positive_weights: Optional[tf.Tensor] = None, smoothing: float = 0.0) -> tf.Tensor:
  """The mean over classes of each class's binary cross-entropy, weighted ``1 + (w - 1) y`` with
  ``positive_weights`` w and y the target's share of a positive (``positive_share``: the smoothing ``smoothing``
  taken off, so that a negative weighs exactly 1 and a positive w); one value per example."""
  if threshold:
    targets_ = tf.cast(targets_ > threshold, tf.float32)
    smoothing = 0.0
  per_class = tf.nn.sigmoid_cross_entropy_with_logits(labels=targets_, logits=tf.cast(logits, tf.float32))
  if positive_weights is not None:
    per_class *= 1.0 + (positive_weights - 1.0) * positive_share(targets_, smoothing)
  return tf.reduce_mean(per_class, axis=-1)


def thresholds_variable(num_classes: int) -> tf.Variable:
  """Each class's decision threshold on its probability (0.5 until the application sets the tuned ones)."""
  return tf.Variable(tf.fill([num_classes], 0.5), trainable=False, name=THRESHOLDS)


def predictions(logits: tf.Tensor, thresholds: tf.Variable) -> Dict[str, tf.Tensor]:
  """``logits`` too: the scores that rank (predict's labelled report), where float32 sigmoids tie above ~16."""
  logits = tf.cast(logits, tf.float32)
  probabilities = tf.sigmoid(logits)
  return {'probabilities': probabilities, 'logits': logits,
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
  ``precision_at_1``: the most probable class is one of the image's, over images with at least one; the sums:
  the score histograms."""
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


@task.register
class MultiLabel(task.Task):
  name = 'multi_label'
  defaults = {'loss': 'binary_cross_entropy', 'best_metric': 'mAP'}

  def targets(self, labels: tf.Tensor, training: bool = False) -> tf.Tensor:
    return targets(labels, self.params['label_smoothing'])

  def per_example_loss(self, logits: tf.Tensor, targets_: tf.Tensor, training: bool = False) -> tf.Tensor:
    weights = self.params['class_weights']
    weights = tf.constant(weights, tf.float32) if training and weights is not None else None
    return per_example_loss(logits, targets_, self.params['bce_target_threshold'], weights, self._smoothing())

  def balanced_class_weights(self, counts: Sequence[int], num_images: int) -> List[float]:
    """Each class's negatives / positives, the weight of its positives (PyTorch's BCEWithLogitsLoss pos_weight):
    a class's positives then weigh as much as its negatives."""
    return [round((num_images - c) / c, 6) if 0 < c < num_images else 1.0 for c in counts]

  def _smoothing(self) -> float:
    """The label smoothing the loss sees: none where bce_target_threshold binarises the targets again."""
    return 0.0 if self.params.get('bce_target_threshold') else float(self.params.get('label_smoothing') or 0.0)

  def _class_terms(self, counts: Optional[Sequence[int]], num_images: int, guess: Optional[float] = None
                   ) -> Tuple[List[float], bool]:
    """(each class's expected training loss of a constant guess, whether the data gave the rates): a class's images
    are positives at rate r with target 1 - e/2, weighted w, and negatives with target e/2, weighted 1 (e the
    smoothing; ``per_example_loss``); the guess is ``guess``, else the mean target ``r (1 - e) + e / 2``."""
    classes = self.num_classes
    known = bool(counts) and len(counts) == classes and num_images > 0
    rates = [min(c / num_images, 1.0) for c in counts] if known else [1.0 / max(classes, 2)] * classes
    weights = self.params['class_weights'] if isinstance(self.params['class_weights'], list) else [1.0] * classes
    e = self._smoothing()
    terms = []
    for r, w in zip(rates, weights):
      p = guess if guess is not None else r * (1 - e) + e / 2
      p = min(max(p, 1e-7), 1 - 1e-7)
      bce = lambda q: -(q * math.log(p) + (1 - q) * math.log(1 - p))
      terms.append(sum(share * weight * bce(q) for share, weight, q in ((r, w, 1 - e / 2), (1 - r, 1.0, e / 2))))
    return terms, known

  def chance_loss(self, counts: Optional[Sequence[int]], num_images: int) -> Tuple[float, str]:
    """A guess of each class's mean target without looking at the image: with hard targets its rate p in the
    training images (1/K where the data does not say), scoring ``w p (-ln p) + (1 - p) (-ln(1 - p))`` per class,
    w its positive weight; with label smoothing e the targets are 1 - e/2 and e/2 and the guess their mean, so the
    baseline keeps the floor smoothing puts under every loss (at least H(e/2) per class: a model cannot fit a
    smoothed target better than its entropy). The mean over classes."""
    terms, known = self._class_terms(counts, num_images)
    classes = self.num_classes
    how = ("binary cross-entropy of each class's rate in the training images" if known
           else f'binary cross-entropy of sigmoids at 1/{classes} (the data records no per-class counts)')
    if self._smoothing():
      how += f', its targets smoothed by {self._smoothing():g}'
    if isinstance(self.params['class_weights'], list):
      how += ', its positives weighted by class_weights'
    return sum(terms) / len(terms), how

  def uninformed_loss(self, counts: Optional[Sequence[int]], num_images: int) -> float:
    """Every sigmoid at 0.5 (logits 0): ln 2 per class, times each class's mean term weight."""
    terms, _ = self._class_terms(counts, num_images, guess=0.5)
    return sum(terms) / len(terms)

  def divergence_fixes(self) -> List[str]:
    return ['milder class_weights'] if self.params['class_weights'] else []

  @property
  def teacher_refusal(self) -> Optional[str]:
    return ("a multi-label model (a sigmoid per class), but distillation's soft term is a softmax over the classes: "
            'name a single-label teacher')

  def eval_parts(self, logits: tf.Tensor, labels: tf.Tensor, per_example_loss_: tf.Tensor) -> task.EvalParts:
    metrics, sums = eval_metrics(logits, labels, per_example_loss_)
    return metrics, sums, {'logits': tf.cast(logits, tf.float32)}   # the hook's exact numbers

  def eval_hooks(self, class_names: Callable[[], List[str]], background: Callable[[], bool]) -> List[Any]:
    return [multi_label_report.MultiLabelReport(class_names(), multi_label_report.served_view(self.params))]

  def predict_objects(self, scope) -> None:
    scope.get_or_create(THRESHOLDS, lambda: thresholds_variable(self.num_classes), saved=False)

  def predictions(self, logits: tf.Tensor, scope) -> Dict[str, tf.Tensor]:
    return predictions(logits, scope.get(THRESHOLDS))

  def decisions(self, estimator, checkpoint: Optional[str], best: bool = False, averaged: bool = True,
                single_view: bool = False) -> Tuple[float, ...]:
    """The thresholds of ``checkpoint`` (default: the latest; ``best``: model_dir/best/'s), set in the served
    model. ``averaged``: whether what is served holds the moving-average weights (when the run keeps them);
    ``single_view``: whether it serves one view whatever ``tta`` is (exports): a warning says when the thresholds
    were tuned on something else."""
    estimator.build(ModeKeys.PREDICT)
    path = checkpoint or estimator.latest_checkpoint()
    step = checkpoints.checkpoint_step(path) if path else None
    thresholds, source, tuned_on = multi_label_report.decision_thresholds(self.params['model_dir'], step,
                                                                          self.num_classes, best)
    estimator.scope.get(THRESHOLDS).assign(thresholds)
    logging.info('Multi-label decisions: per-class thresholds %s: %s', source,
                 ', '.join(f'{t:.3f}' for t in thresholds[:20]) + (', ...' if len(thresholds) > 20 else ''))
    multi_label_report.warn_if_served_differs(tuned_on, multi_label_report.served_view(self.params, averaged,
                                                                                       single_view))
    return tuple(thresholds)

  def deployed_decisions(self, path: str, decisions: Tuple[float, ...]) -> Tuple[float, ...]:
    """A .tflite/.onnx decides with the thresholds exported beside it (those of the checkpoint it came from),
    else with the run's."""
    beside = multi_label_report.deployed_thresholds(path, len(decisions))
    if beside is None:
      logging.warning('%s has no %s beside it: deciding with the run\'s thresholds.', path,
                      multi_label_report.THRESHOLDS_FILE)
      return decisions
    logging.info('Multi-label decisions: the thresholds exported with %s.', path)
    return tuple(beside)

  def prediction_writer(self, decisions: Tuple[float, ...], class_names: List[str]):
    return predictions_lib.MultiLabelRows(self.params, class_names, decisions)

  def answers(self, decisions: Tuple[float, ...]) -> answers.Answers:
    return answers.Thresholded(tuple(decisions))

  def write_export_records(self, export_dir: str, decisions: Tuple[float, ...],
                           class_names: Callable[[], List[str]]) -> Optional[str]:
    return multi_label_report.write_export_thresholds(export_dir, decisions, class_names())
