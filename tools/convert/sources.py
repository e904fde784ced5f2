"""What to convert: the input layout found in a folder (or read from a labels CSV), as the files of each split with
their classes, and the files passed over with why.

The layouts are (a)-(d) of the command's usage (tools/imagenet_to_gcs.py): class folders, cut here by the ratios
(splits.py); split folders and the ImageNet layout, whose split is kept; a labels CSV (labels_csv.py), cut by its
split column or by the ratios. Folders are walked following links, each real folder and file once: a link back up
would loop, and a file reachable twice would be converted twice, under two classes or in two splits. Planning opens
no image, so it is quick to rerun and to test.
"""
import dataclasses
import os
import random
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

from absl import logging

from official_input import file_walk

from tools.convert import labels_csv
from tools.convert import stratify
from tools.convert.splits import SPLIT_WORDS, SPLITS, split_class_items

SYNSET_LABELS_FILE = 'synset_labels.txt'
RATIO_LAYOUTS = ('class_folders', 'labels_csv', 'webdataset', 'parquet')  # the layouts split by the ratios


class Item(NamedTuple):
  """One source file and where it goes: its class, or in multi-label data its classes (class_name ''). A sample
  inside an archive (webdataset_source.py, parquet_source.py) has a ``member`` the cleaning workers read its bytes
  from (``.read()``, ``.size``); its path then names it (source_patterns.display_path)."""
  path: str
  class_name: str
  labels: Tuple[str, ...] = ()
  member: Any = None

  @property
  def source(self) -> Any:
    """What the cleaning workers read: the file's path, or the member."""
    return self.member if self.member is not None else self.path

  @property
  def size(self) -> int:
    return self.member.size if self.member is not None else os.path.getsize(self.path)

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
  link_skips: Sequence[Tuple[str, str]] = ()  # (path, why): links to folders or files already read; archive
                                              # samples passed over (no image, no label, a repeated key)
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
  for split in SPLITS:
    named = [f'{d}/' for d in split_dirs if SPLIT_WORDS[d.lower()] == split]
    if len(named) > 1:
      raise ValueError(f'{root} has {" and ".join(named)}, both {split} folders: keep one.')
  splits: Dict[str, List[Item]] = {s: [] for s in SPLITS}
  layout, folder_classes, loose_files = 'split_folders', set(), []
  for d in split_dirs:
    split, path = SPLIT_WORDS[d.lower()], os.path.join(root, d)
    if os.path.isfile(os.path.join(path, '_classes.csv')):
      raise ValueError(f"{path} holds _classes.csv (Roboflow's CSV export, a CSV per split): export the data set "
                       "as 'Folder Structure' instead (its train/, valid/, test/ class folders convert as they are), "
                       f'or convert one folder with --raw_data_dir={path} --labels_csv={path}/_classes.csv.')
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
    train = next((d for d in split_dirs if SPLIT_WORDS[d.lower()] == 'train'), 'train')
    raise ValueError(f'{root}/{train} has no images: expected {train}/<class>/<image files>.')
  if not splits['validation']:
    logging.warning('No validation images in %s: the trainer evaluates on validation-* files.', root)
  unique = set(map(id, walker.unique([i for s in SPLITS for i in splits[s]])))
  splits = {s: [i for i in items if id(i) in unique] for s, items in splits.items()}
  names = sorted({item.class_name for items in splits.values() for item in items} | folder_classes)
  return Plan(layout, splits, names, loose_files, walker.skips)


def _csv_plan(raw_data_dir: str, csv_path: str, columns: labels_csv.Columns, max_classes: Optional[int],
              ratios: Sequence[float], seed: int, walker: _Walker, multi_label: bool = False) -> Plan:
  """Layout (d): the files a labels CSV names, with its labels (labelled_plan). Files no row names are skipped and
  reported."""
  if not os.path.isfile(csv_path):
    raise ValueError(f'--labels_csv {csv_path!r} is not a file.')
  files = walker.files(raw_data_dir)
  rows, unnamed = labels_csv.read(csv_path, raw_data_dir, files, columns, max_classes, multi_label)
  if unnamed:
    logging.warning('%d files under %s are not named in %s and are skipped (summary.json lists them), e.g. %s.',
                    len(unnamed), raw_data_dir, csv_path, ', '.join(unnamed[:3]))
  multi_label = labels_csv.task(rows, multi_label) == labels_csv.MULTI_LABEL
  kept = {item.path for item in walker.unique([Item(row.path, '') for row in rows])}
  return labelled_plan([row for row in rows if row.path in kept], 'labels_csv', csv_path, ratios, seed, multi_label,
                       loose_files=unnamed, skips=walker.skips)


def labelled_plan(rows: List[labels_csv.Row], layout: str, source: str, ratios: Sequence[float], seed: int,
                  multi_label: bool = False, class_names: Optional[Sequence[str]] = None,
                  loose_files: Sequence[str] = (), skips: Sequence[Tuple[str, str]] = (),
                  members: Optional[Dict[str, Any]] = None) -> Plan:
  """Rows of labelled images (a labels CSV's, or an archive's samples with their ``members`` by path) as a plan:
  by their split (layout ``<layout>_splits``) or, where rows have none, single-label data per class by the ratios
  (stratified, as class folders are) and multi-label data by iterative stratification (rare labels reach
  validation and test; stratify.py). ``class_names``: the label order (default: labels_csv.sorted_class_names)."""
  task = labels_csv.task(rows, multi_label)
  single = task == labels_csv.SINGLE_LABEL
  if class_names is None:
    class_names = labels_csv.sorted_class_names(label for row in rows for label in row.labels)
  member = (members or {}).get

  def item(row: labels_csv.Row) -> Item:
    return Item(row.path, row.label, (), member(row.path)) if single else Item(row.path, '', row.labels,
                                                                                member(row.path))

  items = [item(row) for row in rows]
  if rows[0].split is None:
    if single:
      by_class: Dict[str, List[Item]] = {c: [] for c in class_names}
      for i in items:
        by_class[i.class_name].append(i)
      splits = split_class_items(by_class, ratios, seed)
    else:
      by_path = {i.path: i for i in items}
      keys = stratify.iterative_split([(i.path, i.labels) for i in items], ratios, seed)
      splits = {split: sorted(by_path[key] for key in split_keys) for split, split_keys in zip(SPLITS, keys)}
  else:
    layout += '_splits'
    splits = {s: sorted(i for i, row in zip(items, rows) if row.split == s) for s in SPLITS}
    if not splits['train']:
      raise ValueError(f'{source}: no row has split train: the trainer needs train images.')
    if not splits['validation']:
      logging.warning('No validation rows in %s: the trainer evaluates on validation-* files.', source)
  return Plan(layout, splits, list(class_names), list(loose_files), skips, task=task)


def archive_plan(rows: List[labels_csv.Row], members: Dict[str, Any], skips: List[Tuple[str, str]], layout: str,
                 source: str, ratios: Sequence[float], seed: int, multi_label: bool, what: str,
                 class_names: Optional[List[str]] = None) -> Plan:
  """The plan of an archive's samples (webdataset_source.py, parquet_source.py): ``rows`` by their display paths,
  ``members`` what the workers read, ``skips`` the samples passed over with why (listed in summary.json, logged
  once). Empty labels are negatives in multi-label data (``multi_label``: the data's type says so, or a row has
  several labels) and passed over in single-label data. ``class_names``: the classes in label order (a Hugging Face
  ClassLabel's); without them class ids (every label a whole number) keep their ids: class i is label i + 1
  (class_ids)."""
  if not multi_label and not any(len(row.labels) > 1 for row in rows):
    skips.extend((row.path, f'empty label ({what})') for row in rows if not row.labels)
    rows = [row for row in rows if row.labels]
  if not rows:
    raise ValueError(f'{source}: no sample has both an image and a label ({len(skips)} passed over, e.g. '
                     f'{"; ".join(f"{p}: {why}" for p, why in skips[:3])}).')
  if skips:
    logging.warning('%d samples passed over (summary.json lists them), e.g. %s.', len(skips),
                    '; '.join(f'{p}: {why}' for p, why in skips[:3]))
  names = class_names if class_names is not None else class_ids(rows)
  if class_names is None and all(label.isdecimal() for row in rows for label in row.labels):
    rows = [dataclasses.replace(row, labels=tuple(str(int(label)) for label in row.labels)) for row in rows]
  plan = labelled_plan(rows, layout, source, ratios, seed, multi_label, names, members=members)
  return finish_plan(plan, seed)._replace(link_skips=skips)  # logged above, once


def class_ids(rows: Sequence[labels_csv.Row]) -> Optional[List[str]]:
  """Where every label is a class id (a whole number) and at least half of 0..the largest are used, the classes
  0..the largest, so that class i is label i + 1 as in the dataset (an id no sample has still gets its label); else
  None (names sort as a labels CSV's: numbers numerically)."""
  labels = {label for row in rows for label in row.labels}
  if not labels or not all(label.isdecimal() and label.isascii() for label in labels):
    return None
  ids = {int(label) for label in labels}
  if 2 * len(ids) < max(ids) + 1:  # a few ids of many (a subset of ImageNet's): not hundreds of empty classes
    logging.info('Class ids %s... are sparse: labels follow their order, not the ids.', sorted(ids)[:5])
    return None
  return [str(i) for i in range(max(ids) + 1)]


def plan_conversion(raw_data_dir: str, ratios: Sequence[float] = (0.8, 0.1, 0.1), seed: int = 0,
                    csv_path: Optional[str] = None, columns: labels_csv.Columns = labels_csv.Columns(),
                    max_classes: Optional[int] = None, multi_label: bool = False) -> Plan:
  """Detects the layout of raw_data_dir (or reads ``csv_path``, a labels CSV; ``multi_label``: its data is
  multi-label even where no row has several labels) and lists the files of each split (train shuffled with the
  seed)."""
  if not os.path.isdir(raw_data_dir):
    raise ValueError(f'--raw_data_dir {raw_data_dir!r} is not a directory.')
  if csv_path:
    return finish_plan(_csv_plan(raw_data_dir, csv_path, columns, max_classes, ratios, seed,
                                 _Walker(raw_data_dir), multi_label), seed)
  dirs = _subdirs(raw_data_dir)
  expected = ('expected class folders (<root>/<class>/<images>), split folders (<root>/train/<class>/... with '
              'val/, valid/, validation/ or dev/, optionally test/; training/ and testing/ too), or the ImageNet layout (train/<synset>/*.JPEG, flat '
              f'validation/*.JPEG and {SYNSET_LABELS_FILE})')
  if not dirs:
    raise ValueError(f'{raw_data_dir} has no subfolders: {expected}.')
  walker = _Walker(raw_data_dir)
  # Folders named for splits are split folders when one of them holds folders (train/<class>/...); a class that
  # happens to be named so (a vehicle data set's train/ beside bus/ and car/) holds images and stays a class.
  split_dirs = [d for d in dirs if d.lower() in SPLIT_WORDS]
  nested = any(_subdirs(os.path.join(raw_data_dir, d)) or os.path.isfile(os.path.join(raw_data_dir, d, '_classes.csv'))
               for d in split_dirs)   # _classes.csv: Roboflow's CSV export, refused below with its fix
  if split_dirs and len(split_dirs) == len(dirs) and not nested:
    raise ValueError(f'{raw_data_dir} has only folders named for splits ({", ".join(d + "/" for d in split_dirs)}), '
                     'holding images directly: the labels are missing. Put class folders inside them '
                     '(train/<class>/<images>), or give the labels with --labels_csv; if these are your classes, '
                     'rename them (e.g. class_train/).')
  if not nested:
    split_dirs = []
  if split_dirs:
    others = [d for d in dirs if d.lower() not in SPLIT_WORDS]
    if others or 'train' not in {SPLIT_WORDS[d.lower()] for d in split_dirs}:
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
  return finish_plan(plan, seed)


def finish_plan(plan: Plan, seed: int) -> Plan:
  """Logs what was passed over and the classes without files, and shuffles train with the seed."""
  for path, why in plan.link_skips:
    logging.warning('Skipping %s: %s.', path, why)
  used = {name for items in plan.splits.values() for item in items for name in item.label_names}
  for c in plan.class_names:
    if c not in used:
      logging.warning('Class %r has no files; it still gets a label.', c)
  random.Random(seed).shuffle(plan.splits['train'])
  return plan

