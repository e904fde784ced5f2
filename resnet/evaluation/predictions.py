"""What predict writes: the predictions CSV (one row per image, in the task's columns: the top-k classes, or the
labels at their thresholds) and, on labelled data, the same report as eval, counted on the host from the
predictions written (multi-label: from their logits, as eval counts). ``write`` is the one loop (file names, the last batch's padding, the test subset, the atomic
file); ``SingleLabelRows`` and ``MultiLabelRows`` are the two tasks' columns and reports (each task hands out its
own: resnet/task/)."""
import csv
import json
import os
from typing import Any, Iterable, List, Mapping, Optional, Sequence

from absl import logging
import numpy as np

from params.params_dict import ParamsDict as Params
from resnet.estimator import files
from resnet.evaluation import class_metrics
from resnet.evaluation import label_metrics
from resnet.evaluation.class_names import has_background


class LabelledPredictions:
  """Predict on labelled data (the test split): the same per-class report and misclassified list as eval, counted
  on the host from the predictions written."""

  def __init__(self, params: Params, names: List[str]):
    self.params = params
    self.names = names
    self.labels: List[int] = []
    self.predicted: List[int] = []
    self.misclassified = class_metrics.Misclassified(params['max_misclassified_rows'])

  def add(self, image: str, label: int, probabilities) -> None:
    if label < 0:
      return
    guess = int(probabilities.argmax())
    self.labels.append(label)
    self.predicted.append(guess)
    self.misclassified.add([image], [label], [guess], [float(probabilities[guess])])

  def write(self, output: str) -> Optional[str]:
    """<output stem>_report.json (+ _misclassified.csv); None when no prediction had a label."""
    if not self.labels:
      return None
    labels, predicted = np.array(self.labels), np.array(self.predicted)
    matrix = class_metrics.count_matrix(labels, predicted, self.params['num_label_classes'])
    report = {'top_1_accuracy': float(np.mean(labels == predicted)), 'num_examples': len(labels),
              **class_metrics.class_report(matrix, self.names, has_background(self.params))}
    stem = os.path.splitext(output)[0]
    if self.params['max_misclassified_rows']:
      self.misclassified.write(f'{stem}_misclassified.csv', self.names)
      report['misclassified_examples'] = self.misclassified.count
    path = f'{stem}_report.json'
    files.atomic_write(path, json.dumps(report, indent=2, sort_keys=True))
    logging.info('Predictions on labelled data: top_1_accuracy=%.4f, macro_f1=%.4f over %d images (%s).',
                 report['top_1_accuracy'], report['macro_f1'], len(labels), path)
    return path


class LabelledMultiLabel:
  """Predict on labelled multi-label data: mAP, micro AP and F1 at 0.5 and at the run's thresholds, per class
  (label_metrics.exact_report, eval's function): ranked by each image's logits (by its probabilities where a
  deployed file serves only those, ties and all), decided by the served probabilities, as the CSV is."""

  def __init__(self, params: Params, thresholds: Sequence[float], names: Optional[List[str]] = None):
    self.params = params
    self.names = names if names is not None else [str(i) for i in range(params['num_label_classes'])]
    self.thresholds = list(thresholds)
    self.labels: List[np.ndarray] = []
    self.probabilities: List[np.ndarray] = []
    self.logits: List[np.ndarray] = []

  def add(self, label: np.ndarray, probabilities: np.ndarray, logits: Optional[np.ndarray] = None) -> None:
    if np.ndim(label) == 1 and label[0] >= 0:
      self.labels.append(np.asarray(label > 0, np.int8))
      self.probabilities.append(np.asarray(probabilities, np.float32))
      if logits is not None:
        self.logits.append(np.asarray(logits, np.float32))

  def write(self, output: str) -> Optional[str]:
    if not self.labels:
      return None
    labels, served = np.stack(self.labels), np.stack(self.probabilities)
    # The logits rank (a float32 sigmoid saturates above ~17), where the run has them; a deployed file's
    # probabilities rank otherwise. The served probabilities decide either way, as the CSV beside the report does.
    scores = np.stack(self.logits) if len(self.logits) == len(self.labels) else served
    report = label_metrics.exact_report(scores, labels, self.names, self.thresholds, served=served)
    report['num_examples'] = len(labels)
    path = f'{os.path.splitext(output)[0]}_report.json'
    files.atomic_write(path, json.dumps(report, indent=2, sort_keys=True))
    logging.info('Predictions on labelled data: mAP=%.4f, micro_f1=%.4f at the run\'s thresholds over %d images '
                 '(%s).', report['mAP'], report['micro_f1_tuned'], len(labels), path)
    return path


class SingleLabelRows:
  """Columns: image, true label (if known), then the top-k class ids, names and probabilities."""

  def __init__(self, params: Mapping[str, Any], names: List[str]):
    self.names = names
    self.k = min(params['predict_top_k'], params['num_label_classes'])
    self.labelled = LabelledPredictions(params, names)

  def header(self) -> List[str]:
    header = ['image', 'true_label', 'true_class']
    for i in range(1, self.k + 1):
      header += [f'top{i}_label', f'top{i}_class', f'top{i}_probability']
    return header

  def label(self, prediction: Mapping[str, Any]) -> Any:
    return int(prediction['label']) if 'label' in prediction else -1

  def known(self, label: Any) -> bool:
    return label >= 0

  def row(self, image: str, label: int, probabilities: np.ndarray, logits: Optional[np.ndarray] = None
          ) -> List[Any]:
    self.labelled.add(image, label, probabilities)
    row = [image, label if label >= 0 else '', _name(self.names, label)]
    for c in probabilities.argsort()[::-1][:self.k]:
      row += [int(c), _name(self.names, int(c)), f'{float(probabilities[c]):.6f}']
    return row


class MultiLabelRows:
  """Columns: image, its labels (if known), the labels at or above their class's threshold (space-separated, as
  Kaggle's submissions), their probabilities, and the most probable class."""

  def __init__(self, params: Mapping[str, Any], names: List[str], thresholds: Sequence[float]):
    classes = params['num_label_classes']
    self.names = names if len(names) == classes else [str(i) for i in range(classes)]
    self.limits = np.asarray(thresholds, np.float32)
    self.labelled = LabelledMultiLabel(params, thresholds, self.names)

  def header(self) -> List[str]:
    return ['image', 'true_labels', 'predicted_labels', 'probabilities', 'top1_class', 'top1_probability']

  def label(self, prediction: Mapping[str, Any]) -> np.ndarray:
    return np.asarray(prediction['label']) if 'label' in prediction else np.array(-1)

  def known(self, label: np.ndarray) -> bool:
    return label.ndim == 1 and label[0] >= 0

  def row(self, image: str, label: np.ndarray, probabilities: np.ndarray, logits: Optional[np.ndarray] = None
          ) -> List[Any]:
    probabilities = np.asarray(probabilities, np.float32)
    self.labelled.add(label, probabilities, logits)
    chosen = [c for c in np.argsort(-probabilities) if probabilities[c] >= self.limits[c]]
    top = int(np.argmax(probabilities))
    known = self.known(label)
    return [image, ' '.join(self.names[c] for c in np.flatnonzero(label > 0)) if known else '',
            ' '.join(self.names[c] for c in chosen), ' '.join(f'{probabilities[c]:.6f}' for c in chosen),
            self.names[top], f'{probabilities[top]:.6f}']


def write(predictions: Iterable[Mapping[str, Any]], output: str, rows, limit: int = 0) -> int:
  """The CSV of ``rows``' columns (SingleLabelRows, MultiLabelRows), one row per prediction, written atomically;
  the last batch's padding (no file name, no label) is left out; at most ``limit`` rows (0: all). Returns the rows
  written; ``rows.labelled.write(output)`` then writes the report on labelled data."""
  count = 0
  with files.atomic_output(output, 'w') as f:
    writer = csv.writer(f)
    writer.writerow(rows.header())
    for index, prediction in enumerate(predictions):
      filename = prediction.get('filename', b'')
      filename = filename.decode() if isinstance(filename, bytes) else str(filename)
      label = rows.label(prediction)
      if not filename and not rows.known(label) and 'filename' in prediction:
        continue  # padding of the last batch
      logits = prediction.get('logits')
      writer.writerow(rows.row(filename or str(index), label, np.asarray(prediction['probabilities']),
                               None if logits is None else np.asarray(logits)))
      count += 1
      if limit and count >= limit:
        break  # a subset of the test records
  return count


def _name(names: List[str], class_id: int) -> str:
  return names[class_id] if 0 <= class_id < len(names) else ''
