"""WebDataset tar shards as the converter's source (``--webdataset=PATTERN``), read where they lie: planning reads
each shard's headers and its small label members, and the cleaning workers read each image at its offset in the
shard (TarMember), so nothing is unpacked to disk and the parent never holds the images.

A sample is WebDataset's: the members sharing a key (the member's path up to the first dot of its name), e.g.
``n0144/abc.jpg`` + ``n0144/abc.cls``. Its image is its one member with an image extension (``jpg``, ``png``, ...;
official_input/image_normalisation.py's list); its label the ``--label_field`` member, by default the first of
``cls``, ``txt``, ``json`` that the shards hold:
- ``cls``: a class id (WebDataset's convention; several ids separated by spaces or commas: multi-label),
- ``txt``: the class name (one per line: several lines are several labels),
- ``json``: a name or an id, a list of them (multi-label, ``[]`` a negative), or an object whose ``label``,
  ``labels``, ``cls``, ``class``, ``category``, ``categories`` or ``tags`` key holds one of those.
When every label is a whole number (class ids), class i gets label i + 1 and every id up to the largest is a class
(named by its number), so the records keep the dataset's own ids; otherwise names sort as a labels CSV's do.

Samples without an image or a label, with several images, or whose key another sample already had, are passed
over and listed in summary.json with why; then every image goes through the checks folders get (undecodable, too
small, copies across splits). Compressed shards (``.tar.gz``) are refused with the fix: an image inside a
compressed stream has no offset to read it at.
"""
import json
import os
import tarfile
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from absl import logging

from official_input import file_walk
from official_input import image_normalisation
from tools.convert import labels_csv
from tools.convert import source_patterns
from tools.convert import sources

FLAG = '--webdataset'
LABEL_FIELDS = ('cls', 'txt', 'json')  # the label member by default: the first of these the shards hold
JSON_LABEL_KEYS = ('label', 'labels', 'cls', 'class', 'category', 'categories', 'tags')
_COMPRESSED = ((b'\x1f\x8b', 'gzip', 'gunzip'), (b'BZh', 'bzip2', 'bunzip2'), (b'\xfd7zXZ', 'xz', 'unxz'),
               (b'\x28\xb5\x2f\xfd', 'zstd', 'unzstd'))
_IMAGE_FIELDS = tuple(e.lstrip('.') for e in image_normalisation.IMAGE_EXTENSIONS)


class TarMember(NamedTuple):
  """An image inside an uncompressed tar shard, read by a cleaning worker without unpacking anything."""
  path: str    # the shard
  offset: int  # of the member's data
  size: int
  name: str    # the member's name in the shard

  def read(self) -> bytes:
    with open(self.path, 'rb') as f:
      f.seek(self.offset)
      data = f.read(self.size)
    if len(data) != self.size:
      raise ValueError(f'{self.path} ends inside {self.name} (a truncated shard: copy it again)')
    return data


class _Sample(NamedTuple):
  shard: str
  key: str
  fields: Dict[str, tarfile.TarInfo]
  labels: Dict[str, bytes]  # the bytes of its label members, read while the shard is open


def _key_and_field(name: str) -> Optional[Tuple[str, str]]:
  """WebDataset's split of a member name: the key up to the first dot of the file name, the field after it."""
  folder, base = os.path.split(name)
  dot = base.find('.')
  if dot <= 0 or not file_walk.visible(base) or base.startswith('__'):
    return None  # hidden files (macOS '._x.jpg' forks), names without a field, WebDataset's '__' members
  return (folder + '/' if folder else '') + base[:dot], base[dot + 1:].lower()


def _open_shard(path: str) -> tarfile.TarFile:
  with open(path, 'rb') as f:
    magic = f.read(6)
  for prefix, kind, tool in _COMPRESSED:
    if magic.startswith(prefix):
      raise ValueError(f'{FLAG}: {path} is {kind}-compressed: the converter reads each image at its offset in the '
                       f'shard, which a compressed stream does not have. Decompress the shards first ({tool} -k '
                       f'{os.path.basename(path)}; JPEG and PNG members hardly shrink anyway).')
  try:
    return tarfile.open(path, 'r:')
  except tarfile.ReadError as e:
    raise ValueError(f'{FLAG}: {path} is not a tar file ({e}).') from None


def _samples(path: str, label_fields: Sequence[str]) -> List[_Sample]:
  """The shard's samples in the order of their first member, with the bytes of their ``label_fields`` members.

  The shard is closed before the next is opened: ImageNet's WebDataset sets have over 1024 train shards, more than
  the usual open-file limit, and the images need no open shard (a TarMember reopens it at its offset)."""
  tar = _open_shard(path)
  by_key: Dict[str, _Sample] = {}
  try:
    for member in tar:
      split = _key_and_field(member.name) if member.isfile() else None
      if split:
        by_key.setdefault(split[0], _Sample(path, split[0], {}, {})).fields.setdefault(split[1], member)
    for sample in by_key.values():
      for field in label_fields:
        if field in sample.fields:
          sample.labels[field] = tar.extractfile(sample.fields[field]).read()
  except (tarfile.ReadError, EOFError) as e:
    raise ValueError(f'{FLAG}: {path} is damaged or truncated ({e}): copy it again.') from None
  finally:
    tar.close()
  return list(by_key.values())


def _labels(field: str, data: bytes) -> Tuple[List[str], bool]:
  """(labels, whether the value is a list: multi-label data by its type). ValueError: why it is not a label."""
  text = data.decode('utf-8-sig').strip()
  if field == 'json' or field.endswith('.json'):
    value = json.loads(text) if text else None
    if isinstance(value, dict):
      key = next((k for k in JSON_LABEL_KEYS if k in value), None)
      if key is None:
        raise ValueError(f'no {"/".join(JSON_LABEL_KEYS)} key among {sorted(value)[:8]}')
      value = value[key]
    if isinstance(value, list):
      return [str(v) for v in value], True
    return ([] if value is None or value == '' else [str(value)]), False
  if field == 'cls' or field.startswith('cls'):
    return text.replace(',', ' ').split(), False
  return [line.strip() for line in text.splitlines() if line.strip()], False


def _choose_label_field(samples: Sequence[_Sample], label_field: Optional[str]) -> str:
  seen = {field for sample in samples for field in sample.fields}
  if label_field:
    field = label_field.lstrip('.').lower()
    if field not in seen:
      raise ValueError(f'--label_field={label_field}: no sample has a .{field} member; the shards have '
                       f'{", ".join(sorted(seen)[:12])}.')
    return field
  field = next((f for f in LABEL_FIELDS if f in seen), None)
  if field is None:
    raise ValueError(f'{FLAG}: no sample has a label member ({", ".join("." + f for f in LABEL_FIELDS)}); the shards '
                     f'have {", ".join(sorted(seen)[:12])}: name the label member with --label_field=EXT.')
  return field


def plan(spec: str, ratios: Sequence[float], seed: int, label_field: Optional[str] = None) -> sources.Plan:
  """The plan (sources.Plan) of the shards ``spec`` names (source_patterns.expand), each sample a TarMember."""
  shards = source_patterns.expand(spec, FLAG, ('.tar', '.tar.gz', '.tgz'))
  wanted = (label_field.lstrip('.').lower(),) if label_field else LABEL_FIELDS
  by_shard = [_samples(path, wanted) for path in shards]
  field = _choose_label_field([s for samples in by_shard for s in samples], label_field)
  rows, members, skips, seen = [], {}, [], {}
  typed_list = False
  for samples in by_shard:
    for sample in samples:
      images = sorted(f for f in sample.fields if f in _IMAGE_FIELDS)
      where = source_patterns.display_path(sample.shard, sample.key)
      if len(images) != 1:
        skips.append((where, f'several images ({", ".join(images)}): one image per sample' if images else
                      f'no image member (it has {", ".join(sorted(sample.fields))})'))
        continue
      image = sample.fields[images[0]]
      path = source_patterns.display_path(sample.shard, image.name)
      if sample.key in seen:
        skips.append((path, f'key {sample.key} repeated: the first is in {seen[sample.key]}'))
        continue
      seen[sample.key] = sample.shard
      if field not in sample.fields:
        skips.append((path, f'no .{field} label'))
        continue
      try:
        labels, is_list = _labels(field, sample.labels[field])
      except (ValueError, UnicodeDecodeError) as e:
        skips.append((path, f'unreadable .{field} label ({e})'))
        continue
      typed_list |= is_list
      members[path] = TarMember(sample.shard, image.offset_data, image.size, image.name)
      rows.append(labels_csv.Row(path, tuple(labels), shards[sample.shard]))
  return sources.archive_plan(rows, members, skips, 'webdataset', f'{FLAG}={spec}', ratios, seed, typed_list,
                              f'.{field} members')

