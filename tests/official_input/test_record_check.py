"""Records written by other tools are named for what they are before anything is decoded."""
import numpy as np
import pytest
import tensorflow as tf

from official_input import imagenet_input as ii
from official_input import record_check
from tests.helpers import cli


def _foreign_example(i: int) -> tf.train.Example:
  feature = {'image/raw': tf.train.Feature(bytes_list=tf.train.BytesList(value=[b'\x00' * 12])),
             'label': tf.train.Feature(int64_list=tf.train.Int64List(value=[i % 3]))}
  return tf.train.Example(features=tf.train.Features(feature=feature))


def test_other_feature_keys_are_named_with_the_keys_the_pipeline_reads(tmp_path):
  cli.write_records(str(tmp_path / 'train-00000-of-00001'), [_foreign_example(i) for i in range(20)])
  source = ii.ImageNetInput(is_training=True, data_dir=str(tmp_path), image_size=32, num_label_classes=3)
  with pytest.raises(record_check.RecordFormatError,
                     match=r'have no image/encoded feature; their keys are image/raw, label\. Convert'):
    source.input_fn({'batch_size': 2})


@pytest.mark.parametrize('compression', ['GZIP', 'ZLIB'])
def test_compressed_shards_are_named_as_compressed(tmp_path, compression):
  path = str(tmp_path / 'validation-00000-of-00001')
  with tf.io.TFRecordWriter(path, options=compression) as writer:
    writer.write(cli.jpeg_example(np.random.default_rng(0), 1, 'a.JPEG').SerializeToString())
  with pytest.raises(record_check.RecordFormatError, match=f'{compression}-compressed'):
    ii.ImageNetInput(is_training=False, data_dir=str(tmp_path), image_size=32,
                     num_label_classes=4).input_fn({'batch_size': 2})


def test_bytes_that_are_no_examples_are_named(tmp_path):
  with tf.io.TFRecordWriter(str(tmp_path / 'train-00000-of-00001')) as writer:
    for _ in range(3):
      writer.write(b'\xff\xfe not a proto')
  with pytest.raises(record_check.RecordFormatError, match='are not tf.train.Examples'):
    record_check.check_first_records(str(tmp_path / 'train-00000-of-00001'))


def test_a_few_bad_records_among_good_ones_pass_the_check(tmp_path):
  rng = np.random.default_rng(1)
  examples = cli.bad_train_examples() + [cli.jpeg_example(rng, 1, f'{i}.JPEG') for i in range(3)]
  cli.write_records(str(tmp_path / 'train-00000-of-00001'), examples)
  record_check.check_first_records(str(tmp_path / 'train-00000-of-00001'))  # the pipeline skips the bad ones


def test_plain_records_whose_length_looks_like_a_zlib_header_are_read(tmp_path):
  """A TFRecord starts with its first record's length (little-endian): 376 bytes reads as 0x78 0x01, a ZLIB
  header. The check reads the file before it suspects compression."""
  from official_input import example_schema  # pylint: disable=import-outside-toplevel
  size = 0
  while True:
    record = example_schema.make_example(b'\xff\xd8' + b'\x00' * size, 'JPEG', 1, 'a', 8, 8, 'a.JPEG')
    length = len(record.SerializeToString())
    if length >= 376:
      break
    size += 1
  assert length == 376
  path = str(tmp_path / 'train-00000-of-00001')
  cli.write_records(path, [record])
  with open(path, 'rb') as f:
    assert f.read(2) == b'\x78\x01'
  record_check.check_first_records(path)  # no error
