"""Hugging Face datasets as the converter's source (``--parquet=PATTERN``), read with pyarrow and without the
``datasets`` package: Parquet files as ``datasets`` writes them (``push_to_hub``, ``to_parquet``: the Hub's
``data/train-00000-of-00004.parquet``), and ``save_to_disk`` folders (Arrow IPC streams ``data-0000N-of-0000M.arrow``
beside dataset_info.json and state.json; a DatasetDict's splits in subfolders).

Columns, from the ``huggingface`` key of the Arrow schema's metadata (JSON with ``info.features``, written in every
file): the image is the ``Image`` feature (a struct of ``bytes`` and ``path``), else a struct with ``bytes``, else a
binary column named like an image; the label is ``--label_field``, else the first ``ClassLabel`` (its ``names`` give
the classes in the dataset's order: class i is label i + 1) or list of ``ClassLabel`` (multi-label data by its type:
an empty list is a negative), else a column named ``label``/``labels``/... of names or ids. A label of -1 (an
unlabelled split, as HF marks it) and rows whose image holds only a path are passed over and listed.

Why pyarrow (an optional extra, imported only here): it is the one reader of both formats, and reads a row group or
a memory-mapped Arrow file without loading the rest; each cleaning worker reads the image column of one row group at
a time (TableRow) and keeps the last one it read, so nothing is unpacked to disk and the parent never holds images;
clean_images hands a worker the (shuffled) rows grouped by row group (TableRow.batch_key) so each is read ~once.
"""
import json
import os
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

from tools.convert import labels_csv
from tools.convert import source_patterns
from tools.convert import sources

FLAG = '--parquet'
INSTALL = "pip install -e '.[parquet]'"
LABEL_NAMES = ('label', 'labels', 'fine_label', 'class', 'category', 'tags', 'target')
IMAGE_NAMES = ('image', 'img', 'jpg', 'jpeg', 'png', 'image_bytes', 'bytes')
_LIST_TYPES = ('Sequence', 'List', 'LargeList')
_cache: Dict[Tuple[str, int, str], Any] = {}  # a worker's last row group (Parquet) and its Arrow files (mapped)


def pyarrow() -> Any:
  """pyarrow, or a ValueError naming the install command (the extra is optional: training never needs it)."""
  try:
    import pyarrow as pa  # pylint: disable=g-import-not-at-top
    import pyarrow.ipc  # pylint: disable=g-import-not-at-top,unused-import
    import pyarrow.parquet  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError:
    raise ValueError(f'{FLAG} reads Parquet and Arrow files with pyarrow, which is not installed: {INSTALL}.') from None
  return pa


def _is_arrow(path: str) -> bool:
  return path.lower().endswith('.arrow')


def _arrow_table(path: str) -> Any:
  """A memory-mapped Arrow file (an IPC stream, as save_to_disk writes, or the file format): no copy of its data."""
  pa = pyarrow()
  source = pa.memory_map(path)
  try:
    return pa.ipc.open_stream(source).read_all()
  except pa.ArrowInvalid:
    return pa.ipc.open_file(pa.memory_map(path)).read_all()


class TableRow(NamedTuple):
  """An image in a Parquet row group or an Arrow file, read by a cleaning worker."""
  path: str
  group: int   # Parquet row group (0 in an Arrow file)
  row: int     # in the group
  column: str
  size: int    # estimated: the row group's bytes per row
  name: str

  @property
  def batch_key(self) -> Optional[Tuple[str, int]]:
    """Rows sharing it are cleaned together (clean_images groups them): a worker keeps one Parquet row group."""
    return None if _is_arrow(self.path) else (self.path, self.group)

  def read(self) -> bytes:
    key = (self.path, self.group, self.column)
    if key not in _cache:
      if not _is_arrow(self.path):
        for old in [k for k in _cache if not _is_arrow(k[0])]:
          del _cache[old]  # one row group at a time
        table = pyarrow().parquet.ParquetFile(self.path).read_row_group(self.group, columns=[self.column])
      else:
        table = _arrow_table(self.path)
      _cache[key] = table.column(self.column)
    value = _cache[key][self.row].as_py()
    data = value.get('bytes') if isinstance(value, dict) else value
    if data is None:
      where = f' only its path {value.get("path")!r}' if isinstance(value, dict) and value.get('path') else ' nothing'
      raise ValueError(f'the row holds no image bytes,{where}: save the dataset with its images embedded '
                       '(datasets embeds them in push_to_hub and save_to_disk; cast the column to Image() first)')
    return data


def _features(schema: Any) -> Dict[str, Any]:
  raw = (schema.metadata or {}).get(b'huggingface')
  if not raw:
    return {}
  try:
    return json.loads(raw).get('info', {}).get('features') or {}
  except (ValueError, AttributeError):
    return {}


def _class_label(feature: Any) -> Tuple[Optional[List[str]], bool]:
  """(ClassLabel names or None, whether the feature is a list of labels)."""
  if isinstance(feature, list) and len(feature) == 1:  # an older JSON form of Sequence(ClassLabel)
    return _class_label(feature[0])[0], True
  if isinstance(feature, dict) and feature.get('_type') in _LIST_TYPES:
    return _class_label(feature.get('feature'))[0], True
  if isinstance(feature, dict) and feature.get('_type') == 'ClassLabel':
    return list(feature.get('names') or []), False
  return None, False


def _image_column(schema: Any, features: Dict[str, Any], path: str) -> str:
  pa = pyarrow()
  typed = [name for name, f in features.items() if isinstance(f, dict) and f.get('_type') == 'Image']
  structs = [f.name for f in schema if pa.types.is_struct(f.type) and f.type.get_field_index('bytes') >= 0]
  binary = [f.name for f in schema if (pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type))
            and f.name.lower() in IMAGE_NAMES]
  for found in (typed, structs, binary):
    if len(found) > 1 and 'image' in found:
      return 'image'
    if len(found) == 1:
      return found[0]
    if found:
      raise ValueError(f'{path} has several image columns ({", ".join(found)}): one image per row.')
  raise ValueError(f'{path} has no image column (an Image feature, a struct of bytes and path, or a binary column '
                   f'named {"/".join(IMAGE_NAMES)}); its columns are {schema.names}.')


def _label_column(schema: Any, features: Dict[str, Any], path: str, label_field: Optional[str]) -> str:
  if label_field:
    if label_field not in schema.names:
      raise ValueError(f'--label_field={label_field}: {path} has no such column; its columns are {schema.names}.')
    return label_field
  classes = [name for name, f in features.items() if _class_label(f)[0] is not None and name in schema.names]
  named = [n for n in LABEL_NAMES if n in schema.names]
  if classes or named:
    return (classes or named)[0]
  raise ValueError(f'{path} has no label column (a ClassLabel feature, or a column named {"/".join(LABEL_NAMES)}); '
                   f'its columns are {schema.names}: name it with --label_field=COLUMN.')


def _read_file(path: str, label_field: Optional[str]) -> Tuple[str, str, Optional[List[str]], bool, List[Any],
                                                                 List[Optional[str]], List[Tuple[int, int, int]]]:
  """(image column, label column, class names, list-typed, labels, image paths, (group, row, size) per row)."""
  pa = pyarrow()
  if _is_arrow(path):
    table = _arrow_table(path)
    schema, size = table.schema, os.path.getsize(path) // max(1, table.num_rows)
    places = [(0, i, size) for i in range(table.num_rows)]
  else:
    try:
      parquet = pa.parquet.ParquetFile(path)
    except (pa.ArrowInvalid, OSError) as e:
      raise ValueError(f'{FLAG}: {path} is not a readable Parquet file ({e}).') from None
    schema, meta, places = parquet.schema_arrow, parquet.metadata, []
    for group in range(meta.num_row_groups):
      rows = meta.row_group(group).num_rows
      places.extend((group, i, meta.row_group(group).total_byte_size // max(1, rows)) for i in range(rows))
    table = None
  features = _features(schema)
  image = _image_column(schema, features, path)
  label = _label_column(schema, features, path, label_field)
  names, is_list = _class_label(features.get(label))
  is_list = is_list or pa.types.is_list(schema.field(label).type) or pa.types.is_large_list(schema.field(label).type)
  has_paths = pa.types.is_struct(schema.field(image).type) and schema.field(image).type.get_field_index('path') >= 0
  if table is None:
    table = pa.parquet.read_table(path, columns=[label] + ([f'{image}.path'] if has_paths else []))
  labels = table.column(label).to_pylist()
  if has_paths and image in table.column_names:  # an Arrow file: its mapped column, without copying the images
    import pyarrow.compute as pc  # pylint: disable=g-import-not-at-top
    image_paths = pc.struct_field(table.column(image), 'path').to_pylist()
  elif has_paths:
    image_paths = table.column(1).to_pylist()  # the Parquet read of [label, image.path]
  else:
    image_paths = [None] * len(labels)
  return image, label, names, is_list, labels, image_paths, places


def _label_names(value: Any, names: Optional[List[str]]) -> Tuple[Optional[List[str]], str]:
  """(the row's labels, or None with why it has none usable)."""
  values = value if isinstance(value, list) else [] if value is None else [value]
  out = []
  for v in values:
    if names is not None and isinstance(v, int):
      if v == -1:
        return None, 'no label (-1: an unlabelled row)'
      if not 0 <= v < len(names):
        return None, f'label {v} is not a class of its ClassLabel ({len(names)} names)'
      out.append(names[v])
    else:
      out.append(str(v).strip())
  return [v for v in out if v], ''


def plan(spec: str, ratios: Sequence[float], seed: int, label_field: Optional[str] = None) -> sources.Plan:
  """The plan (sources.Plan) of the files ``spec`` names (source_patterns.expand), each row a TableRow."""
  pyarrow()
  files = source_patterns.expand(spec, FLAG, ('.parquet', '.arrow'))
  rows, members, skips = [], {}, []
  class_names: Optional[List[str]] = None
  multi_label, label_columns = False, set()
  for path in _data_files(files):
    image, label, names, is_list, labels, image_paths, places = _read_file(path, label_field)
    if names is not None:
      if class_names is not None and names != class_names:
        raise ValueError(f'{FLAG}: {path} names its classes {names[:5]}..., another file {class_names[:5]}...: '
                         'convert datasets with one ClassLabel together.')
      class_names = names
    multi_label |= is_list
    label_columns.add(label)
    for index, (value, image_path, (group, row, size)) in enumerate(zip(labels, image_paths, places)):
      inner = f'{index:06d}' + (f'/{os.path.basename(image_path)}' if image_path else '')
      shown = source_patterns.display_path(path, inner)
      found, why = _label_names(value, names)
      if found is None:
        skips.append((shown, why))
        continue
      members[shown] = TableRow(path, group, row, image, size, os.path.basename(inner))
      rows.append(labels_csv.Row(shown, tuple(found), files[path]))
  what = f'column {"/".join(sorted(label_columns))}'
  return sources.archive_plan(rows, members, skips, 'parquet', f'{FLAG}={spec}', ratios, seed, multi_label, what,
                              class_names)


def _data_files(files: Dict[str, Optional[str]]) -> List[str]:
  """The files to read: a save_to_disk folder's Arrow files are those its state.json lists (a cache-*.arrow beside
  them is not data)."""
  out = []
  for path in files:
    state = os.path.join(os.path.dirname(path), 'state.json')
    if _is_arrow(path) and os.path.isfile(state):
      with open(state) as f:
        listed = {d.get('filename') for d in json.load(f).get('_data_files', [])}
      if os.path.basename(path) not in listed:
        continue
    out.append(path)
  return out
