"""TFLite export: the exported weights as a float32 ``model.tflite`` in the SavedModel's version directory.

The .tflite is converted from a float32 copy of the model holding the exported weights (TFLite has no bfloat16
kernels, so converting a bfloat16 SavedModel graph would need TensorFlow ops at run time). Its input is a batch
of one float32 image [1, S, S, 3] with values 0..255, as the SavedModel's ``serving_images`` signature takes, and
its output the class probabilities. After writing, both files classify the same images and the largest difference
is logged. The .tflite must agree with the float32 weights it came from within PARITY_TOLERANCE in every
precision (else it is not written), and a float32 model's with the SavedModel too; a bfloat16/float16 SavedModel
differs from it by its own rounding.
"""
import contextlib
import dataclasses
import os
from typing import Callable, ContextManager, Optional

from absl import logging
import keras
import numpy as np
import tensorflow as tf
from tensorflow.python.framework import convert_to_constants  # pylint: disable=g-direct-tensorflow-import

from resnet.estimator import files

TFLITE_NAME = 'model.tflite'
PARITY_TOLERANCE = 1e-4
PARITY_IMAGES = 4
SERVING_SIGNATURE = 'serving_images'


@dataclasses.dataclass(frozen=True)
class TfliteReport:
  path: str
  bytes: int
  ops: int
  max_difference: float  # largest |probability difference| against its float32 weights on PARITY_IMAGES images
  saved_model_difference: float  # the same against the SavedModel (16-bit models: their own rounding)


def float32_copy(model: keras.Model, build: Callable[[], keras.Model]) -> keras.Model:
  """``build()`` (the same architecture, float32 policy) holding ``model``'s current weights."""
  copy = build()
  copy.set_weights(model.get_weights())
  return copy


def convert(model: keras.Model, image_size: int) -> bytes:
  """Float32 TFLite flatbuffer of ``images [1, S, S, 3] -> probabilities``, the weights frozen into constants."""
  @tf.function(input_signature=[tf.TensorSpec([1, image_size, image_size, 3], tf.float32, name='images')])
  def serve(images):
    return {'probabilities': tf.nn.softmax(tf.cast(model(images, training=False), tf.float32))}

  frozen = convert_to_constants.convert_variables_to_constants_v2(serve.get_concrete_function())
  converter = tf.lite.TFLiteConverter.from_concrete_functions([frozen])
  converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
  return converter.convert()


def tflite_probabilities(flatbuffer: bytes, images: np.ndarray) -> np.ndarray:
  """Runs the .tflite on each image (its input is a batch of one) and stacks the probabilities."""
  interpreter = tf.lite.Interpreter(model_content=flatbuffer)
  interpreter.allocate_tensors()
  (source,), (result,) = interpreter.get_input_details(), interpreter.get_output_details()
  outputs = []
  for image in images.astype(np.float32):
    interpreter.set_tensor(source['index'], image[None])
    interpreter.invoke()
    outputs.append(interpreter.get_tensor(result['index']).copy())
  return np.concatenate(outputs)


def op_count(flatbuffer: bytes) -> int:
  interpreter = tf.lite.Interpreter(model_content=flatbuffer)
  return len(interpreter._get_ops_details())  # pylint: disable=protected-access  (no public op listing in 2.21)


def parity_images(image_size: int, count: int = PARITY_IMAGES, seed: int = 0) -> np.ndarray:
  return np.random.default_rng(seed).uniform(0, 255, (count, image_size, image_size, 3)).astype(np.float32)


def export_tflite(saved_model_dir: str, model: keras.Model, build_float32: Callable[[], keras.Model],
                  image_size: int, precision: str,
                  weights: Optional[Callable[[], ContextManager]] = None) -> TfliteReport:
  """Writes ``<saved_model_dir>/model.tflite`` (atomically), once it is checked.

  The check that holds in every precision: the .tflite against the float32 copy it was converted from, within
  PARITY_TOLERANCE, else an error and no file (a conversion fault never hides behind bfloat16 rounding). Then
  against the SavedModel: within PARITY_TOLERANCE for a float32 model, logged for a 16-bit one.
  ``weights()``: the context in which ``model`` holds the exported weights (e.g. moving averages).
  """
  with (weights() if weights else contextlib.nullcontext()):
    copy = float32_copy(model, build_float32)
  flatbuffer = convert(copy, image_size)
  path = os.path.join(saved_model_dir, TFLITE_NAME)
  images = parity_images(image_size)
  lite = tflite_probabilities(flatbuffer, images)
  reference = tf.nn.softmax(tf.cast(copy(images, training=False), tf.float32)).numpy()
  difference = float(np.max(np.abs(lite - reference)))
  if difference > PARITY_TOLERANCE:
    raise RuntimeError(f'The TFLite conversion differs from the float32 weights it was converted from by '
                       f'{difference:.3g} (> {PARITY_TOLERANCE:g}) on the same images: {path} was not written '
                       f'(the SavedModel beside it is complete). Export without export_tflite, or report the ops.')
  served = tf.saved_model.load(saved_model_dir).signatures[SERVING_SIGNATURE]
  expected = served(images=tf.constant(images, served.structured_input_signature[1]['images'].dtype))
  served_difference = float(np.max(np.abs(lite - expected['probabilities'].numpy().astype(np.float32))))
  if precision == 'float32' and served_difference > PARITY_TOLERANCE:
    raise RuntimeError(f'The TFLite model differs from the SavedModel by {served_difference:.3g} (> '
                       f'{PARITY_TOLERANCE:g}) on the same images: {path} was not written.')
  files.atomic_write(path, flatbuffer)
  report = TfliteReport(path, len(flatbuffer), op_count(flatbuffer), difference, served_difference)
  logging.info('Exported TFLite: %s (%.1f MB, %d ops, float32); max |probability difference| on %d images: %.2g '
               'vs its float32 weights, %.2g vs the %s SavedModel', path, report.bytes / 1e6, report.ops,
               PARITY_IMAGES, difference, served_difference, precision)
  return report
