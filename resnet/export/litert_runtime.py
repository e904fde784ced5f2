"""Running a .tflite file: with LiteRT's own runtime (``ai-edge-litert``), the one phones and Edge TPU hosts use,
so that a file only TensorFlow can read does not pass; TensorFlow's interpreter where that package is missing
(said once in the log). Full-integer files with int8 input and output are fed and read through their
quantization parameters, so callers always give 0..255 float images and get float probabilities.
"""
import time
from typing import Any, Dict, List, Optional, Tuple, Union

from absl import logging
import numpy as np

_WARNED = []


def runtime() -> Tuple[str, Any]:
  """(name, Interpreter class): LiteRT's when ai-edge-litert is installed, else TensorFlow's."""
  try:
    from ai_edge_litert.interpreter import Interpreter  # pylint: disable=g-import-not-at-top
    return 'LiteRT (ai-edge-litert)', Interpreter
  except ImportError:
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    if getattr(getattr(tf, 'lite', None), 'Interpreter', None) is None:  # tf.lite has moved out of TensorFlow
      raise ValueError('Running a .tflite file needs LiteRT\'s runtime, and this TensorFlow has no tf.lite '
                       'interpreter to fall back on: pip install ai-edge-litert.') from None
    if not _WARNED:
      _WARNED.append(True)
      logging.warning('ai-edge-litert is not installed: .tflite files are checked with TensorFlow\'s interpreter '
                      'instead of LiteRT\'s own runtime (pip install ai-edge-litert).')
    return 'TensorFlow tf.lite', tf.lite.Interpreter


class Model:
  """One .tflite (a path or the flatbuffer's bytes), batch 1: ``probabilities(images)``, ``latency_ms()``."""

  def __init__(self, source: Union[str, bytes], num_threads: Optional[int] = None):
    self.runtime, interpreter_class = runtime()
    kwargs = {'model_path': source} if isinstance(source, str) else {'model_content': source}
    self.interpreter = interpreter_class(num_threads=num_threads, **kwargs)
    self.interpreter.allocate_tensors()
    (self.input,), (self.output,) = self.interpreter.get_input_details(), self.interpreter.get_output_details()
    self.image_size = int(self.input['shape'][1])

  @property
  def input_type(self) -> str:
    return np.dtype(self.input['dtype']).name

  def _feed(self, image: np.ndarray) -> None:
    dtype = np.dtype(self.input['dtype'])
    if dtype.kind in 'iu':  # quantized input: q = x / scale + zero_point
      scale, zero_point = self.input['quantization']
      info = np.iinfo(dtype)
      scaled = image / scale
      rounded = np.sign(scaled) * np.floor(np.abs(scaled) + 0.5)  # halves away from zero, as TFLite rounds
      image = np.clip(rounded + zero_point, info.min, info.max)
    self.interpreter.set_tensor(self.input['index'], image[None].astype(dtype))

  def _read(self) -> np.ndarray:
    out = self.interpreter.get_tensor(self.output['index'])[0]
    if np.dtype(self.output['dtype']).kind in 'iu':
      scale, zero_point = self.output['quantization']
      out = (out.astype(np.float32) - zero_point) * scale
    return out.astype(np.float32)

  def probabilities(self, images: np.ndarray) -> np.ndarray:
    """[N, S, S, 3] images 0..255 -> [N, classes] probabilities, one invoke per image."""
    outputs: List[np.ndarray] = []
    for image in np.asarray(images, np.float32):
      self._feed(image)
      self.interpreter.invoke()
      outputs.append(self._read())
    return np.stack(outputs)

  def outputs(self, images: np.ndarray) -> Dict[str, np.ndarray]:
    """Its one output by name: the probabilities (a .tflite holds no decisions: they are made from these)."""
    return {'probabilities': self.probabilities(images)}

  def latency_ms(self, image: np.ndarray, repeats: int = 20) -> float:
    """Median milliseconds of one invoke on one image, after one warm-up invoke."""
    self._feed(np.asarray(image, np.float32))
    self.interpreter.invoke()
    times = []
    for _ in range(repeats):
      start = time.perf_counter()
      self.interpreter.invoke()
      times.append((time.perf_counter() - start) * 1e3)
    return float(np.median(times))

  def op_count(self) -> int:
    return len(self.interpreter._get_ops_details())  # pylint: disable=protected-access  (no public op listing)
