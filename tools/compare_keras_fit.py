r"""Our recipe next to a plain Keras ``fit`` on the same small dataset: accuracy and wall time, side by side.

  python -m tools.compare_keras_fit                         # the demo dataset at the demo's settings (two
                                                            # 1000-step trainings, ~10 min on 2 quiet cores)
  python -m tools.compare_keras_fit --data_dir=RECORDS      # your own converted TFRecords (summary.json needed)

Both runs see the same TFRecords, model (``resnet.model.resnet_model.resnet`` at the config's depth, float32), image
size, batch size and number of training images, and each runs in its own fresh Python process, timed from the
outside, so both walls include the same start-up (TensorFlow import, model build, graph tracing):

- ours: the real CLI, ``python -m resnet.resnet_main --config_file=demo --mode=train_and_eval`` (Inception crop,
  warm-up + cosine learning rate, Nesterov momentum, weight decay, its periodic evaluations and checkpoints);
  top-1 is read from ``model_dir/eval_results.json``.
- Keras fit: what a typical user writes: a tf.data pipeline (parse, decode, resize to the image size, random
  left-right flip; no crop), ``SGD(momentum=0.9)`` at ``--keras_learning_rate`` (default 0.1, the textbook ResNet
  value) following ``keras.optimizers.schedules.CosineDecay`` (or constant), sparse cross-entropy, no weight decay,
  ``fit`` for ``round(train_steps * batch / num_train_images)`` epochs, then ``evaluate`` on the validation split
  (resized, no crop). Both seed everything from ``--seed`` and use deterministic ops (ours does with a seed set).

Images/s is images trained divided by the process's wall time (end to end, as a user waits for it).
"""
import dataclasses
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Mapping, Sequence

if __package__ in (None, ''):
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')  # hide TensorFlow's C++ banner; absl logs stay
os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '1')  # as resnet_main: oneDNN on AVX2-only CPUs too

from absl import app  # pylint: disable=g-import-not-at-top,wrong-import-position
from absl import flags  # pylint: disable=g-import-not-at-top,wrong-import-position
from absl import logging  # pylint: disable=g-import-not-at-top,wrong-import-position

KERAS_SCHEDULES = ('cosine', 'constant')
_KERAS_RESULT = 'keras_results.json'

FLAGS = flags.FLAGS


def define_flags() -> None:
  """This tool's flags, defined when it runs (not at import: a test process imports it beside resnet_main, whose
  flags of the same names would be taken)."""
  flags.DEFINE_string('data_dir', None, 'Converted TFRecords (train-*, validation-*, summary.json); unset = draw and '
                      'convert the demo dataset into --work_dir.')
  flags.DEFINE_string('work_dir', None, 'Where the drawn data, the two runs and their logs go; unset = a temporary '
                      'directory, removed at the end unless --keep_work_dir.')
  flags.DEFINE_boolean('keep_work_dir', False, 'Keep the temporary --work_dir (logs, checkpoints).')
  flags.DEFINE_string('config_file', 'demo', "Our run's config (params/configs/ name or a path); the Keras run takes "
                      'resnet_depth and the defaults below from it.')
  flags.DEFINE_integer('train_steps', None, "Training steps of our run (Keras: the same images, as epochs); unset = "
                       "the config's.", lower_bound=1)
  flags.DEFINE_integer('batch_size', None, "Training batch size of both runs; unset = the config's.", lower_bound=1)
  flags.DEFINE_integer('image_size', None, "Image size of both runs; unset = the config's.", lower_bound=32)
  flags.DEFINE_integer('seed', 1, 'Seed of both training runs (the drawn demo data always uses seed 0, as the demo).')
  flags.DEFINE_integer('num_classes', 4, 'Drawn demo dataset: classes.', lower_bound=2)
  flags.DEFINE_integer('images_per_class', 320, 'Drawn demo dataset: images per class (split 80/10/10).',
                       lower_bound=10)
  flags.DEFINE_float('keras_learning_rate', 0.1, 'Keras run: SGD learning rate (the start of the cosine).',
                     lower_bound=0.0)
  flags.DEFINE_enum('keras_schedule', 'cosine', KERAS_SCHEDULES, 'Keras run: CosineDecay to 0 over the run, or a '
                    'constant learning rate.')
  flags.DEFINE_multi_string('param_overrides', [], 'Extra overrides for our run, e.g. label_smoothing=0.1.')
  flags.DEFINE_string('keras_result', None, 'Internal: run only the Keras baseline in this process and write its '
                      'results as JSON here.')


@dataclasses.dataclass(frozen=True)
class Settings:
  """What both runs share; filled from the flags, the config and the data's summary.json."""
  data_dir: str
  num_classes: int
  num_train_images: int
  num_eval_images: int
  resnet_depth: int
  image_size: int
  batch_size: int
  train_steps: int
  seed: int


@dataclasses.dataclass(frozen=True)
class Row:
  name: str
  top_1: float
  steps: int
  images_trained: int
  wall_seconds: float
  command: str
  notes: str = ''

  @property
  def images_per_sec(self) -> float:
    return self.images_trained / self.wall_seconds if self.wall_seconds > 0 else float('nan')


def keras_epochs(train_steps: int, batch_size: int, num_train_images: int) -> int:
  """Whole epochs covering about as many images as ``train_steps`` batches (at least one)."""
  if num_train_images <= 0:
    raise ValueError(f'num_train_images must be positive, got {num_train_images}.')
  return max(1, int(math.floor(train_steps * batch_size / num_train_images + 0.5)))


def steps_per_epoch(batch_size: int, num_train_images: int) -> int:
  """Batches in one pass over the training split (the last one may be partial, as ``Dataset.batch`` makes it)."""
  return -(-num_train_images // batch_size)


def read_config(config_file: str) -> Mapping[str, Any]:
  """The config's params on top of the defaults, validated: what resnet_main makes of ``--config_file`` alone."""
  from resnet.run_setup import run_params  # pylint: disable=g-import-not-at-top
  return run_params.make_params(config_files=[config_file], fill_from_data=False)


def read_summary(data_dir: str) -> Dict[str, int]:
  """Class count and split sizes from the converter's summary.json; a clear error when it is missing."""
  from official_input import dataset_layout  # pylint: disable=g-import-not-at-top
  path = os.path.join(data_dir, dataset_layout.SUMMARY_FILE)
  if not os.path.isfile(path):
    raise FileNotFoundError(f'{path} not found: --data_dir must hold the output of `python -m tools.imagenet_to_gcs` '
                            '(train-*, validation-* and summary.json), or leave --data_dir unset to draw the demo '
                            'dataset.')
  with open(path) as f:
    summary = json.load(f)
  if summary.get('task', 'single_label') != 'single_label':
    raise ValueError(f'{path} says task={summary["task"]!r}: this comparison is of single-label classifiers (top-1 '
                     "accuracy, Keras' sparse categorical cross-entropy); train multi-label data with "
                     'resnet/resnet_main.py (docs/multi_label.md).')
  splits = summary.get('splits', {})
  counts = {'num_classes': summary.get('num_classes'),
            'num_train_images': splits.get('train', {}).get('images'),
            'num_eval_images': splits.get('validation', {}).get('images')}
  missing = [k for k, v in counts.items() if not v]
  if missing:
    raise ValueError(f'{path} has no (or zero) {", ".join(missing)}: both runs need a train and a validation split '
                     'of at least one image. Re-run `python -m tools.imagenet_to_gcs` with --validation_ratio > 0.')
  return counts


def draw_demo_data(work_dir: str, num_classes: int, images_per_class: int) -> str:
  """Draws and converts the demo dataset (as tools/demo.py does, seed 0); returns the records directory."""
  from tools import imagenet_to_gcs  # pylint: disable=g-import-not-at-top
  from tools import make_demo_dataset  # pylint: disable=g-import-not-at-top
  images, records = os.path.join(work_dir, 'images'), os.path.join(work_dir, 'records')
  make_demo_dataset.make_demo_dataset(images, num_classes=num_classes, images_per_class=images_per_class, seed=0,
                                      overwrite=True)
  imagenet_to_gcs.convert_dataset(images, records, seed=0, overwrite=True)
  return records


# ------------------------------------------------------------------------------------------------ Keras baseline
def keras_dataset(data_dir: str, split: str, image_size: int, batch_size: int, training: bool, seed: int):
  """A plain tf.data pipeline: parse, decode, resize; training also shuffles and flips. Labels become 0-based."""
  import keras  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from official_input import example_schema  # pylint: disable=g-import-not-at-top
  files = sorted(tf.io.gfile.glob(os.path.join(data_dir, f'{split}-*')))
  if not files:
    raise FileNotFoundError(f'No {split}-* TFRecords in {data_dir}.')
  spec = {example_schema.ENCODED: tf.io.FixedLenFeature((), tf.string),
          example_schema.LABEL: tf.io.FixedLenFeature((), tf.int64)}

  def parse(record):
    features = tf.io.parse_single_example(record, spec)
    image = tf.io.decode_image(features[example_schema.ENCODED], channels=3, expand_animations=False)
    image = tf.image.resize(image, [image_size, image_size])  # bilinear, float32 in 0..255 (the model normalises)
    return image, features[example_schema.LABEL] - 1  # stored labels are 1-based

  ds = tf.data.TFRecordDataset(files)
  if training:
    ds = ds.shuffle(10000, seed=seed, reshuffle_each_iteration=True)
  ds = ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE).batch(batch_size)
  if training:
    flip = keras.layers.RandomFlip('horizontal', seed=seed)
    ds = ds.map(lambda x, y: (flip(x, training=True), y), num_parallel_calls=tf.data.AUTOTUNE)
  return ds.prefetch(tf.data.AUTOTUNE)


def run_keras_baseline(s: Settings, learning_rate: float, schedule: str) -> Dict[str, Any]:
  """Builds, compiles, fits and evaluates the Keras baseline in this process; returns its results."""
  import keras  # pylint: disable=g-import-not-at-top
  from resnet import determinism  # pylint: disable=g-import-not-at-top
  from resnet.model import resnet_model  # pylint: disable=g-import-not-at-top
  determinism.make_deterministic(s.seed)  # as ours with a seed: same seed, same numbers
  epochs = keras_epochs(s.train_steps, s.batch_size, s.num_train_images)
  steps = epochs * steps_per_epoch(s.batch_size, s.num_train_images)
  train_ds = keras_dataset(s.data_dir, 'train', s.image_size, s.batch_size, True, s.seed)
  eval_ds = keras_dataset(s.data_dir, 'validation', s.image_size, s.batch_size, False, s.seed)
  from params.model_config import ModelConfig  # pylint: disable=g-import-not-at-top
  model = resnet_model.resnet(ModelConfig(resnet_depth=s.resnet_depth, num_label_classes=s.num_classes),
                              dtype_policy='float32', image_size=s.image_size)
  lr = (keras.optimizers.schedules.CosineDecay(learning_rate, decay_steps=steps) if schedule == 'cosine'
        else learning_rate)
  model.compile(optimizer=keras.optimizers.SGD(learning_rate=lr, momentum=0.9),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=['accuracy'],
                jit_compile=False)
  start = time.time()
  history = model.fit(train_ds, epochs=epochs, verbose=2)
  fit_seconds = time.time() - start
  _, accuracy = model.evaluate(eval_ds, verbose=0)
  return {'top_1_accuracy': float(accuracy), 'epochs': epochs, 'steps': steps,
          'images_trained': epochs * s.num_train_images, 'fit_seconds': fit_seconds,
          'final_train_loss': float(history.history['loss'][-1])}


# ------------------------------------------------------------------------------------------------ the two runs
def _timed(cmd: List[str], log_path: str) -> float:
  """Runs cmd with its output in log_path; returns wall seconds. A failure names the log to read."""
  print('$ ' + ' '.join(shlex.quote(c) for c in cmd), flush=True)
  start = time.time()
  with open(log_path, 'w') as log:
    code = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT)
  seconds = time.time() - start
  if code:
    with open(log_path) as f:
      tail = ''.join(f.readlines()[-15:])
    raise RuntimeError(f'{cmd[2]} failed (exit {code}); last lines of {log_path}:\n{tail}')
  return seconds


def run_ours(s: Settings, work_dir: str, config_file: str, overrides: Sequence[str]) -> Row:
  model_dir = os.path.join(work_dir, 'ours')
  shutil.rmtree(model_dir, ignore_errors=True)
  settings = f'train_steps={s.train_steps},train_batch_size={s.batch_size},image_size={s.image_size}'
  cmd = [sys.executable, '-m', 'resnet.resnet_main', f'--config_file={config_file}', '--mode=train_and_eval',
         f'--data_dir={s.data_dir}', f'--model_dir={model_dir}', f'--random_seed={s.seed}',
         f'--param_overrides={settings}'] + [f'--param_overrides={o}' for o in overrides]
  seconds = _timed(cmd, os.path.join(work_dir, 'ours.log'))
  with open(os.path.join(model_dir, 'eval_results.json')) as f:
    results = json.load(f)
  if results.get('global_step') != s.train_steps:
    raise RuntimeError(f'Our run stopped at step {results.get("global_step")}, not {s.train_steps}: see '
                       f'{os.path.join(work_dir, "ours.log")}.')
  return Row('ours (resnet_main)', results['top_1_accuracy'], s.train_steps, s.train_steps * s.batch_size, seconds,
             ' '.join(shlex.quote(c) for c in cmd))


def run_keras(s: Settings, work_dir: str, learning_rate: float, schedule: str) -> Row:
  result_path = os.path.join(work_dir, _KERAS_RESULT)
  cmd = [sys.executable, '-m', 'tools.compare_keras_fit', f'--keras_result={result_path}',
         f'--data_dir={s.data_dir}', f'--config_file={FLAGS.config_file}', f'--train_steps={s.train_steps}',
         f'--batch_size={s.batch_size}', f'--image_size={s.image_size}', f'--seed={s.seed}',
         f'--keras_learning_rate={learning_rate}', f'--keras_schedule={schedule}']
  seconds = _timed(cmd, os.path.join(work_dir, 'keras.log'))
  with open(result_path) as f:
    r = json.load(f)
  notes = (f'{r["epochs"]} epochs; SGD(momentum=0.9), lr {learning_rate} {schedule}; fit() alone '
           f'{r["fit_seconds"]:.0f} s')
  return Row('Keras fit', r['top_1_accuracy'], r['steps'], r['images_trained'], seconds,
             ' '.join(shlex.quote(c) for c in cmd), notes)


def format_table(rows: Sequence[Row], s: Settings) -> str:
  lines = [f'ResNet-{s.resnet_depth}, {s.image_size} px, batch {s.batch_size}, {s.num_classes} classes, '
           f'{s.num_train_images} train / {s.num_eval_images} validation images, seed {s.seed}, data {s.data_dir}',
           '',
           f'{"run":<20} {"val top-1":>9} {"steps":>6} {"images":>7} {"wall s":>7} {"img/s":>6}',
           f'{"-" * 20} {"-" * 9} {"-" * 6} {"-" * 7} {"-" * 7} {"-" * 6}']
  for r in rows:
    lines.append(f'{r.name:<20} {r.top_1:>9.3f} {r.steps:>6d} {r.images_trained:>7d} {r.wall_seconds:>7.1f} '
                 f'{r.images_per_sec:>6.1f}')
  lines.append('')
  for r in rows:
    lines.append(f'{r.name}: {r.command}' + (f'\n  ({r.notes})' if r.notes else ''))
  return '\n'.join(lines)


def _settings(data_dir: str) -> Settings:
  config = read_config(FLAGS.config_file)
  counts = read_summary(data_dir)
  return Settings(data_dir=os.path.abspath(data_dir), num_classes=counts['num_classes'],
                  num_train_images=counts['num_train_images'], num_eval_images=counts['num_eval_images'],
                  resnet_depth=config['resnet_depth'], image_size=FLAGS.image_size or config['image_size'],
                  batch_size=FLAGS.batch_size or config['train_batch_size'],
                  train_steps=FLAGS.train_steps or config['train_steps'], seed=FLAGS.seed)


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  if FLAGS.keras_result:  # the child process of the Keras row
    if not FLAGS.data_dir:
      raise app.UsageError('--keras_result needs --data_dir.')
    result = run_keras_baseline(_settings(FLAGS.data_dir), FLAGS.keras_learning_rate, FLAGS.keras_schedule)
    with open(FLAGS.keras_result, 'w') as f:
      json.dump(result, f, indent=2)
    return

  temporary = FLAGS.work_dir is None
  work_dir = os.path.abspath(FLAGS.work_dir or tempfile.mkdtemp(prefix='compare-keras-fit-'))
  os.makedirs(work_dir, exist_ok=True)
  try:
    data_dir = FLAGS.data_dir
    if data_dir:
      read_summary(data_dir)  # fail before anything runs
    else:
      print(f'Drawing the demo dataset ({FLAGS.num_classes} classes x {FLAGS.images_per_class} images) into '
            f'{work_dir}', flush=True)
      data_dir = draw_demo_data(work_dir, FLAGS.num_classes, FLAGS.images_per_class)
    s = _settings(data_dir)
    logging.info('Settings: %s', s)
    rows = [run_ours(s, work_dir, FLAGS.config_file, FLAGS.param_overrides),
            run_keras(s, work_dir, FLAGS.keras_learning_rate, FLAGS.keras_schedule)]
    print()
    print(format_table(rows, s))
    print(f'\nLogs: {work_dir}/ours.log, {work_dir}/keras.log' +
          (' (temporary: removed now; --keep_work_dir keeps them)' if temporary and not FLAGS.keep_work_dir else ''))
  finally:
    if temporary and not FLAGS.keep_work_dir:
      shutil.rmtree(work_dir, ignore_errors=True)


def run_main() -> None:
  define_flags()
  app.run(main)


if __name__ == '__main__':
  run_main()
