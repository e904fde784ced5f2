"""Tiny images the converter's tests draw into class folders, and the records they read back from its shards."""
import os
from typing import Dict, List

import numpy as np
from PIL import Image

from tools.convert.splits import SPLITS


def noise(h: int, w: int, seed: int) -> Image.Image:
  return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8))


def save(img: Image.Image, path: str, fmt: str, **kw) -> str:
  os.makedirs(os.path.dirname(path), exist_ok=True)
  img.save(path, fmt, **kw)
  return path


def rgb_jpegs(folder: str, n: int, seed: int = 0, ext: str = '.jpg') -> List[str]:
  """n RGB JPEGs named <folder name>_<i><ext>, so basenames are unique across classes."""
  name = os.path.basename(folder)
  return [save(noise(12 + i, 16, seed + i), os.path.join(folder, f'{name}_{i:02d}{ext}'), 'JPEG')
          for i in range(n)]


def small_dataset(root) -> str:
  """Two class folders, a and b, of three 16 px wide RGB JPEGs each."""
  rgb_jpegs(str(root / 'a'), 3)
  rgb_jpegs(str(root / 'b'), 3, seed=9)
  return str(root)


def records(output_dir: str, split: str) -> List[Dict[str, object]]:
  """Parses every record of a split with the shared FEATURE_SPEC (plus the size/colour keys it does not parse)."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  from official_input import example_schema as es  # pylint: disable=import-outside-toplevel
  spec = dict(es.FEATURE_SPEC)
  spec.update({es.HEIGHT: tf.io.FixedLenFeature((), tf.int64, -1), es.WIDTH: tf.io.FixedLenFeature((), tf.int64, -1),
               es.COLORSPACE: tf.io.FixedLenFeature((), tf.string, ''),
               es.CHANNELS: tf.io.FixedLenFeature((), tf.int64, -1)})
  files = sorted(tf.io.gfile.glob(os.path.join(output_dir, f'{split}-*')))
  if not files:
    return []
  ds = tf.data.TFRecordDataset(files).map(lambda r: tf.io.parse_single_example(r, spec))
  return list(ds.as_numpy_iterator())


def by_filename(out: str) -> Dict[bytes, Dict[str, object]]:
  """Every record of every split, by its image/filename."""
  return {r['image/filename']: r for s in SPLITS for r in records(out, s)}
