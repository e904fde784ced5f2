"""Per-class numbers from a confusion matrix, and the list of misclassified images: host-side numpy, shared by eval
(the matrix summed in the compiled step) and predict on labelled data (the matrix counted here).

Conventions (scikit-learn's, zero_division=0): precision = TP / predicted as the class, recall = TP / support,
F1 their harmonic mean; a ratio with nothing to divide is 0. Macro averages are over the classes with support, so a
class absent from the split (or a background class 0, which no example has) does not pull them to 0. The
background class is left out of ``per_class``; its column stays in the matrix, so the counts still sum to
``num_examples``.
"""
import csv
import heapq
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from resnet.estimator import files

MISCLASSIFIED_HEADER = ('image', 'true_label', 'true_class', 'predicted_label', 'predicted_class', 'probability')


def class_report(matrix: np.ndarray, class_names: Sequence[str], background: bool = False) -> Dict[str, Any]:
  """``per_class`` {name: precision, recall, f1, support}, macro averages and the matrix (ints, [true][pred])."""
  matrix = np.rint(np.asarray(matrix, np.float64)).astype(np.int64)
  num_classes = matrix.shape[0]
  names = list(class_names) if len(class_names) == num_classes else [str(i) for i in range(num_classes)]
  true_positive = np.diag(matrix).astype(np.float64)
  support = matrix.sum(axis=1)
  predicted = matrix.sum(axis=0)
  precision = np.divide(true_positive, predicted, out=np.zeros(num_classes), where=predicted > 0)
  recall = np.divide(true_positive, support, out=np.zeros(num_classes), where=support > 0)
  denominator = precision + recall
  f1 = np.divide(2 * precision * recall, denominator, out=np.zeros(num_classes), where=denominator > 0)
  first = 1 if background else 0
  per_class = {names[c]: {'precision': float(precision[c]), 'recall': float(recall[c]), 'f1': float(f1[c]),
                          'support': int(support[c])} for c in range(first, num_classes)}
  counted = [c for c in range(first, num_classes) if support[c] > 0]
  report: Dict[str, Any] = {
      'per_class': per_class,
      'confusion_matrix': matrix.tolist(),
      'class_names': names,
  }
  for key, values in (('macro_precision', precision), ('macro_recall', recall), ('macro_f1', f1)):
    report[key] = float(np.mean(values[counted])) if counted else 0.0
  return report


def count_matrix(labels: np.ndarray, predicted: np.ndarray, num_classes: int) -> np.ndarray:
  """[true, predicted] counts of the examples with a label (>= 0)."""
  keep = labels >= 0
  matrix = np.zeros((num_classes, num_classes), np.int64)
  np.add.at(matrix, (labels[keep], predicted[keep]), 1)
  return matrix


class Misclassified:
  """The misclassified examples seen so far; past ``max_rows`` only the most confident mistakes are kept (a
  bounded heap), which are the likeliest label errors and the most instructive failures."""

  def __init__(self, max_rows: int):
    self.max_rows = max_rows
    self.count = 0
    self._heap: List[Tuple[float, int, str, int, int]] = []  # (probability, order, image, true, predicted)

  def add(self, images: Sequence[str], labels: np.ndarray, predicted: np.ndarray, probability: np.ndarray) -> None:
    for image, label, guess, prob in zip(images, labels, predicted, probability):
      if label < 0 or guess == label:
        continue
      self.count += 1
      entry = (float(prob), -self.count, image, int(label), int(guess))
      if len(self._heap) < self.max_rows:
        heapq.heappush(self._heap, entry)
      elif self.max_rows:
        heapq.heappushpop(self._heap, entry)

  @property
  def rows(self) -> int:
    return len(self._heap)

  def write(self, path: str, class_names: Sequence[str]) -> None:
    """The CSV, most confident first; written atomically (replaces the previous evaluation's)."""
    def name(class_id: int) -> str:
      return class_names[class_id] if 0 <= class_id < len(class_names) else ''
    with files.atomic_output(path, 'w') as f:
      writer = csv.writer(f)
      writer.writerow(MISCLASSIFIED_HEADER)
      for prob, _, image, label, guess in sorted(self._heap, reverse=True):
        writer.writerow([image, label, name(label), guess, name(guess), f'{prob:.6f}'])


def image_names(batch: Dict[str, np.ndarray], start: int) -> List[str]:
  """The batch's file names (decoded), or the examples' positions in the evaluation when the input has none."""
  names = batch.get('filename')
  size = len(batch['label'])
  if names is None:
    return [str(start + i) for i in range(size)]
  return [n.decode('utf-8', 'replace') if isinstance(n, bytes) else str(n) for n in names]


def misclassified_path(model_dir: str, name: str, task: Optional[str] = None) -> str:
  """model_dir/<name>_misclassified.csv; a task other than the chief adds its name (its own shard's images), e.g.
  ``worker-1``, or ``worker-0`` beside a separate ``chief`` task."""
  suffix = '' if task is None else f'.{task}'
  return os.path.join(model_dir, f'{name}_misclassified{suffix}.csv')
