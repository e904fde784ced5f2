"""Input pipeline benchmark: images/s of the optimized and basic pipelines against an honest CPU bound.

The bound: ``cores x (1 / single-threaded CPU cost per image)`` of exactly the optimized pipeline's work. The
'single thread' row runs the very function the optimized pipeline maps over each batch
(``imagenet_input.decode_batch`` with the pipeline's own ``DecodeConfig``: parse, decode-and-crop, resize, flip,
cast), fed by one TFRecord reader, in a tf.data pipeline confined to one thread (``private_threadpool_size=1``,
``max_intra_op_parallelism=1``, autotuning, injected prefetch and parallelism off). Its process CPU time per image
(``time.process_time``, all threads of the process) is the cost of the work; no pipeline can do that work on
``cores`` cores faster than the bound, so every row's "% of bound" is a real fraction of the achievable maximum.
Reading ahead, shuffling and batching overhead are not in the cost: the bound is tighter for it.

A row below the bound has two possible reasons, printed as factors whose product is the % of bound:
``busy = process CPU s / wall s / cores`` (cores left idle, or taken by other processes on a shared machine) and
``work = single-thread CPU ms / row CPU ms`` (CPU spent on something other than the work: thread hand-offs,
spinning thread pools, copies). Next to each measurement a probe runs ``cores`` threads of pure CPU work (SHA-256,
which releases the GIL) for half a second; the CPU they get ("avail", in cores) shows how much of the machine other
processes left, which separates a pipeline that idles from a machine that is shared.

All rows read the same TFRecords and are consumed inside a tf.function loop (no Python per element), after a
warm-up, over the same number of images. Every measurement builds its pipeline afresh; rows run round-robin
``--repeats`` times and the median is reported, so a noisy neighbour hurts every row alike.

Rows:
  parse only        read + parse the Example (no decoding): the reading ceiling
  single thread     the optimized pipeline's per-batch work on one thread: the cost that sets the bound
  optimized         ImageNetInput(pipeline='optimized') training input_fn: shuffle, repeat, batch, prefetch
  basic             ImageNetInput(pipeline='basic'): a plain sequential pipeline (full decode, no parallelism)
  ... +randaugment  the same two rows with RandAugment / AutoAugment / TrivialAugment-Wide, each against its own
  ... +autoaugment  single-thread bound, with the extra CPU cost per image of the augmentation (when the pipeline
  ... +trivialaugment_wide  supports it)
Targets: optimized >= 90% of the bound and >= 2x basic.

Large photos (``--large_photos=N``): writes N phone-photo-sized JPEGs (4000x3000, ~3 MB), converts them with
tools/imagenet_to_gcs.py once as they are and once with ``--max_image_side`` (512), and measures the optimized
pipeline on both: resizing at conversion should make training input >= 4x faster.

Usage:
  python -m tools.input_benchmark                       # writes 512 fake ImageNet-sized JPEGs to a temp dir
  python -m tools.input_benchmark --data_dir=gs://bucket/imagenet --num_batches=200
  python -m tools.input_benchmark --large_photos=64
"""
import dataclasses
import gc
import hashlib
import inspect
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

if __package__ in (None, ''):  # `python tools/<this>.py`: make the repository's packages importable.
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
from absl import logging
import tensorflow as tf

from official_input import example_schema
from official_input import imagenet_input
from official_input import resnet_preprocessing
from params import resnet_config
from tools import imagenet_to_gcs
from tools import make_fake_imagenet

SINGLE = 'single thread'
ROWS = ('parse only', SINGLE, 'optimized', 'basic')
AUGMENT_NAMES = ('randaugment', 'autoaugment', 'trivialaugment_wide')
TARGET_PCT_OF_BOUND = 90.0
TARGET_LARGE_PHOTO_SPEEDUP = 4.0


def define_flags() -> None:
  """Defined on demand (not at import) so tests and other tools can import this module."""
  flags.DEFINE_string('data_dir', None, 'TFRecords (train-*); unset = write fake ImageNet records to a temp dir.')
  flags.DEFINE_integer('batch_size', 32, 'Per-replica batch size.')
  flags.DEFINE_integer('image_size', 224, 'Output image size.')
  flags.DEFINE_integer('num_batches', 100, 'Batches measured per row and repeat (after warm-up).')
  flags.DEFINE_integer('warmup_batches', 20, 'Batches pulled before timing starts.')
  flags.DEFINE_integer('repeats', 3, 'Round-robin repeats of every row; the median is reported.')
  flags.DEFINE_enum('precision', 'float32', list(resnet_config.PRECISIONS), 'Output image dtype.')
  flags.DEFINE_integer('num_fake_images', 512, 'Fake training images written when --data_dir is unset.')
  flags.DEFINE_integer('shuffle_buffer_size', 1024, 'Shuffle buffer of the training pipelines.')
  flags.DEFINE_integer('num_parallel_calls', -1, 'Decode parallelism of the optimized pipeline; -1 = AUTOTUNE.')
  flags.DEFINE_integer('cores', None, 'Cores in the bound. Default: the CPUs this process may run on.',
                       lower_bound=1)
  flags.DEFINE_float('probe_seconds', 0.5, 'Length of the CPU-availability probe before each measurement.',
                     lower_bound=0.01)
  flags.DEFINE_boolean('augment', True, 'Also measure the RandAugment and AutoAugment rows (when supported).')
  flags.DEFINE_integer('large_photos', 0, 'Large-photo mode: write this many 4000x3000 photo-like JPEGs and '
                       'compare the optimized pipeline on them as they are and resized at conversion. 0 = off.',
                       lower_bound=0)
  flags.DEFINE_integer('large_photo_max_side', 512, 'Large-photo mode: the converter\'s --max_image_side.',
                       lower_bound=1)
  flags.DEFINE_integer('large_photo_num_batches', 8, 'Large-photo mode: batches measured per row and repeat (after '
                       '2 warm-up batches); short runs overstate img/s by the batches buffered ahead.', lower_bound=1)


def available_cores() -> int:
  """The CPUs this process may run on (containers, taskset), not the host's."""
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:
    return os.cpu_count() or 1


# ------------------------------------------------------------------------------------------------------------------
# Datasets.


def parse_only_dataset(files: Sequence[str]) -> tf.data.Dataset:
  """Reads and parses records, no decoding: how fast records arrive (per element)."""
  def _parse(record: tf.Tensor) -> tf.Tensor:
    return tf.io.parse_single_example(record, example_schema.FEATURE_SPEC)[example_schema.ENCODED]
  return (tf.data.Dataset.from_tensor_slices(list(files)).repeat()
          .interleave(tf.data.TFRecordDataset, cycle_length=min(len(files), 8), num_parallel_calls=tf.data.AUTOTUNE,
                      deterministic=False)
          .map(_parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
          .prefetch(tf.data.AUTOTUNE))


def augment_unsupported_reason() -> Optional[str]:
  """None when the optimized pipeline can run RandAugment/AutoAugment, else why the augment rows are skipped."""
  try:
    import official_input.augment  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError:
    return 'official_input/augment.py is missing'
  if not hasattr(resnet_preprocessing, 'AugmentConfig'):
    return 'resnet_preprocessing has no AugmentConfig'
  if 'augment' not in inspect.signature(imagenet_input.ImageNetInput).parameters:
    return 'ImageNetInput takes no augment= argument yet'
  return None


def make_input(data_dir: str, pipeline: str, image_size: int, dtype: tf.DType, shuffle_buffer_size: int,
               num_parallel_calls: int, augment_name: Optional[str] = None) -> imagenet_input.ImageNetInput:
  """The training input exactly as the trainer builds it (1000 classes), optionally with an augmentation."""
  kwargs = {}
  if augment_name:
    kwargs['augment'] = resnet_preprocessing.AugmentConfig(augment_name=augment_name)
  return imagenet_input.ImageNetInput(
      is_training=True, data_dir=data_dir, image_size=image_size, dtype=dtype, pipeline=pipeline,
      shuffle_buffer_size=shuffle_buffer_size, num_parallel_calls=num_parallel_calls, num_label_classes=1000,
      **kwargs)


def single_thread_options() -> tf.data.Options:
  """Everything of the pipeline on one thread: no private pool beyond 1, no intra-op parallelism, no injection."""
  options = tf.data.Options()
  options.threading.private_threadpool_size = 1
  options.threading.max_intra_op_parallelism = 1
  options.autotune.enabled = False
  options.experimental_optimization.map_parallelization = False
  options.experimental_optimization.inject_prefetch = False
  options.experimental_optimization.parallel_batch = False
  return options


def single_thread_dataset(inp: imagenet_input.ImageNetInput, batch_size: int) -> tf.data.Dataset:
  """One reader, then the optimized pipeline's own per-batch function, on one thread (see the module doc)."""
  cfg = inp.decode_config(batch_size)
  records = tf.data.TFRecordDataset(inp.list_files(), buffer_size=imagenet_input.READ_BUFFER_BYTES).repeat()
  return (records.batch(batch_size, drop_remainder=True)
          .map(lambda r: imagenet_input.decode_batch(r, cfg))
          .with_options(single_thread_options()))


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


# ------------------------------------------------------------------------------------------------------------------
# Measuring and summarising.


@dataclasses.dataclass(frozen=True)
class RowSpec:
  """How to measure one row: a dataset factory, elements per measurement and per warm-up, images per element."""
  build: Callable[[], tf.data.Dataset]
  elements: int
  warmup_elements: int
  images_per_element: int


# (images, wall seconds, process CPU seconds, cores the probe got) of one measurement
Sample = Tuple[int, float, float, float]


def probe_available_cores(cores: int, seconds: float = 0.5) -> float:
  """Cores' worth of CPU this process gets when ``cores`` threads do nothing but compute (process CPU s / wall s)."""
  data = bytes(1 << 20)
  deadline = time.perf_counter() + seconds

  def _burn() -> None:
    digest = hashlib.sha256()
    while time.perf_counter() < deadline:
      digest.update(data)  # releases the GIL: the threads really run in parallel

  threads = [threading.Thread(target=_burn, daemon=True) for _ in range(cores)]
  wall, cpu = time.perf_counter(), time.process_time()
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  return (time.process_time() - cpu) / (time.perf_counter() - wall)


def measure(specs: Mapping[str, RowSpec], repeats: int, cores: int = 0,
            probe_seconds: float = 0.5) -> Dict[str, List[Sample]]:
  """Every row ``repeats`` times, round-robin; a fresh pipeline per measurement (no other row's threads running).

  With ``cores`` > 0 the availability probe runs right before each pipeline is built (else avail is reported as
  0): not between warm-up and timing, where the pipeline would fill its buffers in the background meanwhile.
  """
  samples: Dict[str, List[Sample]] = {row: [] for row in specs}
  for repeat in range(repeats):
    for row, spec in specs.items():
      avail = probe_available_cores(cores, probe_seconds) if cores else 0.0
      consume = make_consumer(spec.build())
      consume(max(1, spec.warmup_elements))  # traces the loop, fills buffers, lets autotune settle
      wall, cpu = time_consumer(consume, spec.elements)
      del consume
      gc.collect()
      images = spec.elements * spec.images_per_element
      samples[row].append((images, wall, cpu, avail))
      logging.info('repeat %d %-26s %8.1f img/s %8.3f CPU ms/img (%.2f cores available)', repeat, row,
                   images / wall, 1000 * cpu / images, avail)
  return samples


def bound_row(row: str) -> str:
  """The single-thread row whose cost bounds ``row``: the one with the same augmentation."""
  suffix = row[row.index(' +'):] if ' +' in row else ''
  return SINGLE + suffix


def summarize(samples: Mapping[str, Sequence[Sample]], cores: int) -> Dict[str, Dict[str, float]]:
  """Per row the medians of img/s, CPU ms/img and busy cores, and its bound and % of it (see the module doc).

  bound img/s = cores * 1000 / (CPU ms per image of the row's single-thread row).
  """
  out: Dict[str, Dict[str, float]] = {}
  for row, rows in samples.items():
    out[row] = {'img_s': statistics.median(n / wall for n, wall, _, _ in rows),
                'cpu_ms': statistics.median(1000.0 * cpu / n for n, _, cpu, _ in rows),
                'busy_cores': statistics.median(cpu / wall for _, wall, cpu, _ in rows),
                'avail_cores': statistics.median(avail for _, _, _, avail in rows)}
  for row, r in out.items():
    single = out.get(bound_row(row))
    if single is None:
      continue
    r['bound_img_s'] = cores * 1000.0 / single['cpu_ms']
    r['pct_of_bound'] = 100.0 * r['img_s'] / r['bound_img_s']
    r['busy_pct'] = 100.0 * r['busy_cores'] / cores
    r['work_pct'] = 100.0 * single['cpu_ms'] / r['cpu_ms']
    if bound_row(row) != SINGLE and SINGLE in out:
      r['extra_cpu_ms'] = single['cpu_ms'] - out[SINGLE]['cpu_ms']
  return out


def run_benchmark(data_dir: str, batch_size: int = 32, image_size: int = 224, num_batches: int = 100,
                  warmup_batches: int = 20, repeats: int = 3, dtype: tf.DType = tf.float32,
                  shuffle_buffer_size: int = 1024, num_parallel_calls: int = -1,
                  augment_names: Sequence[str] = (), cores: Optional[int] = None,
                  rows: Sequence[str] = ROWS, probe_seconds: float = 0.5) -> Dict[str, Dict[str, float]]:
  """{row: {'img_s', 'cpu_ms', 'busy_cores', 'bound_img_s', 'pct_of_bound', ...}} (medians over the repeats).

  ``augment_names`` adds 'single thread +<name>' and 'optimized +<name>' rows; ``cores`` defaults to the CPUs
  available to this process. Every row pulls ``num_batches * batch_size`` images.
  """
  files = sorted(tf.io.gfile.glob('%s/train-*' % data_dir.rstrip('/')))
  if not files:
    raise FileNotFoundError('No train-* files in %s: pass --data_dir with TFRecord shards named train-00000-of-NNNNN '
                            'or leave it unset to write fake ones.' % data_dir)
  cores = cores or available_cores()

  def _inp(pipeline: str, augment_name: Optional[str] = None) -> imagenet_input.ImageNetInput:
    return make_input(data_dir, pipeline, image_size, dtype, shuffle_buffer_size, num_parallel_calls, augment_name)

  def _batches(ds_fn: Callable[[], tf.data.Dataset]) -> RowSpec:
    return RowSpec(ds_fn, num_batches, warmup_batches, batch_size)

  specs = {}
  for row in rows:
    if row == 'parse only':
      specs[row] = RowSpec(lambda: parse_only_dataset(files), num_batches * batch_size, warmup_batches * batch_size, 1)
    elif row == SINGLE:
      specs[row] = _batches(lambda: single_thread_dataset(_inp('optimized'), batch_size))
    elif row in ('optimized', 'basic'):
      specs[row] = _batches(lambda p=row: _inp(p).input_fn({'batch_size': batch_size}))
    else:
      raise ValueError('Unknown row %r: choose from %s' % (row, ROWS))
  failed = {}
  for name in augment_names:
    try:  # One batch first: an augmentation that fails costs its rows, not the whole report.
      next(iter(single_thread_dataset(_inp('optimized', name), batch_size)))
    except Exception as e:  # pylint: disable=broad-except
      logging.warning('Skipping the %s rows: %s', name, e)
      failed[f'optimized +{name}'] = {'error': '%s: %s' % (type(e).__name__, str(e).strip().splitlines()[-1])}
      continue
    specs[f'{SINGLE} +{name}'] = _batches(lambda a=name: single_thread_dataset(_inp('optimized', a), batch_size))
    specs[f'optimized +{name}'] = _batches(lambda a=name: _inp('optimized', a).input_fn({'batch_size': batch_size}))
  results = summarize(measure(specs, repeats, cores, probe_seconds), cores)
  results.update(failed)
  return results


def format_table(results: Mapping[str, Mapping[str, float]], images: int, cores: int) -> str:
  """The report: one line per row with img/s, CPU ms/img, % of bound and its two factors, then the verdicts."""
  head = '%-26s %9s %10s %9s %9s %7s %7s %6s' % ('row', 'images/s', 'CPU ms/img', 'bound/s', '% bound', 'busy%',
                                                  'work%', 'avail')
  lines = [head, '-' * len(head)]
  for row, r in results.items():
    if 'error' in r:
      lines.append('%-26s skipped: %s' % (row, r['error'][:200]))
      continue
    lines.append('%-26s %9.1f %10.3f %9.1f %8.1f%% %6.0f%% %6.0f%% %6.2f' % (
        row, r['img_s'], r['cpu_ms'], r.get('bound_img_s', float('nan')), r.get('pct_of_bound', float('nan')),
        r.get('busy_pct', float('nan')), r.get('work_pct', float('nan')), r.get('avail_cores', float('nan'))))
  lines.append('-' * len(head))
  lines.append('bound = %d cores x 1000 / single-thread CPU ms per image; %% bound = busy%% x work%%; avail = cores '
               'a pure-CPU probe got next to the row (< %d: other processes share the machine)' % (cores, cores))
  if 'optimized' in results and 'pct_of_bound' in results['optimized']:
    pct = results['optimized']['pct_of_bound']
    lines.append('optimized / bound:   %6.1f%%  (target >= %.0f%%: %s)' % (
        pct, TARGET_PCT_OF_BOUND, 'met' if pct >= TARGET_PCT_OF_BOUND else 'NOT met'))
  if 'optimized' in results and 'basic' in results:
    lines.append('optimized / basic:   %6.2fx  (target >= 2x)' % (results['optimized']['img_s'] /
                                                                  results['basic']['img_s']))
  for row, r in results.items():
    if 'extra_cpu_ms' in r and row.startswith('optimized') and 'error' not in r:
      name = row.split('+', 1)[1]
      lines.append('%-12s extra CPU per image: %+.3f ms (single thread), optimized %.1f%% of its bound' % (
          name, r['extra_cpu_ms'], r['pct_of_bound']))
  lines.append('(%d images per measurement, median of the repeats)' % images)
  return '\n'.join(lines)


# ------------------------------------------------------------------------------------------------------------------
# Large photos: what resizing at conversion buys.


def _dir_bytes(path: str, prefix: str = '') -> int:
  return sum(os.path.getsize(os.path.join(path, n)) for n in os.listdir(path) if n.startswith(prefix))


def run_large_photos(work_dir: str, num_photos: int = 64, max_image_side: int = 512, width: int = 4000,
                     height: int = 3000, batch_size: int = 32, image_size: int = 224, num_batches: int = 8,
                     warmup_batches: int = 2, repeats: int = 3, dtype: tf.DType = tf.float32,
                     cores: Optional[int] = None, num_workers: Optional[int] = None,
                     probe_seconds: float = 0.5) -> Dict[str, Dict[str, float]]:
  """Writes photos, converts them as they are ('full') and resized ('resized'), measures both pipelines.

  Returns {'full' | 'resized': {'convert_s', 'source_mb', 'records_mb', 'img_s', 'cpu_ms', 'pct_of_bound', ...}}.
  The shuffle buffer is the photo count: a larger one would hold repeats of ~3 MB records for nothing.
  """
  raw = os.path.join(work_dir, 'photos')
  start = time.perf_counter()
  make_fake_imagenet.write_photo_folders(raw, num_photos, width, height)
  logging.info('Wrote %d %dx%d photos (%.0f MB) in %.1f s.', num_photos, width, height,
               sum(_dir_bytes(os.path.join(raw, d)) for d in os.listdir(raw)) / 1e6, time.perf_counter() - start)
  out: Dict[str, Dict[str, float]] = {}
  for name, side in (('full', 0), ('resized', max_image_side)):
    records = os.path.join(work_dir, name)
    start = time.perf_counter()
    summary = imagenet_to_gcs.convert_dataset(raw, records, train_ratio=1.0, validation_ratio=0.0, test_ratio=0.0,
                                              num_workers=num_workers, max_image_side=side)
    convert_s = time.perf_counter() - start
    results = run_benchmark(records, batch_size, image_size, num_batches, warmup_batches, repeats, dtype,
                            shuffle_buffer_size=num_photos, cores=cores, rows=(SINGLE, 'optimized'),
                            probe_seconds=probe_seconds)
    out[name] = dict(results['optimized'], convert_s=convert_s, max_image_side=side,
                     records_mb=_dir_bytes(records, 'train-') / 1e6, images=summary['num_images'],
                     single_cpu_ms=results[SINGLE]['cpu_ms'])
  out['full']['source_mb'] = out['resized']['source_mb'] = sum(
      _dir_bytes(os.path.join(raw, d)) for d in os.listdir(raw)) / 1e6
  return out


def format_large_photos(results: Mapping[str, Mapping[str, float]], width: int, height: int) -> str:
  head = '%-22s %9s %10s %10s %9s %9s %8s' % ('records', 'MB', 'convert s', 'images/s', 'CPU ms/img',
                                             '1-thr ms', '% bound')
  lines = [head, '-' * len(head)]
  for name, r in results.items():
    label = '%dx%d as is' % (width, height) if not r['max_image_side'] else 'max side %d' % r['max_image_side']
    lines.append('%-22s %9.1f %10.1f %10.1f %9.3f %9.3f %7.1f%%' % (
        label, r['records_mb'], r['convert_s'], r['img_s'], r['cpu_ms'], r['single_cpu_ms'], r['pct_of_bound']))
  speedup = results['resized']['img_s'] / results['full']['img_s']
  lines.append('-' * len(head))
  lines.append('resized / full: %.1fx images/s (target >= %.0fx: %s); %d photos, %.0f MB of JPEGs' % (
      speedup, TARGET_LARGE_PHOTO_SPEEDUP, 'met' if speedup >= TARGET_LARGE_PHOTO_SPEEDUP else 'NOT met',
      results['full']['images'], results['full']['source_mb']))
  return '\n'.join(lines)


# ------------------------------------------------------------------------------------------------------------------
# Command line.


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError('Unexpected arguments: %s' % (argv[1:],))
  fl = flags.FLAGS
  dtype = tf.as_dtype(fl.precision)
  cores = fl.cores or available_cores()
  if fl.large_photos:
    work_dir = tempfile.mkdtemp(prefix='large_photos_')
    try:
      results = run_large_photos(work_dir, fl.large_photos, fl.large_photo_max_side, batch_size=fl.batch_size,
                                 image_size=fl.image_size, num_batches=fl.large_photo_num_batches,
                                 repeats=fl.repeats, dtype=dtype, cores=cores, probe_seconds=fl.probe_seconds)
    finally:
      shutil.rmtree(work_dir, ignore_errors=True)
    print('Large photos: optimized pipeline, batch %d, %dx%d, %s, %d cores' % (
        fl.batch_size, fl.image_size, fl.image_size, fl.precision, cores))
    print(format_large_photos(results, 4000, 3000))
    return
  augment_names: Tuple[str, ...] = ()
  note = None
  if fl.augment:
    note = augment_unsupported_reason()
    augment_names = () if note else AUGMENT_NAMES
  data_dir, tmp_dir = fl.data_dir, None
  if not data_dir:
    tmp_dir = tempfile.mkdtemp(prefix='fake_imagenet_')
    print('Writing %d fake ImageNet-sized JPEG records to %s ...' % (fl.num_fake_images, tmp_dir))
    make_fake_imagenet.write_fake_imagenet(tmp_dir, num_train=fl.num_fake_images, num_validation=0, num_shards=8)
    data_dir = tmp_dir
  try:
    results = run_benchmark(data_dir, fl.batch_size, fl.image_size, fl.num_batches, fl.warmup_batches,
                            fl.repeats, dtype, fl.shuffle_buffer_size, fl.num_parallel_calls, augment_names, cores,
                            probe_seconds=fl.probe_seconds)
  finally:
    if tmp_dir:
      shutil.rmtree(tmp_dir, ignore_errors=True)
  print('Input pipeline benchmark: batch %d, %dx%d, %s, %d cores, data %s' % (
      fl.batch_size, fl.image_size, fl.image_size, fl.precision, cores, fl.data_dir or 'fake (temp dir)'))
  print(format_table(results, fl.num_batches * fl.batch_size, cores))
  if note:
    print('RandAugment/AutoAugment rows skipped: %s.' % note)


def run_main() -> None:
  define_flags()
  app.run(main)


if __name__ == '__main__':
  run_main()
