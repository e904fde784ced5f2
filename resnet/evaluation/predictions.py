"""What predict writes: the predictions CSV (top-k ids, names, probabilities per image; multi-label: the labels
above their thresholds) and, on labelled data, the same per-class report as eval (and the misclassified list),
counted on the host from the predictions written."""
import csv
import json
import os
from typing import Any, Dict, Iterator, List, Optional, Sequence

from absl import logging
import numpy as np

from params.params_dict import ParamsDict as Params
from resnet.estimator import files
from resnet.evaluation import class_metrics
from resnet.evaluation import label_metrics
from resnet.evaluation.class_names import has_background, read_class_names


class LabelledPredictions:
  """Predict on labelled data (the test split): the same per-class report and misclassified list as eval, counted
  on the host from the predictions written."""

  def __init__(self, params: Params):
    self.params = params
    self.labels: List[int] = []
    self.predicted: List[int] = []
    self.misclassified = class_metrics.Misclassified(params.max_misclassified_rows)

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
    names = read_class_names(self.params)
    labels, predicted = np.array(self.labels), np.array(self.predicted)
    matrix = class_metrics.count_matrix(labels, predicted, self.params.num_label_classes)
    report = {'top_1_accuracy': float(np.mean(labels == predicted)), 'num_examples': len(labels),
              **class_metrics.class_report(matrix, names, has_background(self.params))}
    stem = os.path.splitext(output)[0]
    if self.params.max_misclassified_rows:
      self.misclassified.write(f'{stem}_misclassified.csv', names)
      report['misclassified_examples'] = self.misclassified.count
    path = f'{stem}_report.json'
    files.atomic_write(path, json.dumps(report, indent=2, sort_keys=True))
    logging.info('Predictions on labelled data: top_1_accuracy=%.4f, macro_f1=%.4f over %d images (%s).',
                 report['top_1_accuracy'], report['macro_f1'], len(labels), path)
    return path


class LabelledMultiLabel:
  """Predict on labelled multi-label data: mAP, micro AP and F1 at 0.5 and at the run's thresholds, per class
  (label_metrics, the same numbers eval reports), from the probabilities written."""

  CHUNK = 1024  # images binned at once: memory stays [2, K, BINS] + a chunk, whatever the number of images

  def __init__(self, params: Params, thresholds: Sequence[float]):
    self.params = params
    self.thresholds = list(thresholds)
    self.hists = np.zeros([2, params.num_label_classes, label_metrics.BINS])
    self.images = 0
    self.labels: List[np.ndarray] = []
    self.probabilities: List[np.ndarray] = []

  def add(self, label: np.ndarray, probabilities: np.ndarray) -> None:
    if np.ndim(label) == 1 and label[0] >= 0:
      self.labels.append(label)
      self.probabilities.append(probabilities)
      if len(self.labels) >= self.CHUNK:
        self._bin()

  def _bin(self) -> None:
    if self.labels:
      p = np.clip(np.stack(self.probabilities).astype(np.float64), 1e-12, 1 - 1e-12)   # eval's bins are of logits
      self.hists += label_metrics.histograms(np.log(p / (1 - p)), np.stack(self.labels),
                                             self.params.num_label_classes)
      self.images += len(self.labels)
      self.labels, self.probabilities = [], []

  def write(self, output: str) -> Optional[str]:
    self._bin()
    if not self.images:
      return None
    report = {**label_metrics.report(self.hists, read_class_names(self.params), self.thresholds),
              'num_examples': self.images}
    path = f'{os.path.splitext(output)[0]}_report.json'
    files.atomic_write(path, json.dumps(report, indent=2, sort_keys=True))
    logging.info('Predictions on labelled data: mAP=%.4f, micro_f1=%.4f at the run\'s thresholds over %d images '
                 '(%s).', report['mAP'], report['micro_f1_tuned'], self.images, path)
    return path


def deployed_file_thresholds(path: str, run_thresholds: Optional[List[float]]) -> Optional[List[float]]:
  """A multi-label .tflite/.onnx decides with the thresholds exported beside it (those of the checkpoint it came
  from), else with the run's."""
  if run_thresholds is None:
    return None
  from resnet.evaluation import multi_label_report  # pylint: disable=g-import-not-at-top
  beside = multi_label_report.deployed_thresholds(path, len(run_thresholds))
  if beside is None:
    logging.warning('%s has no %s beside it: deciding with the run\'s thresholds.', path,
                    multi_label_report.THRESHOLDS_FILE)
    return run_thresholds
  logging.info('Multi-label decisions: the thresholds exported with %s.', path)
  return beside


def write_multi_label_predictions(predictions, output: str, params: Params, thresholds: Sequence[float],
                                  labelled: Optional[LabelledMultiLabel] = None) -> int:
  """CSV: image, its labels (if known), the labels at or above their class's threshold (space-separated, as
  Kaggle's submissions), their probabilities, and the most probable class. Written atomically."""
  names = read_class_names(params)
  names = names if len(names) == params.num_label_classes else [str(i) for i in range(params.num_label_classes)]
  limits = np.asarray(thresholds, np.float32)
  rows = 0
  with files.atomic_output(output, 'w') as f:
    writer = csv.writer(f)
    writer.writerow(['image', 'true_labels', 'predicted_labels', 'probabilities', 'top1_class',
                     'top1_probability'])
    for index, pred in enumerate(predictions):
      filename = pred.get('filename', b'')
      filename = filename.decode() if isinstance(filename, bytes) else str(filename)
      label = np.asarray(pred['label']) if 'label' in pred else np.array(-1)
      known = label.ndim == 1 and label[0] >= 0
      if not filename and not known and 'filename' in pred:
        continue  # padding of the last batch
      probs = np.asarray(pred['probabilities'], np.float32)
      chosen = [c for c in np.argsort(-probs) if probs[c] >= limits[c]]
      top = int(np.argmax(probs))
      writer.writerow([filename or str(index), ' '.join(names[c] for c in np.flatnonzero(label > 0)) if known else '',
                       ' '.join(names[c] for c in chosen), ' '.join(f'{probs[c]:.6f}' for c in chosen), names[top],
                       f'{probs[top]:.6f}'])
      if labelled is not None:
        labelled.add(label, probs)
      rows += 1
      if params.num_test_images and not params.predict_input and rows >= params.num_test_images:
        break
  return rows


def write_predictions(predictions, output: str, params: Params,
                      labelled: Optional[LabelledPredictions] = None) -> int:
  """CSV: image, true label (if known), top-k class ids, names and probabilities. Written atomically."""
  names = read_class_names(params)
  k = min(params.predict_top_k, params.num_label_classes)
  header = ['image', 'true_label', 'true_class']
  for i in range(1, k + 1):
    header += [f'top{i}_label', f'top{i}_class', f'top{i}_probability']
  rows = 0
  with files.atomic_output(output, 'w') as f:
    writer = csv.writer(f)
    writer.writerow(header)
    for index, pred in enumerate(predictions):
      filename = pred.get('filename', b'')
      filename = filename.decode() if isinstance(filename, bytes) else str(filename)
      label = int(pred['label']) if 'label' in pred else -1
      if not filename and label < 0 and 'filename' in pred:
        continue  # padding of the last batch
      probs = pred['probabilities']
      row = [filename or str(index), label if label >= 0 else '', _name(names, label)]
      if labelled is not None:
        labelled.add(row[0], label, probs)
      for c in probs.argsort()[::-1][:k]:
        row += [int(c), _name(names, int(c)), f'{float(probs[c]):.6f}']
      writer.writerow(row)
      rows += 1
      if params.num_test_images and not params.predict_input and rows >= params.num_test_images:
        break  # a subset of the test records; a glob of image files is predicted whole
  return rows


def _name(names: List[str], class_id: int) -> str:
  return names[class_id] if 0 <= class_id < len(names) else ''


def tflite_predictions(path: str, input_fn, image_size: int, batch_size: int,
                       num_classes: int) -> Iterator[Dict[str, Any]]:
  """What ``Estimator.predict`` yields, computed by a .tflite file with LiteRT (``--predict_tflite``): the device's
  own numbers on the same images, preprocessed as eval does."""
  from resnet.export import litert_runtime  # pylint: disable=g-import-not-at-top
  _check_file('--predict_tflite', path, 'model*.tflite')
  litert_runtime.runtime()  # a missing runtime says so, not that the file is bad
  try:
    model = litert_runtime.Model(path)
  except ValueError as e:
    raise ValueError(f'--predict_tflite={path} is not a TFLite model LiteRT can run: {e}') from e
  _check_shapes(path, int(model.output['shape'][-1]), model.image_size, num_classes, image_size)
  logging.info('Predicting with %s (%s, %s input, %s).', path, model.runtime, model.input_type,
               f'{model.op_count()} ops')
  return _predictions(model, input_fn, batch_size)


def onnx_predictions(path: str, input_fn, image_size: int, batch_size: int,
                     num_classes: int) -> Iterator[Dict[str, Any]]:
  """The same from an .onnx file with ONNX Runtime (``--predict_onnx``)."""
  from resnet.export import onnx_runtime  # pylint: disable=g-import-not-at-top
  _check_file('--predict_onnx', path, 'model*.onnx')
  onnx_runtime.require('--predict_onnx', ('onnxruntime',))
  try:
    model = onnx_runtime.Model(path)
  except Exception as e:  # pylint: disable=broad-except  (onnxruntime's errors have no common public base)
    raise ValueError(f'--predict_onnx={path} is not an ONNX model of this program ONNX Runtime can run: {e}') from e
  _check_shapes(path, model.num_classes, model.image_size, num_classes, image_size)
  logging.info('Predicting with %s (%s).', path, model.runtime)
  return _predictions(model, input_fn, batch_size)


def _check_file(flag: str, path: str, pattern: str) -> None:
  if not os.path.isfile(path):
    raise FileNotFoundError(f'{flag}={path}: no such file (the export writes {pattern} into '
                            'export_dir/<version>/).')


def _check_shapes(path: str, classes: int, size: int, num_classes: int, image_size: int) -> None:
  if classes != num_classes:
    raise ValueError(f'{path} outputs {classes} classes, but this run has num_label_classes={num_classes}: predict '
                     'with the run the file was exported from (--model_dir), or set --num_label_classes.')
  if size != image_size:
    raise ValueError(f'{path} takes {size}x{size} images, but this run preprocesses to '
                     f'{image_size}x{image_size}: set --eval_image_size={size}.')


def _predictions(model, input_fn, batch_size: int) -> Iterator[Dict[str, Any]]:
  for features, labels in input_fn({'batch_size': batch_size}):
    probabilities = model.probabilities(features['image'].numpy())
    labels = labels.numpy()   # class ids, or multi-hot rows
    for i, filename in enumerate(features['filename'].numpy()):
      yield {'probabilities': probabilities[i], 'label': labels[i], 'filename': filename}
