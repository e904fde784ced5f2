"""Tests for official_input/imagenet_input.py on tiny fake TFRecords (32-48 px images, a few dozen records)."""
import hashlib
import json
import logging
import math
import os

import numpy as np
from PIL import Image
import pytest
import tensorflow as tf

from official_input import example_schema
from official_input import imagenet_input as ii
from official_input import resnet_preprocessing
from official_input import shards
from params import resnet_config
from resnet.run_setup import run_params
from resnet.estimator import spec
from tools import make_fake_imagenet

NUM_CLASSES = 10
SIZE = 32


def _with_context(batch_size, context, mode='eval'):
  """The params the Estimator passes an input_fn: the batch, and this pipeline's tf.distribute context."""
  return spec.RunParams({}, batch_size, spec.RunContext(mode, context.num_replicas_in_sync, input_context=context))


def _jpeg(seed: int, size: int = 40) -> bytes:
  return make_fake_imagenet.encode_jpeg(make_fake_imagenet.random_image(np.random.default_rng(seed), size, size))


def _write_records(path: str, examples) -> None:
  with tf.io.TFRecordWriter(path) as writer:
    for example in examples:
      writer.write(example if isinstance(example, bytes) else example.SerializeToString())


def _example(encoded: bytes, label: int, filename: str) -> tf.train.Example:
  return example_schema.make_example(encoded, 'JPEG', label, 'x', 40, 40, filename)


@pytest.fixture(scope='module')
def data_dir(tmp_path_factory):
  """4 train shards (24 records), 3 validation shards (13), 2 test shards (5); labels 1..10."""
  path = str(tmp_path_factory.mktemp('fake_imagenet'))
  make_fake_imagenet.write_fake_imagenet(path, num_train=24, num_validation=13, num_test=5, num_shards=4,
                                         num_classes=NUM_CLASSES, min_size=32, max_size=48, seed=3)
  return path


@pytest.fixture(scope='module')
def corrupt_dir(tmp_path_factory):
  """Good records mixed with one of each kind of bad record, in train and validation shards."""
  path = str(tmp_path_factory.mktemp('corrupt'))
  good = [_example(_jpeg(i), 1 + i % NUM_CLASSES, 'good_%02d.JPEG' % i) for i in range(10)]
  truncated = _jpeg(99)
  bad = [_example(b'garbage bytes, not an image', 3, 'garbage.JPEG'),
         _example(truncated[:len(truncated) // 2], 3, 'truncated.JPEG'),
         _example(_jpeg(98), 0, 'bad_label.JPEG'),  # stored 0: no label (background)
         b'this is not a tf.train.Example']
  for split in ('train', 'validation'):
    _write_records(os.path.join(path, '%s-00000-of-00002' % split), good[:5] + bad[:2])
    _write_records(os.path.join(path, '%s-00001-of-00002' % split), good[5:] + bad[2:])
  return path


def _stored_labels(data_dir: str, split: str) -> dict:
  """{filename: stored label} read straight from the records."""
  out = {}
  for path in sorted(tf.io.gfile.glob(os.path.join(data_dir, split + '-*'))):
    for record in tf.data.TFRecordDataset(path):
      parsed = tf.io.parse_single_example(record, example_schema.FEATURE_SPEC)
      out[parsed[example_schema.FILENAME].numpy().decode()] = int(parsed[example_schema.LABEL])
  return out


def _eval_input(data_dir: str, **kwargs) -> ii.ImageNetInput:
  kwargs.setdefault('num_label_classes', NUM_CLASSES)
  return ii.ImageNetInput(is_training=False, data_dir=data_dir, image_size=SIZE, include_filename=True, **kwargs)


def _collect(ds: tf.data.Dataset):
  """(filenames without padding, labels of real rows, number of padded rows, batch shapes)."""
  names, labels, padded, shapes = [], [], 0, set()
  for features, label in ds:
    shapes.add((tuple(features['image'].shape), tuple(label.shape)))
    for name, value in zip(features['filename'].numpy(), label.numpy()):
      if name:
        names.append(name.decode())
        labels.append(int(value))
      else:
        assert value == -1
        padded += 1
  return names, labels, padded, shapes


@pytest.mark.slow
def test_training_batches_have_static_shape_and_requested_dtype(data_dir):
  inp = ii.ImageNetInput(is_training=True, data_dir=data_dir, image_size=SIZE, num_label_classes=NUM_CLASSES,
                         dtype=tf.bfloat16, seed=1)
  ds = inp.input_fn({'batch_size': 5})
  assert ds.element_spec[0].shape == (5, SIZE, SIZE, 3)
  assert ds.element_spec[0].dtype == tf.bfloat16
  assert ds.element_spec[1].shape == (5,) and ds.element_spec[1].dtype == tf.int32
  for images, labels in ds.take(7):  # more than one epoch of 24 records
    values = tf.cast(images, tf.float32).numpy()
    assert values.min() >= 0 and values.max() <= 255
    assert labels.numpy().min() >= 0 and labels.numpy().max() < NUM_CLASSES


def test_basic_pipeline_yields_the_same_structure(data_dir):
  inp = ii.ImageNetInput(is_training=True, data_dir=data_dir, image_size=SIZE, num_label_classes=NUM_CLASSES,
                         pipeline='basic')
  images, labels = next(iter(inp.input_fn({'batch_size': 4})))
  assert images.shape == (4, SIZE, SIZE, 3) and images.dtype == tf.float32
  assert labels.shape == (4,)


@pytest.mark.slow
@pytest.mark.parametrize('num_classes,offset', [(NUM_CLASSES, 1), (1001, 0)])
def test_stored_labels_are_shifted_to_zero_based_unless_background_class(data_dir, num_classes, offset):
  stored = _stored_labels(data_dir, 'validation')
  names, labels, _, _ = _collect(_eval_input(data_dir, num_label_classes=num_classes).input_fn({'batch_size': 4}))
  assert names and all(label == stored[name] - offset for name, label in zip(names, labels))


@pytest.mark.slow
def test_eval_sees_every_record_exactly_once_padded_and_in_a_fixed_order(data_dir):
  stored = _stored_labels(data_dir, 'validation')
  inp = _eval_input(data_dir)
  first = _collect(inp.input_fn({'batch_size': 4}))
  names, _, padded, shapes = first
  assert sorted(names) == sorted(stored) and len(names) == len(set(names)) == 13
  assert padded == 3  # 13 records in batches of 4
  assert shapes == {((4, SIZE, SIZE, 3), (4,))}
  assert _collect(inp.input_fn({'batch_size': 4})) == first


def test_eval_pads_batch_count_to_a_multiple_of_the_replicas_of_a_pipeline(data_dir):
  context = tf.distribute.InputContext(num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=3)
  names, _, padded, _ = _collect(_eval_input(data_dir).input_fn(_with_context(2, context)))
  assert len(names) == 13 and (len(names) + padded) % (2 * 3) == 0


@pytest.mark.slow
@pytest.mark.parametrize('num_pipelines', [2, 6])  # 3 validation files: file sharding, then record sharding
def test_input_pipelines_see_disjoint_records_that_cover_the_split(data_dir, num_pipelines):
  stored = _stored_labels(data_dir, 'validation')
  seen = []
  for index in range(num_pipelines):
    context = tf.distribute.InputContext(num_pipelines, index, num_pipelines)
    names, _, _, _ = _collect(_eval_input(data_dir).input_fn(_with_context(2, context)))
    seen.append(set(names))
  assert set().union(*seen) == set(stored)
  assert sum(len(s) for s in seen) == len(stored)


@pytest.mark.slow
@pytest.mark.parametrize('num_pipelines', [2, 5])  # 4 train files
def test_training_reads_are_sharded_disjointly(data_dir, num_pipelines):
  inp = ii.ImageNetInput(is_training=True, data_dir=data_dir, image_size=SIZE, num_label_classes=NUM_CLASSES,
                         seed=7)
  files = inp.list_files()
  seen = []
  for index in range(num_pipelines):
    context = tf.distribute.InputContext(num_pipelines, index, num_pipelines)
    records = inp.read_records(files, context)
    seen.append({tf.io.parse_single_example(r, example_schema.FEATURE_SPEC)[example_schema.FILENAME].numpy()
                 for r in records})
  assert sum(len(s) for s in seen) == len(set().union(*seen)) == 24


@pytest.mark.slow
def test_corrupt_records_are_skipped_and_counted_in_a_distributed_training_loop(corrupt_dir):
  inp = ii.ImageNetInput(is_training=True, data_dir=corrupt_dir, image_size=SIZE, num_label_classes=NUM_CLASSES,
                         shuffle_buffer_size=16)
  strategy = tf.distribute.get_strategy()
  dist = strategy.distribute_datasets_from_function(lambda ctx: inp.input_fn(_with_context(4, ctx)))
  iterator = iter(dist)

  @tf.function
  def loop(steps):
    total = tf.constant(0.0)
    for _ in tf.range(steps):
      images, labels = next(iterator)
      total += tf.reduce_mean(images) + tf.cast(tf.reduce_max(labels), tf.float32)
    return total

  for _ in range(2):  # the count is readable between loops and keeps growing
    assert np.isfinite(loop(tf.constant(8)).numpy())
  # 14 records per epoch, 4 of them bad: 16 batches of 4 cover several epochs.
  assert inp.skipped_records >= 8
  assert all(count > 0 for count in inp.skipped_by_reason.values()), inp.skipped_by_reason


@pytest.mark.slow
def test_eval_skips_bad_records_reports_them_and_keeps_every_good_one(corrupt_dir):
  inp = _eval_input(corrupt_dir)
  names, _, _, shapes = _collect(inp.input_fn({'batch_size': 4}))
  assert sorted(names) == ['good_%02d.JPEG' % i for i in range(10)]
  assert shapes == {((4, SIZE, SIZE, 3), (4,))}
  assert inp.skipped_records == 4
  assert set(inp.skipped_by_reason.values()) == {1}


def test_a_damaged_shard_ends_early_instead_of_failing(data_dir, tmp_path):
  for path in sorted(tf.io.gfile.glob(os.path.join(data_dir, 'validation-*'))):
    data = open(path, 'rb').read()
    if path.endswith('00000-of-00004'):
      data = data[:len(data) * 2 // 3]  # a truncated copy: the last records are unreadable
    (tmp_path / os.path.basename(path)).write_bytes(data)
  inp = _eval_input(str(tmp_path))
  names, _, _, _ = _collect(inp.input_fn({'batch_size': 4}))
  assert 0 < len(names) < 13 and len(set(names)) == len(names)
  # No summary.json: the damage is found (the reader stopped before the file's end), the count of lost records not.
  assert list(inp.damaged_files) == [str(tmp_path / 'validation-00000-of-00004')]
  assert inp.lost_records == 0 and inp.skipped_records == 0


@pytest.mark.slow
def test_training_fails_clearly_instead_of_spinning_when_all_records_are_bad(tmp_path, monkeypatch):
  monkeypatch.setattr(ii, 'MAX_CONSECUTIVE_BAD', 6)
  _write_records(str(tmp_path / 'train-00000-of-00001'),
                 [_example(b'not an image at all', 1, 'bad%d' % i) for i in range(4)])
  inp = ii.ImageNetInput(is_training=True, data_dir=str(tmp_path), image_size=SIZE, num_label_classes=NUM_CLASSES)
  with pytest.raises(tf.errors.OpError, match='records were all bad'):
    next(iter(inp.input_fn({'batch_size': 2})))


@pytest.mark.parametrize('mode', ['random', 'constant'])
@pytest.mark.parametrize('data_dir_value', [None, '', 'null'])
def test_synthetic_data_when_data_dir_is_unset(mode, data_dir_value):
  inp = ii.ImageNetInput(is_training=True, data_dir=data_dir_value, image_size=SIZE, dtype=tf.float16,
                         num_label_classes=NUM_CLASSES, synthetic_data=mode)
  images, labels = next(iter(inp.input_fn({'batch_size': 3})))
  assert images.shape == (3, SIZE, SIZE, 3) and images.dtype == tf.float16
  assert labels.dtype == tf.int32 and 0 <= labels.numpy().min() and labels.numpy().max() < NUM_CLASSES
  values = images.numpy().astype(np.float32)
  assert values.min() >= 0 and values.max() <= 255
  assert (values.max() == 0) == (mode == 'constant')


def test_synthetic_eval_is_finite_with_ceil_images_over_global_batch_steps():
  inp = ii.ImageNetInput(is_training=False, data_dir=None, image_size=SIZE, num_images=10, include_filename=True)
  context = tf.distribute.InputContext(num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=2)
  batches = list(inp.input_fn(_with_context(2, context)))
  assert len(batches) == math.ceil(10 / 4) * 2
  assert set(batches[0][0]) == {'image', 'filename'}


def test_missing_files_error_names_the_pattern_and_the_fix(tmp_path):
  inp = ii.ImageNetInput(is_training=True, data_dir=str(tmp_path))
  with pytest.raises(FileNotFoundError) as error:
    inp.input_fn({'batch_size': 2})
  assert os.path.join(str(tmp_path), 'train-*') in str(error.value)
  assert 'make_fake_imagenet' in str(error.value) and 'imagenet_to_gcs' in str(error.value)


@pytest.mark.slow
def test_from_params_reads_the_run_params(data_dir):
  params = run_params.make_params({
      'data_dir': data_dir, 'image_size': 40, 'num_label_classes': 1001, 'precision': 'bfloat16',
      'input_pipeline': 'basic', 'synthetic_data': 'random', 'use_cache': True, 'shuffle_buffer_size': 64,
      'num_parallel_calls': 2, 'transpose_input': False, 'random_seed': 5, 'num_test_images': 3,
      'num_eval_images': 13, 'crop_area_range': [0.5, 1.0], 'random_flip': False, 'fail_on_data_loss': True})
  inp = ii.ImageNetInput.from_params(params, 'test')
  assert (inp.is_training, inp.split, inp.image_size, inp.dtype, inp.pipeline) == (False, 'test', 40, tf.bfloat16,
                                                                                 'basic')
  assert inp.include_background_label and inp.include_filename and inp.use_cache and inp.seed == 5
  assert inp.augment.crop_area_range == (0.5, 1.0) and inp.augment.random_flip is False
  assert inp.fail_on_data_loss
  features, labels = next(iter(inp.input_fn({'batch_size': 2})))
  assert features['image'].shape == (2, 40, 40, 3) and labels.shape == (2,)


@pytest.mark.slow
def test_image_files_input_predicts_over_a_glob(tmp_path):
  rng = np.random.default_rng(0)
  for i, fmt in enumerate(['JPEG', 'PNG', 'JPEG']):
    Image.fromarray(rng.integers(0, 256, (30 + i, 40, 3), dtype=np.uint8)).save(
        str(tmp_path / ('img%d.%s' % (i, fmt.lower()))), format=fmt)
  (tmp_path / 'broken.jpeg').write_bytes(b'\xff\xd8\xff not really')
  inp = ii.ImageFilesInput(str(tmp_path / '*'), image_size=SIZE, dtype=tf.bfloat16)
  names, labels, padded, shapes = _collect(inp.input_fn({'batch_size': 2}))
  assert sorted(os.path.basename(n) for n in names) == ['img0.jpeg', 'img1.png', 'img2.jpeg']
  assert labels == [-1, -1, -1] and padded == 1
  assert shapes == {((2, SIZE, SIZE, 3), (2,))}
  assert inp.skipped_records == 1
  with pytest.raises(FileNotFoundError, match='nothing'):
    ii.ImageFilesInput(str(tmp_path / 'nothing*.jpg')).input_fn({'batch_size': 2})


@pytest.mark.slow
def test_a_label_beyond_num_label_classes_is_an_error_naming_the_fix(tmp_path):
  good = [_example(_jpeg(i), 1 + i % NUM_CLASSES, 'good_%02d.JPEG' % i) for i in range(6)]
  _write_records(str(tmp_path / 'train-00000-of-00001'),
                 good + [_example(_jpeg(7), NUM_CLASSES + 5, 'extra_class.JPEG')])
  source = ii.ImageNetInput(is_training=True, data_dir=str(tmp_path), image_size=32, num_label_classes=NUM_CLASSES,
                            shuffle_buffer_size=1)
  with pytest.raises(tf.errors.OpError, match=r"record extra_class.JPEG has a label >= num_label_classes"):
    for _ in source.input_fn({'batch_size': 7}).take(3):
      pass


# ------------------------------------------------------------------------------------------------ damaged shards


def _good_records(prefix: str, n: int, seed: int = 0) -> list:
  return [_example(_jpeg(seed + i), 1 + i % NUM_CLASSES, '%s_%d.JPEG' % (prefix, i)).SerializeToString()
          for i in range(n)]


def _record_start(records: list, index: int) -> int:
  """Byte offset of record ``index`` in a TFRecord file: each record is framed by 8 + 4 bytes before, 4 after."""
  return sum(12 + len(r) + 4 for r in records[:index])


def _write_dataset(path: str, split_records: dict, with_summary: bool = True) -> None:
  """Shards {name: [serialized records]}, plus the converter's summary.json (per-shard records, bytes, sha256)."""
  os.makedirs(path, exist_ok=True)
  shards, splits = {}, {}
  for name, records in split_records.items():
    _write_records(os.path.join(path, name), records)
    with open(os.path.join(path, name), 'rb') as f:
      data = f.read()
    shards[name] = {'records': len(records), 'bytes': len(data), 'sha256': hashlib.sha256(data).hexdigest()}
    split = splits.setdefault(name.split('-')[0], {'images': 0, 'shards': []})
    split['images'] += len(records)
    split['shards'].append(name)
  with open(os.path.join(path, 'labels.txt'), 'w') as f:
    f.write(''.join('class_%d\n' % i for i in range(NUM_CLASSES)))
  if with_summary:
    with open(os.path.join(path, 'summary.json'), 'w') as f:
      json.dump({'num_classes': NUM_CLASSES, 'splits': splits, 'shards': shards}, f)


def _cut(path: str, size: int) -> None:
  with open(path, 'rb') as f:
    data = f.read()
  with open(path, 'wb') as f:
    f.write(data[:size])


def _damaged_validation(path: str, with_summary: bool) -> tuple:
  """validation-0: 8 good records, cut in the middle of record 6 (the last but one); validation-1: 4 good + 1 bad
  image. Returns (path of the cut shard, its size before and after the cut)."""
  a, b = _good_records('a', 8), _good_records('b', 4, seed=50) + [
      _example(b'garbage, not an image', 2, 'b_garbage.JPEG').SerializeToString()]
  _write_dataset(path, {'validation-00000-of-00002': a, 'validation-00001-of-00002': b}, with_summary)
  shard = os.path.join(path, 'validation-00000-of-00002')
  full = os.path.getsize(shard)
  cut = _record_start(a, 6) + 12 + len(a[6]) // 2
  _cut(shard, cut)
  return shard, full, cut


@pytest.mark.slow
def test_a_shard_cut_mid_record_is_named_and_its_lost_records_counted_apart_from_bad_images(tmp_path, caplog,
                                                                                             capfd):
  shard, full, cut = _damaged_validation(str(tmp_path), with_summary=True)
  inp = _eval_input(str(tmp_path))
  with caplog.at_level(logging.WARNING):
    names, _, _, _ = _collect(inp.input_fn({'batch_size': 4}))
  assert sorted(names) == ['a_%d.JPEG' % i for i in range(6)] + ['b_%d.JPEG' % i for i in range(4)]
  assert inp.damaged_files == {shard: 2} and inp.lost_records == 2
  assert inp.skipped_records == 1 and inp.skipped_by_reason['not an image'] == 1  # the bad image, counted apart
  assert inp.skipped_by_reason['undecodable image'] == 0
  assert inp.expected_records == 13
  assert inp.last_read_report == ii.ReadReport(read=11, expected=13, good=10, bad=1, lost=2)
  log = caplog.text
  assert f'{shard} has {cut} bytes' in log and f'says {full} (8 records expected)' in log  # the up-front check
  log = capfd.readouterr().err  # what the dataset logged itself (TensorFlow's C++ logger: no Python in the graph)
  assert f'damaged shard {shard}' in log and '2 of 8 records lost' in log  # the reader's finding
  assert 'read 11 records of 13 expected' in log


def test_a_cut_shard_is_found_without_summary_json_but_the_lost_count_is_unknown(tmp_path):
  shard, _, _ = _damaged_validation(str(tmp_path), with_summary=False)
  inp = _eval_input(str(tmp_path))
  names, _, _, _ = _collect(inp.input_fn({'batch_size': 4}))
  assert len(names) == 10
  assert inp.damaged_files == {shard: None} and inp.lost_records == 0
  assert inp.expected_records is None
  assert inp.last_read_report == ii.ReadReport(read=11, expected=None, good=10, bad=1, lost=0)


def test_a_size_mismatch_with_summary_json_fails_before_reading_when_fail_on_data_loss(tmp_path, monkeypatch):
  shard, full, cut = _damaged_validation(str(tmp_path), with_summary=True)
  monkeypatch.setattr(shards, 'read_accounted', lambda *args: pytest.fail('read a shard before the size check'))
  inp = _eval_input(str(tmp_path), fail_on_data_loss=True)
  with pytest.raises(ii.DataLossError) as error:
    inp.input_fn({'batch_size': 4})
  message = str(error.value)
  assert f'{shard} has {cut} bytes' in message and f'says {full} (8 records expected)' in message
  assert 'Re-copy the shard' in message and 'imagenet_to_gcs' in message


@pytest.mark.slow
def test_fail_on_data_loss_stops_training_at_a_damaged_shard_naming_it_and_the_fix(tmp_path):
  shard, _, _ = _damaged_validation(str(tmp_path), with_summary=False)
  os.rename(shard, str(tmp_path / 'train-00000-of-00001'))
  inp = ii.ImageNetInput(is_training=True, data_dir=str(tmp_path), image_size=SIZE, num_label_classes=NUM_CLASSES,
                         shuffle_buffer_size=4, fail_on_data_loss=True)
  with pytest.raises(tf.errors.OpError, match=r'damaged shard .*train-00000-of-00001.*re-convert'):
    for _ in inp.input_fn({'batch_size': 2}).take(20):
      pass
  # The same data without fail_on_data_loss trains on and counts the damage.
  inp.fail_on_data_loss = False
  for _ in inp.input_fn({'batch_size': 2}).take(8):  # 16 records: past the 6 readable ones, into the 2nd epoch
    pass
  assert list(inp.damaged_files) == [str(tmp_path / 'train-00000-of-00001')]


@pytest.mark.slow
def test_a_corrupt_record_in_the_middle_of_a_shard_loses_the_rest_of_that_shard(tmp_path):
  a = _good_records('a', 8)
  _write_dataset(str(tmp_path), {'validation-00000-of-00001': a})
  shard = str(tmp_path / 'validation-00000-of-00001')
  with open(shard, 'r+b') as f:  # flip one byte of record 3's data: its CRC no longer matches, the size does
    f.seek(_record_start(a, 3) + 12 + 40)
    byte = f.read(1)
    f.seek(-1, os.SEEK_CUR)
    f.write(bytes([byte[0] ^ 0xFF]))
  inp = _eval_input(str(tmp_path))
  names, _, _, _ = _collect(inp.input_fn({'batch_size': 4}))
  assert sorted(names) == ['a_0.JPEG', 'a_1.JPEG', 'a_2.JPEG']
  assert inp.damaged_files == {shard: 5} and inp.lost_records == 5 and inp.skipped_records == 0
  assert inp.last_read_report == ii.ReadReport(read=3, expected=8, good=3, bad=0, lost=5)


@pytest.mark.slow
def test_eval_reports_records_read_against_summary_json(tmp_path):
  _write_dataset(str(tmp_path), {'validation-00000-of-00002': _good_records('a', 6),
                                 'validation-00001-of-00002': _good_records('b', 7, seed=30)})
  inp = _eval_input(str(tmp_path))
  assert inp.last_read_report is None
  names, _, _, _ = _collect(inp.input_fn({'batch_size': 4}))
  assert len(names) == 13
  assert inp.last_read_report == ii.ReadReport(read=13, expected=13, good=13, bad=0, lost=0)
  assert inp.damaged_files == {}
  # A summary.json without per-shard entries (an older converter): the split's image count is the expectation.
  with open(str(tmp_path / 'summary.json')) as f:
    summary = json.load(f)
  del summary['shards']
  summary['splits']['validation']['images'] = 14
  with open(str(tmp_path / 'summary.json'), 'w') as f:
    json.dump(summary, f)
  inp = _eval_input(str(tmp_path))
  _collect(inp.input_fn({'batch_size': 4}))
  assert inp.last_read_report == ii.ReadReport(read=13, expected=14, good=13, bad=0, lost=0)


def test_a_shard_listed_in_summary_json_but_missing_is_an_error_with_fail_on_data_loss(tmp_path):
  _write_dataset(str(tmp_path), {'validation-00000-of-00002': _good_records('a', 3),
                                 'validation-00001-of-00002': _good_records('b', 4)})
  os.remove(str(tmp_path / 'validation-00001-of-00002'))
  with pytest.raises(ii.DataLossError, match=r'missing .*validation-00001-of-00002; 4 records'):
    _eval_input(str(tmp_path), fail_on_data_loss=True).input_fn({'batch_size': 2})
  names, _, _, _ = _collect(_eval_input(str(tmp_path)).input_fn({'batch_size': 2}))
  assert len(names) == 3


# ------------------------------------------------------------------------------------------------ determinism


def _first_batches(data_dir: str, seed, n: int = 8):
  inp = ii.ImageNetInput(is_training=True, data_dir=data_dir, image_size=SIZE, num_label_classes=NUM_CLASSES,
                         shuffle_buffer_size=8, seed=seed)
  return [(images.numpy(), labels.numpy()) for images, labels in inp.input_fn({'batch_size': 4}).take(n)]


@pytest.mark.slow
def test_seeded_training_input_gives_bitwise_identical_batches_and_unseeded_still_works(data_dir):
  first = _first_batches(data_dir, seed=11)  # 32 records: past the end of the 24-record epoch
  second = _first_batches(data_dir, seed=11)
  for (images_a, labels_a), (images_b, labels_b) in zip(first, second):
    assert np.array_equal(labels_a, labels_b)
    assert images_a.tobytes() == images_b.tobytes()
  other = _first_batches(data_dir, seed=12)
  assert any(a[0].tobytes() != b[0].tobytes() for a, b in zip(first, other))
  unseeded = _first_batches(data_dir, seed=None, n=3)
  assert all(images.shape == (4, SIZE, SIZE, 3) and ((labels >= 0) & (labels < NUM_CLASSES)).all()
             for images, labels in unseeded)


@pytest.mark.slow
def test_seeded_augmentation_differs_between_records_of_the_same_image(tmp_path):
  """Per-record seeds: six copies of one image get six different crops (one shared seed would repeat one crop)."""
  encoded = _jpeg(5, size=48)
  records = [_example(encoded, 1, 'same_%d.JPEG' % i).SerializeToString() for i in range(6)]
  _write_dataset(str(tmp_path), {'train-00000-of-00001': records}, with_summary=False)
  inp = ii.ImageNetInput(is_training=True, data_dir=str(tmp_path), image_size=SIZE, num_label_classes=NUM_CLASSES,
                         shuffle_buffer_size=1, seed=3,
                         augment=resnet_preprocessing.AugmentConfig(crop_area_range=(0.1, 0.5), random_flip=False))
  images, _ = next(iter(inp.input_fn({'batch_size': 6})))
  assert len({image.tobytes() for image in images.numpy()}) == 6


@pytest.mark.slow
def test_one_class_more_than_the_data_keeps_stored_labels_as_a_background_class(tmp_path):
  records = _good_records('a', 5)  # stored labels 1..5
  _write_dataset(str(tmp_path), {'validation-00000-of-00001': records})
  names, labels, _, _ = _collect(_eval_input(str(tmp_path), num_label_classes=NUM_CLASSES + 1).input_fn(
      {'batch_size': 5}))
  assert dict(zip(names, labels)) == {'a_%d.JPEG' % i: 1 + i for i in range(5)}
  names, labels, _, _ = _collect(_eval_input(str(tmp_path), num_label_classes=NUM_CLASSES).input_fn(
      {'batch_size': 5}))
  assert dict(zip(names, labels)) == {'a_%d.JPEG' % i: i for i in range(5)}
  assert ii.has_background_class(1001) and not ii.has_background_class(1000)
  assert ii.has_background_class(6, num_data_classes=5) and not ii.has_background_class(1001, num_data_classes=5)


def test_num_eval_images_evaluates_the_first_n_records(data_dir):
  inp = _eval_input(data_dir, num_images=5)
  names, _, padded, _ = _collect(inp.input_fn({'batch_size': 4}))
  assert len(names) == 5 and padded == 3  # 13 in the split; padding (label -1) fills the last batch


@pytest.mark.slow
def test_fast_jpeg_decode_param_decodes_large_crops_at_reduced_scale(tmp_path):
  """A 512 px photo cropped whole to 64 px: fast_jpeg_decode takes the 1/4-scale path, close to the exact one."""
  y, x = np.mgrid[0:512, 0:512]
  image = np.stack([x // 2, y // 2, (x + y) // 4], -1).astype(np.uint8)
  encoded = tf.io.encode_jpeg(image, quality=95).numpy()
  os.makedirs(tmp_path / 'd')
  _write_records(str(tmp_path / 'd' / 'train-00000-of-00001'),
                 [example_schema.make_example(encoded, 'JPEG', 1, 'x', 512, 512, 'a.jpg')] * 2)
  params = {'data_dir': str(tmp_path / 'd'), 'image_size': 64, 'num_label_classes': 2, 'random_seed': 1,
            'crop_area_range': [1.0, 1.0], 'crop_aspect_ratio_range': [1.0, 1.0], 'random_flip': False}
  outputs = {}
  for fast in (False, True):
    inp = ii.ImageNetInput.from_params(run_params.make_params({**params, 'fast_jpeg_decode': fast}), 'train')
    outputs[fast] = next(iter(inp.input_fn({'batch_size': 2})))[0].numpy()
  difference = np.abs(outputs[True] - outputs[False])
  assert 0 < difference.mean() < 6  # another decode (so the flag reached it), but the same picture


def test_with_cache_consecutive_epochs_differ_beyond_the_shuffle_window(tmp_path):
  """use_cache used to replay the first epoch's order (the cache sat after the file shuffle): every record came
  back within a shuffle window of where it was. Now whole cached blocks are reshuffled every epoch."""
  n, window = 384, 8
  tiny_jpeg = _jpeg(0, size=8)
  for shard in range(4):
    _write_records(str(tmp_path / f'train-{shard:05d}-of-00004'),
                   [_example(tiny_jpeg, 1, f'r{shard}_{i:03d}') for i in range(n // 4)])
  source = ii.ImageNetInput(is_training=True, data_dir=str(tmp_path), image_size=8, num_label_classes=NUM_CLASSES,
                            use_cache=True, shuffle_buffer_size=window, seed=1, include_filename=True)
  names = []
  for features, _ in source.input_fn({'batch_size': 32}).take(2 * n // 32):
    names += [name.decode() for name in features['filename'].numpy()]
  first, second = names[:n], names[n:]
  assert len(set(first)) > n - 2 * window and len(set(names)) == n  # the shuffle window spans the epoch boundary
  position = {name: i for i, name in enumerate(first)}
  moved_earlier = max(position[name] - i for i, name in enumerate(second) if name in position)
  assert moved_earlier > 8 * window, moved_earlier


def test_the_constructor_defaults_are_the_params_defaults():
  """from_params maps PARAMS keys to constructor arguments; direct construction must not drift from them."""
  import inspect  # pylint: disable=import-outside-toplevel
  signature = inspect.signature(ii.ImageNetInput)
  drifted = {arg: (signature.parameters[arg].default, resnet_config.RESNET_CFG[key])
             for arg, key in ii.PARAM_ARGS.items()
             if signature.parameters[arg].default != resnet_config.RESNET_CFG[key]}
  # num_label_classes: the params leave it to the data (summary.json); the constructor defaults to ImageNet's.
  assert drifted == {'num_label_classes': (1000, None)}


def test_tpuestimator_style_context_in_params_is_an_error_not_a_silent_full_read(data_dir):
  context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=1, num_replicas_in_sync=2)
  with pytest.raises(TypeError, match=r"params\['context'\] is not read"):
    _eval_input(data_dir).input_fn({'batch_size': 2, 'context': context})
