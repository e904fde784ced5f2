"""Behaviour of tools/imagenet_to_gcs.py on tiny images: layouts, labels, cleaning, splits, atomic outputs."""
import io
import json
import os
import subprocess
import sys
from typing import Dict, List

import numpy as np
import pytest
from absl import flags
from PIL import Image

from tools import clean_images
from tools import imagenet_to_gcs as conv
from tests.helpers import procs

REPO = procs.ROOT


def _noise(h: int, w: int, seed: int) -> Image.Image:
  return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8))


def _save(img: Image.Image, path: str, fmt: str, **kw) -> str:
  os.makedirs(os.path.dirname(path), exist_ok=True)
  img.save(path, fmt, **kw)
  return path


def _rgb_jpegs(folder: str, n: int, seed: int = 0, ext: str = '.jpg') -> List[str]:
  """n RGB JPEGs named <folder name>_<i><ext>, so basenames are unique across classes."""
  name = os.path.basename(folder)
  return [_save(_noise(12 + i, 16, seed + i), os.path.join(folder, f'{name}_{i:02d}{ext}'), 'JPEG')
          for i in range(n)]


def _records(output_dir: str, split: str) -> List[Dict[str, object]]:
  """Parses every record of a split with the shared FEATURE_SPEC (plus the size/colour keys it does not parse)."""
  import tensorflow as tf
  from official_input import example_schema as es
  spec = dict(es.FEATURE_SPEC)
  spec.update({es.HEIGHT: tf.io.FixedLenFeature((), tf.int64, -1), es.WIDTH: tf.io.FixedLenFeature((), tf.int64, -1),
               es.COLORSPACE: tf.io.FixedLenFeature((), tf.string, ''),
               es.CHANNELS: tf.io.FixedLenFeature((), tf.int64, -1)})
  files = sorted(tf.io.gfile.glob(os.path.join(output_dir, f'{split}-*')))
  if not files:
    return []
  ds = tf.data.TFRecordDataset(files).map(lambda r: tf.io.parse_single_example(r, spec))
  return list(ds.as_numpy_iterator())


@pytest.fixture(scope='module')
def mixed(tmp_path_factory):
  """A class-folder dataset with every kind of file the cleaner handles, converted once with 2 worker processes."""
  root = str(tmp_path_factory.mktemp('raw'))
  cat, dog = os.path.join(root, 'cat'), os.path.join(root, 'dog')
  rgb = _rgb_jpegs(cat, 6) + _rgb_jpegs(dog, 5, seed=50)
  _save(_noise(10, 14, 1), os.path.join(cat, 'plain.png'), 'PNG')
  _save(Image.new('RGB', (14, 10), (200, 30, 30)).convert('CMYK'), os.path.join(cat, 'cmyk.jpg'), 'JPEG')
  good = io.BytesIO()
  _noise(40, 40, 2).save(good, 'JPEG')
  with open(os.path.join(cat, 'truncated.jpg'), 'wb') as f:
    f.write(good.getvalue()[:len(good.getvalue()) // 2])
  with open(os.path.join(cat, 'notes.txt'), 'w') as f:
    f.write('not an image')
  with open(os.path.join(cat, '.DS_Store'), 'wb') as f:  # Hidden: ignored, not even listed as skipped.
    f.write(b'\0\0')
  _save(_noise(9, 11, 3).convert('L'), os.path.join(dog, 'gray.jpg'), 'JPEG')
  _save(_noise(13, 7, 4), os.path.join(dog, 'liar.jpg'), 'PNG')  # A PNG named .jpg.
  rgba = Image.new('RGBA', (8, 6), (0, 0, 255, 0))  # Fully transparent blue: must come out white.
  _save(rgba, os.path.join(dog, 'alpha.png'), 'PNG')
  _save(_noise(6, 6, 5).convert('P'), os.path.join(dog, 'palette.gif'), 'GIF')
  _save(Image.fromarray(np.full((5, 7), 50000, np.uint16)), os.path.join(dog, 'deep16.png'), 'PNG')
  with open(os.path.join(root, 'README.md'), 'w') as f:
    f.write('loose file')
  out = str(tmp_path_factory.mktemp('records'))
  summary = conv.convert_dataset(root, out, train_shards=2, num_workers=2)
  return {'root': root, 'out': out, 'summary': summary, 'rgb': rgb}


def _by_filename(out: str) -> Dict[bytes, Dict[str, object]]:
  return {r['image/filename']: r for s in conv.SPLITS for r in _records(out, s)}


def test_mixed_folder_counts_per_split_and_class(mixed):
  summary, out = mixed['summary'], mixed['out']
  assert summary['layout'] == 'class_folders'
  assert sorted(os.listdir(out)) == ['labels.txt', 'summary.json', 'test-00000-of-00001', 'train-00000-of-00002',
                                     'train-00001-of-00002', 'validation-00000-of-00001']
  for split, expected_files in zip(conv.SPLITS, (8, 1, 1)):  # 10 files per class, cut 80/10/10.
    records = _records(out, split)
    assert len(records) == summary['splits'][split]['images']
    for name in ('cat', 'dog'):
      n = sum(r['image/class/text'] == name.encode() for r in records)
      assert n == summary['splits'][split]['per_class'][name]
      n_skipped = sum(1 for s in summary['skipped'] if s['split'] == split and f'/{name}/' in s['path'])
      assert n + n_skipped == expected_files
  assert sum(summary['splits'][s]['per_class']['cat'] for s in conv.SPLITS) == 8
  assert sum(summary['splits'][s]['per_class']['dog'] for s in conv.SPLITS) == 10
  assert summary['num_images'] == 18


def test_labels_are_one_based_sorted_class_index(mixed):
  out = mixed['out']
  with open(os.path.join(out, 'labels.txt')) as f:
    assert f.read() == 'cat\ndog\n'
  assert mixed['summary']['labels'] == {'cat': 1, 'dog': 2}
  for record in _by_filename(out).values():
    assert record['image/class/label'] == {b'cat': 1, b'dog': 2}[record['image/class/text']]


def test_unreadable_files_are_skipped_and_reported(mixed):
  reasons = {os.path.basename(s['path']): s['reason'] for s in mixed['summary']['skipped']}
  assert set(reasons) == {'truncated.jpg', 'notes.txt', 'README.md'}
  assert 'truncated' in reasons['truncated.jpg']
  assert 'not an image' in reasons['notes.txt']
  assert 'class folder' in reasons['README.md']
  with open(os.path.join(mixed['out'], 'summary.json')) as f:
    assert json.load(f)['skipped'] == mixed['summary']['skipped']
  assert 'truncated.jpg' in conv.format_summary(mixed['summary'])


def test_rgb_jpeg_bytes_preserved_others_reencoded_to_rgb_jpeg(mixed):
  import tensorflow as tf
  records = _by_filename(mixed['out'])
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
  records = _by_filename(mixed['out'])
  assert len(records) == 18
  for path in mixed['rgb']:
    record = records[os.path.basename(path).encode()]
    with Image.open(path) as src:
      assert (record['image/width'], record['image/height']) == src.size
    assert record['image/class/text'] == os.path.basename(os.path.dirname(path)).encode()
    assert record['image/format'] == b'JPEG'


def test_no_tmp_files_and_every_shard_complete(mixed):
  assert not [n for n in os.listdir(mixed['out']) if n.startswith('.tmp-')]
  total = sum(len(_records(mixed['out'], s)) for s in conv.SPLITS)  # Reads to the end: no half-written record.
  assert total == mixed['summary']['num_images']


def test_train_shards_mix_classes_in_seeded_order(mixed, tmp_path):
  train = [r['image/class/text'] for r in _records(mixed['out'], 'train')]
  assert train != sorted(train)  # Shuffled, not class after class.
  again = conv.convert_dataset(mixed['root'], str(tmp_path / 'again'), train_shards=2, num_workers=1)
  assert [r['image/filename'] for r in _records(str(tmp_path / 'again'), 'train')] == \
      [r['image/filename'] for r in _records(mixed['out'], 'train')]
  assert again['splits'] == mixed['summary']['splits']


def test_split_is_deterministic_for_a_seed(tmp_path):
  for c in ('a', 'b', 'c'):
    for i in range(20):
      os.makedirs(tmp_path / c, exist_ok=True)
      (tmp_path / c / f'{i}.jpg').write_bytes(b'x')  # Planning never opens the files.
  plan = lambda seed: {s: [i.path for i in items] for s, items in conv.plan_conversion(str(tmp_path), seed=seed)
                       .splits.items()}
  assert plan(0) == plan(0)
  assert plan(0)['validation'] != plan(1)['validation']
  assert [len(plan(0)[s]) for s in conv.SPLITS] == [48, 6, 6]  # Stratified: 16/2/2 of each class.
  assert plan(0)['validation'] == sorted(plan(0)['validation'])
  for n in range(40):
    assert sum(conv.split_counts(n, (0.8, 0.1, 0.1))) == n
  assert conv.split_counts(10, (0.8, 0.1, 0.1)) == [8, 1, 1]


def test_split_folders_layout_with_val_keeps_the_split(tmp_path):
  root = tmp_path / 'data'
  _rgb_jpegs(str(root / 'train' / 'b'), 3)
  _rgb_jpegs(str(root / 'train' / 'a'), 2)
  _rgb_jpegs(str(root / 'train' / 'c'), 1)  # Only in train: still labelled over the union.
  _rgb_jpegs(str(root / 'val' / 'a'), 2)
  _rgb_jpegs(str(root / 'val' / 'b'), 1)
  _rgb_jpegs(str(root / 'test' / 'b'), 2)
  (root / 'val' / 'notes.txt').write_text('outside any class folder')
  summary = conv.convert_dataset(str(root), str(tmp_path / 'out'), num_workers=1)
  assert [os.path.basename(s['path']) for s in summary['skipped']] == ['notes.txt']
  assert summary['layout'] == 'split_folders'
  assert summary['labels'] == {'a': 1, 'b': 2, 'c': 3}
  assert [summary['splits'][s]['images'] for s in conv.SPLITS] == [6, 3, 2]
  assert summary['splits']['validation']['shards'] == ['validation-00000-of-00001']
  validation = _records(str(tmp_path / 'out'), 'validation')
  assert [(r['image/class/text'], r['image/class/label']) for r in validation] == [(b'a', 1), (b'a', 1), (b'b', 2)]


def test_imagenet_layout_pairs_sorted_validation_files_with_synset_labels(tmp_path):
  root = tmp_path / 'imagenet'
  _rgb_jpegs(str(root / 'train' / 'n02'), 2, ext='.JPEG')
  _rgb_jpegs(str(root / 'train' / 'n01'), 2, ext='.JPEG')
  for i in (3, 1, 2):
    _save(_noise(8, 8, i), str(root / 'validation' / f'ILSVRC2012_val_{i:08d}.JPEG'), 'JPEG')
  (root / 'synset_labels.txt').write_text('n02\nn01\nn02\n')
  summary = conv.convert_dataset(str(root), str(tmp_path / 'out'), num_workers=1)
  assert summary['layout'] == 'imagenet'
  validation = _records(str(tmp_path / 'out'), 'validation')
  assert [r['image/filename'] for r in validation] == [b'ILSVRC2012_val_%08d.JPEG' % i for i in (1, 2, 3)]
  assert [r['image/class/label'] for r in validation] == [2, 1, 2]
  assert {r['image/class/label'] for r in _records(str(tmp_path / 'out'), 'train')} == {1, 2}
  (root / 'synset_labels.txt').write_text('n02\nn01\n')
  with pytest.raises(ValueError, match='has 2 labels but'):
    conv.plan_conversion(str(root))
  (root / 'synset_labels.txt').unlink()
  with pytest.raises(ValueError, match='synset_labels.txt is missing'):
    conv.plan_conversion(str(root))


@pytest.mark.parametrize('dirs, message', [
    ((), 'no subfolders'),
    (('cats', 'train'), 'ambiguous'),
    (('train/x', 'val/x', 'validation/x'), 'both val/ and validation/'),
    (('cats', 'dogs'), 'no files'),
])
def test_ambiguous_or_empty_input_says_what_was_expected(tmp_path, dirs, message):
  for d in dirs:
    os.makedirs(tmp_path / 'raw' / d)
  if dirs and dirs[0].startswith('train/'):
    _rgb_jpegs(str(tmp_path / 'raw' / 'train' / 'x'), 1)
  os.makedirs(tmp_path / 'raw', exist_ok=True)
  with pytest.raises(ValueError, match=message):
    conv.plan_conversion(str(tmp_path / 'raw'))


def _small_dataset(root) -> str:
  _rgb_jpegs(str(root / 'a'), 3)
  _rgb_jpegs(str(root / 'b'), 3, seed=9)
  return str(root)


def test_refuses_non_empty_output_dir_without_overwrite(tmp_path):
  raw, out = _small_dataset(tmp_path / 'raw'), tmp_path / 'out'
  out.mkdir()
  (out / 'train-00000-of-00007').write_bytes(b'stale')
  (out / 'notes.md').write_text('mine')
  with pytest.raises(FileExistsError, match='--overwrite'):
    conv.convert_dataset(raw, str(out), num_workers=1)
  conv.convert_dataset(raw, str(out), num_workers=1, overwrite=True)
  assert not (out / 'train-00000-of-00007').exists()  # Stale shards would still match train-*.
  assert (out / 'notes.md').read_text() == 'mine'
  with pytest.raises(ValueError, match='inside raw_data_dir'):
    conv.convert_dataset(raw, os.path.join(raw, 'records'), num_workers=1)


def test_leftover_tmp_files_are_cleaned(tmp_path):
  raw, out = _small_dataset(tmp_path / 'raw'), tmp_path / 'out'
  out.mkdir()
  (out / '.tmp-train-00000-of-00001').write_bytes(b'half')
  conv.convert_dataset(raw, str(out), num_workers=1)
  assert not [n for n in os.listdir(out) if n.startswith('.tmp-')]


def test_failure_mid_shard_leaves_no_complete_looking_file(tmp_path, monkeypatch):
  from official_input import example_schema
  raw, out = _small_dataset(tmp_path / 'raw'), tmp_path / 'out'
  calls = []
  real = example_schema.make_example

  def flaky(*args, **kwargs):
    calls.append(1)
    if len(calls) == 3:
      raise RuntimeError('disk full')
    return real(*args, **kwargs)

  monkeypatch.setattr(example_schema, 'make_example', flaky)
  with pytest.raises(RuntimeError, match='disk full'):
    conv.convert_dataset(raw, str(out), num_workers=1)
  assert os.listdir(out) == []


def test_exif_orientation_is_applied_or_bytes_kept():
  exif = Image.Exif()
  exif[0x0112] = 6  # Rotate 90 degrees clockwise to display.
  buf = io.BytesIO()
  _noise(10, 20, 0).save(buf, 'JPEG', exif=exif)
  rotated = clean_images.clean_image_bytes(buf.getvalue(), '.jpg')
  assert (rotated.height, rotated.width) == (20, 10) and 'EXIF orientation 6' in rotated.converted
  kept = clean_images.clean_image_bytes(buf.getvalue(), '.jpg', apply_exif_orientation=False)
  assert kept.encoded == buf.getvalue() and (kept.height, kept.width) == (10, 20)


def test_default_shard_counts_scale_with_data():
  assert conv.default_num_shards('train', 1_281_167, 140 * 10**9) == 1024
  assert conv.default_num_shards('validation', 50_000, 64 * 10**9) == 128
  assert conv.default_num_shards('train', 800, 5 * 10**6) == 1
  assert conv.default_num_shards('train', 3, 10**10) == 3
  assert conv.default_num_shards('test', 0, 0) == 0


def test_upload_copies_atomically_and_replaces_stale_outputs(mixed, tmp_path):
  dest = tmp_path / 'bucket' / 'data'
  dest.mkdir(parents=True)
  (dest / 'train-00000-of-00009').write_bytes(b'old run')
  with pytest.raises(FileExistsError):
    conv.check_upload_destination(str(dest), overwrite=False)
  with pytest.raises(FileExistsError):
    conv.upload_outputs(mixed['out'], str(dest))
  names = conv.upload_outputs(mixed['out'], str(dest), overwrite=True)
  assert names[-1] == 'summary.json'
  assert sorted(os.listdir(dest)) == sorted(os.listdir(mixed['out']))
  assert (dest / 'labels.txt').read_text() == 'cat\ndog\n'


def test_cli_converts_and_prints_a_table(tmp_path, capsys):
  raw = _small_dataset(tmp_path / 'raw')
  fv = flags.FlagValues()
  conv.define_flags(fv)
  fv(['convert', f'--raw_data_dir={raw}', f'--local_scratch_dir={tmp_path / "out"}', '--num_workers=1',
      '--train_ratio=0.5', '--validation_ratio=0.5', '--test_ratio=0', '--project=ignored', '--max_image_side=14'])
  conv.main(['convert'], fv)
  printed = capsys.readouterr().out
  with open(tmp_path / 'out' / 'summary.json') as f:
    assert json.load(f)['max_image_side'] == 14
  assert 'JPEG/RGB resized to max side 14' in printed  # _rgb_jpegs are 16 px wide.
  assert 'label' in printed and 'validation' in printed and 'Skipped 0 files.' in printed
  assert sorted(os.listdir(tmp_path / 'out')) == ['labels.txt', 'summary.json', 'train-00000-of-00001',
                                                  'validation-00000-of-00001']
  fv.unparse_flags()
  fv(['convert', f'--raw_data_dir={raw}', f'--local_scratch_dir={tmp_path / "out2"}', '--gcs_upload'])
  with pytest.raises(Exception, match='gs://'):
    conv.main(['convert'], fv)
  fv.unparse_flags()
  fv(['convert', f'--raw_data_dir={raw}', f'--local_scratch_dir={tmp_path / "out"}'])
  with pytest.raises(SystemExit, match='error: Output dir .* is not empty'):
    conv.main(['convert'], fv)


def test_importing_the_converter_does_not_import_tensorflow():
  code = 'import sys, tools.imagenet_to_gcs; assert "tensorflow" not in sys.modules; assert "PIL" not in sys.modules'
  subprocess.run([sys.executable, '-c', code], cwd=REPO, check=True, timeout=60)


# --- Shard integrity records ----------------------------------------------------------------------------------------


def test_summary_lists_records_bytes_and_sha256_of_every_shard(mixed):
  import hashlib
  import tensorflow as tf
  out = mixed['out']
  shard_files = sorted(n for n in os.listdir(out) if n.split('-')[0] in conv.SPLITS)
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


# --- Resizing at conversion -----------------------------------------------------------------------------------------


def _jpeg(img: Image.Image, **kw) -> bytes:
  buf = io.BytesIO()
  img.save(buf, 'JPEG', quality=92, **kw)
  return buf.getvalue()


def _halves(width: int, height: int) -> Image.Image:
  """Left half red, right half blue: shows which way an image was turned."""
  arr = np.zeros((height, width, 3), np.uint8)
  arr[:, :width // 2] = (220, 20, 20)
  arr[:, width // 2:] = (20, 20, 220)
  return Image.fromarray(arr)


def _decoded(data: bytes) -> np.ndarray:
  with Image.open(io.BytesIO(data)) as img:
    assert img.format == 'JPEG' and img.mode == 'RGB'
    return np.asarray(img).astype(int)


def test_max_image_side_shrinks_the_longer_side_and_keeps_the_aspect():
  result = clean_images.clean_image_bytes(_jpeg(_halves(600, 300)), '.jpg', max_image_side=256)
  assert (result.width, result.height) == (256, 128)
  image = _decoded(result.encoded)
  assert image.shape == (128, 256, 3)
  assert np.abs(image[:, :100].mean(axis=(0, 1)) - (220, 20, 20)).max() < 15  # Content scaled, not cropped.
  assert np.abs(image[:, -100:].mean(axis=(0, 1)) - (20, 20, 220)).max() < 15
  assert 'resized to max side 256' in result.converted


def test_images_within_max_image_side_keep_their_bytes_and_are_never_upscaled():
  data = _jpeg(_halves(100, 80))
  result = clean_images.clean_image_bytes(data, '.jpg', max_image_side=256)
  assert result.encoded == data and result.converted is None and (result.width, result.height) == (100, 80)
  exact = _jpeg(_halves(256, 200))
  assert clean_images.clean_image_bytes(exact, '.jpg', max_image_side=256).encoded == exact
  assert clean_images.clean_image_bytes(_jpeg(_halves(600, 300)), '.jpg', max_image_side=0).width == 600  # 0 = off.


def test_portrait_images_resize_by_their_height_including_exif_rotated_ones():
  portrait = clean_images.clean_image_bytes(_jpeg(_halves(300, 600)), '.jpg', max_image_side=256)
  assert (portrait.width, portrait.height) == (128, 256)
  exif = Image.Exif()
  exif[0x0112] = 6  # Stored landscape 600x300, displayed turned 90 degrees clockwise: portrait 300x600.
  rotated = clean_images.clean_image_bytes(_jpeg(_halves(600, 300), exif=exif), '.jpg', max_image_side=256)
  assert (rotated.width, rotated.height) == (128, 256)
  image = _decoded(rotated.encoded)
  assert image.shape == (256, 128, 3)
  # Turning clockwise brings the stored left (red) half to the top.
  assert np.abs(image[:100].mean(axis=(0, 1)) - (220, 20, 20)).max() < 15
  assert np.abs(image[-100:].mean(axis=(0, 1)) - (20, 20, 220)).max() < 15
  assert 'EXIF orientation 6' in rotated.converted and 'resized' in rotated.converted


def test_large_png_is_resized_too():
  buf = io.BytesIO()
  _halves(90, 300).save(buf, 'PNG')
  result = clean_images.clean_image_bytes(buf.getvalue(), '.png', max_image_side=60)
  assert (result.width, result.height) == (18, 60)
  assert _decoded(result.encoded).shape == (60, 18, 3)


def test_conversion_resizes_in_workers_and_records_max_image_side(tmp_path):
  import tensorflow as tf
  raw = tmp_path / 'raw'
  big = [_save(_noise(90, 120, i), str(raw / 'a' / f'big{i}.jpg'), 'JPEG') for i in range(3)]
  small = [_save(_noise(40, 30, 9 + i), str(raw / 'b' / f'small{i}.jpg'), 'JPEG') for i in range(3)]
  out = tmp_path / 'out'
  summary = conv.convert_dataset(str(raw), str(out), train_ratio=1.0, validation_ratio=0.0, test_ratio=0.0,
                                 num_workers=2, max_image_side=60)
  with open(out / 'summary.json') as f:
    assert json.load(f)['max_image_side'] == 60
  records = _by_filename(str(out))
  for path in big:
    record = records[os.path.basename(path).encode()]
    assert (record['image/width'], record['image/height']) == (60, 45)
    assert tf.io.decode_jpeg(record['image/encoded']).shape == (45, 60, 3)
  for path in small:
    with open(path, 'rb') as f:
      assert records[os.path.basename(path).encode()]['image/encoded'] == f.read()
  assert summary['converted']['JPEG/RGB resized to max side 60']['count'] == 3
  assert 'resized' in conv.format_summary(summary)


def test_negative_max_image_side_is_refused(tmp_path):
  with pytest.raises(ValueError, match='max_image_side'):
    conv.convert_dataset(_small_dataset(tmp_path / 'raw'), str(tmp_path / 'out'), num_workers=1, max_image_side=-1)


def _scene(seed: int, size: int = 64) -> Image.Image:
  """A smooth picture (random 8x8 colours, enlarged): re-encoding it moves its difference hash by a few bits only,
  while two seeds differ in about half of them."""
  rng = np.random.default_rng(seed)
  return Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).resize((size, size), Image.BILINEAR)


def test_evaluation_images_that_copy_training_images_are_named_and_can_be_dropped(tmp_path):
  root = tmp_path / 'raw'
  for c, offset in (('cat', 0), ('dog', 100)):
    for i in range(4):
      _save(_scene(offset + i), str(root / 'train' / c / f'{c}_{i}.jpg'), 'JPEG', quality=95)
  for c, offset in (('cat', 0), ('dog', 100)):
    for i in range(2):
      _save(_scene(offset + 50 + i), str(root / 'val' / c / f'new_{c}_{i}.jpg'), 'JPEG', quality=95)
  copy = root / 'val' / 'cat' / 'copied.jpg'
  copy.write_bytes((root / 'train' / 'cat' / 'cat_1.jpg').read_bytes())          # byte-identical
  _save(_scene(102), str(root / 'val' / 'dog' / 'reencoded.png'), 'PNG')         # the same picture, another file
  summary = conv.convert_dataset(str(root), str(tmp_path / 'out'), num_workers=1)
  leaked = summary['leaked']
  assert leaked['count'] == 2 and leaked['dropped'] == 0
  assert leaked['by_split_and_kind'] == {'validation identical': 1, 'validation near-identical': 1}
  pairs = {(os.path.basename(e['path']), os.path.basename(e['same_as']), e['kind']) for e in leaked['examples']}
  assert pairs == {('copied.jpg', 'cat_1.jpg', 'identical'), ('reencoded.png', 'dog_2.jpg', 'near-identical')}
  assert summary['splits']['validation']['images'] == 6   # reported, still converted
  assert 'Copies of images of an earlier split: 2' in conv.format_summary(summary)
  dropped = conv.convert_dataset(str(root), str(tmp_path / 'dropped'), num_workers=1, drop_leaked_images=True)
  assert dropped['splits']['validation']['images'] == 4 and dropped['leaked']['dropped'] == 2
  reasons = [e['reason'] for e in dropped['skipped']]
  assert any(r.startswith('identical to an image of train: ') and r.endswith('cat_1.jpg (--drop_leaked_images)')
             for r in reasons)
  assert dropped['skipped_counts'] == {'identical to an image of train': 1, 'near-identical to an image of train': 1}


def test_links_are_followed_once_per_real_folder_and_file_and_loops_are_named(tmp_path):
  root = tmp_path / 'raw'
  _rgb_jpegs(str(root / 'cat'), 5)
  _rgb_jpegs(str(root / 'dog'), 5, seed=50)
  os.symlink('..', root / 'cat' / 'all')                                  # back to the dataset: a loop
  os.symlink(root / 'dog' / 'dog_00.jpg', root / 'cat' / 'also_dog.jpg')  # one file under two classes
  summary = conv.convert_dataset(str(root), str(tmp_path / 'out'), num_workers=1)
  assert summary['num_images'] == 10
  skipped = {os.path.relpath(e['path'], root): e['reason'] for e in summary['skipped']}
  assert skipped[os.path.join('cat', 'all')].startswith('a link to a folder read already')
  assert skipped[os.path.join('cat', 'also_dog.jpg')] == f'a second way to one file (a link): {root}/dog/dog_00.jpg'
  assert summary['skipped_counts'] == {'a link to a folder read already': 1, 'a second way to one file': 1}


def test_images_too_small_to_crop_are_skipped_with_why_and_counted(tmp_path):
  root = tmp_path / 'raw'
  _rgb_jpegs(str(root / 'cat'), 5)
  _rgb_jpegs(str(root / 'dog'), 5, seed=50)
  for c in ('cat', 'dog'):
    _save(Image.new('P', (1, 1)), str(root / c / 'spacer.gif'), 'GIF')
  _save(_noise(1, 30, 3), str(root / 'dog' / 'strip.png'), 'PNG')
  _save(_noise(2, 2, 4), str(root / 'dog' / 'tiny.png'), 'PNG')   # two pixels a side: the crop has one
  summary = conv.convert_dataset(str(root), str(tmp_path / 'out'), num_workers=1)
  assert summary['num_images'] == 11
  small = [e for e in summary['skipped'] if e['reason'].startswith('too small to crop')]
  assert sorted(os.path.basename(e['path']) for e in small) == ['spacer.gif', 'spacer.gif', 'strip.png']
  assert "(1x1 px; the trainer's crop needs at least 2 px a side" in small[0]['reason']
  assert summary['skipped_counts'] == {'too small to crop': 3}


def test_leaks_are_matched_across_splits_only_and_plain_pictures_by_their_bytes():
  """Validation A and B are both re-encodes of train T: B is reported though A (its own split) is nearer. Two
  unrelated plain pictures hash within a few bits of each other: they are not called copies."""
  leaks = conv.LeakedImages(drop=False)
  rng = np.random.default_rng(0)
  detailed = int(''.join(rng.choice(['0', '1'], 256)), 2)

  def image(sha, dhash):
    return clean_images.CleanedImage(b'x', 8, 8, sha256=sha, dhash=dhash)
  assert leaks.check('train', 't.jpg', image('t', detailed)) is None
  leaks.check('validation', 'a.jpg', image('a', detailed ^ 1))
  leaks.check('validation', 'b.jpg', image('b', detailed ^ 1 ^ (1 << 20)))  # its first band is a's, not t's
  assert [(f['path'], f['same_as']) for f in leaks.found] == [('a.jpg', 't.jpg'), ('b.jpg', 't.jpg')]
  plain = conv.LeakedImages(drop=True)
  plain.check('train', 'white.jpg', image('w', 0b1))
  assert plain.check('validation', 'other_white.jpg', image('o', 0b110)) is None and not plain.found
  plain.check('train', 'flat.jpg', image('same-bytes', 0))
  assert plain.check('validation', 'flat_copy.jpg', image('same-bytes', 0)).startswith('identical to an image of train')
