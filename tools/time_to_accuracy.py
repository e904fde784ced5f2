r"""Time to accuracy: CPU wall-clock minutes until a recipe's evaluation first reaches a target, over unseeded runs.

Throughput (tools/train_benchmark) says how fast a step is; this says how soon a recipe gives a good model, which
is what a user waits for. Each recipe runs ``--runs`` times, unseeded (``random_seed=null``, as tools.repeat_runs:
a seed turns on deterministic kernels users do not run), as ``python -m resnet.resnet_main --mode=train_and_eval``
in a model_dir of its own (``OUTPUT_DIR/NAME-N``, log ``OUTPUT_DIR/NAME-N.log``), one run at a time, the recipes
taking turns (run 1 of each, then run 2 of each), so that a machine getting busier or quieter shifts them alike:

  python -m tools.time_to_accuracy --output_dir=tta/demo --target=0.95 --runs=3 --max_minutes=30 \
      --recipe=momentum= --recipe='lamb=--param_overrides=optimizer=lamb,base_learning_rate=0.02' \
      --keras_application=ResNet50 -- \
      --config_file=demo --data_dir=demo/records --param_overrides=steps_per_eval=50

Everything after ``--`` goes to every run of every recipe (the recipe's own flags follow it, then the seeding);
``--recipe=NAME=FLAGS`` names a recipe and its resnet_main flags (shell words; may be empty: ``--recipe=ours=``;
no --recipe = one recipe ``ours`` of the common flags alone).

How it is timed: from just before the run's process starts (so Python and TensorFlow start-up, graph tracing and
every evaluation count, as a user waits for them) to the moment ``model_dir/eval_results.json`` is written by the
first evaluation whose ``--metric`` reaches ``--target`` (>= for accuracies, <= for losses and errors: the goal is
best_checkpoint's rule). The estimator rewrites that file atomically after each evaluation; a watcher reads it
every ``--poll_seconds`` and takes the time from the file's modification time, so the poll interval adds nothing.
At the target the run is stopped with SIGTERM (in training resnet_main saves a checkpoint and exits 0, docs/scale.md;
one that lands in the next evaluation ends the process, after the checkpoint that evaluation reads; sent again
every 5 s, in case one lands where no training loop can honour it), to free the CPU for the next run,
unless ``--stop_at_target=false``; a run still going after 2 minutes is killed. A run still short of the target after
``--max_minutes`` is stopped the same way and counts as not reached, with the best value it got; so is one that
ends (its train_steps done) or fails first. Steps to the target are the evaluation's ``global_step``; img/s is the
median of the run's progress lines (``N img/s``, the first loop's tracing left out).

The Keras row (``--keras_application=ResNet50``, ResNet50V2, ... any ``keras.applications`` class, weights=None):
what a typical user writes: at the common flags' image size, batch size and class count, on the same records
through tools.compare_keras_fit's tf.data pipeline (decode, resize, flip; the application module's
``preprocess_input``), ``SGD(momentum=0.9)`` at ``--keras_learning_rate`` following a cosine over
``--keras_epochs`` (or constant), validation after every epoch. It runs in a fresh Python process of its own (this
module with ``--keras_child``), whose callback writes each epoch's validation accuracy as ``eval_results.json``
(global_step = epochs x batches per epoch) in its model_dir: the same watcher times it, the same way. Top-1 only
(single-label data).

The torchvision row (``--torch_python=/path/to/venv/bin/python``, a scratch environment with torch and torchvision,
never this project's): torchvision's reference recipe (``references/classification/train.py`` defaults at the run's
size: SGD momentum 0.9, weight decay 1e-4, lr 0.1 x batch / 256, StepLR every third of ``--torchvision_epochs``,
RandomResizedCrop + flip; tools/torchvision_recipe.py says it all) on ``torchvision.models.resnet<depth>`` at the
common flags' depth, image size, batch and classes. The same records are first written out once as image files
(``OUTPUT_DIR/torchvision_images/{train,validation}/<0-based label>/``, the encoded bytes as stored; not timed, as
the records' conversion is not) by a child of this module (``--export_child``), since the torch environment has no
TensorFlow to read TFRecords. Its runs write ``eval_results.json`` after each epoch, so the same watcher times them.
Top-1 only (single-label data); without ``--torch_python`` the table says the row was not run.

Output: the table (recipe, reached k/N, minutes to target median (min-max) over the runs that reached it, steps to
target median, best value median (min-max) over all runs, img/s median), the command line, the CPU, and
``OUTPUT_DIR/time_to_accuracy.json`` with every run's numbers and evaluations (rewritten after each run). An
OUTPUT_DIR that holds a run of this plan already is refused, not resumed: a resumed run's clock would start at its
checkpoint, not at zero.
"""
import dataclasses
import json
import math
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

if __package__ in (None, ''):
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app  # pylint: disable=g-import-not-at-top,wrong-import-position
from absl import flags  # pylint: disable=g-import-not-at-top,wrong-import-position

from resnet.estimator import files  # pylint: disable=g-import-not-at-top,wrong-import-position
from tools import repeat_runs  # pylint: disable=g-import-not-at-top,wrong-import-position

FLAGS = flags.FLAGS
RESULTS_FILE = 'eval_results.json'   # the estimator's evaluation 'eval': model_dir/<name>_results.json
OUTPUT_FILE = 'time_to_accuracy.json'
KERAS_SCHEDULES = ('cosine', 'constant')
_NAME = re.compile(r'[A-Za-z0-9][A-Za-z0-9_.-]*')
# resnet_main's progress line (resnet/estimator/estimator.py, _Progress.line): 'step 50/600 loss=... 123.4 img/s ETA'
_PROGRESS = re.compile(r'\bstep (\d+)/\d+ .* ([0-9.]+) img/s ETA')


class MetricError(ValueError):
  """The evaluations do not hold the metric asked for."""


def define_flags() -> None:
  """This tool's flags, defined when it runs (not at import: a test process imports it beside resnet_main)."""
  flags.DEFINE_string('output_dir', None, 'Where the runs (NAME-N/), their logs and time_to_accuracy.json go.')
  flags.DEFINE_float('target', None, 'The value of --metric that counts as reached.')
  flags.DEFINE_string('metric', 'top_1_accuracy', 'A key of model_dir/eval_results.json, e.g. top_1_accuracy, '
                      'macro_f1, mAP (multi-label), loss.')
  flags.DEFINE_integer('runs', 3, 'Unseeded runs of each recipe (and of the Keras row).', lower_bound=1)
  flags.DEFINE_float('max_minutes', 30.0, 'Each run is stopped after this long; not reached by then = not reached.',
                     lower_bound=0.0)
  flags.DEFINE_multi_string('recipe', [], 'NAME=FLAGS: a recipe and its resnet_main flags (shell words, after the '
                            'common ones); repeatable. None = one recipe "ours" of the common flags alone.')
  flags.DEFINE_boolean('stop_at_target', True, 'Stop each run (SIGTERM: a checkpoint, a clean exit) at its first '
                       'evaluation at the target; false = let it train to the end (or --max_minutes).')
  flags.DEFINE_float('poll_seconds', 0.5, 'How often the watcher reads eval_results.json.', lower_bound=0.01)
  flags.DEFINE_string('keras_application', None, 'Also time keras.applications.<this>(weights=None) under a plain '
                      'Keras fit, e.g. ResNet50 or ResNet50V2; unset = no Keras row.')
  flags.DEFINE_float('keras_learning_rate', 0.1, 'Keras row: SGD learning rate (the start of the cosine).',
                     lower_bound=0.0)
  flags.DEFINE_enum('keras_schedule', 'cosine', KERAS_SCHEDULES, 'Keras row: cosine decay to 0 over '
                    '--keras_epochs, or constant.')
  flags.DEFINE_integer('keras_epochs', 30, 'Keras row: the epochs fit() is given (the cosine spans them).',
                       lower_bound=1)
  flags.DEFINE_string('torch_python', None, 'Also time torchvision\'s reference recipe (tools/torchvision_recipe.py) '
                      'with this Python: a scratch environment with torch and torchvision; unset = no torchvision row.')
  flags.DEFINE_integer('torchvision_epochs', 30, 'torchvision row: epochs (StepLR drops 10x every third of them).',
                       lower_bound=1)
  flags.DEFINE_float('torchvision_learning_rate', None, 'torchvision row: SGD learning rate; unset = the reference\'s '
                     '0.1 scaled to the batch (0.1 x batch / 256).', lower_bound=0.0)
  flags.DEFINE_integer('torchvision_workers', 1, 'torchvision row: DataLoader worker processes (decoding small '
                       'images keeps up with one; more take cores from the training).', lower_bound=0)
  flags.DEFINE_string('export_child', None, 'Internal: write the common flags\' records as image files into this '
                      'folder (the torchvision row\'s data), with spec.json of the run\'s sizes.')
  flags.DEFINE_string('keras_child', None, 'Internal: run one Keras fit in this process, writing its evaluations '
                      'into this model_dir.')


# ------------------------------------------------------------------------------------------------ the plan
@dataclasses.dataclass(frozen=True)
class Recipe:
  name: str
  args: Tuple[str, ...]   # resnet_main flags after the common ones; the Keras and torchvision rows: none
  kind: str = 'ours'      # 'ours' (resnet_main), 'keras' or 'torchvision'


def parse_recipe(text: str) -> Recipe:
  """``NAME=FLAGS`` -> Recipe; a clear error for anything else."""
  if '=' not in text:
    raise app.UsageError(f'--recipe={text!r} has no "=": write NAME=FLAGS, e.g. --recipe=\'lamb=--param_overrides='
                         'optimizer=lamb\' (FLAGS may be empty: --recipe=ours=).')
  name, words = text.split('=', 1)
  if not _NAME.fullmatch(name):
    raise app.UsageError(f'--recipe={text!r}: the name {name!r} must be letters, digits, "_", "-" or "." (it names '
                         'the model_dirs).')
  try:
    args = tuple(shlex.split(words))
  except ValueError as e:
    raise app.UsageError(f'--recipe={text!r}: its flags are not valid shell words ({e}).') from e
  repeat_runs.check_args(args, instead='--runs=N (runs here are unseeded)')
  return Recipe(name, args)


def plan_recipes(texts: Sequence[str], keras_application: Optional[str], torchvision: bool = False) -> List[Recipe]:
  recipes = [parse_recipe(t) for t in texts] or [Recipe('ours', ())]
  if keras_application:
    recipes.append(Recipe(f'keras-{keras_application}', (), kind='keras'))
  if torchvision:
    recipes.append(Recipe('torchvision', (), kind='torchvision'))
  names = [r.name for r in recipes]
  twice = sorted({n for n in names if names.count(n) > 1})
  if twice:
    raise app.UsageError(f'Recipe names must differ; given more than once: {", ".join(twice)}.')
  return recipes


def metric_goal(metric: str) -> str:
  """'max' or 'min': best_checkpoint's rule (losses and errors down, the rest up)."""
  from resnet.estimator import best_checkpoint  # pylint: disable=g-import-not-at-top
  return best_checkpoint.metric_goal(metric)


def reaches(value: float, target: float, goal: str) -> bool:
  return value >= target if goal == 'max' else value <= target


def better(a: float, b: Optional[float], goal: str) -> bool:
  """Whether ``a`` beats the best so far ``b`` (a NaN evaluation never becomes the best)."""
  return math.isfinite(a) and (b is None or (a > b if goal == 'max' else a < b))


# ------------------------------------------------------------------------------------------------ the watcher
def read_evaluation(path: str) -> Optional[Tuple[float, Dict[str, Any]]]:
  """(modification time, record) of an eval_results.json, or None while there is none (or it cannot be read: it
  is replaced atomically, so that is only before the first evaluation)."""
  try:
    mtime = os.stat(path).st_mtime
    with open(path) as f:
      record = json.load(f)
  except (OSError, ValueError):
    return None
  return (mtime, record) if isinstance(record, dict) else None


def metric_value(record: Mapping[str, Any], metric: str, path: str) -> float:
  value = record.get(metric)
  if isinstance(value, bool) or not isinstance(value, (int, float)):
    numbers = sorted(k for k, v in record.items() if isinstance(v, (int, float)) and not isinstance(v, bool))
    raise MetricError(f'{path} has no number {metric!r} (--metric); its metrics: {", ".join(numbers)}. '
                      f'Pick one of them (multi-label runs report mAP, micro_AP, ...; single-label top_1_accuracy).')
  return float(value)


def watch(command: Sequence[str], model_dir: str, log_path: str, metric: str, target: float, goal: str,
          max_minutes: float, stop_at_target: bool = True, poll_seconds: float = 0.5) -> Dict[str, Any]:
  """Runs ``command`` (which evaluates into ``model_dir/eval_results.json``) and times it to the target.

  Returns the run's numbers: reached, minutes and step at the first evaluation at the target, the best value,
  every evaluation seen (minutes, step, value), how it ended (``stopped``: 'target', 'cap' or None) and its exit
  code. A record without the metric stops the run and raises MetricError, naming the metrics it has."""
  os.makedirs(model_dir, exist_ok=True)
  path = os.path.join(model_dir, RESULTS_FILE)
  run: Dict[str, Any] = {'model_dir': model_dir, 'log': log_path, 'command': list(command), 'reached': False,
                         'minutes': None, 'step': None, 'value': None, 'best': None, 'best_step': None,
                         'evaluations': [], 'stopped': None}
  seen = set()

  def look() -> None:
    found = read_evaluation(path)
    if found is None:
      return
    mtime, record = found
    key = (mtime, record.get('global_step'))
    if key in seen:
      return
    seen.add(key)
    value = metric_value(record, metric, path)
    minutes, step = max(0.0, mtime - start) / 60.0, record.get('global_step')
    evaluation = {'minutes': round(minutes, 4), 'step': step, 'value': value}
    if 'images_per_sec' in record:   # the Keras and torchvision children's epochs
      evaluation['images_per_sec'] = record['images_per_sec']
    run['evaluations'].append(evaluation)
    if better(value, run['best'], goal):
      run['best'], run['best_step'] = value, step
    if not run['reached'] and reaches(value, target, goal) and minutes <= max_minutes:   # past the cap: not reached
      run.update(reached=True, minutes=round(minutes, 4), step=step, value=value)

  start = time.time()
  with open(log_path, 'w') as log:
    proc = subprocess.Popen(list(command), stdout=log, stderr=subprocess.STDOUT, preexec_fn=repeat_runs.stop_with_parent)
    try:
      while proc.poll() is None:
        time.sleep(poll_seconds)
        look()
        if run['reached'] and stop_at_target:
          run['stopped'] = 'target'
        elif time.time() - start >= 60.0 * max_minutes:
          run['stopped'] = 'cap'
        if run['stopped']:
          repeat_runs.stop_run(proc)
      look()   # the last evaluation, written just before the process ended
    finally:   # a MetricError, Ctrl-C: the run does not outlive the watcher
      repeat_runs.stop_run(proc)
  run['exit_code'] = proc.returncode
  run['wall_minutes'] = round((time.time() - start) / 60.0, 4)
  return run


def log_images_per_sec(log_path: str) -> Optional[float]:
  """The median img/s of a resnet_main log's progress lines, the first (graph tracing) left out where there are
  more; None without any."""
  try:
    with open(log_path, errors='replace') as f:
      rates = [float(m.group(2)) for m in map(_PROGRESS.search, f) if m]
  except OSError:
    return None
  rates = rates[1:] if len(rates) > 1 else rates
  return statistics.median(rates) if rates else None


def epoch_images_per_sec(run: Mapping[str, Any]) -> Optional[float]:
  """The Keras and torchvision rows' img/s: the median over their epochs' records."""
  rates = [e['images_per_sec'] for e in run['evaluations'] if e.get('images_per_sec')]
  rates = rates[1:] if len(rates) > 1 else rates   # the first epoch traces the graph
  return statistics.median(rates) if rates else None


# ------------------------------------------------------------------------------------------------ the table
def table(results: Mapping[str, Sequence[Mapping[str, Any]]], metric: str, target: float, goal: str,
          max_minutes: float) -> str:
  """One row per recipe (reached k/N; minutes and steps to the target over the runs that reached it; the best
  value over all; img/s); without a torchvision row, a line says why."""
  sign = '>=' if goal == 'max' else '<='
  head = ['recipe', 'reached', f'minutes to {metric} {sign} {target:g}', 'steps to target', f'best {metric}',
          'img/s']
  rows = [head]
  for name, runs in results.items():
    hit = [r for r in runs if r['reached']]
    ended = sum(r['stopped'] != 'cap' for r in runs)   # trained to their end (or failed) before the cap
    minutes = (repeat_runs.spread([r['minutes'] for r in hit], '.2f') if hit
               else f'not reached in {max_minutes:g} min' + (f' ({ended} ended first)' if ended else ''))
    steps = f'{statistics.median([r["step"] for r in hit]):g}' if hit and all(
        isinstance(r['step'], (int, float)) for r in hit) else '-'
    bests = [r['best'] for r in runs if r['best'] is not None]
    rates = [r['images_per_sec'] for r in runs if r.get('images_per_sec')]
    failed = [r['exit_code'] for r in runs if r['exit_code'] not in (0, None) and r['stopped'] is None]
    rows.append([name, f'{len(hit)}/{len(runs)}' + (f' ({len(failed)} failed)' if failed else ''), minutes, steps,
                 repeat_runs.spread(bests) if bests else '-',
                 f'{statistics.median(rates):.1f}' if rates else '-'])
  if 'torchvision' not in results:
    rows.append(['torchvision', '-', 'not run (no --torch_python)', '', '', ''])
  widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
  fmt = lambda r: '  '.join(c.ljust(w) for c, w in zip(r, widths)).rstrip()   # noqa: E731
  return '\n'.join([fmt(rows[0]), '  '.join('-' * w for w in widths)] + [fmt(r) for r in rows[1:]])


def machine_line() -> str:
  from tools.train_bench import machine  # pylint: disable=g-import-not-at-top
  peak = machine.detect_peak()
  extras = ''.join([', bf16' if peak.has_bf16 else '', ', AMX' if getattr(peak, 'has_amx', False) else ''])
  return f'CPU: {peak.model_name}, {peak.cores} cores, {peak.isa}{extras}'


# ------------------------------------------------------------------------------------------------ the Keras row
def keras_command(model_dir: str, common: Sequence[str]) -> List[str]:
  return [sys.executable, '-m', 'tools.time_to_accuracy', f'--keras_child={model_dir}',
          f'--keras_application={FLAGS.keras_application}', f'--keras_learning_rate={FLAGS.keras_learning_rate}',
          f'--keras_schedule={FLAGS.keras_schedule}', f'--keras_epochs={FLAGS.keras_epochs}', '--', *common]


def run_keras_child(model_dir: str, application: str, learning_rate: float, schedule: str, epochs: int,
                    common: Sequence[str]) -> None:
  """One unseeded Keras fit of keras.applications.<application>; each epoch's validation accuracy goes to
  model_dir/eval_results.json (atomically, as the estimator's), for the parent's watcher."""
  from resnet import resnet_flags  # pylint: disable=g-import-not-at-top
  fv = flags.FlagValues()
  resnet_flags.define_flags(fv)
  fv(['resnet_main', '--mode=train_and_eval', *common])
  params = resnet_flags.params_from_flags(fv)   # the common flags' image size, batch, classes, data: resnet_main's
  if params.task == 'multi_label':
    raise app.UsageError('The Keras row measures top-1 of single-label data; this data is multi-label.')
  import keras  # pylint: disable=g-import-not-at-top
  from tools import compare_keras_fit  # pylint: disable=g-import-not-at-top
  build = getattr(keras.applications, application, None)
  if not callable(build):
    names = sorted(n for n in dir(keras.applications) if n[:1].isupper())
    raise app.UsageError(f'keras.applications has no {application!r}; it has: {", ".join(names)}.')
  preprocess = getattr(sys.modules.get(build.__module__), 'preprocess_input', None)
  size, batch, n = params.image_size, params.train_batch_size, params.num_train_images
  per_epoch = compare_keras_fit.steps_per_epoch(batch, n)

  def pipeline(split: str, training: bool):
    ds = compare_keras_fit.keras_dataset(params.data_dir, split, size, batch, training, seed=None)
    return ds.map(lambda x, y: (preprocess(x), y)) if preprocess else ds

  model = build(weights=None, input_shape=(size, size, 3), classes=params.num_label_classes)
  lr = (keras.optimizers.schedules.CosineDecay(learning_rate, decay_steps=epochs * per_epoch)
        if schedule == 'cosine' else learning_rate)
  model.compile(optimizer=keras.optimizers.SGD(learning_rate=lr, momentum=0.9),
                loss=keras.losses.SparseCategoricalCrossentropy(), metrics=['accuracy'])
  print(f'keras.applications.{application}(weights=None, input_shape={(size, size, 3)}, '
        f'classes={params.num_label_classes}): {model.count_params():,} weights; SGD(momentum=0.9) at '
        f'{learning_rate} {schedule} over {epochs} epochs of {per_epoch} batches of {batch}; data {params.data_dir}',
        flush=True)

  class Report(keras.callbacks.Callback):
    """Each epoch's validation accuracy and training img/s (the epoch's training part only)."""

    def on_epoch_begin(self, epoch, logs=None):
      self.began = self.trained = time.time()

    def on_test_begin(self, logs=None):
      self.trained = time.time()

    def on_epoch_end(self, epoch, logs=None):
      record = {'global_step': (epoch + 1) * per_epoch, 'epoch': epoch + 1,
                'top_1_accuracy': float(logs['val_accuracy']), 'loss': float(logs['val_loss']),
                'images_per_sec': n / max(self.trained - self.began, 1e-9)}
      files.atomic_write(os.path.join(model_dir, RESULTS_FILE), json.dumps(record, indent=2))

  model.fit(pipeline('train', True), validation_data=pipeline('validation', False), epochs=epochs,
            callbacks=[Report()], verbose=2)


# ------------------------------------------------------------------------------------------------ the torchvision row
TORCHVISION_IMAGES = 'torchvision_images'
TORCHVISION_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'torchvision_recipe.py')


EXPORT_SPLITS = ('train', 'validation')


def export_images(common: Sequence[str], out_dir: str) -> Dict[str, Any]:
  """Writes the common flags' train and validation records as files ``out_dir/<split>/<label>/<index>.<ext>``
  (the encoded bytes as stored, labels the model's: as the run's input reads them) and ``out_dir/spec.json`` with the run's depth, image size, batch,
  classes and image counts; returns that spec. The images of a finished export of the same record files (names,
  sizes, modification times: ``out_dir/export.json``, written last) are reused; any other folder is written anew."""
  from resnet import resnet_flags  # pylint: disable=g-import-not-at-top
  from tools import torchvision_recipe  # pylint: disable=g-import-not-at-top
  fv = flags.FlagValues()
  resnet_flags.define_flags(fv)
  fv(['resnet_main', '--mode=train_and_eval', *common])
  params = resnet_flags.params_from_flags(fv)   # resnet_main's own reading of the common flags
  if params.task == 'multi_label':
    raise app.UsageError('The torchvision row measures top-1 of single-label data; this data is multi-label.')
  if params.resnet_depth not in torchvision_recipe.DEPTHS:
    raise app.UsageError(f'torchvision has no ResNet-{params.resnet_depth} (it has '
                         f'{", ".join(map(str, torchvision_recipe.DEPTHS))}): drop --torch_python or set '
                         'resnet_depth to one of them.')
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from official_input import example_schema  # pylint: disable=g-import-not-at-top
  from official_input import imagenet_input  # pylint: disable=g-import-not-at-top
  # Stored labels are 1-based, unless the run keeps class 0 as background: the input's own rule (decode's offset).
  offset = 0 if imagenet_input.ImageNetInput.from_params(params, split='train').include_background_label else 1
  paths = {}
  for split in EXPORT_SPLITS:
    pattern = os.path.join(params.data_dir, f'{split}-*')
    paths[split] = sorted(tf.io.gfile.glob(pattern))
    if not paths[split]:
      raise FileNotFoundError(f'No {split} records match {pattern}.')
  key = {'data_dir': params.data_dir, 'records': [
      [p, tf.io.gfile.stat(p).length, tf.io.gfile.stat(p).mtime_nsec] for s in EXPORT_SPLITS for p in paths[s]]}
  marker = os.path.join(out_dir, 'export.json')
  old = files.read_json_record(marker, 'image export record').value   # None: missing or damaged
  if not isinstance(old, dict) or old.get('key') != key:
    if os.path.exists(out_dir):   # half written, or of other records: written anew
      shutil.rmtree(out_dir)
    features = {example_schema.ENCODED: tf.io.FixedLenFeature((), tf.string),
                example_schema.LABEL: tf.io.FixedLenFeature((), tf.int64)}
    counts = {}
    for split in EXPORT_SPLITS:
      count = 0
      for record in tf.data.TFRecordDataset(paths[split]):
        example = tf.io.parse_single_example(record, features)
        data = example[example_schema.ENCODED].numpy()
        label = int(example[example_schema.LABEL]) - offset
        if not 0 <= label < params.num_label_classes:
          raise ValueError(f'A {split} record in {params.data_dir} has label {label + offset} (stored), outside '
                           f'the run\'s num_label_classes={params.num_label_classes}: give the data\'s class count '
                           '(or let summary.json give it).')
        ext = '.png' if data[:8] == b'\x89PNG\r\n\x1a\n' else '.jpg'   # PIL reads the bytes, whatever the name
        folder = os.path.join(out_dir, split, str(label))
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f'{count:07d}{ext}'), 'wb') as f:
          f.write(data)
        count += 1
      counts[split] = count
    files.atomic_write(marker, json.dumps({'key': key, 'images': counts}, indent=1))   # last: the export is whole
    old = {'key': key, 'images': counts}
  spec = {'resnet_depth': params.resnet_depth, 'image_size': params.image_size,
          'batch_size': params.train_batch_size, 'num_classes': params.num_label_classes,
          'data_dir': params.data_dir, 'images': old['images']}
  files.atomic_write(os.path.join(out_dir, 'spec.json'), json.dumps(spec, indent=1))
  return spec


def torchvision_command(model_dir: str, spec: Mapping[str, Any], images_dir: str) -> List[str]:
  run_spec = {k: spec[k] for k in ('resnet_depth', 'image_size', 'batch_size', 'num_classes')}
  run_spec.update(model_dir=model_dir, images_dir=images_dir, epochs=FLAGS.torchvision_epochs,
                  learning_rate=FLAGS.torchvision_learning_rate, workers=FLAGS.torchvision_workers)
  return [FLAGS.torch_python, TORCHVISION_SCRIPT, json.dumps(run_spec)]


def prepare_torchvision(common: Sequence[str], output_dir: str) -> Tuple[Dict[str, Any], str]:
  """Checks --torch_python and exports the images (in a child: TensorFlow stays out of this process, which
  only watches); returns (spec, images folder)."""
  from tools import torchvision_recipe  # pylint: disable=g-import-not-at-top
  problem = torchvision_recipe.python_problem(FLAGS.torch_python)
  if problem:
    raise app.UsageError(f'--torch_python: {problem}; point it at the python of a scratch environment with torch '
                         'and torchvision (never this project\'s), e.g. /path/to/venv/bin/python.')
  images_dir = os.path.join(output_dir, TORCHVISION_IMAGES)
  proc = subprocess.run([sys.executable, '-m', 'tools.time_to_accuracy', f'--export_child={images_dir}', '--',
                         *common], capture_output=True, text=True, check=False)
  if proc.returncode:
    raise app.UsageError(f'Writing the torchvision row\'s images into {images_dir} failed:\n{proc.stderr[-3000:]}')
  with open(os.path.join(images_dir, 'spec.json')) as f:
    spec = json.load(f)
  print(f'torchvision row: {spec["images"]} images written to {images_dir}', flush=True)
  return spec, images_dir


# ------------------------------------------------------------------------------------------------ main
def main(argv: Sequence[str]) -> None:
  common = list(argv[1:])
  if FLAGS.export_child:
    export_images(common, FLAGS.export_child)
    return
  if FLAGS.keras_child:
    run_keras_child(FLAGS.keras_child, FLAGS.keras_application, FLAGS.keras_learning_rate, FLAGS.keras_schedule,
                    FLAGS.keras_epochs, common)
    return
  if not FLAGS.output_dir or FLAGS.target is None:
    raise app.UsageError('--output_dir and --target are required (e.g. --output_dir=tta --target=0.95).')
  repeat_runs.check_args(common, instead='--runs=N (runs here are unseeded)')
  recipes = plan_recipes(FLAGS.recipe, FLAGS.keras_application, bool(FLAGS.torch_python))
  if (FLAGS.keras_application or FLAGS.torch_python) and FLAGS.metric != 'top_1_accuracy':
    raise app.UsageError(f'The Keras and torchvision rows report top_1_accuracy only, not --metric={FLAGS.metric}: '
                         'drop --keras_application and --torch_python, or time top_1_accuracy.')
  fix = 'a timed run cannot be resumed (its clock would start at its checkpoint); pick another --output_dir'
  dirs = {r.name: repeat_runs.new_model_dirs(FLAGS.output_dir, r.name, FLAGS.runs, fix) for r in recipes}
  goal = metric_goal(FLAGS.metric)
  os.makedirs(FLAGS.output_dir, exist_ok=True)
  torchvision = prepare_torchvision(common, FLAGS.output_dir) if FLAGS.torch_python else None

  def command_of(recipe: Recipe, model_dir: str) -> List[str]:
    if recipe.kind == 'keras':
      return keras_command(model_dir, common)
    if recipe.kind == 'torchvision':
      return torchvision_command(model_dir, *torchvision)
    return repeat_runs.command([*common, *recipe.args], model_dir, None)

  invocation = shlex.join([os.path.basename(sys.executable), '-m', 'tools.time_to_accuracy', *sys.argv[1:]])
  results: Dict[str, List[Dict[str, Any]]] = {r.name: [] for r in recipes}
  payload = {'command': invocation, 'metric': FLAGS.metric, 'goal': goal, 'target': FLAGS.target,
             'max_minutes': FLAGS.max_minutes, 'stop_at_target': FLAGS.stop_at_target, 'common_args': common,
             'recipes': {r.name: list(r.args) for r in recipes}, 'machine': machine_line(), 'runs': results}
  for i in range(FLAGS.runs):
    for recipe in recipes:
      model_dir = dirs[recipe.name][i]
      command = command_of(recipe, model_dir)
      try:
        run = watch(command, model_dir, model_dir + '.log', FLAGS.metric, FLAGS.target, goal, FLAGS.max_minutes,
                    FLAGS.stop_at_target, FLAGS.poll_seconds)
      except MetricError as e:
        raise app.UsageError(str(e)) from e
      run['images_per_sec'] = (log_images_per_sec(run['log']) if recipe.kind == 'ours' else epoch_images_per_sec(run))
      results[recipe.name].append(run)
      files.atomic_write(os.path.join(FLAGS.output_dir, OUTPUT_FILE), json.dumps(payload, indent=1))
      at = (f'{FLAGS.metric} {run["value"]:.4f} at step {run["step"]} after {run["minutes"]:.2f} min'
            if run['reached'] else
            f'not reached (best {run["best"]}, {run["stopped"] or "ended"}, exit {run["exit_code"]})')
      print(f'{recipe.name} run {i + 1}/{FLAGS.runs}: {at}; log {run["log"]}', flush=True)
  print(f'\n$ {invocation}')
  for recipe in recipes:
    shown = command_of(recipe, f'{FLAGS.output_dir}/{recipe.name}-N')
    print(f'{recipe.name}: {shlex.join([shown[0] if recipe.kind == "torchvision" else "python", *shown[1:]])}')
  print(payload['machine'])
  print(f'{FLAGS.runs} unseeded run(s) each; runs stopped at the target: {FLAGS.stop_at_target}\n')
  print(table(results, FLAGS.metric, FLAGS.target, goal, FLAGS.max_minutes))
  print(f'\nEvery run: {os.path.join(FLAGS.output_dir, OUTPUT_FILE)}')


def run_main() -> None:
  define_flags()
  app.run(main)


if __name__ == '__main__':
  run_main()
