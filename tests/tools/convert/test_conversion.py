"""tools/convert/conversion.py on tiny images: a folder of every kind of file the cleaner handles, converted once
with 2 worker processes, then its records, labels, skipped files, re-encodings, shard digests and seeded order."""
import io
import json
import os

import numpy as np
import pytest
from PIL import Image

from tests.tools.convert import drawn_images as drawn
from tools.convert import summary as summary_lib
from tools.convert.conversion import convert_dataset
from tools.convert.splits import SPLITS


@pytest.fixture(scope='module')
def mixed(tmp_path_factory):
  """A class-folder dataset with every kind of file the cleaner handles, converted once with 2 worker processes."""
  root = str(tmp_path_factory.mktemp('raw'))
  cat, dog = os.path.join(root, 'cat'), os.path.join(root, 'dog')
  rgb = drawn.rgb_jpegs(cat, 6) + drawn.rgb_jpegs(dog, 5, seed=50)
  drawn.save(drawn.noise(10, 14, 1), os.path.join(cat, 'plain.png'), 'PNG')
  drawn.save(Image.new('RGB', (14, 10), (200, 30, 30)).convert('CMYK'), os.path.join(cat, 'cmyk.jpg'), 'JPEG')
  good = io.BytesIO()
  drawn.noise(40, 40, 2).save(good, 'JPEG')
  with open(os.path.join(cat, 'truncated.jpg'), 'wb') as f:
    f.write(good.getvalue()[:len(good.getvalue()) // 2])
  with open(os.path.join(cat, 'notes.txt'), 'w') as f:
    f.write('not an image')
  with open(os.path.join(cat, '.DS_Store'), 'wb') as f:  # Hidden: ignored, not even listed as skipped.
    f.write(b'\0\0')
  drawn.save(drawn.noise(9, 11, 3).convert('L'), os.path.join(dog, 'gray.jpg'), 'JPEG')
  drawn.save(drawn.noise(13, 7, 4), os.path.join(dog, 'liar.jpg'), 'PNG')  # A PNG named .jpg.
  rgba = Image.new('RGBA', (8, 6), (0, 0, 255, 0))  # Fully transparent blue: must come out white.
  drawn.save(rgba, os.path.join(dog, 'alpha.png'), 'PNG')
  drawn.save(drawn.noise(6, 6, 5).convert('P'), os.path.join(dog, 'palette.gif'), 'GIF')
  drawn.save(Image.fromarray(np.full((5, 7), 50000, np.uint16)), os.path.join(dog, 'deep16.png'), 'PNG')
  with open(os.path.join(root, 'README.md'), 'w') as f:
    f.write('loose file')
  out = str(tmp_path_factory.mktemp('records'))
  summary = convert_dataset(root, out, train_shards=2, num_workers=2)
  return {'root': root, 'out': out, 'summary': summary, 'rgb': rgb}


def test_mixed_folder_counts_per_split_and_class(mixed):
  summary, out = mixed['summary'], mixed['out']
  assert summary['layout'] == 'class_folders'
  assert sorted(os.listdir(out)) == ['labels.txt', 'summary.json', 'test-00000-of-00001', 'train-00000-of-00002',
                                     'train-00001-of-00002', 'validation-00000-of-00001']
  for split, expected_files in zip(SPLITS, (8, 1, 1)):  # 10 files per class, cut 80/10/10.
    records = drawn.records(out, split)
    assert len(records) == summary['splits'][split]['images']
    for name in ('cat', 'dog'):
      n = sum(r['image/class/text'] == name.encode() for r in records)
      assert n == summary['splits'][split]['per_class'][name]
      n_skipped = sum(1 for s in summary['skipped'] if s['split'] == split and f'/{name}/' in s['path'])
      assert n + n_skipped == expected_files
  assert sum(summary['splits'][s]['per_class']['cat'] for s in SPLITS) == 8
  assert sum(summary['splits'][s]['per_class']['dog'] for s in SPLITS) == 10
  assert summary['num_images'] == 18


def test_labels_are_one_based_sorted_class_index(mixed):
  out = mixed['out']
  with open(os.path.join(out, 'labels.txt')) as f:
    assert f.read() == 'cat\ndog\n'
  assert mixed['summary']['labels'] == {'cat': 1, 'dog': 2}
  for record in drawn.by_filename(out).values():
    assert record['image/class/label'] == {b'cat': 1, b'dog': 2}[record['image/class/text']]


def test_unreadable_files_are_skipped_and_reported(mixed):
  reasons = {os.path.basename(s['path']): s['reason'] for s in mixed['summary']['skipped']}
  assert set(reasons) == {'truncated.jpg', 'notes.txt', 'README.md'}
  assert 'truncated' in reasons['truncated.jpg']
  assert 'not an image' in reasons['notes.txt']
  assert 'class folder' in reasons['README.md']
  with open(os.path.join(mixed['out'], 'summary.json')) as f:
    assert json.load(f)['skipped'] == mixed['summary']['skipped']
  assert 'truncated.jpg' in summary_lib.format_summary(mixed['summary'])


def test_rgb_jpeg_bytes_preserved_others_reencoded_to_rgb_jpeg(mixed):
  import tensorflow as tf
  records = drawn.by_filename(mixed['out'])
  for path in mixed['rgb']:
    with open(path, 'rb') as f:
      assert records[os.path.basename(path).encode()]['image/encoded'] == f.read()
  converted = {'plain.png', 'cmyk.jpg', 'gray.jpg', 'liar.jpg', 'alpha.png', 'palette.gif', 'deep16.png'}
  for name in converted:
    record = records[name.encode()]
    with Image.open(os.path.join(mixed['root'], 'cat' if name in ('plain.png', 'cmyk.jpg') else 'dog', name)) as src:
      width, height = src.size
    with open(os.path.join(mixed['root'], 'cat' if name in ('plain.png', 'cmyk.jpg') else 'dog', name), 'rb') as f:
      assert record['image/encoded'] != f.read()
    image = tf.io.decode_jpeg(record['image/encoded'], channels=0).numpy()
    assert image.shape == (height, width, 3), name
    assert (record['image/height'], record['image/width']) == (height, width)
    assert record['image/format'] == b'JPEG' and record['image/colorspace'] == b'RGB'
    assert record['image/channels'] == 3
  decode = lambda n: tf.io.decode_jpeg(records[n]['image/encoded']).numpy().astype(int)
  assert np.abs(decode(b'cmyk.jpg').mean(axis=(0, 1)) - (200, 30, 30)).max() < 12  # Not colour-inverted.
  assert decode(b'alpha.png').min() > 240  # Transparent over white.
  assert abs(decode(b'deep16.png').mean() - 50000 / 257) < 3  # 16-bit rescaled, not clipped to 255.
  reasons = mixed['summary']['converted']
  assert 'PNG/RGB named .jpg' in reasons and 'JPEG/CMYK' in reasons and 'JPEG/L' in reasons


def test_schema_keys_size_filename_and_text(mixed):
  records = drawn.by_filename(mixed['out'])
  assert len(records) == 18
  for path in mixed['rgb']:
    record = records[os.path.basename(path).encode()]
    with Image.open(path) as src:
      assert (record['image/width'], record['image/height']) == src.size
    assert record['image/class/text'] == os.path.basename(os.path.dirname(path)).encode()
    assert record['image/format'] == b'JPEG'


def test_no_tmp_files_and_every_shard_complete(mixed):
  assert not [n for n in os.listdir(mixed['out']) if n.startswith('.tmp-')]
  total = sum(len(drawn.records(mixed['out'], s)) for s in SPLITS)  # Reads to the end: no half-written record.
  assert total == mixed['summary']['num_images']


def test_train_shards_mix_classes_in_seeded_order(mixed, tmp_path):
  train = [r['image/class/text'] for r in drawn.records(mixed['out'], 'train')]
  assert train != sorted(train)  # Shuffled, not class after class.
  again = convert_dataset(mixed['root'], str(tmp_path / 'again'), train_shards=2, num_workers=1)
  assert [r['image/filename'] for r in drawn.records(str(tmp_path / 'again'), 'train')] == \
      [r['image/filename'] for r in drawn.records(mixed['out'], 'train')]
  assert again['splits'] == mixed['summary']['splits']


def test_summary_lists_records_bytes_and_sha256_of_every_shard(mixed):
  import hashlib
  import tensorflow as tf
  out = mixed['out']
  shard_files = sorted(n for n in os.listdir(out) if n.split('-')[0] in SPLITS)
  with open(os.path.join(out, 'summary.json')) as f:
    on_disk = json.load(f)['shards']
  assert sorted(on_disk) == shard_files
  for name in shard_files:
    path = os.path.join(out, name)
    with open(path, 'rb') as f:
      data = f.read()
    entry = on_disk[name]
    assert entry['bytes'] == len(data) == os.path.getsize(path)
    assert entry['sha256'] == hashlib.sha256(data).hexdigest()
    assert entry['records'] == sum(1 for _ in tf.data.TFRecordDataset(path))
  assert sum(e['records'] for e in on_disk.values()) == 18  # 20 images minus the 2 unreadable ones.


def test_shard_sha256_detects_a_changed_byte(mixed, tmp_path):
  import hashlib
  name = 'validation-00000-of-00001'
  data = bytearray(open(os.path.join(mixed['out'], name), 'rb').read())
  data[len(data) // 2] ^= 1
  assert hashlib.sha256(bytes(data)).hexdigest() != mixed['summary']['shards'][name]['sha256']


def test_conversion_resizes_in_workers_and_records_max_image_side(tmp_path):
  import tensorflow as tf
  raw = tmp_path / 'raw'
  big = [drawn.save(drawn.noise(90, 120, i), str(raw / 'a' / f'big{i}.jpg'), 'JPEG') for i in range(3)]
  small = [drawn.save(drawn.noise(40, 30, 9 + i), str(raw / 'b' / f'small{i}.jpg'), 'JPEG') for i in range(3)]
  out = tmp_path / 'out'
  summary = convert_dataset(str(raw), str(out), train_ratio=1.0, validation_ratio=0.0, test_ratio=0.0,
                                 num_workers=2, max_image_side=60)
  with open(out / 'summary.json') as f:
    assert json.load(f)['max_image_side'] == 60
  records = drawn.by_filename(str(out))
  for path in big:
    record = records[os.path.basename(path).encode()]
    assert (record['image/width'], record['image/height']) == (60, 45)
    assert tf.io.decode_jpeg(record['image/encoded']).shape == (45, 60, 3)
  for path in small:
    with open(path, 'rb') as f:
      assert records[os.path.basename(path).encode()]['image/encoded'] == f.read()
  assert summary['converted']['JPEG/RGB resized to max side 60']['count'] == 3
  assert 'resized' in summary_lib.format_summary(summary)


def test_negative_max_image_side_is_refused(tmp_path):
  with pytest.raises(ValueError, match='max_image_side'):
    convert_dataset(drawn.small_dataset(tmp_path / 'raw'), str(tmp_path / 'out'), num_workers=1, max_image_side=-1)
