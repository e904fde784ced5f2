"""Multi-label records through the input pipeline: label lists to multi-hot rows, negatives, padding, bad records."""
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from official_input import dataset_info
from official_input import example_schema
from official_input import imagenet_input as ii
from tools import make_fake_imagenet

CLASSES = 4
# Stored 1-based label lists; [] is a negative (an image of none of the classes).
LISTS = [[1, 3], [], [2], [4, 1, 2], [3], [], [1, 2, 3, 4], [2, 4]]


def _jpeg(seed: int) -> bytes:
  return make_fake_imagenet.encode_jpeg(make_fake_imagenet.random_image(np.random.default_rng(seed), 40, 40))


def _write(path: str, examples) -> None:
  with tf.io.TFRecordWriter(path) as writer:
    for example in examples:
      writer.write(example.SerializeToString())


@pytest.fixture(scope='module')
def data_dir(tmp_path_factory):
  """train and validation: the LISTS images, plus a stored label 0 (none: 1-based) and an undecodable image (both
  skipped)."""
  path = str(tmp_path_factory.mktemp('multi_label'))
  good = [example_schema.make_example(_jpeg(i), 'JPEG', labels, '', 40, 40, f'img_{i}.jpg')
          for i, labels in enumerate(LISTS)]
  bad = [example_schema.make_example(_jpeg(50), 'JPEG', [2, 0], '', 40, 40, 'label_zero.jpg'),
         example_schema.make_example(b'not an image', 'JPEG', [1], '', 40, 40, 'garbage.jpg')]
  for split in ('train', 'validation'):
    _write(os.path.join(path, f'{split}-00000-of-00001'), good[:3] + bad + good[3:])
  with open(os.path.join(path, 'labels.txt'), 'w') as f:
    f.write('a\nb\nc\nd\n')
  with open(os.path.join(path, 'summary.json'), 'w') as f:
    json.dump({'task': 'multi_label', 'num_classes': CLASSES,
               'splits': {'train': {'images': len(LISTS), 'per_class': {'a': 4, 'b': 5, 'c': 3, 'd': 3}}}}, f)
  return path


def _multi_hot(lists):
  rows = np.zeros((len(lists), CLASSES), np.int32)
  for row, labels in zip(rows, lists):
    row[[label - 1 for label in labels]] = 1
  return rows


def test_the_data_says_it_is_multi_label_and_counts_positives(data_dir):
  info = dataset_info.read_dataset_info(data_dir)
  assert info.task == 'multi_label' and info.train_class_counts == (4, 5, 3, 3)
  assert dataset_info.model_class_counts(info, CLASSES) == [4, 5, 3, 3]
  assert dataset_info.model_class_counts(info, CLASSES + 1) == [0, 4, 5, 3, 3]   # a background class 0
  assert dataset_info.model_class_counts(info, CLASSES + 2) is None              # counts of other classes


@pytest.mark.parametrize('batch_size', [3, 16])  # 16: one batch holding the bad records (the per-record path)
def test_eval_batches_are_multi_hot_rows_with_negatives_kept_and_padding_of_minus_one(data_dir, batch_size):
  source = ii.ImageNetInput(is_training=False, data_dir=data_dir, image_size=32, num_label_classes=CLASSES,
                            include_filename=True)
  assert source.multi_label
  names, rows, padding = [], [], 0
  for features, labels in source.input_fn({'batch_size': batch_size}):
    assert labels.shape == (batch_size, CLASSES) and labels.dtype == tf.int32
    for name, row in zip(features['filename'].numpy(), labels.numpy()):
      if name:
        names.append(name.decode())
        rows.append(row)
      else:
        assert (row == -1).all()
        padding += 1
  assert names == [f'img_{i}.jpg' for i in range(len(LISTS))]
  np.testing.assert_array_equal(np.stack(rows), _multi_hot(LISTS))
  assert padding > 0 and source.skipped_records == 2


def test_training_batches_are_multi_hot(data_dir):
  source = ii.ImageNetInput(is_training=True, data_dir=data_dir, image_size=32, num_label_classes=CLASSES,
                            shuffle_buffer_size=4)
  expected = {tuple(row) for row in _multi_hot(LISTS)}
  for _, labels in source.input_fn({'batch_size': 4}).take(4):
    assert labels.shape == (4, CLASSES)
    assert {tuple(row) for row in labels.numpy()} <= expected


def test_a_label_past_the_head_is_an_error_naming_the_fix(tmp_path):
  _write(str(tmp_path / 'train-00000-of-00001'),
         [example_schema.make_example(_jpeg(i), 'JPEG', [1, 1 + i], '', 40, 40, f'img_{i}.jpg') for i in range(5)])
  source = ii.ImageNetInput(is_training=True, data_dir=str(tmp_path), image_size=32, num_label_classes=CLASSES,
                            shuffle_buffer_size=1, task='multi_label')
  with pytest.raises(tf.errors.OpError, match='img_4.jpg has a label >= num_label_classes'):
    for _ in source.input_fn({'batch_size': 5}).take(2):
      pass


def test_synthetic_multi_label_batches():
  source = ii.ImageNetInput(is_training=True, data_dir=None, image_size=32, num_label_classes=6,
                            task='multi_label')
  _, labels = next(iter(source.input_fn({'batch_size': 8})))
  assert labels.shape == (8, 6) and set(np.unique(labels.numpy())) <= {0, 1}
