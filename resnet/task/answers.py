"""How a task's answers are read from probabilities, scored and compared: what the deployed files' measured tables
(and predict with a deployed file) ask of the task. ``TopOne``: softmax probabilities answered by their top-1;
``Thresholded``: a sigmoid per class, each class decided at its threshold.

A file is measured by what it outputs: its own decisions (``output``: ``classes``, or multi-label ``labels``, which
the SavedModel and the .onnx files compute inside) where it has them, else those its probabilities give
(``decided``), so a file that decides differently from its probabilities (float16 thresholds) cannot pass on
numbers recomputed outside it. The agreement is pooled (``agreement``) and per class (``per_class``), since a pooled
share hides a rare class a file has lost; a class is judged only with CLASS_MIN_IMAGES images or more (``support``).
"""
import dataclasses
from typing import Mapping, Tuple

import numpy as np
import tensorflow as tf

# A class's Jaccard index is judged (held to a floor) only where the file or the reference decides it for at least
# this many images: with 1000 classes on 500 images most hold 0-1, and a single top-1 flip scores such a class 0.
CLASS_MIN_IMAGES = 10


class Answers:
  """The interface: ``score_name``, ``output`` (the served output holding the decisions), ``agreement_name`` (the
  measure ``agreement`` returns), and the functions below."""
  score_name = ''
  output = ''
  agreement_name = ''

  def probabilities(self, logits) -> tf.Tensor:
    raise NotImplementedError

  def decide(self, probabilities: np.ndarray) -> np.ndarray:
    raise NotImplementedError

  def agreement(self, decided: np.ndarray, reference: np.ndarray) -> float:
    raise NotImplementedError

  def score(self, decided: np.ndarray, labels: np.ndarray) -> float:
    raise NotImplementedError

  def one_hot(self, decided: np.ndarray, num_classes: int) -> np.ndarray:
    """[N, K] booleans: the classes each image is decided to hold."""
    raise NotImplementedError

  def decided(self, outputs: Mapping[str, np.ndarray]) -> np.ndarray:
    """The decisions a file (or the SavedModel) outputs: its own ``output`` where it has one, else those of its
    ``probabilities``."""
    if self.output in outputs:
      return np.asarray(outputs[self.output]).astype(np.int64)
    return self.decide(outputs['probabilities'])

  def per_class(self, decided: np.ndarray, reference: np.ndarray, num_classes: int) -> np.ndarray:
    """[K] per class, of the images either decides to hold it, the share both do (its Jaccard index); NaN where
    neither decides it for any image (nothing to compare)."""
    mine, theirs = self.one_hot(decided, num_classes), self.one_hot(reference, num_classes)
    either = np.sum(mine | theirs, axis=0)
    both = np.sum(mine & theirs, axis=0)
    return np.where(either > 0, both / np.maximum(either, 1), np.nan)

  def support(self, decided: np.ndarray, reference: np.ndarray, num_classes: int) -> np.ndarray:
    """[K] per class, the images the file or the reference decides it for, whichever decides it for more: a class
    under CLASS_MIN_IMAGES is too small to judge (one flip of its single image is a Jaccard index of 0)."""
    return np.maximum(np.sum(self.one_hot(decided, num_classes), axis=0),
                      np.sum(self.one_hot(reference, num_classes), axis=0))

  def describe(self, agreement: float, num_images: int) -> str:
    """The pooled agreement in words, naming its measure."""
    raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class TopOne(Answers):
  score_name = 'top-1'
  output = 'classes'
  agreement_name = 'top-1 agreement'

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

  def one_hot(self, decided: np.ndarray, num_classes: int) -> np.ndarray:
    return np.asarray(decided)[:, None] == np.arange(num_classes)

  def describe(self, agreement: float, num_images: int) -> str:
    return f'agrees with the SavedModel\'s top-1 on {agreement:.1%} of {num_images} validation images'


@dataclasses.dataclass(frozen=True)
class Thresholded(Answers):
  thresholds: Tuple[float, ...] = ()
  score_name = 'micro F1'
  output = 'labels'
  agreement_name = 'Jaccard index of positive labels'

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

  def one_hot(self, decided: np.ndarray, num_classes: int) -> np.ndarray:
    return np.asarray(decided) > 0

  def describe(self, agreement: float, num_images: int) -> str:
    return (f'has a Jaccard index of {agreement:.4f} with the SavedModel\'s positive labels on {num_images} '
            'validation images (of the image x class pairs either calls positive, the share both do)')
