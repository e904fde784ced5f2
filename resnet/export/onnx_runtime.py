"""Running an .onnx file with ONNX Runtime (CPU), the runtime the file is checked with before it is written and
that ``--predict_onnx`` uses: batches of float32 images 0..255 in, probabilities out (the input's batch dimension is
dynamic), and the single-image latency of the export table.

The ONNX packages are an extra (``pip install -e '.[onnx]'``), never needed for training: ``require()`` says so in
one message when they are missing.
"""
import importlib
import time
from typing import Dict, Union

import numpy as np

INSTALL = "pip install -e '.[onnx]'"  # tf2onnx, onnx, onnxruntime (setup.py's onnx extra)


class MissingOnnxError(ValueError):
  """The onnx extra is not installed (a ValueError: the params that ask for ONNX cannot be met here)."""


def require(purpose: str, modules=('onnxruntime', 'onnx', 'tf2onnx')):
  """The ``onnxruntime`` module (after importing ``modules``); without the extra, or with a broken install, one
  message naming what needs it and the install command. Running a file needs ONNX Runtime only."""
  for name in modules:
    try:
      importlib.import_module(name)
    except Exception as e:  # pylint: disable=broad-except  (a broken install raises more than ImportError)
      raise MissingOnnxError(f'{purpose} needs the ONNX packages (tf2onnx, onnx, onnxruntime), which training does '
                             f'not, and {name} could not be imported ({type(e).__name__}: {e}): install them with '
                             f'{INSTALL}.') from e
  return importlib.import_module('onnxruntime')


class Model:
  """One .onnx (a path or the serialized bytes) in an ONNX Runtime CPU session."""

  def __init__(self, source: Union[str, bytes], num_threads: int = 0):
    ort = require('Running an .onnx file', ('onnxruntime',))
    options = ort.SessionOptions()
    options.intra_op_num_threads = num_threads
    options.log_severity_level = 3  # errors only: the quantized files' constant-folding notes are not for users
    self.session = ort.InferenceSession(source, options, providers=['CPUExecutionProvider'])
    self.runtime = f'ONNX Runtime {ort.__version__} (CPU)'
    (self.input,) = self.session.get_inputs()
    self.outputs_names = [o.name for o in self.session.get_outputs()]
    self.image_size = int(self.input.shape[1])
    probabilities = next(o for o in self.session.get_outputs() if o.name == 'probabilities')
    self.num_classes = int(probabilities.shape[-1])

  def probabilities(self, images: np.ndarray, batch_size: int = 32) -> np.ndarray:
    """[N, S, S, 3] images 0..255 -> [N, classes] probabilities, in batches (the batch dimension is dynamic)."""
    return self.outputs(images, batch_size)['probabilities'].astype(np.float32)

  def outputs(self, images: np.ndarray, batch_size: int = 32) -> Dict[str, np.ndarray]:
    """Every output the file serves by name (``probabilities``, ``classes``, multi-label ``labels``), in batches."""
    images = np.asarray(images, np.float32)
    batches = [self.session.run(self.outputs_names, {self.input.name: images[start:start + batch_size]})
               for start in range(0, len(images), batch_size)]
    return {name: np.concatenate([b[i] for b in batches]) for i, name in enumerate(self.outputs_names)}

  def latency_ms(self, image: np.ndarray, repeats: int = 20) -> float:
    """Median milliseconds of one run on a batch of one image, after one warm-up run."""
    feed = {self.input.name: np.asarray(image, np.float32)[None]}
    self.session.run(['probabilities'], feed)
    times = []
    for _ in range(repeats):
      start = time.perf_counter()
      self.session.run(['probabilities'], feed)
      times.append((time.perf_counter() - start) * 1e3)
    return float(np.median(times))
