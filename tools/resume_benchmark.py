r"""What an exact resume costs: checkpoint size and save time with the state a run carries, the time a resumed input
takes to its first batch and the bytes it reads on the way, and the same resume simulated at ImageNet scale.

A resume restores three things beside the weights (docs/faults.md): the step (the input's place is derived from
it: records a pipeline gave = step x its batches), the run's input seed, and the random streams Keras keeps out of
a model's checkpoint (stochastic depth, dropout, DropBlock). Rows:

  checkpoint   per model (the demo's ResNet-18 at 64 px, ResNet-50 at 224 px): bytes and save time of the
               checkpoint as it was (step + objects) and as it is now (+ input seed, + random streams), the median
               of --repeats saves each. The step counter and the seed are 8 bytes each. Restore: the time to
               read each saved checkpoint back into the built variables as a resumed run does (a new Checkpoint
               of step + objects before; Estimator.restore now, which adds the input seed, the input layout and
               the random streams), the median over the --repeats files; they were just written, so they come
               from the page cache (a resume after a machine loss reads them from its disk or bucket too).
  resume       on fake ImageNet-sized records (tools/make_fake_imagenet.py, --records in --shards): seconds from
               building the training input to its first batch and bytes read (/proc/self/io rchar) at a fresh
               start, resumed in the middle of the second epoch (the place computed from summary.json's counts),
               and the same place on data without summary.json: the record counts read from the records' 12-byte
               headers (shards.record_counts), then the same arithmetic; the header scan's own bytes and time on a
               line of their own (before: the records before the place were read, ~1.5 epochs of data).
               Before this change a resume started at record 0 (the fresh-start row) and repeated the epoch.
  skip         a TFRecord file's records passed over by the reader's skip (a resumed run's partly read files):
               bytes read and time with the pipeline's 8 MB read buffer, and unbuffered (how a partly read file is
               read: the skip then reads only each record's header).
  simulate     ImageNet scale without the data: 1,281,167 records in 1,024 shards (1,251-1,252 each), 8 input
               pipelines of 128 files, 16 read at once, shuffle window 1,024: the arithmetic that finds a place
               (file order + interleave state, worst case: the epoch's last record), and what is read to resume
               there (the window's records already given, and the partly read files' skipped headers), at 110 KB
               a record (ImageNet's mean).

Usage:
  python -m tools.resume_benchmark                      # all rows (ResNet-50's checkpoint is ~190 MB, written 2x3 times)
  python -m tools.resume_benchmark --rows=simulate,resume --records=2048
"""
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import List, Tuple

if __package__ in (None, ''):
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
from absl import logging

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The tool's flags, defined when it runs (tests/test_layering.py: none at import)."""
  flags.DEFINE_list('rows', ['checkpoint', 'resume', 'skip', 'simulate'], 'Which rows to measure.')
  flags.DEFINE_integer('records', 1024, 'resume: fake training records written.')
  flags.DEFINE_integer('shards', 16, 'resume: training shards they are written in.')
  flags.DEFINE_integer('batch_size', 32, 'resume: the batch.')
  flags.DEFINE_integer('repeats', 3, 'checkpoint/resume: measurements per row (the median is shown).')

IMAGENET_RECORDS = 1_281_167
IMAGENET_SHARDS = 1024
IMAGENET_PIPELINES = 8
IMAGENET_RECORD_BYTES = 110_000
FRAMING = 16
WINDOW = 64  # resume: the shuffle window, smaller than the epoch so that a place falls inside one


def read_bytes() -> int:
  """Bytes this process read through read syscalls so far (page-cache hits included)."""
  with open('/proc/self/io') as f:
    return next(int(line.split()[1]) for line in f if line.startswith('rchar'))


def _size(prefix: str) -> int:
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  return sum(os.path.getsize(p) for p in tf.io.gfile.glob(prefix + '*'))


def checkpoint_rows(repeats: int, models=None) -> List[str]:
  """``models``: (name, params overrides) pairs, default the demo's ResNet-18 and ResNet-50 at 224 px (a test gives a
  tiny one)."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  from resnet.estimator import checkpoints  # pylint: disable=import-outside-toplevel
  from resnet.estimator.estimator import Estimator  # pylint: disable=import-outside-toplevel
  from resnet.estimator.run_config import RunConfig  # pylint: disable=import-outside-toplevel
  from resnet.estimator.spec import ModeKeys  # pylint: disable=import-outside-toplevel
  from resnet.run_setup import run_params  # pylint: disable=import-outside-toplevel
  from resnet.training import resnet_model_fn  # pylint: disable=import-outside-toplevel
  lines = []
  models = models or (
      ('demo ResNet-18, 64 px', dict(resnet_depth=18, image_size=64, num_label_classes=4)),
      ('ResNet-50, 224 px', dict(resnet_depth=50, image_size=224, num_label_classes=1000)),
      ('ResNet-50, 224 px, stochastic depth', dict(resnet_depth=50, image_size=224, num_label_classes=1000,
                                                 drop_connect_rate=0.1)))
  for name, overrides in models:
    root = tempfile.mkdtemp(prefix='resume-bench-')
    try:
      params = run_params.make_params(dict(overrides, model_dir=root, precision='float32', train_batch_size=32))
      runner = Estimator(resnet_model_fn.resnet_model_fn, RunConfig.from_params(params), params)
      runner.build(ModeKeys.TRAIN)
      old = tf.train.Checkpoint(global_step=runner.global_step, **runner.scope.saved_objects)
      before, after, saved = [], [], []
      for i in range(repeats):
        runner.global_step.assign(i + 1)
        start = time.perf_counter()
        prefix = old.write(os.path.join(root, 'before', f'ckpt-{i}'))
        before.append((time.perf_counter() - start, _size(prefix)))
        start = time.perf_counter()
        path = runner.save()
        after.append((time.perf_counter() - start, _size(path)))
        saved.append((prefix, path))
      restored_before, restored_after = [], []
      for prefix, path in saved:   # as a resumed run restores: a new Checkpoint object over the built variables
        runner.global_step.assign(0)
        start = time.perf_counter()
        tf.train.Checkpoint(global_step=runner.global_step, **runner.scope.saved_objects).restore(prefix)
        restored_before.append(time.perf_counter() - start)
        runner.global_step.assign(0)
        start = time.perf_counter()
        runner.restore(path)   # what a resumed run calls: + input seed, input layout, random streams
        restored_after.append(time.perf_counter() - start)
        assert int(runner.global_step.numpy()) == checkpoints.checkpoint_step(path), path
      extras = sorted({k.split('/', 1)[0] for k, _ in tf.train.list_variables(path)} - set(runner.scope.saved_objects)
                      - {'global_step', 'save_counter', '_CHECKPOINTABLE_OBJECT_GRAPH'})
      states = checkpoints.seed_states(runner.scope.saved_objects)
      b_s, b_n = statistics.median(t for t, _ in before), before[-1][1]
      a_s, a_n = statistics.median(t for t, _ in after), after[-1][1]
      b_r, a_r = statistics.median(restored_before), statistics.median(restored_after)
      lines.append(f'{name:38s} before: {b_n / 1e6:8.2f} MB, save {b_s:6.2f} s, restore {b_r:6.2f} s   now: '
                   f'{a_n / 1e6:8.2f} MB (+{a_n - b_n} bytes: {", ".join(extras)}; {len(states)} random streams), '
                   f'save {a_s:6.2f} s, restore {a_r:6.2f} s')
    finally:
      shutil.rmtree(root, ignore_errors=True)
  return lines


def _first_batch(inp, start_step: int, input_seed: int) -> Tuple[float, int]:
  from resnet.estimator import spec  # pylint: disable=import-outside-toplevel
  params = spec.RunParams({}, FLAGS.batch_size, spec.RunContext('train', 1, start_step=start_step,
                                                                input_seed=input_seed))
  read, start = read_bytes(), time.perf_counter()
  next(iter(inp.input_fn(params)))
  return time.perf_counter() - start, read_bytes() - read


def resume_rows(records: int, shards: int, repeats: int) -> List[str]:
  from official_input import dataset_layout  # pylint: disable=import-outside-toplevel
  from official_input import imagenet_input  # pylint: disable=import-outside-toplevel
  from official_input import shards as shard_files  # pylint: disable=import-outside-toplevel
  from tools import make_fake_imagenet  # pylint: disable=import-outside-toplevel
  root = tempfile.mkdtemp(prefix='resume-bench-data-')
  try:
    make_fake_imagenet.write_fake_imagenet(root, num_train=records, num_validation=8, num_test=0, num_shards=shards,
                                           num_classes=10, seed=1)
    data_bytes = sum(os.path.getsize(os.path.join(root, n)) for n in os.listdir(root) if n.startswith('train-'))
    _write_counts(root, dataset_layout.SUMMARY_FILE)
    uncounted = root + '-nocounts'   # data without summary.json: no record counts
    shutil.copytree(root, uncounted)
    os.remove(os.path.join(uncounted, dataset_layout.SUMMARY_FILE))
    steps_per_epoch = records // FLAGS.batch_size
    mid_second = steps_per_epoch + steps_per_epoch // 2
    lines = [f'{records} records ({data_bytes / records / 1e3:.0f} KB each, {data_bytes / 1e6:.0f} MB) in {shards} '
             f'shards, batch {FLAGS.batch_size}, shuffle window {WINDOW}:']
    cases = (('fresh start (step 0; before: every resume)', root, 0),
             (f'resumed at step {mid_second} (epoch 2, half done)', root, mid_second),
             (f'same place, no counts: from the record headers', uncounted, mid_second))
    for name, data_dir, step in cases:
      times = []
      for _ in range(repeats):
        shard_files._scanned.clear()   # pylint: disable=protected-access  (each repeat as a new process: none scanned)
        inp = imagenet_input.ImageNetInput(is_training=True, data_dir=data_dir, image_size=224,
                                           num_label_classes=10, shuffle_buffer_size=WINDOW)
        times.append(_first_batch(inp, step, 5))
      seconds, read = statistics.median(t for t, _ in times), statistics.median(r for _, r in times)
      lines.append(f'  {name:48s} first batch after {seconds:6.2f} s, read {read / 1e6:7.1f} MB')
    files = sorted(os.path.join(uncounted, n) for n in os.listdir(uncounted) if n.startswith('train-'))
    scans = []
    for _ in range(repeats):
      shard_files._scanned.clear()   # pylint: disable=protected-access
      read, start = read_bytes(), time.perf_counter()
      counts, _ = shard_files.record_counts(files, [-1] * len(files))
      scans.append((time.perf_counter() - start, read_bytes() - read))
    lines.append(f'    of which the header scan of {sum(counts)} records in {len(files)} files: '
                 f'{statistics.median(t for t, _ in scans) * 1e3:.1f} ms, '
                 f'{statistics.median(r for _, r in scans) / 1e3:.1f} KB read')
    return lines
  finally:
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(root + '-nocounts', ignore_errors=True)


def _write_counts(data_dir: str, summary_file: str) -> None:
  """A summary.json with the per-shard record counts the converter writes (make_fake_imagenet writes none)."""
  import json  # pylint: disable=import-outside-toplevel
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  shards, splits = {}, {}
  for name in sorted(os.listdir(data_dir)):
    if '-of-' not in name:
      continue
    path = os.path.join(data_dir, name)
    records = sum(1 for _ in tf.data.TFRecordDataset(path))
    shards[name] = {'records': records, 'bytes': os.path.getsize(path)}
    entry = splits.setdefault(name.split('-')[0], {'images': 0, 'shards': []})
    entry['images'] += records
    entry['shards'].append(name)
  with open(os.path.join(data_dir, summary_file), 'w') as f:
    json.dump({'num_classes': 10, 'splits': splits, 'shards': shards}, f)


def skip_rows() -> List[str]:
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  from official_input import shards  # pylint: disable=import-outside-toplevel
  root = tempfile.mkdtemp(prefix='resume-bench-skip-')
  try:
    path = os.path.join(root, 'train-00000-of-00001')
    count = 600
    with tf.io.TFRecordWriter(path) as writer:
      for _ in range(count):
        writer.write(os.urandom(IMAGENET_RECORD_BYTES))
    size = os.path.getsize(path)
    lines = [f'one file of {count} records of {IMAGENET_RECORD_BYTES // 1000} KB ({size / 1e6:.0f} MB):']
    for buffer in (shards.READ_BUFFER_BYTES, 0):
      for skip in (0, count // 2, count - 1):
        iterator = iter(tf.data.TFRecordDataset(path, buffer_size=buffer).skip(skip).take(1))
        read, start = read_bytes(), time.perf_counter()
        next(iterator)
        seconds, read = time.perf_counter() - start, read_bytes() - read
        lines.append(f'  {"8 MB buffer" if buffer else "unbuffered (a partly read file)":32s} skip {skip:4d} '
                     f'records, read the next: {read / 1e6:6.1f} MB read, {seconds * 1e3:6.1f} ms')
    return lines
  finally:
    shutil.rmtree(root, ignore_errors=True)


def simulate_rows() -> List[str]:
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  from official_input import ordering  # pylint: disable=import-outside-toplevel
  from official_input import shards  # pylint: disable=import-outside-toplevel
  per_shard = [IMAGENET_RECORDS // IMAGENET_SHARDS + (i < IMAGENET_RECORDS % IMAGENET_SHARDS)
               for i in range(IMAGENET_SHARDS)]
  files = list(range(IMAGENET_SHARDS))[0::IMAGENET_PIPELINES]   # pipeline 0's 128 files
  counts = [per_shard[i] for i in files]
  per_epoch = sum(counts)
  width = ordering.read_width(len(files), fixed_order=True)
  window = 1024
  lines = [f'ImageNet: {IMAGENET_RECORDS:,} records in {IMAGENET_SHARDS} shards, {IMAGENET_PIPELINES} pipelines of '
           f'{len(files)} files ({per_epoch:,} records an epoch), {width} read at once, window {window}:']
  for name, k in (('epoch start', 0), ('mid-epoch', per_epoch // 2), ('worst: last record', per_epoch - 1)):
    start = time.perf_counter()
    with tf.init_scope():
      permutation = ordering.file_order(len(files), ordering.epoch_seed(1, 3)).numpy()
    in_window = k % window
    reads = ordering.resumed_reads([counts[i] for i in permutation], width, k - in_window)
    seconds = time.perf_counter() - start
    skipped = sum(s for _, s in reads)
    # A partly read file is read unbuffered (shards.read_accounted): its skip reads each record's 12-byte header.
    lines.append(f'  {name:20s} place found in {seconds * 1e3:7.1f} ms; reads the {in_window} records of its '
                 f'window already given ({in_window * IMAGENET_RECORD_BYTES / 1e6:.0f} MB) and skips {skipped} '
                 f'records in {sum(1 for _, s in reads if s)} partly read files by their headers '
                 f'({skipped * 12 / 1e3:.0f} KB read; with the 8 MB buffer it would read up to '
                 f'{(skipped * (IMAGENET_RECORD_BYTES + FRAMING) + 16 * shards.READ_BUFFER_BYTES) / 1e6:.0f} MB); '
                 f'before: the input started over at record 0 (the epoch\'s first {k:,} records trained again)')
  return lines


def main(argv) -> None:
  del argv
  logging.set_verbosity(logging.WARNING)
  rows = {'checkpoint': lambda: checkpoint_rows(FLAGS.repeats),
          'resume': lambda: resume_rows(FLAGS.records, FLAGS.shards, FLAGS.repeats),
          'skip': skip_rows, 'simulate': simulate_rows}
  for row in FLAGS.rows:
    if row not in rows:
      raise app.UsageError(f'--rows: {row!r} is none of {sorted(rows)}')
    print(f'== {row}', flush=True)
    for line in rows[row]():
      print(line, flush=True)


if __name__ == '__main__':
  define_flags()
  app.run(main)
