"""TFLite export: the exported weights as a float32 ``model.tflite`` in the SavedModel's version directory, and the
quantized files a phone, a browser or an Edge TPU takes (``QUANTIZATIONS``), each measured before it is written.

The .tflite is converted from a float32 copy of the model holding the exported weights (TFLite has no bfloat16
kernels, so converting a bfloat16 SavedModel graph would need TensorFlow ops at run time). Its input is a batch
of one float32 image [1, S, S, 3] with values 0..255, as the SavedModel's ``serving_images`` signature takes, and
its output the class probabilities. After writing, both files classify the same images and the largest difference
is logged. The .tflite must agree with the float32 weights it came from within PARITY_TOLERANCE in every
precision (else it is not written), and a float32 model's with the SavedModel too; a bfloat16/float16 SavedModel
differs from it by its own rounding. Every file is run by LiteRT's own runtime (``litert_runtime``).

Quantized files (``export_quantized``): float16 weights; dynamic-range int8 (int8 weights, float activations);
full-integer int8 calibrated on the run's training images (optionally with int8 input and output, as the Edge TPU
compiler needs). Each is measured on validation images against the SavedModel (``tflite_report``) and written only
if its top-1 agrees on at least ``min_agreement`` of them; the float32 file and the SavedModel are written first and
never touched by a quantized export that fails.
"""
import contextlib
import dataclasses
import os
from typing import Callable, ContextManager, List, Optional, Sequence

from absl import logging
import keras
import numpy as np
import tensorflow as tf
from tensorflow.python.framework import convert_to_constants  # pylint: disable=g-direct-tensorflow-import

from resnet.estimator import files
from resnet.export import litert_runtime
from resnet.export import tflite_report

TFLITE_NAME = 'model.tflite'
QUANTIZATIONS = ('float16', 'dynamic_int8', 'int8')
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
  measured: Sequence[tflite_report.Row] = ()  # with quantized files: every file measured on validation images


@dataclasses.dataclass(frozen=True)
class QuantizedExports:
  """What the quantized files need: their kinds, int8's calibration images and options, and the labelled
  validation images they are measured on."""
  kinds: Sequence[str]
  calibration: Optional[np.ndarray]
  images: np.ndarray
  labels: np.ndarray
  min_agreement: float
  int8_io: bool = False
  float_fallback: bool = False


def float32_copy(model: keras.Model, build: Callable[[], keras.Model]) -> keras.Model:
  """``build()`` (the same architecture, float32 policy) holding ``model``'s current weights."""
  copy = build()
  copy.set_weights(model.get_weights())
  return copy


def file_name(kind: str) -> str:
  return TFLITE_NAME if kind == 'float32' else f'model_{kind}.tflite'


@dataclasses.dataclass(frozen=True)
class Quantization:
  """How to convert: ``kind`` (float32 or one of QUANTIZATIONS) and, for int8, its calibration images and options."""
  kind: str = 'float32'
  calibration: Optional[np.ndarray] = None   # [N, S, S, 3] 0..255, int8 only
  int8_io: bool = False
  float_fallback: bool = False


class QuantizationError(RuntimeError):
  """A quantized file could not be made, or computes too differently from the SavedModel: it was not written."""


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
            outputs: tflite_report.Outputs = tflite_report.Outputs()) -> bytes:
  """TFLite flatbuffer of ``images [1, S, S, 3] -> probabilities`` (softmax, or multi-label sigmoids), the weights
  frozen into constants."""
  converter_type = converter_class()

  @tf.function(input_signature=[tf.TensorSpec([1, image_size, image_size, 3], tf.float32, name='images')])
  def serve(images):
    return {'probabilities': outputs.probabilities(model(images, training=False))}

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
    cause = ' '.join(str(e).split())[:300] or type(e).__name__
    if not quantization.float_fallback and _converts(model, image_size, quantization, outputs):
      raise QuantizationError(f'Full-integer int8 conversion failed: some op has no int8 kernel ({cause}). Let it '
                              'run in float with --tflite_float_fallback=true (not for the Edge TPU), or export '
                              'dynamic_int8 instead.') from e
    raise QuantizationError(f'int8 conversion failed: an op has no TFLite kernel in int8 or float ({cause}); '
                            'no quantized file of this model can be made.') from e


def _converts(model: keras.Model, image_size: int, quantization: Quantization,
              outputs: tflite_report.Outputs) -> bool:
  """Whether int8 with float fallback converts: tells 'no int8 kernel' from 'no kernel at all'."""
  try:
    convert(model, image_size, dataclasses.replace(quantization, float_fallback=True), outputs)
    return True
  except QuantizationError:
    return False


def tflite_probabilities(flatbuffer: bytes, images: np.ndarray) -> np.ndarray:
  """Runs the .tflite with LiteRT on each image (its input is a batch of one) and stacks the probabilities."""
  return litert_runtime.Model(flatbuffer).probabilities(images)


def op_count(flatbuffer: bytes) -> int:
  return litert_runtime.Model(flatbuffer).op_count()


def parity_images(image_size: int, count: int = PARITY_IMAGES, seed: int = 0) -> np.ndarray:
  return np.random.default_rng(seed).uniform(0, 255, (count, image_size, image_size, 3)).astype(np.float32)


def export_tflite(saved_model_dir: str, model: keras.Model, build_float32: Callable[[], keras.Model],
                  image_size: int, precision: str,
                  weights: Optional[Callable[[], ContextManager]] = None,
                  quantized: Optional[QuantizedExports] = None,
                  outputs: tflite_report.Outputs = tflite_report.Outputs()) -> TfliteReport:
  """Writes ``<saved_model_dir>/model.tflite`` (atomically), once it is checked.

  The check that holds in every precision: the .tflite against the float32 copy it was converted from, within
  PARITY_TOLERANCE, else an error and no file (a conversion fault never hides behind bfloat16 rounding). Then
  against the SavedModel: within PARITY_TOLERANCE for a float32 model, logged for a 16-bit one.
  ``weights()``: the context in which ``model`` holds the exported weights (e.g. moving averages).
  ``quantized``: then the quantized files, each measured and written or refused (``export_quantized``).
  """
  with (weights() if weights else contextlib.nullcontext()):
    copy = float32_copy(model, build_float32)
  flatbuffer = convert(copy, image_size, outputs=outputs)
  path = os.path.join(saved_model_dir, TFLITE_NAME)
  images = parity_images(image_size)
  lite = tflite_probabilities(flatbuffer, images)
  reference = outputs.probabilities(copy(images, training=False)).numpy()
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
  if quantized is not None:
    report = dataclasses.replace(report, measured=export_quantized(
        saved_model_dir, copy, flatbuffer, image_size, precision, quantized, outputs))
  return report


def export_quantized(saved_model_dir: str, copy: keras.Model, float32_file: bytes, image_size: int, precision: str,
                     quantized: QuantizedExports,
                     outputs: tflite_report.Outputs = tflite_report.Outputs()) -> List[tflite_report.Row]:
  """Each quantized kind converted, measured against the SavedModel and written, in order; the table of every file
  is written beside them either way. A kind that cannot be made, or agrees with the SavedModel's top-1 on fewer
  than ``min_agreement`` of the images, is not written and raises QuantizationError (the files before it stay)."""
  reference = tflite_report.Reference(saved_model_dir, precision, quantized.images, quantized.labels, outputs)
  rows = [reference.row, reference.measure(TFLITE_NAME, 'float32', float32_file, quantized.images)]
  count = len(quantized.images)
  for kind in quantized.kinds:
    calibration = quantized.calibration if kind == 'int8' else None
    try:
      flatbuffer = convert(copy, image_size, Quantization(kind, calibration, quantized.int8_io,
                                                          quantized.float_fallback), outputs)
    except QuantizationError:
      tflite_report.write(saved_model_dir, rows, count)
      raise
    row = reference.measure(file_name(kind), kind, flatbuffer, quantized.images)
    if row.agreement < quantized.min_agreement:
      rows.append(dataclasses.replace(row, kept=False))
      tflite_report.write(saved_model_dir, rows, count)
      advice = (f'calibrate on more training images (tflite_calibration_images, {len(calibration)} now; per-channel '
                'weights are already on), or let ops that lose most run in float (--tflite_float_fallback=true)'
                if kind == 'int8' else 'export float32 or float16 instead (dynamic_int8 quantizes the weights '
                'without calibration)')
      raise QuantizationError(
          f'{file_name(kind)} agrees with the SavedModel\'s {outputs.answers} on {row.agreement:.1%} of {count} '
          f'validation images, below tflite_min_agreement={quantized.min_agreement:g} ({row.metric} {row.top_1:.4f} '
          f'vs {reference.row.top_1:.4f}): it was not written. To keep it: {advice}; or lower tflite_min_agreement. '
          f'The SavedModel and {TFLITE_NAME} are complete; the table is in '
          f'{os.path.join(saved_model_dir, tflite_report.REPORT_NAME)}.txt.')
    files.atomic_write(os.path.join(saved_model_dir, file_name(kind)), flatbuffer)
    rows.append(row)
  tflite_report.write(saved_model_dir, rows, count)
  return rows
