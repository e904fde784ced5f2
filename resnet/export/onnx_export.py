"""ONNX's format (``OnnxFormat``, written, checked and measured by ``deploy.export``): ``model.onnx`` beside the
SavedModel for ONNX Runtime, TensorRT, OpenVINO, DirectML or Core ML, and quantized files, each run by ONNX Runtime
(``onnx_runtime``) before it is written.

tf2onnx converts the graph: float32 images [batch, S, S, 3] with values 0..255 in (the batch dimension is dynamic),
what the SavedModel's ``serving_images`` signature outputs out (``predictions``: the run's task's; ``probabilities``
and ``classes``, multi-label also ``labels``). Quantized files: ``float16`` (float16 weights and compute, float32 input
and output, for GPUs; the comparison with the thresholds stays float32, ``decision_nodes``) and ``int8`` (static
QDQ quantization after ONNX Runtime's recommended preparation, int8 weights per channel, uint8 activations
calibrated on the run's training images with eval preprocessing; the probabilities and the decisions are computed
in float from the dequantized logits, ``answer_nodes``). So every kind's ``labels`` are what its own
``probabilities`` give at the float32 thresholds beside it, as ``--predict_onnx`` decides them. int8 is per channel
without range reduction (for VNNI CPUs and GPUs): a CPU without VNNI may saturate, which the agreement measured on
this machine shows.
"""
import os
import tempfile
from typing import Callable, Dict, List, Optional

import keras
import numpy as np
import tensorflow as tf

from resnet.task import answers as answers_lib
from resnet.export import deploy
from resnet.export import onnx_runtime

QUANTIZATIONS = ('float16', 'int8')
DEFAULT_OPSET = 17
BATCH_DIMENSION = 'batch'
Predictions = Callable[[tf.Tensor], Dict[str, tf.Tensor]]  # logits -> the served outputs


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


def outputs_of(answers) -> Predictions:
  """The outputs of ``answers`` alone: its probabilities and the most probable class (a task's predictions may add
  more, as multi-label ``labels``)."""
  return lambda logits: {'probabilities': answers.probabilities(logits), 'classes': tf.argmax(logits, axis=-1)}


def convert(model: keras.Model, image_size: int, opset: int = DEFAULT_OPSET,
            predictions: Predictions = outputs_of(answers_lib.TopOne())) -> bytes:
  """The serialized ONNX model of ``images [batch, S, S, 3] -> predictions(logits)`` (named outputs, among them
  ``probabilities``), the weights (and any variable ``predictions`` reads) frozen into constants."""
  onnx_runtime.require('The ONNX export')
  tf2onnx = import_tf2onnx()

  @tf.function(input_signature=[tf.TensorSpec([None, image_size, image_size, 3], tf.float32, name='images')])
  def serve(images):
    return predictions(model(images, training=False))

  proto, _ = tf2onnx.convert.from_function(serve, input_signature=serve.input_signature, opset=opset)
  for value in list(proto.graph.input) + list(proto.graph.output):  # tf2onnx names it unk__N
    value.type.tensor_type.shape.dim[0].dim_param = BATCH_DIMENSION
  return proto.SerializeToString()


def decision_nodes(model) -> List[str]:
  """The nodes that read the ``probabilities`` output (multi-label: the comparison with the thresholds, whose
  ``labels`` the file outputs). A float16 file keeps them in float32, its probabilities cast up to them: thresholds
  rounded to float16 would decide elsewhere than the file's own probabilities do (0.9999 becomes 1.0, a class no
  image reaches)."""
  return [node.name for node in model.graph.node if 'probabilities' in node.input]


def answer_nodes(model) -> List[str]:
  """The node that computes the ``probabilities`` output and those that read it (``decision_nodes``). An int8 file
  keeps them in float, from its dequantized logits: uint8 probabilities, 1/255 apart, would make every threshold
  above 254/255 one no image reaches."""
  return [node.name for node in model.graph.node if 'probabilities' in node.output] + decision_nodes(model)


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
    model = onnx.load_from_string(float32_file)
    return float16.convert_float_to_float16(model, keep_io_types=True, node_block_list=decision_nodes(model)
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
          activation_type=quantization.QuantType.QUInt8, weight_type=quantization.QuantType.QInt8,
          nodes_to_exclude=answer_nodes(onnx.load(prepared)))
    except Exception as e:  # pylint: disable=broad-except  (the quantizer raises many types for one cause)
      raise deploy.QuantizationError(
          f'int8 ONNX quantization failed ({deploy.cause(e)}): model_int8.onnx was not written. Export float16 '
          'instead, or use the int8 .tflite (tflite_quantizations=int8).') from e
    with open(target, 'rb') as f:
      return f.read()


class OnnxFormat(deploy.DeployFormat):
  """.onnx files, run by ONNX Runtime (``onnx_runtime``). ``predictions``: what the SavedModel's signatures output
  for logits (the run's task's), else ``outputs_of(answers)``; the opset is the format's own."""
  name = 'ONNX'
  suffix = '.onnx'
  report_name = 'onnx_report'
  runtime_name = 'ONNX Runtime'
  kinds = QUANTIZATIONS
  export_param = 'export_onnx'
  quantizations_param = 'onnx_quantizations'

  def __init__(self, model: keras.Model, image_size: int, answers=answers_lib.TopOne(),
               opset: int = DEFAULT_OPSET, predictions: Optional[Predictions] = None):
    super().__init__(model, image_size, answers)
    self.opset, self.predictions = opset, predictions or outputs_of(answers)
    self.details = f'opset {opset}, batch dimension {BATCH_DIMENSION!r}'

  def convert(self, kind: str, float32_file: Optional[bytes] = None,
              calibration: Optional[np.ndarray] = None) -> bytes:
    if kind == 'float32':
      return convert(self.model, self.image_size, self.opset, self.predictions)
    return quantize(float32_file, kind, calibration)

  def load(self, data: bytes) -> onnx_runtime.Model:
    return onnx_runtime.Model(data)

  def op_count(self, data: bytes) -> int:
    import onnx  # pylint: disable=g-import-not-at-top
    return len(onnx.load_from_string(data).graph.node)

  def advice(self, kind: str, calibration: Optional[np.ndarray]) -> str:
    if kind == 'int8':
      return deploy.calibration_advice(calibration)
    return 'export model.onnx alone (float16 rounding changes this model\'s answers)'
