"""What the converter recorded about a dataset: class count and names, split sizes and per-shard integrity data.

``tools/imagenet_to_gcs.py`` writes ``summary.json`` (split counts, and per shard its record count, byte size and
SHA-256) and ``labels.txt`` (line i = class of stored label i + 1) next to the shards. Reading them lets a run take
``num_label_classes`` and the split sizes from the data instead of ImageNet defaults, and lets the input pipeline
tell a damaged shard (a truncated copy) from a complete one. Local paths and gs:// work alike (tf.io.gfile).
"""
import dataclasses
import json
import os
import types
from typing import Any, Dict, List, Mapping, Optional, Set, Tuple

import tensorflow as tf

from official_input.dataset_layout import LABELS_FILE, SUMMARY_FILE

TASKS = ('single_label', 'multi_label')
SPLIT_PARAMS = {'num_train_images': 'train', 'num_eval_images': 'validation', 'num_test_images': 'test'}
CHECKED_PARAMS = ('num_label_classes',) + tuple(SPLIT_PARAMS)


@dataclasses.dataclass(frozen=True)
class ShardInfo:
  """One shard as the converter wrote it; a field is None when summary.json does not record it."""
  records: Optional[int] = None
  bytes: Optional[int] = None
  sha256: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
  """The parsed summary.json (+ labels.txt) of one data_dir. Split sizes are None when not recorded."""
  data_dir: str
  num_classes: int
  class_names: Tuple[str, ...]
  task: str = 'single_label'   # or 'multi_label': each image has any number of the classes (label lists)
  num_train_images: Optional[int] = None
  num_eval_images: Optional[int] = None   # the validation split
  num_test_images: Optional[int] = None
  max_image_side: Optional[int] = None
  # Training images per class, in class_names order; () when summary.json does not record them.
  train_class_counts: Tuple[int, ...] = ()
  # Shard file name (e.g. 'train-00000-of-00004') -> ShardInfo; read-only.
  shards: Mapping[str, ShardInfo] = dataclasses.field(default_factory=lambda: types.MappingProxyType({}),
                                                      hash=False)

  def split_images(self, split: str) -> Optional[int]:
    """Records of 'train', 'validation' or 'test' as the converter counted them."""
    return {'train': self.num_train_images, 'validation': self.num_eval_images, 'test': self.num_test_images}[split]

  def shard(self, path: str) -> Optional[ShardInfo]:
    """The recorded info of the shard at ``path`` (matched by file name), or None."""
    return self.shards.get(os.path.basename(path.rstrip('/')))

  @property
  def summary_path(self) -> str:
    return os.path.join(self.data_dir, SUMMARY_FILE)


def _optional_int(value: Any, what: str, path: str) -> Optional[int]:
  if value is None:
    return None
  if isinstance(value, bool) or not isinstance(value, int) or value < 0:
    raise ValueError(f'{path}: {what} must be a non-negative integer, got {value!r}. Re-run '
                     '`python -m tools.imagenet_to_gcs` to rewrite it.')
  return value


def _parse_shards(raw: Any, path: str) -> Dict[str, ShardInfo]:
  if raw is None:
    return {}
  if not isinstance(raw, dict):
    raise ValueError(f'{path}: "shards" must map shard names to {{"records", "bytes", "sha256"}}, got '
                     f'{type(raw).__name__}.')
  shards = {}
  for name, entry in raw.items():
    if not isinstance(entry, dict):
      raise ValueError(f'{path}: shards[{name!r}] must be an object with "records", "bytes", "sha256".')
    sha = entry.get('sha256')
    shards[name] = ShardInfo(records=_optional_int(entry.get('records'), f'shards[{name!r}].records', path),
                             bytes=_optional_int(entry.get('bytes'), f'shards[{name!r}].bytes', path),
                             sha256=str(sha) if sha is not None else None)
  return shards


def _split_count(summary: Dict[str, Any], split: str, path: str) -> Optional[int]:
  splits = summary.get('splits')
  if splits is None:
    return None
  if not isinstance(splits, dict):
    raise ValueError(f'{path}: "splits" must be an object, got {type(splits).__name__}.')
  entry = splits.get(split)
  if entry is None:
    return None
  if not isinstance(entry, dict):
    raise ValueError(f'{path}: splits[{split!r}] must be an object with "images".')
  return _optional_int(entry.get('images'), f'splits[{split!r}].images', path)


_REWRITE = ('It is written by `python -m tools.imagenet_to_gcs`; re-run the conversion, or delete the file to use the '
            'data without it.')


def _read_text(path: str, what: str) -> Optional[str]:
  """A text file of the dataset, or None when it is not there; a directory in its place, or bytes that are not
  UTF-8 text (a damaged copy), are a ValueError naming the file and the fix."""
  if not tf.io.gfile.exists(path):
    return None
  if tf.io.gfile.isdir(path):
    raise ValueError(f'{path} is a directory, not the dataset\'s {what}. {_REWRITE}')
  with tf.io.gfile.GFile(path, 'rb') as f:
    data = f.read()
  try:
    return data.decode('utf-8')
  except UnicodeDecodeError:
    raise ValueError(f'{path} is not text ({len(data)} bytes of binary data: a damaged copy?), not the dataset\'s '
                     f'{what}. {_REWRITE}') from None


def _read_class_names(labels_path: str) -> Optional[List[str]]:
  text = _read_text(labels_path, 'class names')
  if text is None:
    return None
  return [line.strip() for line in text.splitlines() if line.strip()]


def read_dataset_info(data_dir: Optional[str], labels_file: Optional[str] = None) -> Optional['DatasetInfo']:
  """The DatasetInfo of ``data_dir``, or None when it has no summary.json (or data_dir is unset).

  Class names come from ``labels_file`` (default ``<data_dir>/labels.txt``), else from summary.json's ``labels``.
  Raises ValueError naming the file when summary.json is not valid JSON or has the wrong structure, and when
  labels.txt and summary.json disagree on the class count.
  """
  if is_synthetic(data_dir):
    return None
  path = os.path.join(data_dir, SUMMARY_FILE)
  text = _read_text(path, 'summary')
  if text is None:
    return None
  try:
    summary = json.loads(text)
  except json.JSONDecodeError as e:
    raise ValueError(f'{path} is not valid JSON ({e}: truncated or damaged?). {_REWRITE}') from e
  if not isinstance(summary, dict):
    raise ValueError(f'{path} must hold a JSON object, got {type(summary).__name__}.')

  task = summary.get('task', 'single_label')
  if task not in TASKS:
    raise ValueError(f'{path} says task={task!r}, which this version does not know (it knows {", ".join(TASKS)}). '
                     f'{_REWRITE}')
  labels_path = labels_file or os.path.join(data_dir, LABELS_FILE)
  names = _read_class_names(labels_path)
  recorded = _optional_int(summary.get('num_classes'), 'num_classes', path)
  if names is None:
    labels = summary.get('labels')
    if isinstance(labels, dict):  # class name -> 1-based label
      names = [name for name, _ in sorted(labels.items(), key=lambda item: item[1])]
    elif recorded is None:
      raise ValueError(f'Neither {labels_path} nor {path} says how many classes the data has: re-run '
                       '`python -m tools.imagenet_to_gcs`, or set labels_file.')
  if names is not None and recorded is not None and len(names) != recorded:
    if labels_file:
      raise ValueError(f'labels_file={labels_path} lists {len(names)} classes but the data in {data_dir} has '
                       f'{recorded} ({path}): give the labels file of this data ({os.path.join(data_dir, LABELS_FILE)}'
                       ', or leave labels_file unset), or point data_dir at the data it lists.')
    raise ValueError(f'{labels_path} lists {len(names)} classes but {path} says num_classes={recorded}: they '
                     'come from different conversions. Re-copy both from the same converter run.')
  return DatasetInfo(
      data_dir=data_dir,
      num_classes=len(names) if names is not None else recorded,
      class_names=tuple(names or ()),
      task=task,
      num_train_images=_split_count(summary, 'train', path),
      num_eval_images=_split_count(summary, 'validation', path),
      num_test_images=_split_count(summary, 'test', path),
      max_image_side=_optional_int(summary.get('max_image_side'), 'max_image_side', path),
      train_class_counts=_class_counts(summary, 'train', names, path),
      shards=types.MappingProxyType(_parse_shards(summary.get('shards'), path)))


def _class_counts(summary: Dict[str, Any], split: str, names: Optional[List[str]], path: str) -> Tuple[int, ...]:
  """splits.<split>.per_class (class name -> images) in class-name order; () when not recorded."""
  per_class = ((summary.get('splits') or {}).get(split) or {}).get('per_class')
  if not isinstance(per_class, dict) or not names:
    return ()
  missing = [name for name in names if name not in per_class]
  if missing:
    raise ValueError(f'{path}: splits.{split}.per_class has no count for {", ".join(missing[:5])}: it comes from '
                     'another conversion than labels.txt. Re-copy both from the same converter run.')
  return tuple(_optional_int(per_class[name], f'splits.{split}.per_class', path) or 0 for name in names)


def model_class_counts(info: DatasetInfo, num_label_classes: int) -> Optional[List[int]]:
  """The training images of each model class (summary.json's per-class counts, a background class 0 with none
  where the model keeps one): the one place the counts meet the model's classes. None where the data records no
  per-class counts, or counts that are not the model's classes."""
  counts = list(info.train_class_counts)
  if not counts:
    return None
  if has_background_class(num_label_classes, len(counts)):
    counts = [0] + counts
  return counts if len(counts) == num_label_classes else None


def _data_value(info: DatasetInfo, key: str) -> Optional[int]:
  """The data's value for a param; a split of 0 images (converted without a test/ folder) is no split at all, so
  it leaves the param unset rather than setting a count that no mode could run with."""
  if key == 'num_label_classes':
    return info.num_classes
  return info.split_images(SPLIT_PARAMS[key]) or None


def _tolerated(key: str, value: int, data_value: int) -> Optional[str]:
  """The warning for a set value that differs from the data but is still a valid configuration, else None."""
  if key == 'num_label_classes' and value == data_value + 1:
    return (f'num_label_classes={value} is the {data_value} classes of the data plus a background class 0 (stored '
            'labels are used as they are).')
  if key == 'num_eval_images' and value < data_value:
    return (f'num_eval_images={value} is less than the {data_value} validation images in the data: evaluating '
            f'the first {value}.')
  if key == 'num_eval_images' and value > data_value:
    return (f'num_eval_images={value} is more than the {data_value} validation images in the data: evaluating '
            f'all {data_value}.')
  if key == 'num_test_images' and value < data_value:
    return (f'num_test_images={value} is less than the {data_value} test images in the data: predicting the '
            f'first {value}.')
  return None


def _mismatch_error(info: DatasetInfo, key: str, value: int, data_value: int) -> str:
  if key == 'num_label_classes':
    return (f'num_label_classes={value} but {os.path.join(info.data_dir, LABELS_FILE)} lists {data_value} '
            f'classes: set num_label_classes={data_value} (or {data_value + 1} to keep a background class 0), '
            'leave it unset to take it from the data, or point data_dir at the dataset you meant.')
  split = SPLIT_PARAMS[key]
  return (f'{key}={value} but {info.summary_path} counts {data_value} {split} images: set {key}={data_value} '
          'or leave it unset to take it from the data, or point data_dir at the dataset you meant.')


def check_params_against(info: DatasetInfo, params_values: Mapping[str, Any],
                         explicitly_set: Set[str]) -> Tuple[Dict[str, int], List[str], List[str]]:
  """Reconciles num_label_classes and num_{train,eval,test}_images with the data: (filled, warnings, errors).

  - None (unset): filled from the data when the data records it.
  - Set explicitly (in ``explicitly_set``) and different from the data: an error naming the key, both values and
    the fix; except num_label_classes == classes + 1 (a background class) and num_eval_images below the split size
    (evaluating a subset), which are warnings.
  - Set but not explicitly (a default or derived value) and different: replaced by the data's value, with a
    warning, unless it is one of the tolerated cases above.
  Keys absent from ``params_values`` are left alone.
  """
  filled: Dict[str, int] = {}
  warnings: List[str] = []
  errors: List[str] = []
  for key in CHECKED_PARAMS:
    if key not in params_values:
      continue
    data_value = _data_value(info, key)
    value = params_values[key]
    if data_value is None:
      continue
    if value is None:
      filled[key] = data_value
      continue
    if value == data_value:
      continue
    tolerated = _tolerated(key, int(value), data_value)
    if tolerated:
      warnings.append(tolerated)
    elif key in explicitly_set:
      errors.append(_mismatch_error(info, key, int(value), data_value))
    else:
      filled[key] = data_value
      warnings.append(f'{key}: the default {value} replaced by {data_value} from {info.summary_path}.')
  return filled, warnings, errors


def labels_file_exists(path: str) -> bool:
  return tf.io.gfile.exists(path) and not tf.io.gfile.isdir(path)


def model_class_names(labels_path: Optional[str], num_label_classes: int) -> List[str]:
  """Class names indexed by model class id, from labels.txt (line i = stored 1-based label i+1); [] without it.

  The pipeline's background-class rule with the data's own class count: a model with one class more than
  labels.txt lists keeps class 0 for background (so on your own data too, not only for ImageNet's 1001).
  """
  if not labels_path or not labels_file_exists(labels_path):
    return []
  names = _read_class_names(labels_path) or []
  return (['background'] if has_background_class(num_label_classes, len(names)) else []) + names


IMAGENET_CLASSES_WITH_BACKGROUND = 1001


def has_background_class(num_label_classes: int, num_data_classes: Optional[int] = None) -> bool:
  """Whether the model keeps class 0 for background, so stored 1-based labels are used as they are.

  True when the model has one class more than the data (``num_data_classes``, from labels.txt/summary.json); when
  the data's count is unknown, the ImageNet convention: 1001 = 1000 classes + background.
  """
  if num_data_classes is None:
    return num_label_classes == IMAGENET_CLASSES_WITH_BACKGROUND
  return num_label_classes == num_data_classes + 1


NULL_DATA_DIRS = (None, '', 'null', 'None')


def is_synthetic(data_dir: Optional[str]) -> bool:
  """data_dir None, '', 'null' or 'None' selects synthetic tensors (the reference's null input): the one rule."""
  return data_dir in NULL_DATA_DIRS
