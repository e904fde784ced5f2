"""The conversion from top to bottom: check the arguments, plan the splits (sources.py), prepare the output folder
and write the shards (shards.py) while the workers clean the images (clean_images.py), then labels.txt and, last,
summary.json (summary.py), whose presence marks a complete run.

Each step lives in its own module; this one holds only their order, so that the command (tools/imagenet_to_gcs.py),
the demo and the tests run one and the same conversion.
"""
import json
import os
import time
from typing import Any, Dict, Optional

from absl import logging

from official_input.dataset_layout import LABELS_FILE, SUMMARY_FILE
from tools.convert import integrity
from tools.convert import labels_csv
from tools.convert import parquet_source
from tools.convert import shards as shards_lib
from tools.convert import summary as summary_lib
from tools.convert import webdataset_source
from tools.convert.sources import RATIO_LAYOUTS, plan_conversion
from tools.convert.splits import SPLITS


def convert_dataset(raw_data_dir: str,
                    output_dir: str,
                    train_ratio: float = 0.8,
                    validation_ratio: float = 0.1,
                    test_ratio: float = 0.1,
                    seed: int = 0,
                    train_shards: Optional[int] = None,
                    validation_shards: Optional[int] = None,
                    test_shards: Optional[int] = None,
                    num_workers: Optional[int] = None,
                    overwrite: bool = False,
                    apply_exif_orientation: bool = True,
                    max_image_side: int = 0,
                    drop_leaked_images: bool = False,
                    labels_csv_path: Optional[str] = None,
                    csv_columns: labels_csv.Columns = labels_csv.Columns(),
                    max_classes: Optional[int] = None,
                    multi_label: bool = False,
                    webdataset: Optional[str] = None,
                    parquet: Optional[str] = None,
                    label_field: Optional[str] = None) -> Dict[str, Any]:
  """Converts raw_data_dir to TFRecord shards, labels.txt and summary.json in output_dir; returns the summary.

  Shard counts of None are sized to the data (shards.default_num_shards). Ratios apply to class folders and to a labels
  CSV (``labels_csv_path``, read with ``csv_columns``) without a split column; multi-label CSV data (several labels
  per row, or ``multi_label``) is split by iterative stratification, and its records hold each image's list of
  labels (none for a negative).
  max_image_side > 0 shrinks images whose longer side exceeds it (0 keeps every size). Validation and test images
  that are copies of an image of an earlier split (train, then validation) are reported, and with
  drop_leaked_images left out of their split.
  ``webdataset`` or ``parquet`` (a pattern: source_patterns.py) reads the samples of tar shards or of Hugging Face
  Parquet/Arrow files in place of ``raw_data_dir`` (webdataset_source.py, parquet_source.py); ``label_field`` names
  their label member or column.
  """
  if max_image_side < 0:
    raise ValueError(f'max_image_side must be 0 (keep sizes) or a positive side in pixels, got {max_image_side}.')
  ratios = (train_ratio, validation_ratio, test_ratio)
  if min(ratios) < 0 or abs(sum(ratios) - 1.0) > 1e-6:
    raise ValueError(f'Split ratios must be >= 0 and sum to 1, got {ratios}.')
  start = time.time()
  if webdataset or parquet:
    raw_data_dir = webdataset or parquet
    plan = (webdataset_source.plan(webdataset, ratios, seed, label_field) if webdataset else
            parquet_source.plan(parquet, ratios, seed, label_field))
  else:
    raw_real, out_real = os.path.realpath(raw_data_dir), os.path.realpath(output_dir)
    if out_real == raw_real or out_real.startswith(raw_real + os.sep):
      raise ValueError(f'Output dir {output_dir} must not be inside raw_data_dir {raw_data_dir} '
                       '(it would be read as data).')
    plan = plan_conversion(raw_data_dir, ratios, seed, labels_csv_path, csv_columns, max_classes, multi_label)
  logging.info('Found the %s layout in %s: %s, %d classes.', plan.layout, raw_data_dir,
               ', '.join(f'{s} {len(plan.splits[s])} files' for s in SPLITS), len(plan.class_names))
  if plan.layout not in RATIO_LAYOUTS and ratios != (0.8, 0.1, 0.1):
    logging.info('Split ratios %s ignored: %s is already split.', ratios, raw_data_dir)
  shards_lib.prepare_output_dir(output_dir, overwrite)
  shards = shards_lib.shard_plan(plan, {'train': train_shards, 'validation': validation_shards, 'test': test_shards})
  workers = num_workers or _default_num_workers()
  labels = {name: i + 1 for i, name in enumerate(plan.class_names)}
  summary = summary_lib.new_summary(plan, raw_data_dir, output_dir, ratios, seed, max_image_side)
  leaks = integrity.LeakedImages(drop_leaked_images)
  shards_lib.write_shards(shards, output_dir, labels, workers, apply_exif_orientation, summary, max_image_side, leaks)
  leaks.log()
  shards_lib.atomic_write_text(output_dir, LABELS_FILE, ''.join(n + '\n' for n in plan.class_names))
  summary_lib.finish(summary, leaks.report(), time.time() - start)
  shards_lib.atomic_write_text(output_dir, SUMMARY_FILE, json.dumps(summary, indent=2) + '\n')
  logging.info('Wrote %d images (%d skipped) to %s in %.1f s.', summary['num_images'], len(summary['skipped']),
               output_dir, summary['seconds'])
  return summary


def _default_num_workers() -> int:
  try:
    return len(os.sched_getaffinity(0))  # The CPUs this process may use (containers, taskset), not the host's.
  except AttributeError:
    return os.cpu_count() or 1
