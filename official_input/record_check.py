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


def _first_records(path: str, compression: str = '') -> Optional[List[bytes]]:
  """Up to RECORDS_LOOKED_AT records; None when the file does not read with ``compression``."""
  try:
    return [r.numpy() for r in tf.data.TFRecordDataset(path, compression_type=compression).take(RECORDS_LOOKED_AT)]
  except tf.errors.OpError:
    return None


def check_first_records(path: str) -> None:
  """RecordFormatError when ``path`` is compressed, or none of its first records has an image/encoded feature."""
  records = _first_records(path)
  if records is None:  # unreadable as plain TFRecords: compressed, or damaged (the pipeline's accounting names that)
    for compression in ('GZIP', 'ZLIB'):
      if _first_records(path, compression):
        raise RecordFormatError(
            f'{path} is {compression}-compressed; this pipeline reads uncompressed TFRecords. Decompress the '
            f'shards (e.g. `gunzip -c` each one) or re-write them without compression.')
    return
  keys = [_feature_keys(r) for r in records]
  if not records or any(k is not None and example_schema.ENCODED in k for k in keys):
    return
  found = sorted({key for k in keys if k for key in k})
  if not found:
    raise RecordFormatError(f'The first {len(records)} records of {path} are not tf.train.Examples. {CONVERT_HINT}')
  raise RecordFormatError(
      f'The first {len(records)} records of {path} have no {example_schema.ENCODED} feature; their keys are '
      f'{", ".join(found)}. {CONVERT_HINT}')
