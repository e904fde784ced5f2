"""The labels files annotation tools export for image classification, read into the columns and cells that
labels_csv.read takes, so every shape ends in the same rows (and the same checks) as a plain CSV.

Label Studio (its exports, label_studio_sdk's converter):
- CSV: the task's data columns (``image``), ``id``, one column per control tag (its ``name``, ``choice`` in the
  image classification template) and the metadata ``annotator, annotation_id, created_at, updated_at, lead_time``
  (``agreement``). One choice is written as is; several as JSON, ``{"choices": ["a", "b"]}`` (unquoted by some
  versions, which breaks the row at its commas: refused with the fix, export JSON-MIN).
- JSON-MIN: a JSON list of the same records, a value ``"a"``, ``{"choices": ["a", "b"]}`` or a list of those.
- JSON: a list of tasks ``{"data": {"image": ...}, "annotations": [{"result": [{"from_name": "choice", "value":
  {"choices": ["a"]}}], "was_cancelled": false}]}``. A task with no annotation (or only cancelled ones) is not
  labelled: no row, so its file is counted as not named. Annotations of one task that disagree are refused.
The image is ``/data/upload/<project>/<8 hex>-<name>`` (an upload), ``/data/local-files/?d=<path>``, or a URL;
matched to the image folder by its file name (the local-files path first), then without the upload prefix.

CVAT: its ImageNet 1.0 export with images is class folders (read as such); without images it is datumaro's
imagenet_txt, ``<subset>.txt`` of ``name label_index...`` lines (a name with spaces in quotes) and ``synsets.txt``
of class names beside it, which is read when that file is there; the subset names a split when it is one.
"""
import json
import os
import posixpath
import re
import shlex
import urllib.parse
from typing import Any, Dict, List, Optional, Sequence, Tuple

from tools.convert.splits import SPLIT_WORDS

# The metadata columns Label Studio's CSV and JSON-MIN add to each record: never the path or the label column.
LABEL_STUDIO_METADATA = ('id', 'annotator', 'annotation_id', 'created_at', 'updated_at', 'lead_time', 'agreement')
UPLOAD_PREFIX = re.compile(r'^[0-9a-f]{8}-')  # Label Studio renames an upload <8 hex of a uuid4>-<name>
SYNSETS = 'synsets.txt'                       # CVAT's (datumaro's) imagenet_txt class names, one a line


def is_label_studio(header: Sequence[str]) -> bool:
  """A Label Studio CSV or JSON-MIN header: it has the annotation metadata columns."""
  return 'annotation_id' in header and 'lead_time' in header


def metadata_columns(header: Sequence[str]) -> List[int]:
  """The columns that are never the path or label column: Label Studio's metadata, where its header is one."""
  return [i for i, h in enumerate(header) if h in LABEL_STUDIO_METADATA] if is_label_studio(header) else []


def labels_value(value: Any):
  """A JSON value as a cell: a list of labels for a Label Studio choices value (``{"choices": [...]}`` or a list of
  them, several tags' choices together) or a list; '' for null; else its text."""
  if isinstance(value, dict) and 'choices' in value:
    return [str(x) for x in value['choices']]
  if isinstance(value, list):
    return [str(x) for item in value for x in (labels_value(item) if isinstance(item, dict) else [item])]
  return '' if value is None else str(value)


def choices_cell(text: str):
  """A CSV cell holding Label Studio's JSON of several choices, as its list of labels; None if it is not one;
  ValueError if it starts as one but is not JSON (the row was cut at its commas)."""
  if not text.lstrip().startswith('{"choices"'):
    return None
  try:
    return labels_value(json.loads(text))
  except json.JSONDecodeError:
    raise ValueError(f'{text!r} is not whole JSON: Label Studio wrote several choices without quotes, so the row '
                     'was cut at their commas; export JSON-MIN instead (--labels_csv=FILE.json)') from None


def json_objects(path: str, f) -> List[Tuple[int, Dict[str, Any]]]:
  """(number, object) of a ``.json`` file: a list of records (JSON-MIN), or of Label Studio tasks (JSON) made
  records of their data and each control tag's choices. Numbers count the list's items from 1."""
  try:
    value = json.load(f)
  except json.JSONDecodeError as e:
    raise ValueError(f'{path} is not JSON ({e}).') from None
  if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
    raise ValueError(f'{path}: expected a JSON list of objects (Label Studio\'s JSON or JSON-MIN export, e.g. '
                     '[{"image": "a.jpg", "choice": "cat"}]); for one object per line name it .jsonl.')
  if not value or not any('annotations' in item and 'data' in item for item in value):
    return list(enumerate(value, start=1))
  records, disagree = [], []
  for number, task in enumerate(value, start=1):
    annotations = [a for a in task.get('annotations') or [] if not a.get('was_cancelled')]
    answers = [_choices(a.get('result') or []) for a in annotations]
    if not answers:
      continue   # not labelled
    if any(answer != answers[0] for answer in answers[1:]):
      disagree.append(f'item {number} (task {task.get("id")}: {answers})')
      continue
    records.append((number, {**task.get('data', {}), **answers[0]}))
  if disagree:
    shown = '; '.join(disagree[:5]) + (f'; ... and {len(disagree) - 5} more' if len(disagree) > 5 else '')
    raise ValueError(f'{path}: {len(disagree)} tasks have annotations that disagree: {shown}. Settle them in Label '
                     'Studio (or leave one annotation per task) and export again. Nothing was written.')
  return records


def _choices(result: List[Dict[str, Any]]) -> Dict[str, List[str]]:
  out: Dict[str, List[str]] = {}
  for region in result:
    value = region.get('value') or {}
    if 'choices' in value:
      out.setdefault(region.get('from_name', 'choices'), []).extend(str(c) for c in value['choices'])
  return {name: sorted(set(labels)) for name, labels in out.items()}


def reference_names(name: str) -> List[str]:
  """The names to look for under the image folder for a Label Studio image reference (an upload, a local-files
  path, a URL), in order: the local-files path, the file name, the file name without the upload prefix. [] for
  a name that is none of these (a path relative to the image folder)."""
  if '://' not in name and not name.startswith('/data/'):
    return []
  parts = urllib.parse.urlsplit(name)
  local = urllib.parse.parse_qs(parts.query).get('d')
  path = local[0] if local else urllib.parse.unquote(parts.path)
  base = posixpath.basename(path)
  names = ([path.lstrip('/')] if local else []) + [base]
  stripped = UPLOAD_PREFIX.sub('', base, count=1)
  return names + ([stripped] if stripped != base else [])


def match_reference(name: str, image_dir: str, files: Sequence[str], exact: Dict[str, str],
                    by_name: Dict[str, List[str]]) -> Tuple[Optional[str], List[str]]:
  """(the file a Label Studio reference names, []) or (None, the files it could name when several share its file
  name), or (None, []) when none. ``by_name``: files by their file name (filled on first use)."""
  if not by_name:
    for path in files:
      by_name.setdefault(os.path.basename(path), []).append(path)
  for candidate in reference_names(name):
    if candidate in exact:
      return exact[candidate], []
    found = by_name.get(candidate, [])
    if len(found) == 1:
      return found[0], []
    if found:
      return None, [os.path.relpath(p, image_dir) for p in found]
  return None, []


def cvat_table(path: str, f) -> Optional[Tuple[List[str], List[Tuple[int, list]]]]:
  """(header, rows) of CVAT's ImageNet export without images (``<subset>.txt`` of ``name index...`` lines with
  ``synsets.txt`` beside it), or None when no synsets.txt is beside ``path``."""
  synsets_path = os.path.join(os.path.dirname(path), SYNSETS)
  if os.path.basename(path) == SYNSETS or not os.path.isfile(synsets_path):
    return None
  with open(synsets_path, encoding='utf-8-sig') as s:
    classes = [line.strip() for line in s if line.strip()]
  subset = os.path.splitext(os.path.basename(path))[0].lower()
  split = subset if subset in SPLIT_WORDS else None   # the split column's word, read as labels_csv reads it
  body, bad = [], []
  for number, line in enumerate(f, start=1):
    if not line.strip():
      continue
    words = shlex.split(line) if '"' in line else line.split()
    if not all(w.isdecimal() and int(w) < len(classes) for w in words[1:]):
      bad.append(f'line {number} {line.strip()!r}')
      continue
    body.append((number, [words[0], [classes[int(w)] for w in words[1:]]] + ([split] if split else [])))
  if bad:
    raise ValueError(f'{path}: {len(bad)} lines are not "name class_index..." with indices into {synsets_path} '
                     f'({len(classes)} classes): {"; ".join(bad[:5])}. Nothing was written.')
  return ['image', 'label'] + (['split'] if split else []), body
