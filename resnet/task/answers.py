"""How a task's answers are read from probabilities, scored and compared: what the deployed files' measured tables
(and predict with a deployed file) ask of the task. ``TopOne``: softmax probabilities answered by their top-1;
``Thresholded``: a sigmoid per class, each class decided at its threshold."""
import dataclasses
from typing import Tuple

import numpy as np
import tensorflow as tf


class Answers:
  """The interface: ``answers`` (what is compared), ``score_name``, and the four functions below."""
  answers = ''
  score_name = ''

  def probabilities(self, logits) -> tf.Tensor:
    raise NotImplementedError

  def decide(self, probabilities: np.ndarray) -> np.ndarray:
    raise NotImplementedError

  def agreement(self, decided: np.ndarray, reference: np.ndarray) -> float:
    raise NotImplementedError

  def score(self, decided: np.ndarray, labels: np.ndarray) -> float:
    raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class TopOne(Answers):
  answers = 'top-1'
  score_name = 'top-1'

  def probabilities(self, logits) -> tf.Tensor:
    return tf.nn.softmax(tf.cast(logits, tf.float32))

  def decide(self, probabilities: np.ndarray) -> np.ndarray:
    """[N] classes."""
    return np.asarray(probabilities).argmax(axis=1)

  def agreement(self, decided: np.ndarray, reference: np.ndarray) -> float:
    """Share of images with the reference's top-1."""
    return float(np.mean(decided == reference))

  def score(self, decided: np.ndarray, labels: np.ndarray) -> float:
    """top-1 accuracy."""
    return float(np.mean(decided == labels))


@dataclasses.dataclass(frozen=True)
class Thresholded(Answers):
  thresholds: Tuple[float, ...] = ()
  answers = 'positive labels (image x class)'
  score_name = 'micro F1'

  def probabilities(self, logits) -> tf.Tensor:
    return tf.sigmoid(tf.cast(logits, tf.float32))

  def decide(self, probabilities: np.ndarray) -> np.ndarray:
    """[N, K] 0/1 decisions."""
    return (np.asarray(probabilities) >= np.asarray(self.thresholds, np.float32)).astype(np.int64)

  def agreement(self, decided: np.ndarray, reference: np.ndarray) -> float:
    """Of the positive decisions (image x class) either makes, those both make (their Jaccard index), so the many
    easy negatives cannot hide a broken file."""
    either = np.sum((decided > 0) | (reference > 0))
    return float(np.sum((decided > 0) & (reference > 0)) / either) if either else 1.0

  def score(self, decided: np.ndarray, labels: np.ndarray) -> float:
    """Micro F1 of the decisions against multi-hot labels."""
    truth = labels > 0
    tp = np.sum(truth & (decided > 0))
    return float(2 * tp / max(truth.sum() + (decided > 0).sum(), 1))
