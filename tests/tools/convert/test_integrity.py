"""tools/convert/integrity.py: evaluation images that copy training images (identical or re-encoded), named
and optionally dropped; images too small to crop, skipped with why."""
import os

import numpy as np
from PIL import Image

from tests.tools.convert import drawn_images as drawn
from tools.convert import clean_images
from tools.convert import summary as summary_lib
from tools.convert.conversion import convert_dataset
from tools.convert.integrity import LeakedImages


def _scene(seed: int, size: int = 64) -> Image.Image:
  """A smooth picture (random 8x8 colours, enlarged): re-encoding it moves its difference hash by a few bits only,
  while two seeds differ in about half of them."""
  rng = np.random.default_rng(seed)
  return Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).resize((size, size), Image.BILINEAR)


def test_evaluation_images_that_copy_training_images_are_named_and_can_be_dropped(tmp_path):
  root = tmp_path / 'raw'
  for c, offset in (('cat', 0), ('dog', 100)):
    for i in range(4):
      drawn.save(_scene(offset + i), str(root / 'train' / c / f'{c}_{i}.jpg'), 'JPEG', quality=95)
  for c, offset in (('cat', 0), ('dog', 100)):
    for i in range(2):
      drawn.save(_scene(offset + 50 + i), str(root / 'val' / c / f'new_{c}_{i}.jpg'), 'JPEG', quality=95)
  copy = root / 'val' / 'cat' / 'copied.jpg'
  copy.write_bytes((root / 'train' / 'cat' / 'cat_1.jpg').read_bytes())          # byte-identical
  drawn.save(_scene(102), str(root / 'val' / 'dog' / 'reencoded.png'), 'PNG')         # the same picture, another file
  summary = convert_dataset(str(root), str(tmp_path / 'out'), num_workers=1)
  leaked = summary['leaked']
  assert leaked['count'] == 2 and leaked['dropped'] == 0
  assert leaked['by_split_and_kind'] == {'validation identical': 1, 'validation near-identical': 1}
  pairs = {(os.path.basename(e['path']), os.path.basename(e['same_as']), e['kind']) for e in leaked['examples']}
  assert pairs == {('copied.jpg', 'cat_1.jpg', 'identical'), ('reencoded.png', 'dog_2.jpg', 'near-identical')}
  assert summary['splits']['validation']['images'] == 6   # reported, still converted
  assert 'Copies of images of an earlier split: 2' in summary_lib.format_summary(summary)
  dropped = convert_dataset(str(root), str(tmp_path / 'dropped'), num_workers=1, drop_leaked_images=True)
  assert dropped['splits']['validation']['images'] == 4 and dropped['leaked']['dropped'] == 2
  reasons = [e['reason'] for e in dropped['skipped']]
  assert any(r.startswith('identical to an image of train: ') and r.endswith('cat_1.jpg (--drop_leaked_images)')
             for r in reasons)
  assert dropped['skipped_counts'] == {'identical to an image of train': 1, 'near-identical to an image of train': 1}


def test_images_too_small_to_crop_are_skipped_with_why_and_counted(tmp_path):
  root = tmp_path / 'raw'
  drawn.rgb_jpegs(str(root / 'cat'), 5)
  drawn.rgb_jpegs(str(root / 'dog'), 5, seed=50)
  for c in ('cat', 'dog'):
    drawn.save(Image.new('P', (1, 1)), str(root / c / 'spacer.gif'), 'GIF')
  drawn.save(drawn.noise(1, 30, 3), str(root / 'dog' / 'strip.png'), 'PNG')
  drawn.save(drawn.noise(2, 2, 4), str(root / 'dog' / 'tiny.png'), 'PNG')   # two pixels a side: the crop has one
  summary = convert_dataset(str(root), str(tmp_path / 'out'), num_workers=1)
  assert summary['num_images'] == 11
  small = [e for e in summary['skipped'] if e['reason'].startswith('too small to crop')]
  assert sorted(os.path.basename(e['path']) for e in small) == ['spacer.gif', 'spacer.gif', 'strip.png']
  assert "(1x1 px; the trainer's crop needs at least 2 px a side" in small[0]['reason']
  assert summary['skipped_counts'] == {'too small to crop': 3}


def test_leaks_are_matched_across_splits_only_and_plain_pictures_by_their_bytes():
  """Validation A and B are both re-encodes of train T: B is reported though A (its own split) is nearer. Two
  unrelated plain pictures hash within a few bits of each other: they are not called copies."""
  leaks = LeakedImages(drop=False)
  rng = np.random.default_rng(0)
  detailed = int(''.join(rng.choice(['0', '1'], 256)), 2)

  def image(sha, dhash):
    return clean_images.CleanedImage(b'x', 8, 8, sha256=sha, dhash=dhash)
  assert leaks.check('train', 't.jpg', image('t', detailed)) is None
  leaks.check('validation', 'a.jpg', image('a', detailed ^ 1))
  leaks.check('validation', 'b.jpg', image('b', detailed ^ 1 ^ (1 << 20)))  # its first band is a's, not t's
  assert [(f['path'], f['same_as']) for f in leaks.found] == [('a.jpg', 't.jpg'), ('b.jpg', 't.jpg')]
  plain = LeakedImages(drop=True)
  plain.check('train', 'white.jpg', image('w', 0b1))
  assert plain.check('validation', 'other_white.jpg', image('o', 0b110)) is None and not plain.found
  plain.check('train', 'flat.jpg', image('same-bytes', 0))
  assert plain.check('validation', 'flat_copy.jpg', image('same-bytes', 0)).startswith('identical to an image of train')
