"""What quantization cost, measured on the run's own validation images: for the float32 SavedModel and each .tflite
(or .onnx, ``onnx_export``), top-1 accuracy, agreement with the SavedModel's top-1 (share of images with the same
class), file size and the median single-image latency on this machine. Multi-label runs (``Outputs``): micro F1 at
the run's thresholds, and the agreement of the positive labels (image x class) with the SavedModel's (their Jaccard
index: shared positives over the positives of either). Written
beside the files as ``tflite_report.json`` and a table in ``tflite_report.txt`` (``onnx_report.*`` for the ONNX
files).
"""
import dataclasses
import json
import os
import time
from typing import Optional, Sequence, Tuple

from absl import logging
import numpy as np
import tensorflow as tf

from resnet.estimator import files
from resnet.export import litert_runtime

REPORT_NAME = 'tflite_report'
REPORT_NAMES = (REPORT_NAME, 'onnx_report')
DEPLOYED_FILES = ('.tflite', '.onnx')  # beside the SavedModel, not part of it
SERVING_SIGNATURE = 'serving_images'


@dataclasses.dataclass(frozen=True)
class Outputs:
  """What the exported files output and how their answers compare: softmax probabilities answered by their top-1,
  or (``thresholds``: multi-label) a sigmoid per class, each class decided at its threshold."""
  thresholds: Optional[Tuple[float, ...]] = None

  @property
  def multi_label(self) -> bool:
    return self.thresholds is not None

  @property
  def answers(self) -> str:
    return 'positive labels (image x class)' if self.multi_label else 'top-1'

  @property
  def score_name(self) -> str:
    return 'micro F1' if self.multi_label else 'top-1'

  def probabilities(self, logits) -> tf.Tensor:
    logits = tf.cast(logits, tf.float32)
    return tf.sigmoid(logits) if self.multi_label else tf.nn.softmax(logits)

  def decide(self, probabilities: np.ndarray) -> np.ndarray:
    """[N] classes, or [N, K] 0/1 decisions."""
    if self.multi_label:
      return (np.asarray(probabilities) >= np.asarray(self.thresholds, np.float32)).astype(np.int64)
    return np.asarray(probabilities).argmax(axis=1)

  def agreement(self, decided: np.ndarray, reference: np.ndarray) -> float:
    """Share of images with the reference's top-1; multi-label: of the positive decisions (image x class) either
    makes, those both make (their Jaccard index), so the many easy negatives cannot hide a broken file."""
    if not self.multi_label:
      return float(np.mean(decided == reference))
    either = np.sum((decided > 0) | (reference > 0))
    return float(np.sum((decided > 0) & (reference > 0)) / either) if either else 1.0

  def score(self, decided: np.ndarray, labels: np.ndarray) -> float:
    """top-1 accuracy, or micro F1 of the decisions against multi-hot labels."""
    if not self.multi_label:
      return float(np.mean(decided == labels))
    truth = labels > 0
    tp = np.sum(truth & (decided > 0))
    return float(2 * tp / max(truth.sum() + (decided > 0).sum(), 1))


@dataclasses.dataclass(frozen=True)
class Row:
  name: str            # 'SavedModel (bfloat16)', 'model_int8.tflite', ...
  kind: str            # 'saved_model', 'float32', 'float16', 'dynamic_int8', 'int8'
  bytes: int
  top_1: float         # the score: top-1 accuracy, or micro F1 (``metric``)
  agreement: float     # share of images whose top-1 equals the SavedModel's (multi-label: Outputs.agreement)
  latency_ms: float    # median of one image, batch 1
  runtime: str
  kept: bool = True    # False: below the agreement threshold, not written
  metric: str = 'top-1'


def directory_bytes(path: str) -> int:
  return sum(tf.io.gfile.stat(os.path.join(root, name)).length for root, _, names in tf.io.gfile.walk(path)
             for name in names if not name.endswith(DEPLOYED_FILES) and not name.startswith(REPORT_NAMES))


class Reference:
  """The float32-or-not SavedModel's view of the images: its top-1, accuracy, size and latency."""

  def __init__(self, saved_model_dir: str, precision: str, images: np.ndarray, labels: np.ndarray,
               outputs: Outputs = Outputs()):
    served = tf.saved_model.load(saved_model_dir).signatures[SERVING_SIGNATURE]
    dtype = served.structured_input_signature[1]['images'].dtype
    probabilities = [served(images=tf.constant(images[i:i + 32], dtype))['probabilities'].numpy()
                     for i in range(0, len(images), 32)]
    self.outputs = outputs
    self.predicted = outputs.decide(np.concatenate(probabilities))
    self.labels = labels
    one = tf.constant(images[:1], dtype)
    served(images=one)
    times = []
    for _ in range(10):
      start = time.perf_counter()
      served(images=one)
      times.append((time.perf_counter() - start) * 1e3)
    self.row = Row(f'SavedModel ({precision})', 'saved_model', directory_bytes(saved_model_dir),
                   outputs.score(self.predicted, labels), 1.0, float(np.median(times)), 'TensorFlow',
                   metric=outputs.score_name)

  def measure(self, name: str, kind: str, flatbuffer: bytes, images: np.ndarray) -> Row:
    model = litert_runtime.Model(flatbuffer)
    return self.row_for(name, kind, len(flatbuffer), model.probabilities(images), model.latency_ms(images[0]),
                        model.runtime)

  def row_for(self, name: str, kind: str, size: int, probabilities: np.ndarray, latency_ms: float,
              runtime: str) -> Row:
    """A file's row from its probabilities on the reference's images, answered as the SavedModel's are."""
    predicted = self.outputs.decide(probabilities)
    return Row(name, kind, size, self.outputs.score(predicted, self.labels),
               self.outputs.agreement(predicted, self.predicted), latency_ms, runtime, metric=self.outputs.score_name)


def table(rows: Sequence[Row], num_images: int) -> str:
  metric = rows[0].metric if rows else 'top-1'
  agreement = 'agreement of positive labels' if metric == 'micro F1' else 'agreement'
  lines = [f'Measured on {num_images} validation images (latency: one image, batch 1, this machine):',
           f'| file | size MB | {metric} | {agreement} with the SavedModel | latency ms | runtime |',
           '|---|---|---|---|---|---|']
  for r in rows:
    kept = '' if r.kept else ' (not written: below tflite_min_agreement)'
    lines.append(f'| {r.name}{kept} | {r.bytes / 1e6:.2f} | {r.top_1:.4f} | {r.agreement:.4f} | '
                 f'{r.latency_ms:.2f} | {r.runtime} |')
  return '\n'.join(lines) + '\n'


def write(directory: str, rows: Sequence[Row], num_images: int, name: str = REPORT_NAME) -> str:
  """``name``.txt (the table) and ``name``.json beside the files."""
  text = table(rows, num_images)
  files.atomic_write(os.path.join(directory, name + '.txt'), text)
  files.atomic_write(os.path.join(directory, name + '.json'), json.dumps(
      {'num_images': num_images, 'rows': [dataclasses.asdict(r) for r in rows]}, indent=2))
  logging.info('Wrote the measured table to %s.txt (and .json).', os.path.join(directory, name))
  return text
