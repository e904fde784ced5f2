"""A split's TFRecord shards: finding them, checking them against summary.json, and reading them accounted.

Damaged shards (an interrupted copy, a flipped bit): TFRecord framing errors stop ``TFRecordDataset`` with a
DataLoss error at the bad record, and the rest of that file is unreadable. Two checks find them:

- Up front, when ``<data_dir>/summary.json`` records the shards: listed shards that are missing, and each file's
  byte size (one stat per file) against the converter's. Findings come back as messages; the caller decides
  whether they are errors (``fail_on_data_loss``) or warnings.
- While reading, with or without summary.json: every record takes ``len(record) + 16`` bytes in the file (length,
  two CRCs), so a running count and byte sum per file (``read_accounted``) tell at the file's end whether the
  reader stopped before the last byte, and, when summary.json knows the file's record count, exactly how many
  records were lost. A shard cut exactly at a record boundary reads cleanly; only the summary.json checks catch it.
"""
import concurrent.futures
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

from absl import logging
import tensorflow as tf

from official_input import dataset_info as dataset_info_lib
from official_input.accounting import InputAccounting

DatasetInfo = Optional[dataset_info_lib.DatasetInfo]

# TFRecord read buffer (the reference's 8 MiB).
READ_BUFFER_BYTES = 8 * 1024 * 1024
# Bytes a TFRecord adds around each record: uint64 length, its masked CRC32C, and the data's masked CRC32C.
TFRECORD_FRAMING_BYTES = 16
# Records per accounting step of a shard read (read_accounted): amortises the per-step cost, bounds the extra
# buffering (per file open in the read interleave) to this many records.
ACCOUNT_BLOCK_RECORDS = 32
# Concurrent stats of shard files at pipeline build (one request each; matters on gs://).
STAT_THREADS = 16


def file_pattern(data_dir: Optional[str], split: str) -> str:
  return os.path.join(data_dir or '', '%s-*' % split)


def list_files(data_dir: Optional[str], split: str) -> List[str]:
  """Sorted ``<data_dir>/<split>-*``; a missing dataset is a clear error, not an empty pipeline."""
  pattern = file_pattern(data_dir, split)
  files = sorted(tf.io.gfile.glob(pattern))
  if not files:
    raise FileNotFoundError(
        'No input files match %r. data_dir must hold TFRecord shards named %s-00000-of-NNNNN. Create them with '
        '`python -m tools.imagenet_to_gcs` (real images) or `python -m tools.make_fake_imagenet '
        '--output_dir=DIR` (fake data), or set data_dir=null for synthetic input.' % (pattern, split))
  return files


def missing_shards(files: Sequence[str], info: DatasetInfo, data_dir: str, split: str) -> Optional[str]:
  """A message when shards summary.json lists for ``split`` are missing (their records are lost); files that
  summary.json does not list are read too, with a warning."""
  listed = sorted(n for n in (info.shards if info else {}) if n.startswith(split + '-'))
  if not listed:
    return None
  present = {os.path.basename(f) for f in files}
  extra = sorted(present - set(listed))
  if extra:
    logging.warning('%s input: %d files match %s but are not in %s (e.g. %s): left over from another '
                    'conversion? They are read too.', split, len(extra), file_pattern(data_dir, split),
                    info.summary_path, extra[0])
  missing = [n for n in listed if n not in present]
  if not missing:
    return None
  lost = sum(r for r in (info.shards[n].records for n in missing) if r is not None)
  return (f'{split} input: {len(missing)} shards listed in {info.summary_path} are missing from '
          f'{data_dir} (e.g. {missing[0]}; {lost} records).')


def file_sizes(files: Sequence[str]) -> List[int]:
  """Each file's size in bytes: one stat per file, concurrent."""
  with concurrent.futures.ThreadPoolExecutor(max(1, min(STAT_THREADS, len(files)))) as pool:
    return list(pool.map(lambda f: int(tf.io.gfile.stat(f).length), files))


def wrong_sizes(files: Sequence[str], sizes: Sequence[int], info: DatasetInfo, split: str) -> Optional[str]:
  """A message naming the files whose size differs from the converter's (a truncated or altered copy)."""
  wrong = []
  for path, size in zip(files, sizes):
    shard = info.shard(path) if info else None
    if shard is not None and shard.bytes is not None and shard.bytes != size:
      expected = f'{shard.records} records expected' if shard.records is not None else 'record count unknown'
      wrong.append(f'{path} has {size} bytes, {info.summary_path} says {shard.bytes} ({expected})')
  if not wrong:
    return None
  return (f'{split} input: {len(wrong)} shards do not have the size the converter wrote: ' + '; '.join(wrong[:10])
          + (f'; and {len(wrong) - 10} more' if len(wrong) > 10 else '') + '.')


def file_records(files: Sequence[str], info: DatasetInfo) -> List[int]:
  """summary.json's record count of each file, -1 where unknown."""
  counts = []
  for path in files:
    shard = info.shard(path) if info else None
    counts.append(shard.records if shard is not None and shard.records is not None else -1)
  return counts


def pass_records(counts: Sequence[int], split_total: Optional[int], reads_all: bool, first_n: Optional[int],
                 index: int, count: int) -> Optional[int]:
  """Records one pass of a pipeline should yield, or None if unknown.

  Its files' per-shard counts (else the split's size when it reads every file), at most the first ``first_n`` when
  it reads every file, and its every ``count``-th of those when it shards by record.
  """
  if counts and min(counts) >= 0:
    total = sum(counts)
  elif split_total is not None and reads_all:
    total = split_total
  else:
    return None
  if reads_all and first_n:
    total = min(total, first_n)
  return len(range(index, total, count)) if reads_all and count > 1 else total


# --- record counts from the records' headers: a resumed run's place on data without summary.json counts ----------

# A TFRecord's header: the data's length (uint64, little-endian) and that length's masked CRC32C (uint32).
TFRECORD_HEADER_BYTES = 12


def _crc32c_table() -> List[int]:
  table = []
  for n in range(256):
    for _ in range(8):
      n = (n >> 1) ^ 0x82F63B78 if n & 1 else n >> 1
    table.append(n)
  return table


_CRC32C = _crc32c_table()
# (path, size, mtime) -> (records, damage): each file is scanned once a process (a pipeline rebuilt, e.g. at a
# progressive-resizing stage, scans nothing again); a file changed since has another size or time.
_scanned: Dict[Tuple[str, int, int], Tuple[int, Optional[str]]] = {}


def _masked_crc32c(data: bytes) -> int:
  """TFRecord's masked CRC32C (Castagnoli) of a few bytes (a length field)."""
  crc = 0xFFFFFFFF
  for byte in data:
    crc = _CRC32C[(crc ^ byte) & 0xFF] ^ (crc >> 8)
  crc ^= 0xFFFFFFFF
  return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def count_records(path: str) -> Tuple[int, Optional[str]]:
  """(records, damage) of one TFRecord file, counted from its records' 12-byte headers alone: each header gives the
  data's length, and the next record starts ``length + 16`` bytes on, so no record's data is read. The count is what
  the reader yields: a header cut short, a length whose checksum fails, or a record running past the file's end is
  where the reader stops too (``damage`` then says where; the whole records before it are counted). A flipped bit in
  a record's data is not seen (its own checksum is not read), as the reader only finds it there.

  Local files are read with one ``pread`` of 12 bytes per record (no read-ahead: a buffered reader would read the
  data it passes over); gs:// and other URLs through tf.io.gfile, seeking from header to header (its reader buffers
  512 KB a read, so there records smaller than that are fetched whole: not measured on a bucket)."""
  stat = tf.io.gfile.stat(path)
  key = (path, int(stat.length), int(stat.mtime_nsec))
  if key not in _scanned:
    _scanned[key] = _scan_headers(path, int(stat.length))
  return _scanned[key]


def _scan_headers(path: str, size: int) -> Tuple[int, Optional[str]]:
  local = '://' not in path
  with (open(path, 'rb', buffering=0) if local else tf.io.gfile.GFile(path, 'rb')) as f:
    def header_at(offset: int) -> bytes:
      if local:
        return os.pread(f.fileno(), TFRECORD_HEADER_BYTES, offset)
      f.seek(offset)
      return f.read(TFRECORD_HEADER_BYTES)

    offset = count = 0
    while offset < size:
      header = header_at(offset)
      if len(header) < TFRECORD_HEADER_BYTES:
        return count, f'it ends {size - offset} bytes into the header of record {count + 1} (at byte {offset})'
      length = int.from_bytes(header[:8], 'little')
      if _masked_crc32c(header[:8]) != int.from_bytes(header[8:], 'little'):
        return count, f'record {count + 1} (at byte {offset}) has a corrupt length: its checksum does not match'
      end = offset + length + TFRECORD_FRAMING_BYTES
      if end > size:
        return count, (f'record {count + 1} (at byte {offset}, {length} bytes) runs past the file\'s end at byte '
                       f'{size}: a truncated copy')
      count, offset = count + 1, end
  return count, None


def record_counts(files: Sequence[str], expected: Sequence[int]) -> Tuple[List[int], List[str]]:
  """Every file's record count: summary.json's (``expected``), else its headers' (``count_records``, files scanned
  concurrently); and a message naming each damaged file and what is wrong with it."""
  unknown = [i for i, e in enumerate(expected) if e < 0]
  counts = list(expected)
  problems = []
  with concurrent.futures.ThreadPoolExecutor(max(1, min(STAT_THREADS, len(unknown)))) as pool:
    for i, (count, damage) in zip(unknown, pool.map(lambda i: count_records(files[i]), unknown)):
      counts[i] = count
      if damage:
        problems.append(f'damaged shard {files[i]}: {damage}; the reader stops there, after {count} records')
  return counts, problems


def read_accounted(path: tf.Tensor, size: tf.Tensor, expected: tf.Tensor, stats: InputAccounting,
                   pipeline_id: int = 0, skip: Any = 0) -> tf.data.Dataset:
  """The records of one TFRecord file, reporting at its end how many were read and how many bytes they span.

  A framing error (bad length or CRC, a cut in mid-record) stops ``TFRecordDataset`` at that record; ignoring the
  error ends the file there. Each record spans exactly ``len(record) + TFRECORD_FRAMING_BYTES`` bytes, so a running
  (count, bytes) sum reaching less than the file's ``size`` proves the file was not read to its end, and with
  ``expected`` (the converter's record count, -1 unknown) how many records were lost (``stats.count_file``).

  Cost: the sums run over blocks of ACCOUNT_BLOCK_RECORDS records (batch, one scan step, unbatch) instead of a
  function call per record. Measured (CPU time, 110 KB records, busy 2-core machine): bare read 85-98 us per record,
  accounted read 87-112 us, i.e. ~10 us, 1-2% of a training image's decode and crop; a per-record scan and filter
  cost ~100 us. ``stats.count_file`` (TF ops) runs once per file.

  ``skip``: records passed over first (a resumed run's place in the file), by the reader's skip, which reads each
  record's 12-byte header and seeks past the rest: neither read, parsed nor decoded. That file is read without the
  read buffer: a buffered reader's skip reads every byte it passes over into the buffer (measured, 110 KB records:
  half a 33 MB file skipped read 16.8 MB with the 8 MB buffer, 0.1 MB without). The skipped records count as read;
  the caller gives such a file size 0 and expected -1 (their bytes are not summed), so its end is not checked.
  """
  skip = tf.cast(skip, tf.int64)
  buffer = tf.where(skip > 0, tf.constant(0, tf.int64), tf.constant(READ_BUFFER_BYTES, tf.int64))
  blocks = tf.data.TFRecordDataset(path, buffer_size=buffer).skip(skip).ignore_errors().batch(ACCOUNT_BLOCK_RECORDS)
  # batch() never yields an empty block, so an empty one marks the end of the file; unbatch() then yields nothing.
  marked = blocks.concatenate(tf.data.Dataset.from_tensors(tf.zeros([0], tf.string)))
  zero = tf.constant(0, tf.int64)
  skipped = skip
  counters = stats.pipeline(pipeline_id)

  def _account(state: Tuple[tf.Tensor, tf.Tensor], block: tf.Tensor) -> Tuple[Tuple[tf.Tensor, tf.Tensor], tf.Tensor]:
    count, consumed = state
    count += tf.size(block, out_type=tf.int64)
    consumed += tf.reduce_sum(tf.cast(tf.strings.length(block), tf.int64) + TFRECORD_FRAMING_BYTES)

    def _report() -> tf.Tensor:
      return stats.count_file(counters, path, count, consumed, size, expected)

    reported = tf.cond(tf.equal(tf.size(block), 0), _report, lambda: tf.constant(False))
    with tf.control_dependencies([reported]):
      return (count, consumed), tf.identity(block)

  return marked.scan((skipped, zero), _account).unbatch()
