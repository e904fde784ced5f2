"""Where predict's predictions come from, as one object: the images (a glob of files, or the test split, else the
validation split, of the run's records), what computes them (the run's checkpoint, or a deployed .tflite or .onnx
file run by its own runtime on the same images, preprocessed as eval does), and what they are decided with (the
task's decisions for that checkpoint, or those exported beside the file). ``resnet_main.predict`` writes what this
yields with the task's writer."""
import os
from typing import Any, Dict, Iterator, Mapping

from absl import logging
import tensorflow as tf

from official_input import dataset_info
from official_input import imagenet_input
from official_input import resnet_preprocessing
from resnet.estimator.estimator import Estimator
from resnet.task import tasks


class PredictionSource:
  """``predictions()`` yields what ``Estimator.predict`` yields (probabilities, label, filename per image);
  ``decisions`` are what they are decided with, ``task`` the run's, ``output`` the CSV's path and ``limit`` the
  rows kept (num_test_images of the records; a glob of files is predicted whole)."""

  def __init__(self, estimator: Estimator, params: Mapping[str, Any]):
    self.estimator = estimator
    self.params = params
    self.task = tasks.for_params(params)
    self.deployed = params['predict_tflite'] or params['predict_onnx']
    self.image_size, crop_fraction = resnet_preprocessing.eval_view(params)  # validation refuses tta with a file
    dtype = tf.float32 if self.deployed else tf.as_dtype(params['precision'])  # a deployed file takes float32
    if params['predict_input']:
      # Files are shrunk as the converter shrank the run's records, so they give the model the records' pixels.
      self.images = imagenet_input.ImageFilesInput(params['predict_input'], image_size=self.image_size, dtype=dtype,
                                                   crop_fraction=crop_fraction, max_image_side=_max_image_side(params))
      self.limit = 0
    else:
      split = 'test' if tf.io.gfile.glob(os.path.join(params['data_dir'] or '', 'test-*')) else 'validation'
      self.images = imagenet_input.ImageNetInput.from_params(params, split=split, include_filename=True, dtype=dtype)
      self.limit = params['num_test_images'] or 0
    self.output = params['predict_output'] or os.path.join(params['model_dir'], 'predictions.csv')
    self.checkpoint = estimator.latest_checkpoint()   # one lookup: the decisions are those of the weights predicting
    self.decisions = self.task.decisions(estimator, self.checkpoint)
    if self.deployed:
      self.decisions = self.task.deployed_decisions(self.deployed, self.decisions)

  def predictions(self, weights=None) -> Iterator[Dict[str, Any]]:
    """``weights``: the context the checkpoint's predictions run in (the moving averages: wiring.eval_weights)."""
    if not self.deployed:
      return self.estimator.predict(self.images.input_fn, self.checkpoint, weights=weights)
    read = tflite_predictions if self.params['predict_tflite'] else onnx_predictions
    return read(self.deployed, self.images.input_fn, self.image_size, self.params['predict_batch_size'],
                self.params['num_label_classes'])


def _max_image_side(params: Mapping[str, Any]) -> int:
  """The --max_image_side the run's records were converted with (summary.json), 0 where none is recorded."""
  try:
    info = dataset_info.read_dataset_info(params['data_dir'], params['labels_file'])
  except (ValueError, OSError) as e:
    logging.warning('Predicting image files at their full size: %s', e)
    return 0
  if info is None:
    if not dataset_info.is_synthetic(params['data_dir']):
      logging.warning('Predicting image files at their full size: %s has no summary.json to say how the run\'s '
                      'records were converted (moved?); if with --max_image_side, give --data_dir where they are.',
                      params['data_dir'])
    return 0
  if info.max_image_side:
    logging.info('Image files are shrunk to max_image_side=%d, as the run\'s records were (%s).',
                 info.max_image_side, info.summary_path)
  return info.max_image_side or 0


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
