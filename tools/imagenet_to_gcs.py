r"""Converts an image folder (or raw ImageNet) to sharded TFRecords, and optionally uploads them to GCS.

The reference's name and flags (tensorflow/tpu tools/datasets/imagenet_to_gcs.py), rebuilt to also take the seed's
own data: a folder of class folders is split train/validation/test (80/10/10 like split-folders), so the extra
split-folders step is optional. Usage (from the repository root):

  python -m tools.imagenet_to_gcs --raw_data_dir=flower_photos --local_scratch_dir=records \
      [--gcs_output_path=gs://bucket/data] [--train_ratio=0.8 --validation_ratio=0.1 --test_ratio=0.1]

Input layouts, detected automatically:
  (a) class folders: ``<root>/<class>/**/<image>``: split per class by the ratios with --seed (stratified).
  (b) split folders: ``<root>/train/<class>/...`` plus ``val/`` or ``validation/`` and optionally ``test/``.
  (c) ImageNet: ``train/<synset>/*.JPEG``, flat ``validation/*.JPEG`` and ``synset_labels.txt`` (one synset per
      line, in sorted validation filename order).
  (d) a labels CSV (--labels_csv=FILE): any folder of images plus a CSV naming each file and its label
      (tools/convert/labels_csv.py); split by the ratios like (a) unless the CSV has a split column.
  (e) WebDataset tar shards (--webdataset=PATTERN, e.g. 'shards/train-{000000..000009}.tar'; globs, folders and
      comma lists too, each optionally split=PATTERN): samples key.jpg + key.cls/.txt/.json, read in place
      (tools/convert/webdataset_source.py).
  (f) Hugging Face Parquet files or a save_to_disk folder (--parquet=PATTERN; needs pyarrow: pip install -e
      '.[parquet]'): the Image column and the ClassLabel's names (tools/convert/parquet_source.py).
  (e) and (f) keep the split a file's name or prefix gives (train-*, val-*, test-*), else split by the ratios.

Outputs in --local_scratch_dir: ``train-00000-of-00008``, ``validation-...``, ``test-...`` shards of tf.train.Example
(official_input/example_schema.py; labels 1-based = sorted class index + 1, 0 reserved for background),
``labels.txt`` (line i = label i + 1) and ``summary.json`` (counts, skipped files, and per shard its record count,
size and SHA-256 under ``shards``, so a copy can be verified without parsing it). Every file is written under a
``.tmp-`` name and renamed when complete; ``summary.json`` is renamed last, so its presence marks a complete run.

Cleaning (Pillow, in worker processes that never import TensorFlow): files whose *content* is an RGB JPEG keep
their original bytes (decoded only to check them and read H x W, as the reference does); everything else Pillow
reads (PNG, CMYK/grayscale JPEG, palette, alpha, 16-bit, WebP/BMP/GIF/TIFF, misnamed files) is re-encoded as RGB
JPEG at quality 95 (first frame; alpha composited on white; ICC profiles ignored). With --exif_orientation (default),
images carrying an EXIF rotation are rotated upright and re-encoded too. Unreadable files are skipped and listed.

Resizing (--max_image_side=N, default 0 = off): images whose longer side exceeds N are shrunk to a longer side of N
(aspect kept, never upscaled, EXIF orientation honoured) and re-encoded as JPEG; smaller ones keep their bytes. Why:
the trainer crops and resizes to ~224 px anyway, and a 12-megapixel phone photo has ~60x the pixels of a 512 px one, so
full-size photos make the input pipeline, not the accelerator, the bottleneck of every epoch.

This file is the command line (its flags and main); the conversion itself is the package tools/convert/, one module
per job (tools/convert/conversion.py runs them in order).
"""
import os
import sys
from typing import Sequence

from absl import app
from absl import flags
from absl import logging

if __package__ in (None, ''):  # Run as a script (like the reference): make the repository's packages importable.
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# pylint: disable=g-import-not-at-top
from tools.convert import clean_images
from tools.convert import labels_csv
from tools.convert.conversion import convert_dataset
from tools.convert.shards import MAX_AUTO_SHARDS, TARGET_SHARD_BYTES
from tools.convert.splits import SPLITS
from tools.convert.summary import format_summary
from tools.convert.upload import check_upload_destination, upload_outputs
# pylint: enable=g-import-not-at-top


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """Defines the CLI flags (once). Not at import, so tests and workers can import this module without clashes."""
  if 'raw_data_dir' in flag_values:
    return
  fv = flag_values
  flags.DEFINE_string('raw_data_dir', None, 'Input images: class folders, split folders or the ImageNet layout.',
                      flag_values=fv)
  flags.DEFINE_string('local_scratch_dir', None, 'Where the TFRecords, labels.txt and summary.json are written.',
                      flag_values=fv)
  flags.DEFINE_string('gcs_output_path', None, 'gs://bucket/path to upload the outputs to.', flag_values=fv)
  flags.DEFINE_boolean('gcs_upload', None, 'Upload to --gcs_output_path. Default: upload only when '
                       '--gcs_output_path is given (the reference defaulted to True).', flag_values=fv)
  flags.DEFINE_string('project', None, 'Accepted for compatibility with the reference; unused (uploads go through '
                      'tf.io.gfile and the environment\'s credentials, not a cloud SDK).', flag_values=fv)
  flags.DEFINE_string('webdataset', None, 'WebDataset tar shards to convert instead of --raw_data_dir: paths, '
                      "globs, brace ranges ('train-{000000..000009}.tar') or folders, comma-separated, each "
                      "optionally prefixed by its split ('train=...,validation=...'). Samples: key.jpg/.png plus "
                      'key.cls, key.txt or key.json (--label_field).', flag_values=fv)
  flags.DEFINE_string('parquet', None, 'Hugging Face datasets to convert instead of --raw_data_dir: Parquet files '
                      '(data/train-*.parquet) or save_to_disk folders, as --webdataset names files. Needs pyarrow: '
                      "pip install -e '.[parquet]'.", flag_values=fv)
  flags.DEFINE_string('label_field', None, 'The label of --webdataset samples (a member extension: cls, txt, json; '
                      'default: the first of these the shards hold) or of --parquet rows (a column; default: the '
                      'first ClassLabel, else a column named label or labels).', flag_values=fv)
  flags.DEFINE_string('labels_csv', None, 'A CSV naming each image under --raw_data_dir and its label (header '
                      'first; paths relative to --raw_data_dir, with or without extension), or JSON lines (.jsonl: '
                      'one object per image, a list value its labels); replaces the folder layouts. Several labels '
                      'in a cell (or a list) make multi-label data.', flag_values=fv)
  flags.DEFINE_string('csv_path_column', None, 'The --labels_csv column of image paths (default: the first column '
                      'that has no other role).', flag_values=fv)
  flags.DEFINE_string('csv_label_column', None, 'The --labels_csv column of labels (default: the next column that '
                      'has no other role).', flag_values=fv)
  flags.DEFINE_string('csv_split_column', None, 'The --labels_csv column of splits (train, validation/val, test; '
                      "default: a column named 'split' if there is one, else the ratios split the rows).",
                      flag_values=fv)
  flags.DEFINE_string('csv_label_separator', None, 'What separates several labels in a --labels_csv cell '
                      '(default: whitespace, Kaggle\'s convention); rows with several labels make multi-label data.',
                      flag_values=fv)
  flags.DEFINE_boolean('csv_multi_label', False, 'The --labels_csv data is multi-label (an image has any number of '
                       'the classes; an empty label cell is a negative) even where no row has several labels.',
                       flag_values=fv)
  flags.DEFINE_integer('max_classes', None, 'The most classes --labels_csv may give (default: at most half the '
                       'rows, from 20 rows: more says the label column is another column).', lower_bound=1,
                       flag_values=fv)
  flags.DEFINE_float('train_ratio', 0.8, 'Class folders or a --labels_csv without splits: fraction of each class '
                     'for train.', flag_values=fv)
  flags.DEFINE_float('validation_ratio', 0.1, 'Fraction for validation (as --train_ratio).', flag_values=fv)
  flags.DEFINE_float('test_ratio', 0.1, 'Fraction for test (as --train_ratio).', flag_values=fv)
  flags.DEFINE_integer('seed', 0, 'Seed of the split and of the train shuffle.', flag_values=fv)
  for split in SPLITS:
    flags.DEFINE_integer(f'{split}_shards', None, f'Number of {split} shards. Default: about one per '
                         f'{TARGET_SHARD_BYTES >> 20} MiB of source images, at most {MAX_AUTO_SHARDS[split]} and at '
                         'most one per image.', lower_bound=1, flag_values=fv)
  flags.DEFINE_integer('num_workers', None, 'Image-cleaning processes. Default: the CPUs available to this process '
                       '(os.cpu_count() where affinity is unknown).', lower_bound=1, flag_values=fv)
  flags.DEFINE_boolean('overwrite', False, 'Replace earlier outputs in --local_scratch_dir (and at '
                       '--gcs_output_path) instead of refusing a non-empty output dir.', flag_values=fv)
  flags.DEFINE_integer('max_image_side', 0, 'Shrink images whose longer side exceeds this many pixels to that '
                       'longer side (aspect kept, LANCZOS, re-encoded as JPEG quality %d); smaller images keep their '
                       'bytes. 0 keeps every size. E.g. 512 for phone photos trained at 224 px.' % clean_images.JPEG_QUALITY,
                       lower_bound=0, flag_values=fv)
  flags.DEFINE_boolean('exif_orientation', True, 'Rotate images with an EXIF orientation upright (re-encoding '
                       'them); off keeps such JPEGs byte-for-byte, as the reference did.', flag_values=fv)
  flags.DEFINE_boolean('drop_leaked_images', False, 'Leave out of validation and test the images that are copies '
                       '(byte-identical, or near-identical re-encodes) of an image of an earlier split; without it '
                       'they are converted and reported.', flag_values=fv)


def main(argv: Sequence[str], flag_values: flags.FlagValues = flags.FLAGS) -> None:
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  fv = flag_values
  archives = [f'--{n}' for n in ('webdataset', 'parquet') if fv[n].value]
  if len(archives) > 1 or (archives and (fv.raw_data_dir or fv.labels_csv)):
    given = archives + [f'--{n}' for n in ('raw_data_dir', 'labels_csv') if fv[n].value]
    raise app.UsageError(f'{" and ".join(given)} each name the input: give one.')
  if not fv.raw_data_dir and not archives:
    raise app.UsageError('--raw_data_dir is required (or --webdataset / --parquet).')
  if fv.label_field and not archives:
    raise app.UsageError('--label_field names the label of --webdataset samples or --parquet rows: give one.')
  if not fv.local_scratch_dir:
    raise app.UsageError('--local_scratch_dir is required (the records are written there, then uploaded).')
  csv_flags = [f'--{n}' for n in ('csv_path_column', 'csv_label_column', 'csv_split_column', 'csv_label_separator',
                                   'max_classes') if fv[n].value is not None] + (
                                       ['--csv_multi_label'] if fv.csv_multi_label else [])
  if csv_flags and not fv.labels_csv:
    raise app.UsageError(f'{", ".join(csv_flags)} describe a labels CSV: give it with --labels_csv=FILE.')
  upload = fv.gcs_upload if fv.gcs_upload is not None else bool(fv.gcs_output_path)
  if upload:
    if not (fv.gcs_output_path or '').startswith('gs://'):
      raise app.UsageError('Uploading needs --gcs_output_path=gs://...; pass --nogcs_upload to stay local.')
  if fv.project:
    logging.info('--project=%s is accepted for compatibility and not used.', fv.project)
  try:
    if upload:
      check_upload_destination(fv.gcs_output_path, fv.overwrite)
    summary = convert_dataset(
        fv.raw_data_dir, fv.local_scratch_dir, train_ratio=fv.train_ratio, validation_ratio=fv.validation_ratio,
        test_ratio=fv.test_ratio, seed=fv.seed, train_shards=fv.train_shards,
        validation_shards=fv.validation_shards, test_shards=fv.test_shards, num_workers=fv.num_workers,
        overwrite=fv.overwrite, apply_exif_orientation=fv.exif_orientation, max_image_side=fv.max_image_side,
        drop_leaked_images=fv.drop_leaked_images, labels_csv_path=fv.labels_csv,
        csv_columns=labels_csv.Columns(fv.csv_path_column, fv.csv_label_column, fv.csv_split_column,
                                       fv.csv_label_separator),
        max_classes=fv.max_classes, multi_label=fv.csv_multi_label, webdataset=fv.webdataset, parquet=fv.parquet,
        label_field=fv.label_field)
    print(format_summary(summary))
    if upload:
      upload_outputs(fv.local_scratch_dir, fv.gcs_output_path, fv.overwrite)
      print(f'Uploaded to {fv.gcs_output_path}')
  except (ValueError, FileExistsError) as e:  # Input or output problems: a message, not a traceback.
    raise SystemExit(f'error: {e}') from e


def run_main() -> None:
  define_flags()
  app.run(main)


if __name__ == '__main__':
  run_main()
