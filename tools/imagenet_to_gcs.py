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
      (tools/labels_csv.py); split by the ratios like (a) unless the CSV has a split column.

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
"""
import hashlib
import json
import os
import random
import re
import sys
import time
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

from absl import app
from absl import flags
from absl import logging

if __package__ in (None, ''):  # Run as a script (like the reference): make the repository's packages importable.
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from official_input.dataset_layout import LABELS_FILE, MIN_IMAGE_SIDE, SUMMARY_FILE  # pylint: disable=g-import-not-at-top
from tools import clean_images  # pylint: disable=g-import-not-at-top
from tools import labels_csv  # pylint: disable=g-import-not-at-top
from tools import stratify  # pylint: disable=g-import-not-at-top

SPLITS = ('train', 'validation', 'test')
# Auto shard count: about one shard per this many source bytes, capped like the reference (1024/128) and at the
# image count, so ImageNet gets 1024 train shards and a 200 MB folder gets one or two per split.
TARGET_SHARD_BYTES = 100 * 1024 * 1024
MAX_AUTO_SHARDS = {'train': 1024, 'validation': 128, 'test': 128}
TMP_PREFIX = '.tmp-'
SYNSET_LABELS_FILE = 'synset_labels.txt'
_SHARD_RE = re.compile(r'^(train|validation|test)-\d{5}-of-\d{5}$')
_SPLIT_DIRS = {'train': 'train', 'val': 'validation', 'validation': 'validation', 'test': 'test'}
_HASH_CHUNK_BYTES = 4 * 1024 * 1024


# ------------------------------------------------------------------------------------------------------------------
# Layout detection and split planning.


class Item(NamedTuple):
  """One source file and where it goes: its class, or in multi-label data its classes (class_name '')."""
  path: str
  class_name: str
  labels: Tuple[str, ...] = ()

  @property
  def label_names(self) -> Tuple[str, ...]:
    """The classes the image is labelled with: its class, or its labels in multi-label data (none: a negative)."""
    return (self.class_name,) if self.class_name else self.labels


class Plan(NamedTuple):
  """What to convert: the layout found, the ordered items per split, class names (label = index + 1)."""
  layout: str  # 'class_folders', 'split_folders', 'imagenet', 'labels_csv' or 'labels_csv_splits'.
  splits: Dict[str, List[Item]]
  class_names: List[str]
  loose_files: List[str]  # Files outside any class folder, or no CSV row names (skipped and reported).
  link_skips: Sequence[Tuple[str, str]] = ()  # (path, why): links to folders or files already read
  task: str = labels_csv.SINGLE_LABEL  # or MULTI_LABEL: a labels CSV with several labels (or none) per image


def _visible(name: str) -> bool:
  return not name.startswith('.')  # Hidden files and macOS '._*' resource forks are never images.


def _subdirs(path: str) -> List[str]:
  return sorted(n for n in os.listdir(path) if _visible(n) and os.path.isdir(os.path.join(path, n)))


def _files(path: str) -> List[str]:
  return sorted(n for n in os.listdir(path) if _visible(n) and os.path.isfile(os.path.join(path, n)))


class _Walker:
  """Lists the visible files under folders, following a link to a folder at most once per real folder (a link back
  to a folder being read, ``all -> ..``, would otherwise loop until the OS refuses), and keeps each real file once
  (``unique``): a file reachable twice would be converted twice, under two classes or in two splits. Each link
  passed over is noted with why."""

  def __init__(self, root: str):
    self.seen_dirs = {os.path.realpath(root)}
    self.skips: List[Tuple[str, str]] = []

  def files(self, path: str) -> List[str]:
    """All visible files under path, recursively, in a stable sorted order."""
    found = []
    self.seen_dirs.add(os.path.realpath(path))
    for dirpath, dirnames, filenames in os.walk(path, followlinks=True):
      keep = []
      for d in sorted(d for d in dirnames if _visible(d)):
        real = os.path.realpath(os.path.join(dirpath, d))
        if real in self.seen_dirs:
          self.skips.append((os.path.join(dirpath, d), f'a link to a folder read already ({real}): a loop or a '
                                                       'second way to the same images'))
        else:
          self.seen_dirs.add(real)
          keep.append(d)
      dirnames[:] = keep
      found.extend(os.path.join(dirpath, f) for f in sorted(filenames) if _visible(f))
    return found

  def unique(self, items: List[Item]) -> List[Item]:
    """``items`` with each real file once: under its own path where it is listed there, else its first."""
    by_file: Dict[str, List[Item]] = {}
    for item in items:
      by_file.setdefault(os.path.realpath(item.path), []).append(item)
    dropped = set()
    for real, listed in by_file.items():
      if len(listed) > 1:
        kept = next((i for i in listed if os.path.abspath(i.path) == real), listed[0])
        for item in listed:
          if item is not kept:
            dropped.add(id(item))
            self.skips.append((item.path, f'a second way to one file (a link): {kept.path}'))
    return [item for item in items if id(item) not in dropped]


def _class_folder_items(root: str, walker: _Walker) -> Tuple[Dict[str, List[Item]], List[str]]:
  """Items per class of a folder of class folders, plus loose files at its top level."""
  by_class = {c: [Item(p, c) for p in walker.files(os.path.join(root, c))] for c in _subdirs(root)}
  return by_class, [os.path.join(root, f) for f in _files(root)]


def split_counts(n: int, ratios: Sequence[float]) -> List[int]:
  """Splits n items by ratios with cumulative rounding, so the counts always add up to n."""
  bounds, total = [], 0.0
  for r in ratios[:-1]:
    total += r
    bounds.append(min(n, int(n * total + 0.5)))
  edges = [0] + bounds + [n]
  return [max(0, edges[i + 1] - edges[i]) for i in range(len(ratios))]


def split_class_items(by_class: Dict[str, List[Item]], ratios: Sequence[float], seed: int) -> Dict[str, List[Item]]:
  """Stratified, deterministic split: each class is shuffled with (seed, class name), then cut by the ratios.

  Seeding per class keeps a class's split unchanged when other classes are added or removed.
  """
  splits: Dict[str, List[Item]] = {s: [] for s in SPLITS}
  for class_name in sorted(by_class):
    items = sorted(by_class[class_name])
    random.Random(f'{seed}/{class_name}').shuffle(items)
    start = 0
    for split, count in zip(SPLITS, split_counts(len(items), ratios)):
      splits[split].extend(items[start:start + count])
      start += count
  return {split: sorted(items) for split, items in splits.items()}  # Validation/test stay in path order.


def _read_synset_labels(root: str, num_files: int) -> List[str]:
  path = os.path.join(root, SYNSET_LABELS_FILE)
  if not os.path.isfile(path):
    raise ValueError(f'{root}/validation holds images directly (the ImageNet layout), but {path} is missing: '
                     'expected one synset per line, in sorted validation filename order.')
  with open(path) as f:
    synsets = [line.strip() for line in f if line.strip()]
  if len(synsets) != num_files:
    raise ValueError(f'{path} has {len(synsets)} labels but {root}/validation has {num_files} files; they are paired '
                     'line by line in sorted filename order.')
  return synsets


def _split_folder_plan(root: str, split_dirs: List[str], walker: '_Walker') -> Plan:
  """Layouts (b) and (c): keep the given split."""
  val_dirs = [d for d in split_dirs if _SPLIT_DIRS[d] == 'validation']
  if len(val_dirs) > 1:
    raise ValueError(f'{root} has both val/ and validation/: keep one.')
  splits: Dict[str, List[Item]] = {s: [] for s in SPLITS}
  layout, folder_classes, loose_files = 'split_folders', set(), []
  for d in split_dirs:
    split, path = _SPLIT_DIRS[d], os.path.join(root, d)
    if split == 'validation' and not _subdirs(path) and _files(path):
      layout = 'imagenet'
      names = _files(path)
      synsets = _read_synset_labels(root, len(names))
      splits[split] = [Item(os.path.join(path, n), s) for n, s in zip(names, synsets)]
    else:
      by_class, loose = _class_folder_items(path, walker)
      folder_classes.update(by_class)
      loose_files.extend(loose)
      splits[split] = [item for c in sorted(by_class) for item in by_class[c]]
  if layout == 'imagenet' and splits['test']:
    logging.warning('ImageNet layout: ignoring test/ (its images have no labels).')
    splits['test'] = []
  if not splits['train']:
    raise ValueError(f'{root}/train has no images: expected train/<class>/<image files>.')
  if not splits['validation']:
    logging.warning('No validation images in %s: the trainer evaluates on validation-* files.', root)
  unique = set(map(id, walker.unique([i for s in SPLITS for i in splits[s]])))
  splits = {s: [i for i in items if id(i) in unique] for s, items in splits.items()}
  names = sorted({item.class_name for items in splits.values() for item in items} | folder_classes)
  return Plan(layout, splits, names, loose_files, walker.skips)


RATIO_LAYOUTS = ('class_folders', 'labels_csv')  # the layouts split by the ratios


def _csv_plan(raw_data_dir: str, csv_path: str, columns: labels_csv.Columns, max_classes: Optional[int],
              ratios: Sequence[float], seed: int, walker: _Walker, multi_label: bool = False) -> Plan:
  """Layout (d): the files a labels CSV names, with its labels; split by its split column, or per class by the
  ratios (stratified, as class folders are). Files no row names are skipped and reported."""
  if not os.path.isfile(csv_path):
    raise ValueError(f'--labels_csv {csv_path!r} is not a file.')
  files = walker.files(raw_data_dir)
  rows, unnamed = labels_csv.read(csv_path, raw_data_dir, files, columns, max_classes, multi_label)
  task = labels_csv.task(rows, multi_label)
  if task == labels_csv.MULTI_LABEL:
    return _multi_label_plan(rows, unnamed, raw_data_dir, csv_path, ratios, seed, walker)
  items = walker.unique([Item(row.path, row.label) for row in rows])
  kept = {item.path for item in items}
  names = labels_csv.sorted_class_names(row.label for row in rows)
  _warn_unnamed(unnamed, raw_data_dir, csv_path)
  if rows[0].split is None:
    by_class: Dict[str, List[Item]] = {c: [] for c in names}
    for item in items:
      by_class[item.class_name].append(item)
    return Plan('labels_csv', split_class_items(by_class, ratios, seed), names, unnamed, walker.skips)
  splits: Dict[str, List[Item]] = {s: [] for s in SPLITS}
  for row in rows:
    if row.path in kept:
      splits[row.split].append(Item(row.path, row.label))
  if not splits['train']:
    raise ValueError(f'{csv_path}: no row has split train: the trainer needs train images.')
  if not splits['validation']:
    logging.warning('No validation rows in %s: the trainer evaluates on validation-* files.', csv_path)
  return Plan('labels_csv_splits', {s: sorted(i) for s, i in splits.items()}, names, unnamed, walker.skips)


def _warn_unnamed(unnamed: List[str], raw_data_dir: str, csv_path: str) -> None:
  if unnamed:
    logging.warning('%d files under %s are not named in %s and are skipped (summary.json lists them), e.g. %s.',
                    len(unnamed), raw_data_dir, csv_path, ', '.join(unnamed[:3]))


def _multi_label_plan(rows: List[labels_csv.Row], unnamed: List[str], raw_data_dir: str, csv_path: str,
                      ratios: Sequence[float], seed: int, walker: _Walker) -> Plan:
  """Multi-label rows: a split column's splits, or iterative stratification by the ratios (rare labels reach
  validation and test; tools/stratify.py)."""
  _warn_unnamed(unnamed, raw_data_dir, csv_path)
  items = walker.unique([Item(row.path, '', row.labels) for row in rows])
  names = labels_csv.sorted_class_names(label for row in rows for label in row.labels)
  if rows[0].split is None:
    by_path = {item.path: item for item in items}
    keys = stratify.iterative_split([(item.path, item.labels) for item in items], ratios, seed)
    splits = {split: sorted(by_path[key] for key in split_keys) for split, split_keys in zip(SPLITS, keys)}
    layout = 'labels_csv'
  else:
    kept = {item.path for item in items}
    splits = {s: sorted(Item(row.path, '', row.labels) for row in rows if row.split == s and row.path in kept)
              for s in SPLITS}
    layout = 'labels_csv_splits'
    if not splits['train']:
      raise ValueError(f'{csv_path}: no row has split train: the trainer needs train images.')
  return Plan(layout, splits, names, unnamed, walker.skips, task=labels_csv.MULTI_LABEL)


def plan_conversion(raw_data_dir: str, ratios: Sequence[float] = (0.8, 0.1, 0.1), seed: int = 0,
                    csv_path: Optional[str] = None, columns: labels_csv.Columns = labels_csv.Columns(),
                    max_classes: Optional[int] = None, multi_label: bool = False) -> Plan:
  """Detects the layout of raw_data_dir (or reads ``csv_path``, a labels CSV; ``multi_label``: its data is
  multi-label even where no row has several labels) and lists the files of each split (train shuffled with the
  seed)."""
  if not os.path.isdir(raw_data_dir):
    raise ValueError(f'--raw_data_dir {raw_data_dir!r} is not a directory.')
  if csv_path:
    return _finish_plan(_csv_plan(raw_data_dir, csv_path, columns, max_classes, ratios, seed,
                                  _Walker(raw_data_dir), multi_label), seed)
  dirs = _subdirs(raw_data_dir)
  expected = ('expected class folders (<root>/<class>/<images>), split folders (<root>/train/<class>/... with '
              'val/ or validation/, optionally test/), or the ImageNet layout (train/<synset>/*.JPEG, flat '
              f'validation/*.JPEG and {SYNSET_LABELS_FILE})')
  if not dirs:
    raise ValueError(f'{raw_data_dir} has no subfolders: {expected}.')
  walker = _Walker(raw_data_dir)
  split_dirs = [d for d in dirs if d in _SPLIT_DIRS]
  if split_dirs:
    others = [d for d in dirs if d not in _SPLIT_DIRS]
    if others or 'train' not in split_dirs:
      raise ValueError(f'{raw_data_dir} is ambiguous: split folders {split_dirs} next to {others or "no train/"}; '
                       f'{expected}.')
    plan = _split_folder_plan(raw_data_dir, split_dirs, walker)
  else:
    by_class, loose = _class_folder_items(raw_data_dir, walker)
    if not any(by_class.values()):
      raise ValueError(f'{raw_data_dir} has folders but no files in them: {expected}.')
    unique = set(map(id, walker.unique([i for c in sorted(by_class) for i in by_class[c]])))
    by_class = {c: [i for i in items if id(i) in unique] for c, items in by_class.items()}
    plan = Plan('class_folders', split_class_items(by_class, ratios, seed), sorted(by_class), loose, walker.skips)
  return _finish_plan(plan, seed)


def _finish_plan(plan: Plan, seed: int) -> Plan:
  for path, why in plan.link_skips:
    logging.warning('Skipping %s: %s.', path, why)
  used = {name for items in plan.splits.values() for item in items for name in item.label_names}
  for c in plan.class_names:
    if c not in used:
      logging.warning('Class %r has no files; it still gets a label.', c)
  random.Random(seed).shuffle(plan.splits['train'])
  return plan


def default_num_shards(split: str, num_images: int, num_bytes: int) -> int:
  """About one shard per TARGET_SHARD_BYTES of source data, at least 1, capped by MAX_AUTO_SHARDS and num_images."""
  if num_images == 0:
    return 0
  return max(1, min(MAX_AUTO_SHARDS[split], num_images, num_bytes // TARGET_SHARD_BYTES))


def shard_name(split: str, index: int, num_shards: int) -> str:
  return f'{split}-{index:05d}-of-{num_shards:05d}'


# ------------------------------------------------------------------------------------------------------------------
# Output directory handling and writing (parent process only; TensorFlow is imported lazily here).


def _prepare_output_dir(output_dir: str, overwrite: bool) -> None:
  """Removes leftover .tmp- files; refuses other content unless overwrite, which removes only our own outputs."""
  os.makedirs(output_dir, exist_ok=True)
  for name in os.listdir(output_dir):
    if name.startswith(TMP_PREFIX):
      logging.info('Removing %s left by an interrupted run.', name)
      os.remove(os.path.join(output_dir, name))
  existing = sorted(os.listdir(output_dir))
  if not existing:
    return
  if not overwrite:
    raise FileExistsError(f'Output dir {output_dir} is not empty ({", ".join(existing[:5])}...): pass --overwrite '
                          '(replaces the shards, labels.txt and summary.json) or choose an empty dir.')
  for name in existing:
    if _SHARD_RE.match(name) or name in (LABELS_FILE, SUMMARY_FILE):
      os.remove(os.path.join(output_dir, name))
    else:
      logging.warning('--overwrite keeps %s in %s (not a converter output).', name, output_dir)


def _atomic_write_text(output_dir: str, name: str, text: str) -> None:
  tmp = os.path.join(output_dir, TMP_PREFIX + name)
  with open(tmp, 'w') as f:
    f.write(text)
  os.replace(tmp, os.path.join(output_dir, name))


def _shard_plan(plan: Plan, shards: Dict[str, Optional[int]]) -> List[Tuple[str, int, int, List[Item]]]:
  """(split, index, num_shards, items) per shard; items are spread evenly so no auto shard is empty."""
  out = []
  for split in SPLITS:
    items = plan.splits[split]
    if not items:
      continue
    num = shards.get(split)
    if num is None:
      num = default_num_shards(split, len(items), sum(os.path.getsize(i.path) for i in items))
    elif num > len(items):
      logging.warning('%s: %d shards for %d images: some shards will be empty.', split, num, len(items))
    for index in range(num):
      out.append((split, index, num, items[index * len(items) // num:(index + 1) * len(items) // num]))
  return out


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
                    multi_label: bool = False) -> Dict[str, Any]:
  """Converts raw_data_dir to TFRecord shards, labels.txt and summary.json in output_dir; returns the summary.

  Shard counts of None are sized to the data (default_num_shards). Ratios apply to class folders and to a labels
  CSV (``labels_csv_path``, read with ``csv_columns``) without a split column; multi-label CSV data (several labels
  per row, or ``multi_label``) is split by iterative stratification, and its records hold each image's list of
  labels (none for a negative).
  max_image_side > 0 shrinks images whose longer side exceeds it (0 keeps every size). Validation and test images
  that are copies of an image of an earlier split (train, then validation) are reported, and with
  drop_leaked_images left out of their split.
  """
  if max_image_side < 0:
    raise ValueError(f'max_image_side must be 0 (keep sizes) or a positive side in pixels, got {max_image_side}.')
  ratios = (train_ratio, validation_ratio, test_ratio)
  if min(ratios) < 0 or abs(sum(ratios) - 1.0) > 1e-6:
    raise ValueError(f'Split ratios must be >= 0 and sum to 1, got {ratios}.')
  raw_real, out_real = os.path.realpath(raw_data_dir), os.path.realpath(output_dir)
  if out_real == raw_real or out_real.startswith(raw_real + os.sep):
    raise ValueError(f'Output dir {output_dir} must not be inside raw_data_dir {raw_data_dir} '
                     '(it would be read as data).')
  start = time.time()
  plan = plan_conversion(raw_data_dir, ratios, seed, labels_csv_path, csv_columns, max_classes, multi_label)
  logging.info('Found the %s layout in %s: %s, %d classes.', plan.layout, raw_data_dir,
               ', '.join(f'{s} {len(plan.splits[s])} files' for s in SPLITS), len(plan.class_names))
  if plan.layout not in RATIO_LAYOUTS and ratios != (0.8, 0.1, 0.1):
    logging.info('Split ratios %s ignored: %s is already split.', ratios, raw_data_dir)
  _prepare_output_dir(output_dir, overwrite)
  shards = _shard_plan(plan, {'train': train_shards, 'validation': validation_shards, 'test': test_shards})
  workers = num_workers or _default_num_workers()
  labels = {name: i + 1 for i, name in enumerate(plan.class_names)}
  summary = _new_summary(plan, raw_data_dir, output_dir, ratios, seed)
  summary['max_image_side'] = max_image_side
  leaks = LeakedImages(drop_leaked_images)
  _write_shards(shards, output_dir, labels, workers, apply_exif_orientation, summary, max_image_side, leaks)
  summary['leaked'] = leaks.report()
  leaks.log()
  summary['skipped_counts'] = _skipped_counts(summary['skipped'])
  _atomic_write_text(output_dir, LABELS_FILE, ''.join(n + '\n' for n in plan.class_names))
  summary['seconds'] = round(time.time() - start, 1)
  _atomic_write_text(output_dir, SUMMARY_FILE, json.dumps(summary, indent=2) + '\n')
  logging.info('Wrote %d images (%d skipped) to %s in %.1f s.', summary['num_images'], len(summary['skipped']),
               output_dir, summary['seconds'])
  return summary


def _default_num_workers() -> int:
  try:
    return len(os.sched_getaffinity(0))  # The CPUs this process may use (containers, taskset), not the host's.
  except AttributeError:
    return os.cpu_count() or 1


def _new_summary(plan: Plan, raw_data_dir: str, output_dir: str, ratios: Sequence[float],
                 seed: int) -> Dict[str, Any]:
  loose_reason = 'not named in the labels CSV' if plan.layout.startswith('labels_csv') else 'not inside a class folder'
  return {
      'layout': plan.layout,
      'raw_data_dir': raw_data_dir,
      'output_dir': output_dir,
      'split_ratios': dict(zip(SPLITS, ratios)) if plan.layout in RATIO_LAYOUTS else None,
      'task': plan.task,  # multi_label: per_class counts each image under every label it has; negatives: none
      'seed': seed,
      'jpeg_quality': clean_images.JPEG_QUALITY,
      'num_classes': len(plan.class_names),
      'labels': {name: i + 1 for i, name in enumerate(plan.class_names)},
      'splits': {s: {'images': 0, 'shards': [], 'per_class': {c: 0 for c in plan.class_names},
                     **({'negatives': 0} if plan.task == labels_csv.MULTI_LABEL else {})} for s in SPLITS},
      'num_images': 0,
      'converted': {},  # reason -> {'count': n, 'examples': [paths]}
      'shards': {},  # shard file name -> {'records': n, 'bytes': b, 'sha256': hex digest}
      'skipped': ([{'path': p, 'split': None, 'reason': loose_reason} for p in plan.loose_files]
                  + [{'path': p, 'split': None, 'reason': why} for p, why in plan.link_skips]),
  }


def _skipped_counts(skipped: List[Dict[str, Any]]) -> Dict[str, int]:
  """Skipped files by the kind of reason (its words before any detail in parentheses or after a colon)."""
  counts: Dict[str, int] = {}
  for entry in skipped:
    kind = re.split(r' \(|: ', entry['reason'], maxsplit=1)[0]
    counts[kind] = counts.get(kind, 0) + 1
  return counts


class LeakedImages:
  """Finds validation and test images whose picture is one of an earlier split's (train, then validation):
  byte-identical files (SHA-256), and near-identical re-encodes (256-bit difference hashes within NEAR_BITS bits,
  found through BANDS bands of 16 bits: two hashes that differ in fewer bits than there are bands share a band).
  Their accuracy would measure memory, not generalisation; ``drop`` leaves them out of their split."""

  NEAR_BITS = 8
  BANDS = 16
  SHOWN = 20
  # A picture with little detail (flat, or a plain background) hashes to few 1 bits (or few 0 bits): two such
  # unrelated pictures fall within NEAR_BITS of each other. They are matched by their bytes only.
  MIN_DETAIL_BITS = 32

  def __init__(self, drop: bool):
    self.drop = drop
    self.by_digest: Dict[str, Tuple[str, str]] = {}               # sha256 -> (split, path)
    self.bands: List[Dict[int, List[Tuple[int, str, str]]]] = [{} for _ in range(self.BANDS)]
    self.found: List[Dict[str, Any]] = []

  def _detailed(self, dhash: int) -> bool:
    return self.MIN_DETAIL_BITS <= bin(dhash).count('1') <= 16 * self.BANDS - self.MIN_DETAIL_BITS

  def _near(self, dhash: int, split: str) -> Optional[Tuple[str, str]]:
    """An image of another split whose hash is within NEAR_BITS (one of this split's would hide it)."""
    for band, index in enumerate(self.bands):
      for other, other_split, path in index.get((dhash >> (16 * band)) & 0xFFFF, ()):
        if other_split != split and bin(dhash ^ other).count('1') <= self.NEAR_BITS:
          return other_split, path
    return None

  def check(self, split: str, path: str, result: clean_images.CleanedImage) -> Optional[str]:
    """Records ``path`` (of ``split``) and returns why it is dropped, or None to keep it."""
    match, kind = None, None
    if split != 'train':
      if result.sha256 and result.sha256 in self.by_digest and self.by_digest[result.sha256][0] != split:
        match, kind = self.by_digest[result.sha256], 'identical'
      elif result.dhash >= 0 and self._detailed(result.dhash):
        near = self._near(result.dhash, split)
        if near is not None:
          match, kind = near, 'near-identical'
    if match is not None:
      self.found.append({'path': path, 'split': split, 'kind': kind, 'same_as': match[1], 'same_as_split': match[0]})
      if self.drop:
        return f'{kind} to an image of {match[0]}: {match[1]} (--drop_leaked_images)'
    if result.sha256:
      self.by_digest.setdefault(result.sha256, (split, path))
    if result.dhash >= 0 and self._detailed(result.dhash):
      for band, index in enumerate(self.bands):
        index.setdefault((result.dhash >> (16 * band)) & 0xFFFF, []).append((result.dhash, split, path))
    return None

  def report(self) -> Dict[str, Any]:
    counts = {f'{f["split"]} {f["kind"]}': 0 for f in self.found}
    for f in self.found:
      counts[f'{f["split"]} {f["kind"]}'] += 1
    return {'count': len(self.found), 'dropped': len(self.found) if self.drop else 0, 'by_split_and_kind': counts,
            'examples': self.found[:self.SHOWN]}

  def log(self) -> None:
    if not self.found:
      return
    counts = ', '.join(f'{n} {k}' for k, n in self.report()['by_split_and_kind'].items())
    shown = '; '.join(f'{f["path"]} = {f["same_as"]}' for f in self.found[:5])
    if self.drop:
      logging.warning('Dropped %d evaluation images that are copies of images of an earlier split (%s), e.g. %s.',
                      len(self.found), counts, shown)
    else:
      logging.warning('%d evaluation images are copies of images of an earlier split (%s), e.g. %s. Their accuracy '
                      'measures memory, not generalisation: --drop_leaked_images leaves them out (summary.json '
                      '"leaked" lists them).', len(self.found), counts, shown)


def _write_shards(shards: List[Tuple[str, int, int, List[Item]]], output_dir: str, labels: Dict[str, int],
                  num_workers: int, apply_exif_orientation: bool, summary: Dict[str, Any],
                  max_image_side: int = 0, leaks: Optional[LeakedImages] = None) -> None:
  """Streams cleaned images from the workers into the shards, in plan order."""
  paths = [item.path for _, _, _, items in shards for item in items]
  with clean_images.cleaned_images(paths, apply_exif_orientation, num_workers, max_image_side) as results:
    import tensorflow as tf  # pylint: disable=g-import-not-at-top,unused-import  # Lazy, while the workers boot.
    done, last_log, start = 0, time.time(), time.time()
    for split, index, num, items in shards:
      _write_shard(os.path.join(output_dir, shard_name(split, index, num)), split, items, results, labels, summary,
                   leaks or LeakedImages(False))
      done += len(items)
      if time.time() - last_log > 10 or index == num - 1:
        last_log = time.time()
        logging.info('%s: %d/%d shards; %d/%d files processed (%.0f files/s).', split, index + 1, num, done,
                     len(paths), done / max(1e-9, time.time() - start))


def _write_shard(path: str, split: str, items: List[Item], results: Iterator[clean_images.CleanedImage],
                 labels: Dict[str, int], summary: Dict[str, Any], leaks: LeakedImages) -> None:
  """Writes one shard under a .tmp- name and renames it when complete; a failure leaves no shard behind."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top  # Lazy: keeps --help and the workers TF-free.
  from official_input import example_schema  # pylint: disable=g-import-not-at-top
  tmp = os.path.join(os.path.dirname(path), TMP_PREFIX + os.path.basename(path))
  stats = summary['splits'][split]
  records = 0
  try:
    with tf.io.TFRecordWriter(tmp) as writer:
      for item in items:
        result = next(results)
        reason = result.error or _too_small(result) or leaks.check(split, item.path, result)
        if reason:
          summary['skipped'].append({'path': item.path, 'split': split, 'reason': reason})
          continue
        if result.converted:
          _count_conversion(summary, result.converted, item.path)
        names = item.label_names
        example = example_schema.make_example(result.encoded, 'JPEG', [labels[n] for n in names], ' '.join(names),
                                              result.height, result.width, os.path.basename(item.path))
        writer.write(example.SerializeToString())
        records += 1
        stats['images'] += 1
        for name in names:
          stats['per_class'][name] += 1
        if not names:
          stats['negatives'] += 1
        summary['num_images'] += 1
    num_bytes, digest = _file_digest(tmp)
    os.replace(tmp, path)
  finally:
    if os.path.exists(tmp):
      os.remove(tmp)
  stats['shards'].append(os.path.basename(path))
  summary['shards'][os.path.basename(path)] = {'records': records, 'bytes': num_bytes, 'sha256': digest}


def _too_small(result: clean_images.CleanedImage) -> Optional[str]:
  if min(result.height, result.width) >= MIN_IMAGE_SIDE:
    return None
  return (f'too small to crop ({result.width}x{result.height} px; the trainer\'s crop needs at least {MIN_IMAGE_SIDE} '
          'px a side: a spacer or a tracking pixel?)')


def _file_digest(path: str) -> Tuple[int, str]:
  """(size, SHA-256 hex) of a file that was just written.

  Hashing while writing would mean framing the TFRecords ourselves, which needs a CRC-32C implementation that is
  not among the dependencies; the shard was closed a moment ago, so this read is served from the page cache, not
  from disk: ~0.3 s per 100 MB on a loaded 2-core machine, a few percent of the time its images took to clean.
  """
  digest, size = hashlib.sha256(), 0
  with open(path, 'rb') as f:
    for chunk in iter(lambda: f.read(_HASH_CHUNK_BYTES), b''):
      digest.update(chunk)
      size += len(chunk)
  return size, digest.hexdigest()


def _count_conversion(summary: Dict[str, Any], reason: str, path: str) -> None:
  entry = summary['converted'].setdefault(reason, {'count': 0, 'examples': []})
  entry['count'] += 1
  if len(entry['examples']) < 5:
    entry['examples'].append(path)


# ------------------------------------------------------------------------------------------------------------------
# Upload and reporting.


def output_files(output_dir: str) -> List[str]:
  """The converter's outputs in upload order: shards, labels.txt, then summary.json (completion marker) last."""
  names = sorted(n for n in os.listdir(output_dir) if _SHARD_RE.match(n))
  return names + [n for n in (LABELS_FILE, SUMMARY_FILE) if os.path.exists(os.path.join(output_dir, n))]


def _stale_outputs(dest: str) -> List[str]:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  if not tf.io.gfile.isdir(dest):
    return []
  return [n.rstrip('/') for n in tf.io.gfile.listdir(dest)
          if _SHARD_RE.match(n.rstrip('/')) or n.rstrip('/') in (LABELS_FILE, SUMMARY_FILE)]


def check_upload_destination(dest: str, overwrite: bool) -> None:
  """Fails before converting when dest already holds converter outputs and overwrite is off."""
  existing = _stale_outputs(dest)
  if existing and not overwrite:
    raise FileExistsError(f'{dest} already holds {len(existing)} converter outputs (e.g. {existing[0]}): pass '
                          '--overwrite to replace them.')


def upload_outputs(local_dir: str, dest: str, overwrite: bool = False) -> List[str]:
  """Copies the outputs to dest (gs:// or any tf.io.gfile path): each to a .tmp- name, then renamed.

  With overwrite, converter outputs already at dest that this run did not produce (e.g. shards of an older run
  with another shard count, which train-* would still match) are deleted first.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  names = output_files(local_dir)
  tf.io.gfile.makedirs(dest)
  stale = [n for n in _stale_outputs(dest) if n not in names]
  if stale:
    if not overwrite:
      raise FileExistsError(f'{dest} holds outputs of another run (e.g. {stale[0]}): pass --overwrite.')
    for n in stale:
      tf.io.gfile.remove(f'{dest.rstrip("/")}/{n}')
  for i, name in enumerate(names):
    tmp, final = f'{dest.rstrip("/")}/{TMP_PREFIX}{name}', f'{dest.rstrip("/")}/{name}'
    tf.io.gfile.copy(os.path.join(local_dir, name), tmp, overwrite=True)
    tf.io.gfile.rename(tmp, final, overwrite=True)
    if (i + 1) % 20 == 0 or i + 1 == len(names):
      logging.info('Uploaded %d/%d files to %s.', i + 1, len(names), dest)
  return names


def format_summary(summary: Dict[str, Any], max_skipped: int = 20) -> str:
  """A readable table: images per class and split, then conversions and skipped files."""
  splits = [s for s in SPLITS if summary['splits'][s]['shards']]
  width = max([len('class')] + [len(c) for c in summary['labels']])
  lines = [f'Layout: {summary["layout"]}' + (f', split {summary["split_ratios"]} seed {summary["seed"]}'
                                             if summary['split_ratios'] else ''),
           f'{"label":>5}  {"class":<{width}}' + ''.join(f'  {s:>10}' for s in splits) + f'  {"total":>10}']
  for name, label in summary['labels'].items():
    counts = [summary['splits'][s]['per_class'][name] for s in splits]
    lines.append(f'{label:>5}  {name:<{width}}' + ''.join(f'  {n:>10}' for n in counts) + f'  {sum(counts):>10}')
  if summary.get('task') == labels_csv.MULTI_LABEL:   # an image counts under each of its labels: rows overlap
    width = max(width, len('no label'))
    negatives = [summary['splits'][s]['negatives'] for s in splits]
    lines.append(f'{"":>5}  {"no label":<{width}}' + ''.join(f'  {n:>10}' for n in negatives)
                 + f'  {sum(negatives):>10}')
    lines[0] += ' (multi-label: an image counts under each of its labels)'
  totals = [summary['splits'][s]['images'] for s in splits]
  lines.append(f'{"":>5}  {"images":<{width}}' + ''.join(f'  {n:>10}' for n in totals) + f'  {sum(totals):>10}')
  lines.append(f'{"":>5}  {"shards":<{width}}' + ''.join(f'  {len(summary["splits"][s]["shards"]):>10}'
                                                           for s in splits))
  if summary.get('max_image_side'):
    lines.append(f'Images longer than {summary["max_image_side"]} px were resized to that longer side.')
  for reason, entry in sorted(summary['converted'].items()):
    lines.append(f'Re-encoded to RGB JPEG (quality {summary["jpeg_quality"]}): {entry["count"]} x {reason}')
  skipped = summary['skipped']
  lines.append(f'Skipped {len(skipped)} files' + (':' if skipped else '.'))
  for entry in skipped[:max_skipped]:
    lines.append(f'  {entry["path"]}: {entry["reason"]}')
  if len(skipped) > max_skipped:
    lines.append(f'  ... {len(skipped) - max_skipped} more in {SUMMARY_FILE}')
  leaked = summary.get('leaked') or {}
  if leaked.get('count'):
    counts = ', '.join(f'{n} {kind}' for kind, n in leaked['by_split_and_kind'].items())
    lines.append(f'Copies of images of an earlier split: {leaked["count"]} ({counts})'
                 + (', left out (--drop_leaked_images):' if leaked['dropped'] else
                    ': their accuracy measures memory (--drop_leaked_images leaves them out):'))
    for entry in leaked['examples'][:max_skipped]:
      lines.append(f'  {entry["path"]} = {entry["same_as"]} ({entry["kind"]})')
  return '\n'.join(lines)


# ------------------------------------------------------------------------------------------------------------------
# Command line.


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
  if not fv.raw_data_dir:
    raise app.UsageError('--raw_data_dir is required.')
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
        max_classes=fv.max_classes, multi_label=fv.csv_multi_label)
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
