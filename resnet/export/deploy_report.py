"""The measured table of the deployed files (``deploy``), measured on the run's own validation images: for the
SavedModel and each .tflite or .onnx file, its score (top-1 accuracy, or what the run's answers score: micro F1 at
multi-label thresholds), the agreement of its answers with the SavedModel's (top-1 agreement, or the Jaccard index of
positive labels), pooled and of its worst class (named), file size and the median single-image latency on this
machine. Written beside the files, one table per format: ``<report>.json`` and the table in
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
REFUSED = 'not written: below {}'  # the floor it missed: deploy_min_agreement or deploy_min_class_agreement


@dataclasses.dataclass(frozen=True)
class Row:
  name: str            # 'SavedModel (bfloat16)', 'model_int8.tflite', ...
  kind: str            # 'saved_model', 'float32', 'float16', 'dynamic_int8', 'int8'
  bytes: int
  top_1: float         # the score: top-1 accuracy, or another (``metric``: the answers' score_name)
  agreement: float     # the answers' agreement with the SavedModel's (share of images with its top-1, ...)
  latency_ms: float    # median of one image, batch 1
  runtime: str
  kept: bool = True    # False: below deploy_min_agreement or deploy_min_class_agreement (``refused_by``), not written
  metric: str = 'top-1'
  agreement_name: str = 'top-1 agreement'  # what ``agreement`` measures (the answers' agreement_name)
  class_agreement: float = 1.0  # the Jaccard index of its worst class: of the images either puts in it, both do
  worst_class: str = ''         # that class ('3 (cat)'); '' for the SavedModel, or where no class was compared
  refused_by: str = ''  # the floor it missed, where not kept ('' for a kept file)
  classes_too_small: int = 0  # classes compared but decided for under answers.CLASS_MIN_IMAGES images: not judged


def directory_bytes(path: str) -> int:
  """The SavedModel's size: its directory without the deployed files and reports beside it."""
  return sum(tf.io.gfile.stat(os.path.join(root, name)).length for root, _, names in tf.io.gfile.walk(path)
             for name in names if not name.endswith(DEPLOYED_FILES) and not name.startswith(REPORT_NAMES))


def table(rows: Sequence[Row], num_images: int) -> str:
  """The table, its columns named by what the rows measure (``metric``, ``agreement_name``)."""
  metric = rows[0].metric if rows else 'top-1'
  measure = rows[0].agreement_name if rows else 'top-1 agreement'
  lines = [f'Measured on {num_images} validation images (latency: one image, batch 1, this machine):',
           f'| file | size MB | {metric} | {measure} with the SavedModel | worst class: its Jaccard index | '
           'latency ms | runtime |',
           '|---|---|---|---|---|---|---|']
  for r in rows:
    kept = '' if r.kept else f' ({REFUSED.format(r.refused_by)})'
    worst = f'{r.worst_class}: {r.class_agreement:.4f}' if r.worst_class else '-'
    if r.classes_too_small:
      worst += f' ({r.classes_too_small} classes too small to judge)'
    lines.append(f'| {r.name}{kept} | {r.bytes / 1e6:.2f} | {r.top_1:.4f} | {r.agreement:.4f} | {worst} | '
                 f'{r.latency_ms:.2f} | {r.runtime} |')
  return '\n'.join(lines) + '\n'


def write(directory: str, name: str, rows: Sequence[Row], num_images: int) -> str:
  """``name``.txt (the table) and ``name``.json beside the files; returns the table."""
  text = table(rows, num_images)
  files.atomic_write(os.path.join(directory, name + '.txt'), text)
  files.atomic_write(os.path.join(directory, name + '.json'), json.dumps(
      {'num_images': num_images, 'rows': [dataclasses.asdict(r) for r in rows]}, indent=2))
  logging.info('Wrote the measured table to %s.txt (and .json).', os.path.join(directory, name))
  return text
