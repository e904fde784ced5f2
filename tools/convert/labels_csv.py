"""A labels CSV read against its image folder: which file each row names, its label and its split, or an error
that names every bad row (the converter writes nothing then).

Data often arrives as a folder of images plus a CSV mapping each file to its label (Kaggle's ``image_name,tags``,
paths without extension; ``Id,Target``). A ``split`` column (train / validation / val / test), when there is one,
keeps the split it gives; the path and label columns are the first two others unless named; a path is relative to
the image folder, with or without its image extension.

One label per row gives single-label data. Rows with several labels (space-separated, Kaggle's convention; another
separator by --csv_label_separator) make the whole CSV multi-label data (``--csv_multi_label`` says so when no row
has several); there an empty label cell is an image with none of the classes, a valid negative, kept and counted.
In single-label data an empty cell is an error.

The shapes other tools export read as they are: Excel's CSVs (a BOM, ``;`` or tab separators, CRLF), one-hot
columns (Kaggle's ``image_id,healthy,rust,scab``, Roboflow's ``_classes.csv``: where no label column is named and
every column besides the path and split holds 0/1, a row's labels are its 1 columns), and fastai's ``is_valid``
column (True: validation, False: train) as the split column.

JSON lines (``.jsonl``, ``.ndjson``) read the same way: one object per image, its keys the columns (a list value is
the image's labels, ``[]`` a negative), e.g. ``{"image": "a.jpg", "labels": ["cat", "indoor"], "split": "train"}``.

Annotation tools' exports (Label Studio's CSV, JSON-MIN and JSON; CVAT's ImageNet txt with its synsets.txt) are
read into the same table by label_exports.py, which owns their shapes, so they end in the same rows and checks.
"""
import csv
import dataclasses
import json
import os
from typing import Dict, List, Optional, Sequence, Tuple, Union

from official_input import image_normalisation
from tools.convert import label_exports
from tools.convert.splits import SPLIT_WORDS

IS_VALID = 'is_valid'  # fastai's split column: True is validation, False train
IS_VALID_VALUES = {'true': 'validation', '1': 'validation', 'false': 'train', '0': 'train'}
ONE_HOT_VALUES = {'0': False, '1': True, '0.0': False, '1.0': True, 'true': True, 'false': False}
DELIMITERS = (',', ';', '\t')  # Excel writes ';' where the decimal mark is ','; '\t': TSV
# A name without extension matches a file with one of these (any case): not a sidecar (.json, .xml, .txt).
IMAGE_EXTENSIONS = image_normalisation.IMAGE_EXTENSIONS   # the one list: what the converter and predict read
MAX_LISTED = 5  # bad rows named in an error; the rest are counted


@dataclasses.dataclass(frozen=True)
class Row:
  path: str                 # the file it names (absolute)
  labels: Tuple[str, ...]   # one in single-label data; any number (none: a negative) in multi-label data
  split: Optional[str]      # 'train', 'validation', 'test', or None without a split column

  @property
  def label(self) -> str:
    """The label of a single-label row."""
    return self.labels[0]


SINGLE_LABEL, MULTI_LABEL = 'single_label', 'multi_label'


def task(rows: Sequence[Row], multi_label: bool = False) -> str:
  """MULTI_LABEL when asked, or when a row has several labels or none; else SINGLE_LABEL."""
  return MULTI_LABEL if multi_label or any(len(row.labels) != 1 for row in rows) else SINGLE_LABEL


@dataclasses.dataclass(frozen=True)
class Columns:
  """Column names; None: a column named 'split' (any case) is the split column if there is one, and the path and
  label columns are the first and second of the other columns."""
  path: Optional[str] = None
  label: Optional[str] = None
  split: Optional[str] = None
  separator: Optional[str] = None  # between several labels in a cell; None: whitespace (Kaggle's convention)


def _listed(problems: List[str], what: str) -> str:
  shown = '; '.join(problems[:MAX_LISTED])
  more = f'; ... and {len(problems) - MAX_LISTED} more' if len(problems) > MAX_LISTED else ''
  return f'{len(problems)} {what}: {shown}{more}'


def _pick(header: List[str], name: Optional[str], flag: str, csv_path: str) -> Optional[int]:
  if name is None:
    return None
  if name not in header:
    raise ValueError(f'{csv_path} has no column {name!r} ({flag}); its columns are {header}.')
  return header.index(name)


def _columns(header: List[str], columns: Columns, csv_path: str) -> Tuple[int, int, Optional[int]]:
  """(path, label, split) column indices: the named ones, then the split column by its name, then the first
  unused columns for path and label. Two roles in one column are refused."""
  path_i = _pick(header, columns.path, '--csv_path_column', csv_path)
  label_i = _pick(header, columns.label, '--csv_label_column', csv_path)
  split_i = _pick(header, columns.split, '--csv_split_column', csv_path)
  named = [i for i in (path_i, label_i, split_i) if i is not None]
  if len(set(named)) < len(named):
    raise ValueError(f'{csv_path}: one column ({header[named[0]]!r}) is named for two roles; the path, label and '
                     'split columns must differ.')
  if split_i is None:
    split_i = next((i for i, h in enumerate(header) if h.lower() in ('split', IS_VALID) and i not in named), None)
  metadata = label_exports.metadata_columns(header)  # Label Studio's id, annotator, ...: never path nor label
  free = [i for i in range(len(header)) if i not in (path_i, label_i, split_i) and i not in metadata]
  if path_i is None:
    path_i = free.pop(0) if free else None
  if label_i is None:
    label_i = free.pop(0) if free else None
  if path_i is None or label_i is None:
    raise ValueError(f'{csv_path} has columns {header}: expected a path column and a label column.')
  return path_i, label_i, split_i


def _file_index(image_dir: str, files: Sequence[str]) -> Tuple[Dict[str, str], Dict[str, List[str]]]:
  """Files by their path relative to ``image_dir``, and by that path without its extension."""
  exact, stems = {}, {}
  for path in files:
    rel = os.path.relpath(path, image_dir).replace(os.sep, '/')
    exact[rel] = path
    stem, extension = os.path.splitext(rel)
    if extension.lower() in IMAGE_EXTENSIONS:
      stems.setdefault(stem, []).append(path)
  return exact, stems


def sorted_class_names(names) -> List[str]:
  """Class names in label order: numerically when every name is a whole number (``Target`` columns of class
  numbers: 2 before 10), else as strings (as class folders are)."""
  names = set(names)
  if names and all(n.isdecimal() and n.isascii() for n in names):
    return sorted(names, key=lambda n: (int(n), n))
  return sorted(names)


JSON_LINES = ('.jsonl', '.ndjson')
Cell = Union[str, List[str]]


def _read_table(path: str) -> Tuple[List[str], List[Tuple[int, List[Cell]]]]:
  """(header, [(line number, cells)]) of a CSV, or of JSON lines (one object per line, its keys the columns in
  order of appearance; a list value is a list of labels; a missing key an empty cell)."""
  try:
    with open(path, newline='', encoding='utf-8-sig') as f:
      if path.lower().endswith(JSON_LINES):
        return _json_lines(path, f)
      if path.lower().endswith('.json'):   # Label Studio's JSON-MIN or JSON export (label_exports.py)
        return _object_table(path, label_exports.json_objects(path, f))
      cvat = label_exports.cvat_table(path, f) if path.lower().endswith('.txt') else None
      if cvat is not None:
        return cvat
      first = f.readline()
      f.seek(0)
      delimiter = max(DELIMITERS, key=first.count)  # the header's separator: ',' unless it has more ';' or tabs
      table = [(number, r) for number, r in enumerate(csv.reader(f, delimiter=delimiter), start=1)
               if any(cell.strip() for cell in r)]
  except UnicodeDecodeError as e:
    raise ValueError(f'{path} is not UTF-8 text ({e}): save it as UTF-8 (CSV UTF-8 in Excel).') from None
  except csv.Error as e:
    raise ValueError(f'{path} is not a readable CSV ({e}).') from None
  if not table:
    raise ValueError(f'{path} is empty: expected a header and one row per image (e.g. image,label).')
  return [h.strip() for h in table[0][1]], table[1:]


def _json_lines(path: str, lines) -> Tuple[List[str], List[Tuple[int, List[Cell]]]]:
  objects, bad = [], []
  for number, line in enumerate(lines, start=1):
    if not line.strip():
      continue
    try:
      value = json.loads(line)
    except json.JSONDecodeError as e:
      bad.append(f'line {number} ({e.msg})')
      continue
    if not isinstance(value, dict):
      bad.append(f'line {number} (a {type(value).__name__}, not an object)')
      continue
    objects.append((number, value))
  if bad:
    raise ValueError(f'{path}: ' + _listed(bad, 'lines are not JSON objects such as {"image": "a.jpg", "labels": '
                                                '["cat"]}') + '. Nothing was written.')
  return _object_table(path, objects)


def _object_table(path: str, objects) -> Tuple[List[str], List[Tuple[int, List[Cell]]]]:
  """The table of (number, object) records: their keys the columns in order of appearance, a list (or Label
  Studio's ``{"choices": [...]}``) a list of labels, a missing key an empty cell."""
  if not objects:
    raise ValueError(f'{path} is empty: expected one JSON object per image (e.g. {{"image": "a.jpg", "label": '
                     '"cat"}).')
  header = list(dict.fromkeys(key for _, value in objects for key in value))
  cell = label_exports.labels_value
  return header, [(number, [cell(value.get(key)) for key in header]) for number, value in objects]


def _one_hot_columns(header: List[str], body: List[Tuple[int, List[Cell]]], columns: Columns, path_i: int,
                     split_i: Optional[int]) -> List[int]:
  """The label columns of a one-hot CSV (Kaggle's ``image_id,healthy,rust,scab``, Roboflow's ``_classes.csv``):
  where no label column is named, at least two columns besides the path and split hold only 0/1 (or True/False);
  else none. A row's labels are the names of its 1 columns."""
  if columns.label is not None:
    return []
  others = [i for i in range(len(header)) if i not in (path_i, split_i)]
  if len(others) < 2 or not body:
    return []
  for _, cells in body:
    if len(cells) < len(header) or any(isinstance(cells[i], list) or cells[i].strip().lower() not in ONE_HOT_VALUES
                                       for i in others):
      return []
  return others


def _text(cell: Cell) -> str:
  return ' '.join(cell) if isinstance(cell, list) else cell


def read(csv_path: str, image_dir: str, files: Sequence[str], columns: Columns = Columns(),
         max_classes: Optional[int] = None, multi_label: bool = False) -> Tuple[List[Row], List[str]]:
  """(rows, files under ``image_dir`` that no row names). ``files``: every image file under ``image_dir``.

  ValueError, naming the rows, for: a column that is not there (or named for two roles), an unreadable file, rows
  naming no file (as written, nor with an image extension), names matching several files, a file named twice, a
  label named twice in one cell, empty label cells in single-label data (``multi_label`` False and no row with
  several labels), an unknown split, and a label vocabulary larger than ``max_classes`` (None: more classes than
  half the rows, from 20 rows, which says the label column is probably another column)."""
  header, body = _read_table(csv_path)
  if len(header) < 2:
    raise ValueError(f'{csv_path} has one column ({header}): expected a path column and a label column (CVAT\'s '
                     f'ImageNet export without images is read with its {label_exports.SYNSETS} beside it).')
  path_i, label_i, split_i = _columns(header, columns, csv_path)
  one_hot = _one_hot_columns(header, body, columns, path_i, split_i)
  exact, stems = _file_index(image_dir, files)
  csv_real = os.path.realpath(csv_path)
  rows: List[Row] = []
  missing, ambiguous, empty, repeated, bad_split, short = [], [], [], [], [], []
  first_row: Dict[str, int] = {}
  twice, same_name, bad_json, by_name = [], [], [], {}
  for number, cells in body:  # line numbers as an editor shows them
    if len(cells) <= max(i for i in (path_i, label_i, split_i) if i is not None):
      short.append(f'line {number} has {len(cells)} cells')
      continue
    name = _text(cells[path_i]).strip().replace('\\', '/')  # a CSV written on Windows
    key = (os.path.relpath(name, image_dir) if os.path.isabs(name) else os.path.normpath(name)).replace(os.sep, '/')
    path = exact.get(key)
    if path is None:
      candidates = [p for p in stems.get(key, []) if os.path.realpath(p) != csv_real]
      if len(candidates) > 1:
        ambiguous.append(f'line {number} {name!r} ({", ".join(os.path.basename(c) for c in candidates[:3])})')
        continue
      path = candidates[0] if candidates else None
    if path is None:   # a Label Studio upload, local file or URL: by its file name (label_exports.py)
      path, several = label_exports.match_reference(name, image_dir, files, exact, by_name)
      if several:
        same_name.append(f'line {number} {name!r} ({", ".join(several[:3])})')
        continue
    if path is None:
      missing.append(f'line {number} {name!r}')
      continue
    cell = [header[i] for i in one_hot if ONE_HOT_VALUES[cells[i].strip().lower()]] if one_hot else cells[label_i]
    try:
      choices = label_exports.choices_cell(cell) if isinstance(cell, str) else None   # Label Studio's JSON
      cell = cell if choices is None else choices
    except ValueError as e:
      bad_json.append(f'line {number} {e}')
      continue
    if isinstance(cell, list):   # a JSON list: its items are the labels
      labels = cell
    else:
      labels = cell.split(columns.separator) if columns.separator else cell.split()
    labels = [label.strip() for label in labels if label.strip()]
    if not labels:
      empty.append(f'line {number} ({name})')   # an error in single-label data only (below)
    if len(set(labels)) < len(labels):
      repeated.append(f'line {number} ({name}: {" ".join(labels)})')
      continue
    split = None
    if split_i is not None:
      values = IS_VALID_VALUES if header[split_i].lower() == IS_VALID else SPLIT_WORDS
      split = values.get(_text(cells[split_i]).strip().lower())
      if split is None:
        bad_split.append(f'line {number} {_text(cells[split_i]).strip()!r}')
        continue
    if path in first_row:
      twice.append(f'{name} on lines {first_row[path]} and {number}')
      continue
    first_row[path] = number
    rows.append(Row(path, tuple(labels), split))
  if multi_label or any(len(row.labels) > 1 for row in rows):
    empty = []   # negatives: images with none of the classes
  elif one_hot:
    empty = [e + ' (no column is 1)' for e in empty]
  problems = []
  if short:
    problems.append(_listed(short, f'rows with fewer cells than the header ({len(header)})'))
  if missing:
    problems.append(_listed(missing, f'rows name no file under {image_dir} (as written, nor with an image '
                                     f'extension: {", ".join(IMAGE_EXTENSIONS)}; a Label Studio upload, local file '
                                     'or URL by its file name, with or without its <8 hex>- upload prefix)'))
  if ambiguous:
    problems.append(_listed(ambiguous, 'rows name several files (give the extension)'))
  if same_name:
    problems.append(_listed(same_name, 'Label Studio images match several files of their file name under '
                                       f'{image_dir} (keep one file of each name, or name the files by their path '
                                       'relative to the image folder)'))
  if bad_json:
    problems.append(_listed(bad_json, 'rows have a cut label cell'))
  if twice:
    problems.append(_listed(twice, 'files are named twice (each image must have one row)'))
  if empty:
    problems.append(_listed(empty, f'rows have an empty {header[label_i]!r} cell (in single-label data every image '
                                   'needs its label: leave out images you cannot label; multi-label data where an '
                                   'image may have none of the classes: --csv_multi_label)'))
  if repeated:
    problems.append(_listed(repeated, 'rows name a label twice'))
  if bad_split:
    problems.append(_listed(bad_split, f'rows have an unknown {header[split_i]!r} value (use ' + (
        'True or False' if header[split_i].lower() == IS_VALID else ', '.join(SPLIT_WORDS)) + ')'))
  if problems:
    raise ValueError(f'{csv_path}: ' + '. '.join(problems) + '. Nothing was written.')
  if not rows:
    raise ValueError(f'{csv_path} has a header but no rows: expected one row per image.')
  classes = {label for row in rows for label in row.labels}
  limit = max_classes if max_classes is not None else (len(rows) // 2 if len(rows) >= 20 else None)
  if limit is not None and len(classes) > limit:
    bound = f'--max_classes={max_classes}' if max_classes is not None else 'half the rows'
    raise ValueError(f'{csv_path}: column {header[label_i]!r} has {len(classes)} different labels over {len(rows)} '
                     f'rows, more than {bound}: is it the label column? Name it with --csv_label_column, or allow '
                     f'that many classes with --max_classes={len(classes)}.')
  named = set(first_row)
  unnamed = [p for p in files if p not in named and os.path.realpath(p) != csv_real]
  return rows, unnamed
