"""What to convert: the input layout found in a folder (or read from a labels CSV), as the files of each split with
their classes, and the files passed over with why.

The layouts are (a)-(d) of the command's usage (tools/imagenet_to_gcs.py): class folders, cut here by the ratios
(splits.py); split folders and the ImageNet layout, whose split is kept; a labels CSV (labels_csv.py), cut by its
split column or by the ratios. Folders are walked following links, each real folder and file once: a link back up
would loop, and a file reachable twice would be converted twice, under two classes or in two splits. Planning opens
no image, so it is quick to rerun and to test.
"""
import os
import random
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from absl import logging

from official_input import file_walk

from tools.convert import labels_csv
from tools.convert import stratify
from tools.convert.splits import SPLITS, split_class_items

SYNSET_LABELS_FILE = 'synset_labels.txt'
_SPLIT_DIRS = {'train': 'train', 'val': 'validation', 'validation': 'validation', 'test': 'test'}
RATIO_LAYOUTS = ('class_folders', 'labels_csv')  # the layouts split by the ratios


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


def _subdirs(path: str) -> List[str]:
  return sorted(n for n in os.listdir(path) if file_walk.visible(n) and os.path.isdir(os.path.join(path, n)))


def _files(path: str) -> List[str]:
  return sorted(n for n in os.listdir(path) if file_walk.visible(n) and os.path.isfile(os.path.join(path, n)))


class _Walker(file_walk.Walker):
  """The converter's walk (file_walk.Walker) over its Items: each real file once, under one class and split."""

  def unique(self, items: List[Item]) -> List[Item]:  # pylint: disable=arguments-differ
    return super().unique(items, path_of=lambda item: item.path)


def _class_folder_items(root: str, walker: _Walker) -> Tuple[Dict[str, List[Item]], List[str]]:
  """Items per class of a folder of class folders, plus loose files at its top level."""
  by_class = {c: [Item(p, c) for p in walker.files(os.path.join(root, c))] for c in _subdirs(root)}
  return by_class, [os.path.join(root, f) for f in _files(root)]


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
  validation and test; stratify.py)."""
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

