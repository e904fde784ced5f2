"""Input pipeline benchmark: images/s of parse-only, the decode ceiling, the optimized and the basic pipeline.

All rows read the same TFRecords and are consumed inside a tf.function loop (no Python per element), after a
warm-up, over the same number of images. Every measurement builds its pipeline afresh (no other row's threads
running meanwhile); rows run round-robin ``--repeats`` times and the median is reported, so a noisy neighbour hurts
every row alike. CPU ms/img (process CPU time / images) is printed too: on a shared machine it is steadier than
wall time.

Rows:
  parse only      read + parse the Example (no decoding): the reading ceiling
  decode ceiling  read + parse + crop-decode + resize (training preprocessing), fully parallel, unbatched
  optimized       ImageNetInput(pipeline='optimized') training input_fn: shuffle, repeat, batch, prefetch
  basic           ImageNetInput(pipeline='basic'): the seed's sequential pipeline (full decode, no parallelism)
Targets (issue 4): optimized >= 90% of the decode ceiling and >= 2x basic.

Usage:
  python -m tools.input_benchmark                       # writes 512 fake ImageNet-sized JPEGs to a temp dir
  python -m tools.input_benchmark --data_dir=gs://bucket/imagenet --num_batches=200
"""
import gc
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Callable, Dict, List, Sequence, Tuple

if __package__ in (None, ''):  # `python tools/<this>.py`: make the repository's packages importable.
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
from absl import logging
import tensorflow as tf

from official_input import example_schema
from official_input import imagenet_input
from official_input import resnet_preprocessing
from tools import make_fake_imagenet

ROWS = ('parse only', 'decode ceiling', 'optimized', 'basic')


def define_flags() -> None:
  """Defined on demand (not at import) so tests and other tools can import this module."""
  flags.DEFINE_string('data_dir', None, 'TFRecords (train-*); unset = write fake ImageNet records to a temp dir.')
  flags.DEFINE_integer('batch_size', 32, 'Per-replica batch size.')
  flags.DEFINE_integer('image_size', 224, 'Output image size.')
  flags.DEFINE_integer('num_batches', 100, 'Batches measured per row and repeat (after warm-up).')
  flags.DEFINE_integer('warmup_batches', 20, 'Batches pulled before timing starts.')
  flags.DEFINE_integer('repeats', 3, 'Round-robin repeats of every row; the median is reported.')
  flags.DEFINE_enum('precision', 'float32', list(imagenet_input.PRECISION_DTYPES), 'Output image dtype.')
  flags.DEFINE_integer('num_fake_images', 512, 'Fake training images written when --data_dir is unset.')
  flags.DEFINE_integer('shuffle_buffer_size', 1024, 'Shuffle buffer of the training pipelines.')
  flags.DEFINE_integer('num_parallel_calls', -1, 'Decode parallelism of the optimized pipeline; -1 = AUTOTUNE.')


def parse_only_dataset(files: Sequence[str]) -> tf.data.Dataset:
  """Reads and parses records, no decoding: how fast records arrive (per element)."""
  def _parse(record: tf.Tensor) -> tf.Tensor:
    return tf.io.parse_single_example(record, example_schema.FEATURE_SPEC)[example_schema.ENCODED]
  return (tf.data.Dataset.from_tensor_slices(list(files)).repeat()
          .interleave(tf.data.TFRecordDataset, cycle_length=min(len(files), 8), num_parallel_calls=tf.data.AUTOTUNE,
                      deterministic=False)
          .map(_parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
          .prefetch(tf.data.AUTOTUNE))


def decode_ceiling_dataset(files: Sequence[str], image_size: int, dtype: tf.DType) -> tf.data.Dataset:
  """Read + parse + the training preprocessing (crop-decode, resize, flip), fully parallel, one image per element."""
  def _decode(record: tf.Tensor) -> tf.Tensor:
    encoded = tf.io.parse_single_example(record, example_schema.FEATURE_SPEC)[example_schema.ENCODED]
    return resnet_preprocessing.preprocess_image(encoded, True, image_size, dtype)
  return (tf.data.Dataset.from_tensor_slices(list(files)).repeat()
          .interleave(tf.data.TFRecordDataset, cycle_length=min(len(files), 8), num_parallel_calls=tf.data.AUTOTUNE,
                      deterministic=False)
          .map(_decode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
          .prefetch(tf.data.AUTOTUNE))


def pipeline_dataset(data_dir: str, pipeline: str, batch_size: int, image_size: int, dtype: tf.DType,
                     shuffle_buffer_size: int, num_parallel_calls: int) -> tf.data.Dataset:
  inp = imagenet_input.ImageNetInput(
      is_training=True, data_dir=data_dir, image_size=image_size, dtype=dtype, pipeline=pipeline,
      shuffle_buffer_size=shuffle_buffer_size, num_parallel_calls=num_parallel_calls, num_label_classes=1000)
  return inp.input_fn({'batch_size': batch_size})


@tf.function
def _pull(iterator: tf.data.Iterator, n: tf.Tensor) -> tf.Tensor:
  """Pulls n elements in-graph: no Python work per element, nothing copied out. One trace per element spec."""
  count = tf.constant(0)
  for _ in tf.range(n):
    element = next(iterator)
    count += tf.size(tf.nest.flatten(element)[0])
  return count


def make_consumer(ds: tf.data.Dataset) -> Callable[[int], None]:
  iterator = iter(ds)
  return lambda n: _pull(iterator, tf.constant(n)).numpy()


def time_consumer(consume: Callable[[int], None], n: int) -> Tuple[float, float]:
  """(wall seconds, process CPU seconds) to pull n elements."""
  wall, cpu = time.perf_counter(), time.process_time()
  consume(n)
  return time.perf_counter() - wall, time.process_time() - cpu


def run_benchmark(data_dir: str, batch_size: int = 32, image_size: int = 224, num_batches: int = 100,
                  warmup_batches: int = 20, repeats: int = 3, dtype: tf.DType = tf.float32,
                  shuffle_buffer_size: int = 1024, num_parallel_calls: int = -1) -> Dict[str, Dict[str, float]]:
  """{row: {'img_s', 'cpu_ms'}}, each the median over ``repeats`` round-robin measurements."""
  files = sorted(tf.io.gfile.glob('%s/train-*' % data_dir.rstrip('/')))
  if not files:
    raise FileNotFoundError('No train-* files in %s' % data_dir)
  images = num_batches * batch_size
  # (dataset, elements per measured run, elements per warm-up): unbatched rows pull single images.
  builders = {
      'parse only': (lambda: parse_only_dataset(files), images, warmup_batches * batch_size),
      'decode ceiling': (lambda: decode_ceiling_dataset(files, image_size, dtype), images,
                         warmup_batches * batch_size),
      'optimized': (lambda: pipeline_dataset(data_dir, 'optimized', batch_size, image_size, dtype,
                                             shuffle_buffer_size, num_parallel_calls), num_batches, warmup_batches),
      'basic': (lambda: pipeline_dataset(data_dir, 'basic', batch_size, image_size, dtype, shuffle_buffer_size,
                                         num_parallel_calls), num_batches, warmup_batches),
  }
  samples: Dict[str, List[Tuple[float, float]]] = {row: [] for row in builders}
  for repeat in range(repeats):
    for row, (build, n, warmup) in builders.items():
      # A fresh pipeline per measurement: no other row's background threads refill buffers meanwhile, and every
      # row starts from the same state (warmed up, buffers at their steady level).
      consume = make_consumer(build())
      consume(max(1, warmup))  # traces the loop, fills buffers, lets autotune settle
      wall, cpu = time_consumer(consume, n)
      del consume
      gc.collect()
      samples[row].append((images / wall, 1000.0 * cpu / images))
      logging.info('repeat %d %-15s %8.0f img/s %6.3f CPU ms/img', repeat, row, images / wall,
                   1000.0 * cpu / images)
  return {row: {'img_s': statistics.median(s[0] for s in rows), 'cpu_ms': statistics.median(s[1] for s in rows)}
          for row, rows in samples.items()}


def format_table(results: Dict[str, Dict[str, float]], images: int) -> str:
  lines = ['%-16s %10s %12s' % ('row', 'images/s', 'CPU ms/img'), '-' * 40]
  for row in ROWS:
    lines.append('%-16s %10.0f %12.3f' % (row, results[row]['img_s'], results[row]['cpu_ms']))
  ceiling = results['optimized']['img_s'] / results['decode ceiling']['img_s']
  speedup = results['optimized']['img_s'] / results['basic']['img_s']
  lines.append('-' * 40)
  lines.append('optimized / decode ceiling: %5.1f%%  (target >= 90%%)' % (100.0 * ceiling))
  lines.append('optimized / basic:          %5.2fx  (target >= 2x)' % speedup)
  lines.append('(%d images per measurement, median of the repeats)' % images)
  return '\n'.join(lines)


def main(argv: Sequence[str]) -> None:
  del argv
  fl = flags.FLAGS
  data_dir, tmp_dir = fl.data_dir, None
  if not data_dir:
    tmp_dir = tempfile.mkdtemp(prefix='fake_imagenet_')
    print('Writing %d fake ImageNet-sized JPEG records to %s ...' % (fl.num_fake_images, tmp_dir))
    make_fake_imagenet.write_fake_imagenet(tmp_dir, num_train=fl.num_fake_images, num_validation=0, num_shards=8)
    data_dir = tmp_dir
  try:
    results = run_benchmark(data_dir, fl.batch_size, fl.image_size, fl.num_batches, fl.warmup_batches,
                            fl.repeats, imagenet_input.PRECISION_DTYPES[fl.precision], fl.shuffle_buffer_size,
                            fl.num_parallel_calls)
  finally:
    if tmp_dir:
      shutil.rmtree(tmp_dir, ignore_errors=True)
  print('Input pipeline benchmark: batch %d, %dx%d, %s, data %s' % (
      fl.batch_size, fl.image_size, fl.image_size, fl.precision, fl.data_dir or 'fake (temp dir)'))
  print(format_table(results, fl.num_batches * fl.batch_size))


def run_main() -> None:
  define_flags()
  app.run(main)


if __name__ == '__main__':
  run_main()
