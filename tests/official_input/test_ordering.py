"""official_input/ordering.py: the training order is a function of (seed, epoch), so a resumed pipeline seeks to its
place: the stream a pipeline gives from position k is the uninterrupted stream from its k-th record, bit for bit,
and an unseeded run reads each record once an epoch across any number of resumes."""
import os

import numpy as np
import pytest
import tensorflow as tf

from official_input import example_schema
from official_input import imagenet_input as ii
from official_input import ordering
from official_input import resnet_preprocessing
from official_input import shards
from resnet.estimator import spec
from tests.helpers import cli
from tools import make_fake_imagenet

COUNTS = [5, 0, 3, 9, 1, 7, 2, 6, 4, 8, 0, 3]  # uneven files, empty ones among them


@pytest.fixture(scope='module')
def named_files(tmp_path_factory):
  """Files of COUNTS records, each record b'<file>:<index>'."""
  root = tmp_path_factory.mktemp('named')
  paths = []
  for i, count in enumerate(COUNTS):
    path = str(root / f'f{i:02d}')
    with tf.io.TFRecordWriter(path) as writer:
      for j in range(count):
        writer.write(f'{i}:{j}'.encode())
    paths.append(path)
  return paths


def _interleave(paths, skips, width):
  ds = tf.data.Dataset.from_tensor_slices((paths, tf.constant(skips, tf.int64)))
  ds = ds.interleave(lambda p, s: tf.data.TFRecordDataset(p).skip(s), cycle_length=width, block_length=1,
                     num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  return [r.decode() for r in ds.as_numpy_iterator()]


@pytest.mark.parametrize('width', [1, 3, 16])
def test_the_interleave_arithmetic_restarts_tf_datas_parallel_interleave_at_every_position(named_files, width):
  whole = _interleave(named_files, [0] * len(named_files), width)
  assert len(whole) == sum(COUNTS)
  for k in range(len(whole) + 1):
    reads = ordering.resumed_reads(COUNTS, width, k)
    assert _interleave([named_files[f] for f, _ in reads], [s for _, s in reads], width) == whole[k:], k


def _stream(named_files, order, start, n, read_width=None, counts=None):
  def read_file(path, size, expected, skip):
    return tf.data.TFRecordDataset(path).skip(skip)

  def read(ds, fn, width):
    return ds.interleave(fn, cycle_length=width, block_length=1, num_parallel_calls=tf.data.AUTOTUNE,
                         deterministic=True)
  files = (named_files, [1] * len(named_files), COUNTS if read_width is None else [-1] * len(COUNTS))
  stream, how = ordering.training_records(files, read_file, read, order, start, counts)
  return [r.decode() for r in stream.take(n).as_numpy_iterator()], how


ORDERS = {
    'window 5': ordering.TrainingOrder(seed=7, window=5, width=4),
    'no shuffle': ordering.TrainingOrder(seed=7, window=1, width=16),
    'window past the epoch': ordering.TrainingOrder(seed=7, window=100, width=3),
    'cache': ordering.TrainingOrder(seed=7, window=5, width=4, cache_blocks=1),
    'record shards': ordering.TrainingOrder(seed=7, window=4, width=4, shard=(3, 1)),
}


@pytest.mark.parametrize('name', sorted(ORDERS))
def test_a_stream_started_at_any_position_is_the_rest_of_the_uninterrupted_stream(named_files, name):
  order = ORDERS[name]
  per_epoch = ordering.records_per_epoch(COUNTS, order.shard)
  whole, _ = _stream(named_files, order, 0, 3 * per_epoch)
  epochs = [whole[i * per_epoch:(i + 1) * per_epoch] for i in range(3)]
  assert all(len(set(e)) == per_epoch for e in epochs)   # each record once an epoch
  assert epochs[0] != epochs[1] != epochs[2]             # a new order each epoch
  # Every window offset of the first epoch's start, window edges, the epoch's end, later epochs.
  for start in sorted({1, 2, 3, 4, 5, 6, 9, 10, 11, per_epoch - 1, per_epoch, per_epoch + 1, 2 * per_epoch - 1,
                       2 * per_epoch + 3}):
    resumed, how = _stream(named_files, order, start, 3 * per_epoch - start)
    assert resumed == whole[start:], (start, how)
    assert start == 0 or 'without reading the records before it' in how


def test_without_record_counts_the_place_is_found_from_the_record_headers_and_is_the_same(named_files):
  order = ORDERS['window 5']
  whole, _ = _stream(named_files, order, 0, 80)
  counts, damaged = shards.record_counts(named_files, [-1] * len(COUNTS))
  assert counts == COUNTS and not damaged
  resumed, how = _stream(named_files, order, 33, 47, read_width=True, counts=counts)
  assert resumed == whole[33:]
  assert "from the record counts of its files' record headers" in how
  with pytest.raises(ValueError, match='needs every file'):   # no counts at all: never a silent restart
    _stream(named_files, order, 33, 47, read_width=True)


def test_another_seed_gives_another_order(named_files):
  a, _ = _stream(named_files, ordering.TrainingOrder(seed=1, window=5, width=4), 0, sum(COUNTS))
  b, _ = _stream(named_files, ordering.TrainingOrder(seed=2, window=5, width=4), 0, sum(COUNTS))
  assert a != b and sorted(a) == sorted(b)


# --- through ImageNetInput ------------------------------------------------------------------------------------

NUM_CLASSES = 10
SIZE = 32


@pytest.fixture(scope='module')
def data_dir(tmp_path_factory):
  """4 train shards of 30 records (summary.json gives their counts)."""
  path = str(tmp_path_factory.mktemp('fake_imagenet'))
  make_fake_imagenet.write_fake_imagenet(path, num_train=30, num_validation=4, num_test=2, num_shards=4,
                                         num_classes=NUM_CLASSES, min_size=32, max_size=48, seed=5)
  return cli.write_summary(path)


def _params(batch, start_step, input_seed=None, replicas=1, pipelines=1, pipeline=0):
  context = tf.distribute.InputContext(pipelines, pipeline, replicas)
  return spec.RunParams({}, batch, spec.RunContext('train', replicas, input_context=context, start_step=start_step,
                                                   input_seed=input_seed))


def _input(data_dir, **kwargs):
  kwargs.setdefault('augment', resnet_preprocessing.AugmentConfig(augment_name='randaugment',
                                                                  random_erase_prob=0.5))
  return ii.ImageNetInput(is_training=True, data_dir=data_dir, image_size=SIZE, num_label_classes=NUM_CLASSES,
                          shuffle_buffer_size=8, **kwargs)


@pytest.mark.slow
@pytest.mark.parametrize('use_cache', [False, True])
def test_a_seeded_input_resumed_at_a_step_gives_the_uninterrupted_runs_batches_bit_for_bit(data_dir, use_cache):
  """Crops, RandAugment and random erasing draw from per-record seeds counted from the resumed place."""
  batches = [(i.numpy(), l.numpy()) for i, l in _input(data_dir, seed=3, use_cache=use_cache).input_fn(
      _params(4, 0)).take(12)]   # 48 records: into the second epoch of 30
  for start_step in (1, 5, 8):
    resumed = [(i.numpy(), l.numpy()) for i, l in _input(data_dir, seed=3, use_cache=use_cache).input_fn(
        _params(4, start_step)).take(12 - start_step)]
    for step, ((images, labels), (want_images, want_labels)) in enumerate(zip(resumed, batches[start_step:])):
      assert np.array_equal(labels, want_labels), (start_step, step)
      assert images.tobytes() == want_images.tobytes(), (start_step, step)


def _names(records) -> list:
  return [tf.io.parse_single_example(r, example_schema.FEATURE_SPEC)[example_schema.FILENAME].numpy().decode()
          for r in records]


@pytest.mark.parametrize('use_cache', [False, True])
def test_an_unseeded_run_reads_each_record_once_an_epoch_across_resumes(data_dir, use_cache):
  """The run's saved input seed fixes its order; each resume starts at step x batch: nothing lost or repeated."""
  inp = _input(data_dir, seed=None, use_cache=use_cache)
  files = inp.list_files()
  read, position = [], 0
  for records_until_the_stop in (7, 13, 2, 19, 19):   # four resumes in the first two epochs of 30 records
    records = inp.training_records(files, None, start=position, input_seed=1234)
    read += _names(records.take(records_until_the_stop))
    position += records_until_the_stop
  assert position == 60
  for epoch in (read[:30], read[30:]):
    assert len(set(epoch)) == 30, sorted(epoch)
  uninterrupted = _names(inp.training_records(files, None, start=0, input_seed=1234).take(60))
  assert read == uninterrupted
  assert _names(inp.training_records(files, None, start=0, input_seed=99).take(30)) != read[:30]


@pytest.mark.slow
def test_two_pipelines_each_resume_at_their_own_place(data_dir):
  """Two workers' pipelines (2 files each), 2 replicas each: each pipeline's place is step x its batches."""
  for pipeline in (0, 1):
    whole = _input(data_dir, seed=4).input_fn(_params(2, 0, replicas=4, pipelines=2, pipeline=pipeline))
    want = [l.numpy().tolist() for _, l in whole.take(10)]
    resumed = _input(data_dir, seed=4).input_fn(_params(2, 3, replicas=4, pipelines=2, pipeline=pipeline))
    assert [l.numpy().tolist() for _, l in resumed.take(4)] == want[6:]   # 3 steps x 2 replicas' batches


def test_the_place_is_computed_from_summary_json_not_read(data_dir, caplog):
  caplog.set_level('INFO', logger='absl')
  inp = _input(data_dir, seed=4)
  inp.training_records(inp.list_files(), None, start=45)
  assert 'resumed at record 45 of this pipeline: epoch 1, record 15 of 30' in caplog.text


def test_a_partly_read_file_is_not_reported_damaged(data_dir):
  inp = _input(data_dir, seed=4)
  list(inp.training_records(inp.list_files(), None, start=11).take(40).as_numpy_iterator())
  assert inp.lost_records == 0 and not inp.damaged_files

