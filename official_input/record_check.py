"""An up-front look at the first records of a split: are they the TFRecords this pipeline reads?

TFRecords written by other tools often hold other feature keys (``image/raw``, ``image``, ``label``), or are
GZIP-compressed. Left to the pipeline, the first would be skipped one by one as "not an image" until the
consecutive-bad limit stops the run, and the second would be reported as a shard damaged at byte 0. Reading a few
records of one shard on the host, before the dataset is built, names the real problem and the fix instead.
"""
from typing import List, Optional

import tensorflow as tf

from official_input import example_schema

RECORDS_LOOKED_AT = 8
GZIP_MAGIC = b'\x1f\x8b'
ZLIB_FIRST_BYTES = (b'\x78\x01', b'\x78\x5e', b'\x78\x9c', b'\x78\xda')
CONVERT_HINT = ('Convert the images with `python -m tools.imagenet_to_gcs`, or write tf.train.Examples with the keys '
                f'{example_schema.ENCODED} (JPEG/PNG bytes), {example_schema.LABEL} (int64, 1-based) and '
                f'{example_schema.FILENAME}.')


class RecordFormatError(ValueError):
  """The split's records are not what the pipeline reads (compressed, or other feature keys)."""


def _feature_keys(record: bytes) -> Optional[List[str]]:
  """The Example's feature keys; None when the record is no tf.train.Example."""
  try:
    example = tf.train.Example.FromString(record)
  except Exception:  # pylint: disable=broad-except (protobuf's DecodeError varies by implementation)
    return None
  return sorted(example.features.feature)


def check_first_records(path: str) -> None:
  """RecordFormatError when ``path`` is compressed, or none of its first records has an image/encoded feature."""
  with tf.io.gfile.GFile(path, 'rb') as f:
    head = f.read(2)
  if head == GZIP_MAGIC or head in ZLIB_FIRST_BYTES:
    kind = 'GZIP' if head == GZIP_MAGIC else 'ZLIB'
    raise RecordFormatError(
        f'{path} is {kind}-compressed; this pipeline reads uncompressed TFRecords. Decompress the shards (e.g. '
        f'`gunzip -c {path} > {path}.tfrecord` then rename) or re-write them without compression.')
  try:
    records = [r.numpy() for r in tf.data.TFRecordDataset(path).take(RECORDS_LOOKED_AT)]
  except tf.errors.OpError:
    return  # a damaged shard: the pipeline's own accounting names it and counts what was lost
  keys = [_feature_keys(r) for r in records]
  if not records or any(k is not None and example_schema.ENCODED in k for k in keys):
    return
  found = sorted({key for k in keys if k for key in k})
  if not found:
    raise RecordFormatError(f'The first {len(records)} records of {path} are not tf.train.Examples. {CONVERT_HINT}')
  raise RecordFormatError(
      f'The first {len(records)} records of {path} have no {example_schema.ENCODED} feature; their keys are '
      f'{", ".join(found)}. {CONVERT_HINT}')
