"""Writes a small fake ImageNet: random JPEGs in the TFRecord schema, sharded like the real converter's output.

Why: tests, smoke runs and the input benchmark need records that look like ImageNet to the pipeline (JPEG bytes of
realistic size, 1-based labels, ``train-00000-of-00008`` names) without the 150 GB download. The images are smooth
gradients plus noise, so they compress to roughly ImageNet-sized files (~40-80 KB at 500x375) and cost the decoder
about as much as real photos do.

Usage:
  python -m tools.make_fake_imagenet --output_dir=/tmp/fake_imagenet --num_train=1024 --num_validation=256
"""
import io
import os
import sys
from typing import Dict, Iterator, List, Sequence, Tuple

if __package__ in (None, ''):  # `python tools/<this>.py`: make the repository's packages importable.
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
from absl import logging
import numpy as np
from PIL import Image
import tensorflow as tf

from official_input import dataset_layout
from official_input import example_schema

LABELS_FILE = dataset_layout.LABELS_FILE
SPLITS = ('train', 'validation', 'test')


def class_names(num_classes: int) -> List[str]:
  """Fake class names; line i of labels.txt names 0-based class i (stored label i + 1)."""
  return ['fake_class_%04d' % i for i in range(num_classes)]


def random_image(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
  """A uint8 [H, W, 3] image: a random colour gradient, coarse blobs and fine noise (photo-like entropy)."""
  ys = np.linspace(0.0, 1.0, height, dtype=np.float32)[:, None, None]
  xs = np.linspace(0.0, 1.0, width, dtype=np.float32)[None, :, None]
  corners = rng.uniform(0, 255, size=(4, 3)).astype(np.float32)
  image = (corners[0] * (1 - ys) * (1 - xs) + corners[1] * (1 - ys) * xs +
           corners[2] * ys * (1 - xs) + corners[3] * ys * xs)
  coarse = rng.normal(0, 40, size=(height // 16 + 1, width // 16 + 1, 3)).astype(np.float32)
  image += np.kron(coarse, np.ones((16, 16, 1), np.float32))[:height, :width]
  image += rng.normal(0, 12, size=(height, width, 3)).astype(np.float32)
  return np.clip(image, 0, 255).astype(np.uint8)


def photo_like_images(rng: np.random.Generator, count: int, height: int, width: int,
                      noise_std: float = 8.0) -> Iterator[np.ndarray]:
  """``count`` large uint8 [H, W, 3] images like random_image, cheap enough to make dozens of 12-megapixel ones.

  Fine noise is drawn once and rolled by a random offset per image (drawing 36M normals per 4000x3000 image
  costs ~2 s, the rest ~0.3 s); gradients and coarse blobs are drawn per image. At JPEG quality 90, 4000x3000
  images come out at ~3 MB, like phone photos, and cost the decoder what photos of that size cost.
  """
  ys = np.linspace(0.0, 1.0, height, dtype=np.float32)[:, None, None]
  xs = np.linspace(0.0, 1.0, width, dtype=np.float32)[None, :, None]
  fine = rng.standard_normal((height, width, 3), dtype=np.float32) * np.float32(noise_std)
  for _ in range(count):
    corners = rng.uniform(0, 255, size=(4, 3)).astype(np.float32)
    image = (corners[0] * (1 - ys) * (1 - xs) + corners[1] * (1 - ys) * xs +
             corners[2] * ys * (1 - xs) + corners[3] * ys * xs)
    coarse = rng.normal(0, 40, size=(height // 64 + 1, width // 64 + 1, 3)).astype(np.float32)
    image += coarse.repeat(64, axis=0).repeat(64, axis=1)[:height, :width]
    image += np.roll(fine, (int(rng.integers(height)), int(rng.integers(width))), axis=(0, 1))
    yield np.clip(image, 0, 255).astype(np.uint8)


def write_photo_folders(root: str, num_images: int, width: int = 4000, height: int = 3000, num_classes: int = 2,
                        seed: int = 0, quality: int = 90) -> List[str]:
  """Writes ``num_images`` photo-sized JPEGs into ``<root>/<class>/photo_NNNN.jpg`` (the converter's input layout).

  Why: measuring what converting (and resizing) camera photos buys needs photos; returns the paths written.
  """
  if num_images < 1 or width < 1 or height < 1:
    raise ValueError('Need num_images, width and height >= 1, got %d, %d, %d' % (num_images, width, height))
  names = class_names(num_classes)
  paths = []
  rng = np.random.default_rng(seed)
  for i, image in enumerate(photo_like_images(rng, num_images, height, width)):
    folder = os.path.join(root, names[i % num_classes])
    os.makedirs(folder, exist_ok=True)
    paths.append(os.path.join(folder, 'photo_%04d.jpg' % i))
    with open(paths[-1], 'wb') as f:
      f.write(encode_jpeg(image, quality))
  return paths


def encode_jpeg(image: np.ndarray, quality: int = 90) -> bytes:
  buf = io.BytesIO()
  Image.fromarray(image).save(buf, format='JPEG', quality=quality)
  return buf.getvalue()


def shard_name(split: str, index: int, num_shards: int) -> str:
  """The converter's naming: ``train-00000-of-01024``."""
  return '%s-%05d-of-%05d' % (split, index, num_shards)


def _split_sizes(n: int, num_shards: int) -> List[int]:
  """Records per shard: ceil(n / shards) each, the last shorter, as the reference converter does."""
  num_shards = max(1, min(num_shards, n))
  chunk = -(-n // num_shards)
  return [min(chunk, n - i * chunk) for i in range(num_shards) if n - i * chunk > 0]


def write_split(output_dir: str, split: str, num_images: int, num_shards: int, num_classes: int,
                size_range: Tuple[int, int], rng: np.random.Generator, quality: int = 90) -> List[str]:
  """Writes one split; each shard goes to a temp name first and is renamed, so readers never see half a shard."""
  sizes = _split_sizes(num_images, num_shards)
  names = class_names(num_classes)
  paths = []
  image_index = 0
  for shard, count in enumerate(sizes):
    path = os.path.join(output_dir, shard_name(split, shard, len(sizes)))
    tmp_path = os.path.join(output_dir, '.tmp-' + os.path.basename(path))
    with tf.io.TFRecordWriter(tmp_path) as writer:
      for _ in range(count):
        height, width = (int(v) for v in rng.integers(size_range[0], size_range[1] + 1, size=2))
        label = int(rng.integers(1, num_classes + 1))
        encoded = encode_jpeg(random_image(rng, height, width), quality)
        filename = '%s_%08d.JPEG' % (split, image_index)
        example = example_schema.make_example(encoded, 'JPEG', label, names[label - 1], height, width,
                                              filename)
        writer.write(example.SerializeToString())
        image_index += 1
    tf.io.gfile.rename(tmp_path, path, overwrite=True)
    paths.append(path)
  logging.info('Wrote %d %s images in %d shards to %s', num_images, split, len(sizes), output_dir)
  return paths


def write_fake_imagenet(output_dir: str, num_train: int = 1024, num_validation: int = 256, num_test: int = 0,
                        num_shards: int = 8, num_classes: int = 1000, min_size: int = 300, max_size: int = 500,
                        seed: int = 0, jpeg_quality: int = 90) -> Dict[str, List[str]]:
  """Writes the fake dataset and ``labels.txt``; returns {split: [shard paths]} for the splits written."""
  if min_size < 1 or max_size < min_size:
    raise ValueError('Need 1 <= min_size <= max_size, got %d, %d' % (min_size, max_size))
  if num_classes < 1:
    raise ValueError('num_classes must be positive, got %d' % num_classes)
  tf.io.gfile.makedirs(output_dir)
  rng = np.random.default_rng(seed)
  written = {}
  for split, count in zip(SPLITS, (num_train, num_validation, num_test)):
    if count > 0:
      written[split] = write_split(output_dir, split, count, num_shards, num_classes, (min_size, max_size), rng,
                                   jpeg_quality)
  with tf.io.gfile.GFile(os.path.join(output_dir, LABELS_FILE), 'w') as f:
    f.write('\n'.join(class_names(num_classes)) + '\n')
  return written


def define_flags() -> None:
  """Defined on demand, not at import, so that other tools can import write_fake_imagenet without flag clashes."""
  flags.DEFINE_string('output_dir', None, 'Where to write the shards and labels.txt (local or gs://).')
  flags.DEFINE_integer('num_train', 1024, 'Training images.')
  flags.DEFINE_integer('num_validation', 256, 'Validation images.')
  flags.DEFINE_integer('num_test', 0, 'Test images (predict mode), 0 = no test split.')
  flags.DEFINE_integer('num_shards', 8, 'Shards per split (fewer when a split has fewer images).')
  flags.DEFINE_integer('num_classes', 1000, 'Number of classes; stored labels are 1..num_classes.')
  flags.DEFINE_integer('min_size', 300, 'Smallest image side, in pixels (each side is drawn independently).')
  flags.DEFINE_integer('max_size', 500, 'Largest image side, in pixels. ImageNet is mostly 500x375 / 375x500.')
  flags.DEFINE_integer('jpeg_quality', 90, 'JPEG quality of the fake images.')
  flags.DEFINE_integer('seed', 0, 'Random seed: the same seed writes the same files.')


def main(argv: Sequence[str]) -> None:
  del argv
  if not flags.FLAGS.output_dir:
    raise app.UsageError('--output_dir is required')
  fl = flags.FLAGS
  written = write_fake_imagenet(fl.output_dir, fl.num_train, fl.num_validation, fl.num_test, fl.num_shards,
                                fl.num_classes, fl.min_size, fl.max_size, fl.seed, fl.jpeg_quality)
  for split, paths in written.items():
    print('%s: %d shards in %s' % (split, len(paths), fl.output_dir))


def run_main() -> None:
  define_flags()
  app.run(main)


if __name__ == '__main__':
  run_main()
