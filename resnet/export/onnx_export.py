"""ONNX export (``export_onnx``, ``onnx_quantizations``): ``model.onnx`` beside the SavedModel for ONNX Runtime,
TensorRT, OpenVINO, DirectML or Core ML, and quantized files, each run by ONNX Runtime before it is written.

The file is converted by tf2onnx from a float32 copy of the model holding the exported weights (as the .tflite is:
a bfloat16 graph has few ONNX Runtime kernels): float32 images [batch, S, S, 3] with values 0..255 in (the batch
dimension is dynamic), ``probabilities`` and ``classes`` out, as the SavedModel's ``serving_images`` signature.
It must agree with the float32 weights within PARITY_TOLERANCE (a float32 SavedModel too), else it is not written.

Quantized files: ``float16`` (float16 weights and compute, float32 input and output, for GPUs) and ``int8``
(static QDQ quantization, int8 weights per channel, uint8 activations calibrated on the run's training images with
eval preprocessing). With the run's records every file is measured on its validation images against the SavedModel
(``onnx_report.txt``) and a quantized file whose top-1 agrees on fewer than ``tflite_min_agreement`` of them is not
written (the export fails saying why; the files before it stay). int8 is per channel without range reduction (for
VNNI CPUs and GPUs): a CPU without VNNI may saturate, which the agreement measured on this machine shows.
"""
import dataclasses
import os
import tempfile
from typing import List, Optional, Sequence

from absl import logging
import keras
import numpy as np
import tensorflow as tf

from resnet.estimator import files
from resnet.export import onnx_runtime
from resnet.export import tflite_export
from resnet.export import tflite_report

ONNX_NAME = 'model.onnx'
QUANTIZATIONS = ('float16', 'int8')
REPORT_NAME = 'onnx_report'
PARITY_TOLERANCE = tflite_export.PARITY_TOLERANCE
DEFAULT_OPSET = 17
BATCH_DIMENSION = 'batch'


class QuantizationError(RuntimeError):
  """A quantized .onnx could not be made, or computes too differently from the SavedModel: it was not written."""


@dataclasses.dataclass(frozen=True)
class OnnxExports:
  """What the ONNX files need: the opset, the quantized kinds, int8's calibration images and the labelled
  validation images every file is measured on (None without the run's records: then the float32 file is checked
  against its weights only)."""
  opset: int = DEFAULT_OPSET
  kinds: Sequence[str] = ()
  calibration: Optional[np.ndarray] = None
  images: Optional[np.ndarray] = None
  labels: Optional[np.ndarray] = None
  min_agreement: float = 0.9
  outputs: tflite_report.Outputs = tflite_report.Outputs()   # multi-label: sigmoids, decided at thresholds


def file_name(kind: str) -> str:
  return ONNX_NAME if kind == 'float32' else f'model_{kind}.onnx'


def import_tf2onnx():
  """tf2onnx with its converter, and TF_CPP_MIN_LOG_LEVEL as it was: importing tf2onnx.convert (which tf2onnx
  imports on first use) sets the variable to 3 for the whole process, which would hide TensorFlow's C++ errors
  from every process started afterwards."""
  before = os.environ.get('TF_CPP_MIN_LOG_LEVEL')
  try:
    import tf2onnx.convert  # pylint: disable=g-import-not-at-top
  finally:
    if before is None:
      os.environ.pop('TF_CPP_MIN_LOG_LEVEL', None)
    else:
      os.environ['TF_CPP_MIN_LOG_LEVEL'] = before
  return tf2onnx


def convert(model: keras.Model, image_size: int, opset: int = DEFAULT_OPSET,
            outputs: tflite_report.Outputs = tflite_report.Outputs()) -> bytes:
  """The serialized ONNX model of ``images [batch, S, S, 3] -> probabilities, classes`` (multi-label: sigmoids, and
  ``labels``, each class decided at its threshold, as the SavedModel)."""
  onnx_runtime.require('The ONNX export')
  tf2onnx = import_tf2onnx()

  @tf.function(input_signature=[tf.TensorSpec([None, image_size, image_size, 3], tf.float32, name='images')])
  def serve(images):
    probabilities = outputs.probabilities(model(images, training=False))
    served = {'probabilities': probabilities, 'classes': tf.argmax(probabilities, axis=1, output_type=tf.int64)}
    if outputs.multi_label:
      served['labels'] = tf.cast(probabilities >= tf.constant(outputs.thresholds, tf.float32), tf.int32)
    return served

  proto, _ = tf2onnx.convert.from_function(serve, input_signature=serve.input_signature, opset=opset)
  for value in list(proto.graph.input) + list(proto.graph.output):  # tf2onnx names it unk__N
    value.type.tensor_type.shape.dim[0].dim_param = BATCH_DIMENSION
  return proto.SerializeToString()


class _Calibration:
  """onnxruntime's CalibrationDataReader protocol over [N, S, S, 3] images, a batch of 8 at a time."""

  def __init__(self, images: np.ndarray):
    self._batches = iter([{'images': images[i:i + 8]} for i in range(0, len(images), 8)])

  def get_next(self):
    return next(self._batches, None)


def quantize(float32_file: bytes, kind: str, calibration: Optional[np.ndarray] = None) -> bytes:
  """``float32_file`` as a ``kind`` file (one of QUANTIZATIONS)."""
  onnx_runtime.require('The quantized ONNX export')
  import onnx  # pylint: disable=g-import-not-at-top
  if kind == 'float16':
    from onnxruntime.transformers import float16  # pylint: disable=g-import-not-at-top
    return float16.convert_float_to_float16(onnx.load_from_string(float32_file), keep_io_types=True
                                            ).SerializeToString()
  if kind != 'int8':
    raise ValueError(f'Unknown ONNX quantization {kind!r}: choose from {", ".join(QUANTIZATIONS)}.')
  from onnxruntime import quantization  # pylint: disable=g-import-not-at-top
  from onnxruntime.quantization import shape_inference  # pylint: disable=g-import-not-at-top
  with tempfile.TemporaryDirectory(prefix='onnx-int8-') as scratch:  # the quantizer reads and writes files
    source, prepared, target = (os.path.join(scratch, name) for name in ('float32.onnx', 'prepared.onnx', 'int8.onnx'))
    with open(source, 'wb') as f:
      f.write(float32_file)
    try:
      # ONNX Runtime's recommended preparation (shapes inferred, graph optimised) before calibration; symbolic
      # shape inference would need sympy, and the shapes here are static but for the batch.
      shape_inference.quant_pre_process(source, prepared, skip_symbolic_shape=True)
      quantization.quantize_static(
          prepared, target, _Calibration(np.asarray(calibration, np.float32)),
          quant_format=quantization.QuantFormat.QDQ, per_channel=True,
          activation_type=quantization.QuantType.QUInt8, weight_type=quantization.QuantType.QInt8)
    except Exception as e:  # pylint: disable=broad-except  (the quantizer raises many types for one cause)
      cause = ' '.join(str(e).split())[:300] or type(e).__name__
      raise QuantizationError(f'int8 ONNX quantization failed ({cause}): model_int8.onnx was not written. Export '
                              'float16 instead, or use the int8 .tflite (tflite_quantizations=int8).') from e
    with open(target, 'rb') as f:
      return f.read()


def export_onnx(saved_model_dir: str, copy: keras.Model, image_size: int, precision: str,
                exports: OnnxExports) -> List[tflite_report.Row]:
  """Writes ``model.onnx`` (and the quantized files) into ``saved_model_dir``, each checked first; returns the
  measured rows (empty without the run's images). ``copy``: the float32 model holding the exported weights."""
  if exports.kinds and exports.images is None:
    raise ValueError('Quantized ONNX files are measured on the run\'s validation images, and there are none.')
  float32_file = convert(copy, image_size, exports.opset, exports.outputs)
  path = os.path.join(saved_model_dir, ONNX_NAME)
  images = tflite_export.parity_images(image_size)
  try:  # tf2onnx converts what it can and leaves the rest: an op it could not convert fails here
    served = onnx_runtime.Model(float32_file).probabilities(images)
  except Exception as e:  # pylint: disable=broad-except  (onnxruntime's errors have no common public base)
    raise RuntimeError(f'ONNX Runtime cannot run the converted model ({" ".join(str(e).split())[:300]}): {path} '
                       'was not written (the SavedModel beside it is complete). Export without export_onnx, or '
                       'report the op it names.') from e
  difference = float(np.max(np.abs(served - exports.outputs.probabilities(copy(images, training=False)).numpy())))
  if difference > PARITY_TOLERANCE:
    raise RuntimeError(f'The ONNX conversion differs from the float32 weights it was converted from by '
                       f'{difference:.3g} (> {PARITY_TOLERANCE:g}) on the same images: {path} was not written '
                       '(the SavedModel beside it is complete). Export without export_onnx, or report the ops.')
  saved = tf.saved_model.load(saved_model_dir).signatures[tflite_export.SERVING_SIGNATURE]
  saved_difference = float(np.max(np.abs(served - saved(images=tf.constant(images))['probabilities'].numpy())))
  if precision == 'float32' and saved_difference > PARITY_TOLERANCE:
    raise RuntimeError(f'The ONNX model differs from the SavedModel by {saved_difference:.3g} (> '
                       f'{PARITY_TOLERANCE:g}) on the same images: {path} was not written (the SavedModel beside '
                       'it is complete). Export without export_onnx, or report the ops.')
  rows: List[tflite_report.Row] = []
  reference = None
  if exports.images is not None:
    reference = tflite_report.Reference(saved_model_dir, precision, exports.images, exports.labels, exports.outputs)
    rows = [reference.row, _measure(reference, ONNX_NAME, 'float32', float32_file, exports.images)]
  files.atomic_write(path, float32_file)
  logging.info('Exported ONNX: %s (%.1f MB, opset %d, float32, batch dimension %r); max |probability difference| '
               'on %d images: %.2g vs its float32 weights, %.2g vs the %s SavedModel', path,
               len(float32_file) / 1e6, exports.opset, BATCH_DIMENSION, len(images), difference, saved_difference,
               precision)
  print(f'Exported ONNX: {path} ({len(float32_file) / 1e6:.1f} MB, opset {exports.opset}; max |probability '
        f'difference| {difference:.2g} vs its float32 weights, {saved_difference:.2g} vs the SavedModel)')
  for kind in exports.kinds:
    try:
      data = quantize(float32_file, kind, exports.calibration)
      row = _measure(reference, file_name(kind), kind, data, exports.images)
    except Exception as e:  # pylint: disable=broad-except  (the table of the files before it is still written)
      _write_report(saved_model_dir, rows, exports)
      if isinstance(e, QuantizationError):
        raise
      raise QuantizationError(f'{file_name(kind)} could not be made or run ({" ".join(str(e).split())[:300]}): it '
                              f'was not written; the files before it are complete. Export without {kind} in '
                              'onnx_quantizations.') from e
    if row.agreement < exports.min_agreement:
      rows.append(dataclasses.replace(row, kept=False))
      _write_report(saved_model_dir, rows, exports)
      advice = ('calibrate on more training images (tflite_calibration_images, '
                f'{len(exports.calibration)} now)' if kind == 'int8' else
                'export model.onnx alone (float16 rounding changes this model\'s answers)')
      raise QuantizationError(
          f'{file_name(kind)} agrees with the SavedModel\'s {exports.outputs.answers} on '
          f'{row.agreement:.1%} of {len(exports.images)} validation images, below tflite_min_agreement='
          f'{exports.min_agreement:g} ({row.metric} {row.top_1:.4f} vs {reference.row.top_1:.4f}): it was not written. To keep it: {advice}; or lower tflite_min_agreement. '
          f'The SavedModel and {ONNX_NAME} are complete; the table is in '
          f'{os.path.join(saved_model_dir, REPORT_NAME)}.txt.')
    files.atomic_write(os.path.join(saved_model_dir, file_name(kind)), data)
    rows.append(row)
  _write_report(saved_model_dir, rows, exports)
  return rows


def _measure(reference: tflite_report.Reference, name: str, kind: str, data: bytes,
             images: np.ndarray) -> tflite_report.Row:
  model = onnx_runtime.Model(data)
  return reference.row_for(name, kind, len(data), model.probabilities(images), model.latency_ms(images[0]),
                           model.runtime)


def _write_report(directory: str, rows: Sequence[tflite_report.Row], exports: OnnxExports) -> None:
  if rows:
    tflite_report.write(directory, rows, len(exports.images), name=REPORT_NAME)
