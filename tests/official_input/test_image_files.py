"""official_input/image_files.py: predict on raw files gives the model the pixels the file's record gives eval (every
kind of file the converter takes), reads what --predict_input names (folders, globs, files, comma-separated lists)
and says what it matched and skipped; and, end to end, a phone photo is predicted as the upright picture it shows."""
import csv
import io
import logging
import os
import shutil

import numpy as np
from PIL import Image
import pytest
import tensorflow as tf

from official_input import image_files
from official_input import imagenet_input as ii
from official_input import resnet_preprocessing
from tests.helpers import cli
from tests.official_input import image_kinds
from tools.convert import conversion

SIZE = 32
PYTHON_OPS = {'PyFunc', 'PyFuncStateless', 'EagerPyFunc'}


def _images(dataset: tf.data.Dataset) -> dict:
  """{file name: the image the model is fed} over a predict or eval dataset (padding left out)."""
  out = {}
  for features, _ in dataset:
    for image, name in zip(features['image'].numpy(), features['filename'].numpy()):
      if name:
        out[os.path.basename(name.decode())] = image
  return out


def _op_types(dataset: tf.data.Dataset) -> set:
  graph = tf.compat.v1.GraphDef()
  graph.ParseFromString(dataset._as_serialized_graph().numpy())  # pylint: disable=protected-access
  return {node.op for node in graph.node} | {n.op for f in graph.library.function for n in f.node_def}


def _write(path, data: bytes) -> str:
  os.makedirs(os.path.dirname(str(path)), exist_ok=True)
  with open(path, 'wb') as f:
    f.write(data)
  return str(path)


def _jpeg(array: np.ndarray, **kw) -> bytes:
  buf = io.BytesIO()
  Image.fromarray(array).save(buf, 'JPEG', **kw)
  return buf.getvalue()


@pytest.mark.slow
@pytest.mark.parametrize('max_image_side', [0, 40])
@pytest.mark.parametrize('crop_fraction', [resnet_preprocessing.CROP_FRACTION, 1.0])
def test_every_kind_of_file_gives_predict_the_pixels_its_record_gives_eval(tmp_path, max_image_side, crop_fraction):
  """The converter writes a record of each file; eval reads the records; predict reads the files: the images fed to
  the model are equal, bit for bit, for every kind (crop_fraction 1.0: the view multi-crop TTA reads)."""
  raw = tmp_path / 'raw'
  paths = image_kinds.write_kinds(str(raw / 'validation' / 'k'))
  _write(raw / 'train' / 'k' / 'other.jpg', _jpeg(image_kinds.picture(30, 30)))
  out = str(tmp_path / 'records')
  summary = conversion.convert_dataset(str(raw), out, num_workers=1, max_image_side=max_image_side)
  assert summary['skipped'] == [] and summary['splits']['validation']['images'] == len(paths)
  records = ii.ImageNetInput(is_training=False, data_dir=out, split='validation', image_size=SIZE,
                             num_label_classes=1, include_filename=True, crop_fraction=crop_fraction)
  from_records = _images(records.input_fn({'batch_size': 4}))
  resized = {'max_image_side': max_image_side} if max_image_side else {}  # the converter's setting for the data
  files = image_files.ImageFilesInput(str(raw / 'validation' / 'k' / '*'), image_size=SIZE,
                                      crop_fraction=crop_fraction, **resized)
  from_files = _images(files.input_fn({'batch_size': 4}))
  assert sorted(from_records) == sorted(paths)
  differ = [name for name in sorted(paths) if name in from_files
            and not np.array_equal(from_files[name], from_records[name])]
  missing = sorted(set(paths) - set(from_files))
  assert (differ, missing) == ([], []), files.skipped_by_reason
  assert files.skipped_records == 0


def test_a_phone_photo_is_fed_upright_and_transparency_on_white(tmp_path):
  """An EXIF orientation 6 photo is fed as the upright picture (stored upright as the converter stores it: Pillow's
  decode turned, a JPEG at quality 95), not as the sideways one a decoder that ignores the tag shows; a transparent
  background is white, not black."""
  phone = image_kinds.exif_jpeg(6, image_kinds.picture())
  with Image.open(io.BytesIO(phone)) as img:
    upright = img.transpose(Image.Transpose.ROTATE_270)
    buf = io.BytesIO()
    upright.save(buf, 'JPEG', quality=95)
    sideways = np.asarray(img)
  _write(tmp_path / 'phone.jpg', phone)
  _write(tmp_path / 'upright.jpg', buf.getvalue())
  _write(tmp_path / 'untagged.jpg', _jpeg(sideways, quality=95))
  _write(tmp_path / 'logo.png', image_kinds.kinds()['alpha.png'])
  images = _images(image_files.ImageFilesInput(str(tmp_path / '*'), image_size=SIZE).input_fn({'batch_size': 4}))
  assert np.array_equal(images['phone.jpg'], images['upright.jpg'])
  assert np.abs(images['phone.jpg'] - images['untagged.jpg']).mean() > 20
  corners = images['logo.png'][[0, 0, -1, -1], [0, -1, 0, -1]]
  assert corners.min() > 250, corners


def test_the_dataset_holds_a_python_op_only_when_a_file_needs_normalising(tmp_path):
  """Plain upright RGB JPEGs are read by TensorFlow ops alone (a TPU host without Python can run that)."""
  _write(tmp_path / 'a.jpg', _jpeg(image_kinds.picture()))
  _write(tmp_path / 'b.jpg', _jpeg(image_kinds.picture(20, 30)))
  plain = image_files.ImageFilesInput(str(tmp_path / '*'), image_size=SIZE).input_fn({'batch_size': 2})
  assert not _op_types(plain) & PYTHON_OPS
  _write(tmp_path / 'c.png', image_kinds.kinds()['alpha.png'])
  mixed = image_files.ImageFilesInput(str(tmp_path / '*'), image_size=SIZE).input_fn({'batch_size': 2})
  assert _op_types(mixed) & PYTHON_OPS


def _tree(root) -> None:
  """photos/ with subfolders, hidden files, a sidecar, a HEIC and a link back up; other/ with a file without an
  extension."""
  kinds = image_kinds.kinds()
  _write(root / 'photos' / 'a.jpg', kinds['rgb.jpg'])
  _write(root / 'photos' / 'sub' / 'b.png', kinds['alpha.png'])
  _write(root / 'photos' / 'sub' / 'deeper' / 'c.TIF', kinds['scan.tif'])
  _write(root / 'photos' / '.hidden.jpg', kinds['rgb.jpg'])
  _write(root / 'photos' / '._a.jpg', b'\0\5\26\7 a macOS resource fork')
  _write(root / 'photos' / '.thumbs' / 'x.jpg', kinds['rgb.jpg'])
  _write(root / 'photos' / 'notes.txt', b'not a picture')
  _write(root / 'photos' / 'IMG_2.HEIC', b'\0\0\0\x18ftypheic')
  os.symlink('..', root / 'photos' / 'sub' / 'up')  # a loop: photos/sub/up/sub/up/...
  _write(root / 'other' / 'd.webp', kinds['web.webp'])
  _write(root / 'other' / 'e', kinds['phone_exif6.jpg'])  # an image without an extension
  _write(root / 'other' / 'f.gif', kinds['animated.gif'])


def _relative(files, root) -> list:
  return [os.path.relpath(f, root) for f in files]


def test_a_folder_is_read_recursively_by_image_extension_without_hidden_names_or_loops(tmp_path):
  _tree(tmp_path)
  matched = image_files.match(str(tmp_path / 'photos'))
  assert _relative(matched.files, tmp_path) == ['photos/a.jpg', 'photos/sub/b.png', 'photos/sub/deeper/c.TIF']
  assert [(os.path.relpath(p, tmp_path), why) for p, why in matched.skipped] == [
      ('photos/IMG_2.HEIC', image_files.NOT_AN_IMAGE_NAME), ('photos/notes.txt', image_files.NOT_AN_IMAGE_NAME)]
  assert matched.unmatched == []


def test_globs_files_and_comma_separated_lists(tmp_path):
  _tree(tmp_path)
  assert _relative(image_files.match(str(tmp_path / 'photos' / '*.jpg')).files, tmp_path) == ['photos/a.jpg']
  assert _relative(image_files.match(str(tmp_path / 'photos' / '*')).files, tmp_path) == [
      'photos/a.jpg', 'photos/sub/b.png', 'photos/sub/deeper/c.TIF']      # a glob's folders are read too
  listed = f'{tmp_path}/photos/sub/deeper , {tmp_path}/other/*.webp,{tmp_path}/other/e,{tmp_path}/nowhere/*.jpg'
  matched = image_files.match(listed)
  assert _relative(matched.files, tmp_path) == ['other/d.webp', 'other/e', 'photos/sub/deeper/c.TIF']
  assert matched.unmatched == [f'{tmp_path}/nowhere/*.jpg']
  # A name with a comma that exists is a file, not a list.
  comma = _write(tmp_path / 'x,y.jpg', image_kinds.kinds()['rgb.jpg'])
  assert image_files.match(comma).files == [comma]


def test_predict_input_logs_what_it_matched_normalises_and_skips(tmp_path, caplog):
  _tree(tmp_path)
  _write(tmp_path / 'other' / 'broken.jpg', b'\xff\xd8\xff not really a JPEG')
  spec = f'{tmp_path}/photos,{tmp_path}/other,{tmp_path}/other/e,{tmp_path}/nowhere.jpg'
  inp = image_files.ImageFilesInput(spec, image_size=SIZE)
  with caplog.at_level(logging.INFO, logger='absl'):   # whatever verbosity another test left absl at
    names = _relative(inp.list_files(), tmp_path)
  assert names == ['other/d.webp', 'other/e', 'other/f.gif', 'photos/a.jpg', 'photos/sub/b.png',
                   'photos/sub/deeper/c.TIF']
  log = '\n'.join(r.getMessage() for r in caplog.records)
  assert (f'predict_input={spec}: 6 image files to predict, 1 read as they are (upright RGB JPEGs), 5 normalised as '
          'the converter does first (1 GIF/P, 1 JPEG/RGB EXIF orientation 6, 1 PNG/RGBA, 1 TIFF/RGB, 1 WEBP/RGBA).'
          ) in log
  assert (f'skipping 3 of the 9 files matched: 1 not an image Pillow can read ({tmp_path}/other/broken.jpg); '
          f'2 not an image file extension ({tmp_path}/photos/IMG_2.HEIC, {tmp_path}/photos/notes.txt)') in log
  assert f'{tmp_path}/nowhere.jpg matched no file' in log
  predicted = _images(inp.input_fn({'batch_size': 4}))
  assert sorted(predicted) == ['a.jpg', 'b.png', 'c.TIF', 'd.webp', 'e', 'f.gif']
  assert inp.skipped_records == 3
  assert inp.skipped_by_reason['not an image Pillow can read'] == 1
  assert inp.skipped_by_reason[image_files.NOT_AN_IMAGE_NAME] == 2


def test_nothing_to_predict_is_an_error_that_says_why(tmp_path):
  _write(tmp_path / 'IMG_1.HEIC', b'\0\0\0\x18ftypheic')
  _write(tmp_path / 'notes.txt', b'words')
  with pytest.raises(FileNotFoundError, match=r"No image to predict in .*: 2 files matched, each skipped \(2 not an "
                                              r'image file extension\)\. Image files end in \.jpg, '):
    image_files.ImageFilesInput(str(tmp_path)).list_files()
  with pytest.raises(FileNotFoundError, match='No image files match .*nothing'):
    image_files.ImageFilesInput(str(tmp_path / 'nothing*.jpg')).list_files()


def test_a_file_that_fails_to_decode_is_skipped_in_the_dataset_and_counted(tmp_path):
  """The header check passes, the decode fails: in the normaliser (a truncated PNG) or in TensorFlow's decoder (a
  truncated upright JPEG); the other files are predicted."""
  kinds = image_kinds.kinds()
  big = np.random.default_rng(0).integers(0, 256, (64, 64, 3), np.uint8)
  png = io.BytesIO()
  Image.fromarray(big).save(png, 'PNG')
  _write(tmp_path / 'cut.png', png.getvalue()[:len(png.getvalue()) // 2])
  jpeg = _jpeg(big)
  _write(tmp_path / 'cut.jpg', jpeg[:len(jpeg) // 2])
  _write(tmp_path / 'good.png', kinds['alpha.png'])
  _write(tmp_path / 'good.jpg', kinds['rgb.jpg'])
  inp = image_files.ImageFilesInput(str(tmp_path / '*'), image_size=SIZE)
  assert sorted(_images(inp.input_fn({'batch_size': 4}))) == ['good.jpg', 'good.png']
  assert inp.skipped_by_reason['undecodable image'] == 2 and inp.skipped_records == 2


@pytest.mark.slow
def test_predict_writes_the_probabilities_of_the_upright_picture_for_a_phone_photo(tmp_path):
  """End to end (resnet_main --mode=predict on a trained tiny run): a photo a phone stored sideways with EXIF
  orientation 6 gets the probabilities of the same picture stored upright, not those of the sideways pixels."""
  model_dir, _, _ = cli.shared_trained_run()
  run = str(tmp_path / 'run')
  shutil.copytree(model_dir, run, ignore=shutil.ignore_patterns('export'))
  photos = tmp_path / 'photos'
  picture = image_kinds.picture(60, 80)
  phone = image_kinds.exif_jpeg(6, picture)
  with Image.open(io.BytesIO(phone)) as img:
    buf = io.BytesIO()
    img.transpose(Image.Transpose.ROTATE_270).save(buf, 'JPEG', quality=95)  # turned by a photo app, saved upright
    sideways = np.asarray(img)
  _write(photos / 'phone.jpg', phone)
  _write(photos / 'upright.jpg', buf.getvalue())
  _write(photos / 'untagged.jpg', _jpeg(sideways, quality=95))
  output = str(tmp_path / 'predictions.csv')
  result = cli.run_in_process('--mode=predict', f'--model_dir={run}', f'--predict_input={photos}/*.jpg',
                              f'--predict_output={output}', base=())
  assert result.code == 0, result.log[-3000:]
  with open(output) as f:
    rows = {os.path.basename(row['image']): row for row in csv.DictReader(f)}

  def probabilities(name):
    row = rows[name]
    return {row[f'top{i}_label']: row[f'top{i}_probability'] for i in range(1, 5)}
  assert probabilities('phone.jpg') == probabilities('upright.jpg')
  assert probabilities('phone.jpg') != probabilities('untagged.jpg')
