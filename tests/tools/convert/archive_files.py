"""The data sets users bring, written by the tests as the tools write them: WebDataset tar shards (what
webdataset.TarWriter writes: each sample's members under its key, in a plain tar), Parquet files as Hugging Face
``datasets`` writes them and ``save_to_disk`` folders, made with pyarrow alone.

The Hugging Face shapes were read off files datasets 5.2.0 wrote (Dataset.to_parquet, save_to_disk of a Dataset and
of a DatasetDict, in a scratch venv outside the repository): an ``image`` column of ``struct<bytes: binary, path:
string>``, ClassLabel columns of int64, Sequence(ClassLabel) as ``list<int64>``, and the features as JSON under
the ``huggingface`` key of the Arrow schema's metadata (``{"info": {"features": {...}}}``), e.g.
``{"image": {"_type": "Image"}, "label": {"names": ["cat", "dog"], "_type": "ClassLabel"}, "tags": {"feature":
{"names": [...], "_type": "ClassLabel"}, "_type": "List"}}``; save_to_disk writes Arrow IPC *streams*
``data-00000-of-00001.arrow`` with the same metadata beside state.json (``_data_files``) and dataset_info.json, and
a DatasetDict's ``dataset_dict.json`` (``{"splits": [...]}``) above a folder per split.
"""
import io
import json
import os
import tarfile
from typing import Any, Dict, List, Optional, Sequence, Tuple


def write_tar(path: str, members: Sequence[Tuple[str, bytes]]) -> str:
  """A plain tar of (name, bytes) members, in order (a WebDataset shard)."""
  os.makedirs(os.path.dirname(path) or '.', exist_ok=True)
  with tarfile.open(path, 'w') as tar:
    for name, data in members:
      info = tarfile.TarInfo(name)
      info.size = len(data)
      info.mtime = 1700000000
      tar.addfile(info, io.BytesIO(data))
  return path


def sample(key: str, image: bytes, image_ext: str = 'jpg', **labels: Any) -> List[Tuple[str, bytes]]:
  """A WebDataset sample's members: key.<image_ext> and key.<field> for each label given (cls=3, txt='cat',
  json={...}: encoded as WebDataset's writer encodes them)."""
  members = [(f'{key}.{image_ext}', image)]
  for field, value in labels.items():
    data = json.dumps(value).encode() if field == 'json' else str(value).encode()
    members.append((f'{key}.{field}', data))
  return members


def features(label_names: Optional[Sequence[str]] = None, tag_names: Optional[Sequence[str]] = None
             ) -> Dict[str, Any]:
  out: Dict[str, Any] = {'image': {'_type': 'Image'}}
  if label_names is not None:
    out['label'] = {'names': list(label_names), '_type': 'ClassLabel'}
  if tag_names is not None:
    out['tags'] = {'feature': {'names': list(tag_names), '_type': 'ClassLabel'}, '_type': 'List'}
  return out


def hf_table(images: Sequence[Tuple[bytes, Optional[str]]], columns: Dict[str, Sequence[Any]],
             feature_json: Optional[Dict[str, Any]]):
  """An Arrow table as datasets holds one: image structs, the other columns, the features in the metadata."""
  import pyarrow as pa  # pylint: disable=import-outside-toplevel
  image_type = pa.struct([('bytes', pa.binary()), ('path', pa.string())])
  arrays = {'image': pa.array([{'bytes': b, 'path': p} for b, p in images], image_type)}
  for name, values in columns.items():
    arrays[name] = pa.array(values, pa.list_(pa.int64()) if values and isinstance(values[0], list) else None)
  metadata = {b'huggingface': json.dumps({'info': {'features': feature_json}}).encode()} if feature_json else None
  return pa.table(arrays).replace_schema_metadata(metadata)


def write_parquet(path: str, table: Any, row_group_size: int = 100) -> str:
  """A Parquet file as datasets writes it (row groups of 100 rows for image data)."""
  import pyarrow.parquet as pq  # pylint: disable=import-outside-toplevel
  os.makedirs(os.path.dirname(path) or '.', exist_ok=True)
  pq.write_table(table, path, row_group_size=row_group_size)
  return path


def save_to_disk(folder: str, table: Any, split: Optional[str] = None) -> str:
  """A save_to_disk folder of one Arrow stream file, state.json and dataset_info.json."""
  import pyarrow as pa  # pylint: disable=import-outside-toplevel
  os.makedirs(folder, exist_ok=True)
  name = 'data-00000-of-00001.arrow'
  with pa.OSFile(os.path.join(folder, name), 'wb') as sink:
    with pa.ipc.new_stream(sink, table.schema) as writer:
      for batch in table.to_batches(max_chunksize=3):
        writer.write_batch(batch)
  state = {'_data_files': [{'filename': name}], '_fingerprint': '0', '_format_columns': None, '_format_kwargs': {},
           '_format_type': None, '_output_all_columns': False, '_split': split}
  with open(os.path.join(folder, 'state.json'), 'w') as f:
    json.dump(state, f)
  metadata = json.loads(table.schema.metadata[b'huggingface']) if table.schema.metadata else {'info': {}}
  with open(os.path.join(folder, 'dataset_info.json'), 'w') as f:
    json.dump({'citation': '', 'description': '', 'features': metadata['info'].get('features'), 'homepage': '',
               'license': ''}, f)
  return folder
