"""tools/demo.py writes only what it owns: a folder it did not make is refused naming what is there; a rerun over its
own output works; files it did not draw among its images are refused by name. (The whole demo runs in `make demo`;
these test its folder rules, which run before any training.)"""
import os

import pytest

from tools import demo
from tools import make_demo_dataset

CLASSES = make_demo_dataset.CLASSES


def test_a_folder_the_demo_did_not_make_is_refused_and_kept(tmp_path):
  photo = tmp_path / 'proj' / 'images' / 'holiday' / 'my_photo.jpg'
  photo.parent.mkdir(parents=True)
  photo.write_bytes(b'mine')
  (tmp_path / 'proj' / 'notes.txt').write_text('mine')
  with pytest.raises(demo.NotTheDemosFolder, match=r'not made by the demo .* it holds images, notes.txt'):
    demo.prepare_output_dir(str(tmp_path / 'proj'), True, CLASSES)
  assert photo.read_bytes() == b'mine' and not (tmp_path / 'proj' / demo.MARKER).exists()


def test_a_rerun_over_its_own_output_replaces_its_run_and_images_and_nothing_else(tmp_path):
  out = tmp_path / 'demo_out'
  demo.prepare_output_dir(str(out), True, CLASSES)          # a new folder: made the demo's
  assert (out / demo.MARKER).exists()
  make_demo_dataset.make_demo_dataset(str(out / 'images'), num_classes=2, images_per_class=2, image_size=(32, 32))
  (out / 'run').mkdir()
  (out / 'run' / 'model.ckpt-1.index').write_bytes(b'x')
  (out / 'export').mkdir()
  (out / 'export' / 'keep.txt').write_text('an earlier export')
  demo.prepare_output_dir(str(out), True, CLASSES)
  assert not (out / 'images').exists() and not (out / 'run').exists()
  assert (out / 'export' / 'keep.txt').read_text() == 'an earlier export'


def test_a_file_it_did_not_draw_among_its_images_is_refused_by_name(tmp_path):
  out = tmp_path / 'demo_out'
  demo.prepare_output_dir(str(out), True, CLASSES)
  make_demo_dataset.make_demo_dataset(str(out / 'images'), num_classes=2, images_per_class=2, image_size=(32, 32))
  mine = out / 'images' / CLASSES[0] / 'my_photo.jpg'
  mine.write_bytes(b'mine')
  with pytest.raises(demo.NotTheDemosFolder, match=os.path.join('images', CLASSES[0], 'my_photo.jpg')):
    demo.prepare_output_dir(str(out), True, CLASSES)
  assert mine.read_bytes() == b'mine'


def test_an_earlier_demo_folder_without_the_marker_still_works(tmp_path):
  out = tmp_path / 'demo_out'
  make_demo_dataset.make_demo_dataset(str(out / 'images'), num_classes=2, images_per_class=2, image_size=(32, 32))
  (out / 'records').mkdir()
  demo.prepare_output_dir(str(out), True, CLASSES)
  assert (out / demo.MARKER).exists() and not (out / 'images').exists()


def test_the_demo_reports_the_seed_its_training_run_recorded(tmp_path):
  for seed, expected in (('7', 7), ('null', None)):
    (tmp_path / 'params.yaml').write_text(f'resnet_depth: 18\nrandom_seed: {seed}\n')
    assert demo.run_seed(str(tmp_path)) == expected
