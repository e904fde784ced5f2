"""Behaviour of tools/make_demo_dataset.py: counts, determinism, and classes a trivial statistic tells apart."""
import os
from typing import Tuple

import numpy as np
import pytest
from PIL import Image

from tools import make_demo_dataset as demo


def _shape_features(path: str) -> Tuple[float, float]:
  """(fraction of the border in the minority colour, fill of that colour's bounding box).

  Shapes sit inside the image (border fraction ~0) and fill their box differently (square 1, circle pi/4,
  triangle <= 1/2); stripes touch the border everywhere.
  """
  image = np.asarray(Image.open(path).convert('RGB'), dtype=np.float32)
  centres = [image[0, 0], image.reshape(-1, 3)[np.argmax(np.linalg.norm(image - image[0, 0], axis=-1))]]
  for _ in range(5):  # Two-colour k-means: background vs shape.
    other = np.linalg.norm(image - centres[1], axis=-1) < np.linalg.norm(image - centres[0], axis=-1)
    centres = [image[~other].mean(axis=0), image[other].mean(axis=0)]
  if other.mean() > 0.5:
    other = ~other
  ys, xs = np.nonzero(other)
  box = (ys.max() - ys.min() + 1) * (xs.max() - xs.min() + 1)
  edge = np.concatenate([other[0], other[-1], other[:, 0], other[:, -1]])
  return float(edge.mean()), float(other.sum() / box)


def test_makes_the_requested_counts_sizes_and_some_pngs(tmp_path):
  result = demo.make_demo_dataset(str(tmp_path), num_classes=4, images_per_class=8, image_size=(40, 60),
                                  png_fraction=0.3)
  assert result['classes'] == ['circles', 'squares', 'triangles', 'stripes']
  assert sorted(os.listdir(tmp_path)) == sorted(result['classes'])
  names = [n for c in result['classes'] for n in os.listdir(tmp_path / c)]
  assert len(names) == 32 and result['counts'] == {c: 8 for c in result['classes']}
  pngs = [n for n in names if n.endswith('.png')]
  assert len(pngs) == result['num_png'] > 0
  for c in result['classes']:
    for n in os.listdir(tmp_path / c):
      with Image.open(tmp_path / c / n) as img:
        assert img.mode == 'RGB' and all(40 <= s <= 60 for s in img.size)


def test_same_seed_same_images_and_non_empty_root_refused(tmp_path):
  demo.make_demo_dataset(str(tmp_path / 'a'), images_per_class=2, image_size=(32, 32), seed=3)
  demo.make_demo_dataset(str(tmp_path / 'b'), images_per_class=2, image_size=(32, 32), seed=3)
  for c in demo.CLASSES[:4]:
    assert sorted(os.listdir(tmp_path / 'a' / c)) == sorted(os.listdir(tmp_path / 'b' / c))
    for n in os.listdir(tmp_path / 'a' / c):
      assert (tmp_path / 'a' / c / n).read_bytes() == (tmp_path / 'b' / c / n).read_bytes()
  with pytest.raises(FileExistsError):
    demo.make_demo_dataset(str(tmp_path / 'a'), images_per_class=1)
  demo.make_demo_dataset(str(tmp_path / 'a'), images_per_class=1, image_size=(32, 32), overwrite=True)
  assert len(os.listdir(tmp_path / 'a' / 'circles')) == 1


def test_classes_are_distinguishable_by_a_trivial_statistic(tmp_path):
  result = demo.make_demo_dataset(str(tmp_path), images_per_class=10, image_size=(64, 96), png_fraction=0.2)
  features = {c: np.array([_shape_features(str(tmp_path / c / n)) for n in sorted(os.listdir(tmp_path / c))])
              for c in result['classes']}
  edge, fill = {c: f[:, 0] for c, f in features.items()}, {c: f[:, 1] for c, f in features.items()}
  assert edge['stripes'].min() > 0.2
  for shape in ('circles', 'squares', 'triangles'):
    assert edge[shape].max() < 0.05
  assert fill['squares'].min() > 0.9
  assert 0.65 < fill['circles'].min() and fill['circles'].max() < 0.88
  assert fill['triangles'].max() < 0.6


def test_demo_output_converts_to_records(tmp_path):
  from tools import imagenet_to_gcs
  demo.make_demo_dataset(str(tmp_path / 'images'), images_per_class=10, image_size=(32, 40), png_fraction=0.5)
  summary = imagenet_to_gcs.convert_dataset(str(tmp_path / 'images'), str(tmp_path / 'records'), num_workers=1)
  assert summary['labels'] == {'circles': 1, 'squares': 2, 'stripes': 3, 'triangles': 4}
  assert [summary['splits'][s]['images'] for s in imagenet_to_gcs.SPLITS] == [32, 4, 4]
  assert not summary['skipped']


def test_multi_label_data_is_a_planet_shaped_csv_with_rates_per_class(tmp_path):
  made = demo.make_multi_label_dataset(str(tmp_path / 'ml'), num_images=400, image_size=48,
                                       positive_rate=[0.05, 0.5, 0.5, 0.5], seed=3)
  with open(made['csv']) as f:
    lines = f.read().splitlines()
  assert lines[0] == 'image_name,tags' and len(lines) == 401
  names = sorted(os.listdir(tmp_path / 'ml' / 'images'))
  assert names[0] == 'img_00000.jpg' and lines[1].split(',')[0] == 'img_00000'   # names without extension
  tags = [line.split(',')[1].split() for line in lines[1:]]
  counts = {name: sum(name in t for t in tags) for name in made['classes']}
  assert counts == made['positives'] and made['negatives'] == sum(not t for t in tags)
  assert counts['circles'] < 40 < min(counts[c] for c in ('squares', 'triangles', 'stripes'))   # the rare class
  with Image.open(tmp_path / 'ml' / 'images' / names[0]) as image:
    assert image.size == (48, 48)
  with pytest.raises(FileExistsError, match='overwrite'):
    demo.make_multi_label_dataset(str(tmp_path / 'ml'), num_images=2, image_size=48)
  with pytest.raises(ValueError, match='one per class'):
    demo.make_multi_label_dataset(str(tmp_path / 'other'), positive_rate=[0.1, 0.2])
  with pytest.raises(ValueError, match='at least 48'):
    demo.make_multi_label_dataset(str(tmp_path / 'other'), image_size=32)


def test_the_command_line_takes_one_rate_for_all_classes_or_one_each(tmp_path, capsys):
  from absl import app  # pylint: disable=import-outside-toplevel
  from absl import flags  # pylint: disable=import-outside-toplevel

  def run(*args):
    fv = flags.FlagValues()
    demo.define_flags(fv)
    fv(['make_demo_dataset', '--multi_label', '--num_images=40', '--max_size=48', *args])
    demo.main(['make_demo_dataset'], fv)
  run(f'--output_dir={tmp_path / "one"}', '--positive_rates=1')
  assert 'circles 40, squares 40, triangles 40, stripes 40' in capsys.readouterr().out
  run(f'--output_dir={tmp_path / "each"}', '--positive_rates=0,1,0,1')
  assert 'circles 0, squares 40, triangles 0, stripes 40' in capsys.readouterr().out
  with pytest.raises(app.UsageError, match='--positive_rates takes numbers .* got 0.3,rare'):
    run(f'--output_dir={tmp_path / "bad"}', '--positive_rates=0.3,rare')
