"""The measured table of the deployed files (``deploy``), measured on the run's own validation images: for the
SavedModel and each .tflite or .onnx file, its score (top-1 accuracy, or what the run's answers score: micro F1 at
multi-label thresholds), the agreement of its answers with the SavedModel's, file size and the median single-image
latency on this machine. Written beside the files, one table per format: ``<report>.json`` and the table in
``<report>.txt`` (``tflite_report``, ``onnx_report``).
"""
import dataclasses
import json
import os
from typing import Sequence

from absl import logging
import tensorflow as tf

from resnet.estimator import files

REPORT_NAMES = ('tflite_report', 'onnx_report')  # each format's report_name (a test)
DEPLOYED_FILES = ('.tflite', '.onnx')  # each format's suffix (a test): beside the SavedModel, not part of it
REFUSED = 'not written: below deploy_min_agreement'


@dataclasses.dataclass(frozen=True)
class Row:
  name: str            # 'SavedModel (bfloat16)', 'model_int8.tflite', ...
  kind: str            # 'saved_model', 'float32', 'float16', 'dynamic_int8', 'int8'
  bytes: int
  top_1: float         # the score: top-1 accuracy, or another (``metric``: the answers' score_name)
  agreement: float     # the answers' agreement with the SavedModel's (share of images with its top-1, ...)
  latency_ms: float    # median of one image, batch 1
  runtime: str
  kept: bool = True    # False: below deploy_min_agreement, not written
  metric: str = 'top-1'


def directory_bytes(path: str) -> int:
  """The SavedModel's size: its directory without the deployed files and reports beside it."""
  return sum(tf.io.gfile.stat(os.path.join(root, name)).length for root, _, names in tf.io.gfile.walk(path)
             for name in names if not name.endswith(DEPLOYED_FILES) and not name.startswith(REPORT_NAMES))


def table(rows: Sequence[Row], num_images: int, answers: str = 'top-1') -> str:
  """The table; ``answers``: what the agreement compares (the answers object's ``answers``; its gloss in
  parentheses, as '(image x class)', is left to the refusal's message)."""
  metric = rows[0].metric if rows else 'top-1'
  compared = answers.partition(' (')[0]
  lines = [f'Measured on {num_images} validation images (latency: one image, batch 1, this machine):',
           f'| file | size MB | {metric} | agreement of {compared} with the SavedModel | latency ms | runtime |',
           '|---|---|---|---|---|---|']
  for r in rows:
    kept = '' if r.kept else f' ({REFUSED})'
    lines.append(f'| {r.name}{kept} | {r.bytes / 1e6:.2f} | {r.top_1:.4f} | {r.agreement:.4f} | '
                 f'{r.latency_ms:.2f} | {r.runtime} |')
  return '\n'.join(lines) + '\n'


def write(directory: str, name: str, rows: Sequence[Row], num_images: int, answers: str = 'top-1') -> str:
  """``name``.txt (the table) and ``name``.json beside the files; returns the table."""
  text = table(rows, num_images, answers)
  files.atomic_write(os.path.join(directory, name + '.txt'), text)
  files.atomic_write(os.path.join(directory, name + '.json'), json.dumps(
      {'num_images': num_images, 'rows': [dataclasses.asdict(r) for r in rows]}, indent=2))
  logging.info('Wrote the measured table to %s.txt (and .json).', os.path.join(directory, name))
  return text
