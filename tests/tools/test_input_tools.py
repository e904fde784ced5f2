"""Tests for tools/make_fake_imagenet.py (tiny sizes); the input benchmark has tests/tools/test_input_benchmark.py."""
import os

import numpy as np
import pytest
import tensorflow as tf

from official_input import example_schema
from tools import make_fake_imagenet


def test_make_fake_imagenet_writes_named_shards_in_the_schema_and_labels_txt(tmp_path):
  written = make_fake_imagenet.write_fake_imagenet(str(tmp_path), num_train=10, num_validation=3, num_test=2,
                                                   num_shards=4, num_classes=5, min_size=20, max_size=30)
  assert sorted(os.listdir(tmp_path)) == sorted(
      ['labels.txt'] + ['train-%05d-of-00004' % i for i in range(4)] +
      ['validation-%05d-of-00003' % i for i in range(3)] + ['test-%05d-of-00002' % i for i in range(2)])
  assert [os.path.basename(p) for p in written['train']] == ['train-%05d-of-00004' % i for i in range(4)]
  names = (tmp_path / 'labels.txt').read_text().splitlines()
  assert len(names) == 5
  records = list(tf.data.TFRecordDataset(written['train']))
  assert len(records) == 10
  for record in records:
    example = tf.train.Example.FromString(record.numpy())
    assert {example_schema.ENCODED, example_schema.LABEL, example_schema.FORMAT, example_schema.FILENAME,
            example_schema.HEIGHT, example_schema.WIDTH, example_schema.TEXT} <= set(example.features.feature)
    parsed = tf.io.parse_single_example(record, example_schema.FEATURE_SPEC)
    label = int(parsed[example_schema.LABEL])
    assert 1 <= label <= 5  # 1-based, as the converter writes
    assert parsed[example_schema.TEXT].numpy().decode() == names[label - 1]
    image = tf.io.decode_jpeg(parsed[example_schema.ENCODED])
    feature = example.features.feature
    assert image.shape[:2] == (feature[example_schema.HEIGHT].int64_list.value[0],
                               feature[example_schema.WIDTH].int64_list.value[0])
    assert 20 <= image.shape[0] <= 30 and 20 <= image.shape[1] <= 30


def test_make_fake_imagenet_is_reproducible_from_its_seed(tmp_path):
  a = make_fake_imagenet.write_fake_imagenet(str(tmp_path / 'a'), 3, 0, num_shards=1, num_classes=4, min_size=16,
                                             max_size=24, seed=5)
  b = make_fake_imagenet.write_fake_imagenet(str(tmp_path / 'b'), 3, 0, num_shards=1, num_classes=4, min_size=16,
                                             max_size=24, seed=5)
  assert open(a['train'][0], 'rb').read() == open(b['train'][0], 'rb').read()


def test_make_fake_imagenet_rejects_bad_sizes(tmp_path):
  with pytest.raises(ValueError):
    make_fake_imagenet.write_fake_imagenet(str(tmp_path), 2, 0, min_size=50, max_size=40)


def test_photo_folders_hold_phone_sized_jpegs_in_class_folders(tmp_path):
  from PIL import Image
  paths = make_fake_imagenet.write_photo_folders(str(tmp_path), 3, width=640, height=480, num_classes=2)
  assert sorted(os.listdir(tmp_path)) == ['fake_class_0000', 'fake_class_0001']
  assert len(paths) == 3 and all(os.path.dirname(os.path.dirname(p)) == str(tmp_path) for p in paths)
  for path in paths:
    with Image.open(path) as img:
      assert (img.format, img.size, img.mode) == ('JPEG', (640, 480), 'RGB')
      pixels = np.asarray(img).astype(float)
    assert pixels.std() > 20  # Not flat colour: gradients, blobs and noise.
    # ~3 MB at 12 MP scales to ~75 KB at 0.3 MP: photo-like entropy, between flat (a few KB) and pure noise.
    assert 40_000 < os.path.getsize(path) < 200_000
