"""official_input/shards.py's record counts from the records' headers: a resume on data without summary.json's
counts finds its place by arithmetic, reading 12 bytes a record and no record's data; damaged files are named."""
import os
import shutil

import pytest
import tensorflow as tf

from official_input import dataset_layout
from official_input import imagenet_input as ii
from official_input import shards
from tests.helpers import cli
from tools import make_fake_imagenet

RECORD_BYTES = 4000


def read_bytes() -> int:
  """Bytes this process read through read syscalls (tools/resume_benchmark.py measures the same)."""
  with open('/proc/self/io') as f:
    return next(int(line.split()[1]) for line in f if line.startswith('rchar'))


def _write(path, sizes):
  with tf.io.TFRecordWriter(str(path)) as writer:
    for i, size in enumerate(sizes):
      writer.write(bytes([i % 256]) * size)
  return str(path)


def _reader_yields(path) -> int:
  """What the pipeline's reader gives of the file: it stops at the first framing error."""
  return sum(1 for _ in tf.data.TFRecordDataset(path).ignore_errors())


def test_a_files_records_are_counted_from_their_headers_alone(tmp_path):
  sizes = [RECORD_BYTES + 37 * i for i in range(400)] + [0, 1]   # uneven, an empty record among them
  path = _write(tmp_path / 'f', sizes)
  before = read_bytes()
  count, damage = shards.count_records(path)
  read = read_bytes() - before
  assert (count, damage) == (len(sizes), None)
  # (/proc/self/io's own read counts too: ~200 bytes)
  assert read <= shards.TFRECORD_HEADER_BYTES * len(sizes) + 1024 < os.path.getsize(path) / 100, read
  before = read_bytes()
  assert shards.count_records(path) == (len(sizes), None)   # once a process: the second asks nothing but a stat
  assert read_bytes() - before < 1024
  assert shards.count_records(_write(tmp_path / 'empty', [])) == (0, None)


@pytest.mark.parametrize('damage, says', [
    ('cut mid-record', 'runs past the file\'s end'),
    ('cut mid-header', 'bytes into the header of record 4'),
    ('corrupt length', 'has a corrupt length'),
])
def test_a_damaged_file_counts_what_the_reader_reads_and_names_the_damage(tmp_path, damage, says):
  path = _write(tmp_path / 'f', [100] * 5)
  data = bytearray(open(path, 'rb').read())
  record = 100 + shards.TFRECORD_FRAMING_BYTES
  if damage == 'cut mid-record':
    data = data[:3 * record + 50]
  elif damage == 'cut mid-header':
    data = data[:3 * record + 5]
  else:
    data[3 * record] ^= 0x40   # record 4's length
  with open(path, 'wb') as f:
    f.write(data)
  count, problem = shards.count_records(path)
  assert count == 3 == _reader_yields(path)
  assert says in problem
  counts, problems = shards.record_counts([path, path], [7, -1])
  assert counts == [7, 3] and len(problems) == 1
  assert path in problems[0] and 'the reader stops there, after 3 records' in problems[0]


# --- a resume through ImageNetInput ----------------------------------------------------------------------------

@pytest.fixture(scope='module')
def data_dirs(tmp_path_factory):
  """4 train shards of 30 records, with summary.json's counts and (a copy) without."""
  path = str(tmp_path_factory.mktemp('fake'))
  make_fake_imagenet.write_fake_imagenet(path, num_train=30, num_validation=4, num_test=2, num_shards=4,
                                         num_classes=10, min_size=64, max_size=96, seed=5)
  counted = cli.write_summary(path)
  uncounted = str(tmp_path_factory.mktemp('nocounts'))
  shutil.rmtree(uncounted)
  shutil.copytree(counted, uncounted)
  os.remove(os.path.join(uncounted, dataset_layout.SUMMARY_FILE))
  return counted, uncounted


def _input(data_dir, **kwargs):
  return ii.ImageNetInput(is_training=True, data_dir=data_dir, image_size=32, num_label_classes=10,
                          shuffle_buffer_size=8, **kwargs)


def _first(data_dir, start, n=1, **kwargs):
  """The first ``n`` records from ``start``, and the bytes read to build the pipeline and give them."""
  inp = _input(data_dir, seed=4, **kwargs)
  before = read_bytes()
  records = list(inp.training_records(inp.list_files(), None, start=start, input_seed=1).take(n).as_numpy_iterator())
  return records, read_bytes() - before


def test_a_resume_without_counts_reads_no_record_before_its_place_and_goes_on_where_counts_put_it(data_dirs, caplog):
  caplog.set_level('INFO', logger='absl')
  counted, uncounted = data_dirs
  shards._scanned.clear()   # pylint: disable=protected-access  (a new process: nothing scanned yet)
  _first(counted, 45)       # TensorFlow's own first reads out of the measurement
  want, counted_read = _first(counted, 45, n=20)
  got, uncounted_read = _first(uncounted, 45, n=20)
  assert got == want
  # The headers of the 30 records, nothing else (reading the 45 records before the place read 1.5x the data).
  data_bytes = sum(os.path.getsize(f) for f in _input(uncounted).list_files())
  assert uncounted_read - counted_read < 30 * shards.TFRECORD_HEADER_BYTES + 4096 < data_bytes * 1.5 / 10, (
      uncounted_read, counted_read, data_bytes)
  assert "from the record counts of its files' record headers" in caplog.text


def test_a_damaged_shard_met_while_counting_is_named_or_an_error_with_fail_on_data_loss(data_dirs, tmp_path, caplog):
  _, uncounted = data_dirs
  damaged = str(tmp_path / 'data')
  shutil.copytree(uncounted, damaged)
  victim = _input(damaged).list_files()[2]
  size = os.path.getsize(victim)
  with open(victim, 'r+b') as f:
    f.truncate(size - 100)
  with pytest.raises(ii.DataLossError, match=rf'damaged shard {victim}: record \d+ \(at byte \d+, \d+ bytes\) runs past'):
    _first(damaged, 45, fail_on_data_loss=True)
  caplog.set_level('WARNING', logger='absl')
  records, _ = _first(damaged, 45)   # the default: as the reader, which stops there too; a warning names it
  assert records and f'damaged shard {victim}' in caplog.text and 'the reader stops there, after' in caplog.text
