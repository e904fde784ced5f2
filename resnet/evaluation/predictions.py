"""What predict writes: the predictions CSV (top-k ids, names, probabilities per image) and, on labelled data,
the same per-class report and misclassified list as eval, counted on the host from the predictions written."""
import csv
import json
import os
from typing import Any, Dict, Iterator, List, Optional

from absl import logging
import numpy as np

from params.params_dict import ParamsDict as Params
from resnet.estimator import files
from resnet.evaluation import class_metrics
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
    for i, filename in enumerate(features['filename'].numpy()):
      yield {'probabilities': probabilities[i], 'label': int(labels[i]), 'filename': filename}
