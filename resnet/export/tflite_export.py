"""LiteRT's format (``TfliteFormat``, written, checked and measured by ``deploy.export``): ``model.tflite`` in the
SavedModel's version directory, and the quantized files a phone, a browser or an Edge TPU takes (``QUANTIZATIONS``).

The .tflite's input is a batch of one float32 image [1, S, S, 3] with values 0..255, as the SavedModel's
``serving_images`` signature takes, and its output the probabilities (``answers``). Every file is run by LiteRT's
own runtime (``litert_runtime``). Quantized files: float16 weights; dynamic-range int8 (int8 weights, float
activations); full-integer int8 calibrated on the run's training images, optionally with int8 input and output
(``tflite_int8_io``, as the Edge TPU compiler needs) and with float kernels for ops that have no int8 one
(``tflite_float_fallback``; else such a model is refused, naming the op).

A .tflite holds no thresholds: its probabilities are decided outside it at the float32 thresholds exported beside
it, by the measure and by ``--predict_tflite`` alike. float16 weights compute in float32 on LiteRT's CPU kernels; a
full-integer file's probabilities are 1/256 apart (at most 255/256), so a class whose threshold is above that is
never decided: the class floor of the measure refuses such a file, naming the class.
"""
import contextlib
import dataclasses
from typing import Callable, ContextManager, Optional

import keras
import numpy as np
import tensorflow as tf
from tensorflow.python.framework import convert_to_constants  # pylint: disable=g-direct-tensorflow-import

from resnet.task import answers as answers_lib
from resnet.export import deploy
from resnet.export import litert_runtime

TFLITE_NAME = deploy.file_name('.tflite', 'float32')
QUANTIZATIONS = ('float16', 'dynamic_int8', 'int8')
parity_images = deploy.parity_images  # the names tests/resnet/training/test_recipe.py reads


@dataclasses.dataclass(frozen=True)
class Quantization:
  """How to convert: ``kind`` (float32 or one of QUANTIZATIONS) and, for int8, its calibration images and options."""
  kind: str = 'float32'
  calibration: Optional[np.ndarray] = None   # [N, S, S, 3] 0..255, int8 only
  int8_io: bool = False
  float_fallback: bool = False


class NoConverterError(RuntimeError):
  """This TensorFlow has no tf.lite converter."""


def converter_class():
  """``tf.lite.TFLiteConverter``. TensorFlow is moving tf.lite out of its Python package into LiteRT (TF 2.20's
  release notes; TF #102071), and LiteRT's wheel (ai-edge-litert 2.3) ships the runtime but no Python converter for
  TensorFlow models yet: where tf.lite is gone, one message says what to do instead (docs/export.md)."""
  lite = getattr(tf, 'lite', None)
  converter = getattr(lite, 'TFLiteConverter', None)
  if converter is None:
    raise NoConverterError(
        f'This TensorFlow ({tf.__version__}) has no tf.lite.TFLiteConverter (tf.lite is moving to LiteRT, whose '
        'Python package has no converter for TensorFlow models yet), so no .tflite can be written. Export with '
        'TensorFlow 2.21 (pip install "tensorflow-cpu==2.21.*"), or write ONNX instead (--export_onnx), or export '
        'without export_tflite and tflite_quantizations.')
  return converter


def convert(model: keras.Model, image_size: int, quantization: Quantization = Quantization(),
            answers=answers_lib.TopOne()) -> bytes:
  """TFLite flatbuffer of ``images [1, S, S, 3] -> probabilities`` (``answers.probabilities``), the weights frozen
  into constants."""
  converter_type = converter_class()

  @tf.function(input_signature=[tf.TensorSpec([1, image_size, image_size, 3], tf.float32, name='images')])
  def serve(images):
    return {'probabilities': answers.probabilities(model(images, training=False))}

  frozen = convert_to_constants.convert_variables_to_constants_v2(serve.get_concrete_function())
  converter = converter_type.from_concrete_functions([frozen])
  converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
  kind = quantization.kind
  if kind != 'float32':
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
  if kind == 'float16':
    converter.target_spec.supported_types = [tf.float16]
  if kind == 'int8':
    images = quantization.calibration
    converter.representative_dataset = lambda: ([image[None].astype(np.float32)] for image in images)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8] + (
        [tf.lite.OpsSet.TFLITE_BUILTINS] if quantization.float_fallback else [])
    if quantization.int8_io:
      converter.inference_input_type = converter.inference_output_type = tf.int8
  try:
    return converter.convert()
  except Exception as e:  # pylint: disable=broad-except  (the converter raises many types for one cause)
    if kind != 'int8':
      raise
    if not quantization.float_fallback and _converts(model, image_size, quantization, answers):
      raise deploy.QuantizationError(
          f'Full-integer int8 conversion failed: some op has no int8 kernel ({deploy.cause(e)}). Let it run in '
          'float with --tflite_float_fallback=true (not for the Edge TPU), or export dynamic_int8 instead.') from e
    raise deploy.QuantizationError(f'int8 conversion failed: an op has no TFLite kernel in int8 or float '
                                   f'({deploy.cause(e)}); no quantized file of this model can be made.') from e


def _converts(model: keras.Model, image_size: int, quantization: Quantization, answers) -> bool:
  """Whether int8 with float fallback converts: tells 'no int8 kernel' from 'no kernel at all'."""
  try:
    convert(model, image_size, dataclasses.replace(quantization, float_fallback=True), answers)
    return True
  except deploy.QuantizationError:
    return False


class TfliteFormat(deploy.DeployFormat):
  """.tflite files, run by LiteRT (``litert_runtime``); int8's options are the format's own."""
  name = 'TFLite'
  suffix = '.tflite'
  report_name = 'tflite_report'
  runtime_name = 'LiteRT'
  kinds = QUANTIZATIONS
  export_param = 'export_tflite'
  quantizations_param = 'tflite_quantizations'
  details = 'batch 1'

  def __init__(self, model: keras.Model, image_size: int, answers=answers_lib.TopOne(), int8_io: bool = False,
               float_fallback: bool = False):
    super().__init__(model, image_size, answers)
    self.int8_io, self.float_fallback = int8_io, float_fallback

  def convert(self, kind: str, float32_file: Optional[bytes] = None,
              calibration: Optional[np.ndarray] = None) -> bytes:
    del float32_file  # every kind is converted from the model
    quantization = Quantization(kind, calibration if kind == 'int8' else None, self.int8_io, self.float_fallback)
    return convert(self.model, self.image_size, quantization=quantization, answers=self.answers)

  def load(self, data: bytes) -> litert_runtime.Model:
    return litert_runtime.Model(data)

  def op_count(self, data: bytes) -> int:
    return litert_runtime.Model(data).op_count()

  def advice(self, kind: str, calibration: Optional[np.ndarray]) -> str:
    if kind == 'int8':
      return (deploy.calibration_advice(calibration, '; per-channel weights are already on') + ', or let ops that '
              'lose most run in float (--tflite_float_fallback=true)')
    return 'export float32 or float16 instead (dynamic_int8 quantizes the weights without calibration)'


def tflite_probabilities(flatbuffer: bytes, images: np.ndarray) -> np.ndarray:
  """Runs the .tflite with LiteRT on each image (its input is a batch of one) and stacks the probabilities."""
  return litert_runtime.Model(flatbuffer).probabilities(images)


def export_tflite(saved_model_dir: str, model: keras.Model, build_float32: Callable[[], keras.Model],
                  image_size: int, precision: str, weights: Optional[Callable[[], ContextManager]] = None,
                  measuring: Optional[deploy.Measuring] = None, answers=answers_lib.TopOne(),
                  **options) -> deploy.Report:
  """``deploy.export`` of the .tflite files of ``model`` (a float32 copy by ``build_float32`` holding the weights it
  has in ``weights()``, e.g. moving averages); ``options``: TfliteFormat's int8 options."""
  with (weights() if weights else contextlib.nullcontext()):
    copy = deploy.float32_copy(model, build_float32)
  return deploy.export(TfliteFormat(copy, image_size, answers, **options), saved_model_dir, precision, measuring)
