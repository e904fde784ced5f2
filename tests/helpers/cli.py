"""Shared pieces of the CLI tests: the tiny run's flags, tiny TFRecord data, checkpoint readers, a shared run.

Why tiny: a resnet_main run's cost is mostly fixed (TF import, the model's build, tracing, graph optimisation:
~10-20 s on 2 cores, about half of it ResNet-18's eight blocks), so the tests use ResNet-10 (one block a group) at
32 px, batch 8, float32, and share one trained run (``shared_trained_run``) per session.
"""
import atexit
import contextlib
import dataclasses
import glob
import io
import logging as py_logging
import os
import re
import shutil
import subprocess
import tempfile
import threading
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from official_input import example_schema
from tests.helpers import procs

MAIN = [procs.PYTHON, '-m', 'resnet.resnet_main']
MAIN_DUMP = [procs.PYTHON, '-m', 'tests.helpers.main_dump']
NUM_CLASSES = 4

# ResNet-10, 32 px, 4 classes, float32, CPU, no TPU: ~0.05-0.1 s a step on 2 cores.
TINY = ('--resnet_depth=10', '--image_size=32', '--num_label_classes=4', '--precision=float32',
        '--train_batch_size=8', '--eval_batch_size=8', '--predict_batch_size=8', '--num_train_images=64',
        '--use_tpu=false', '--skip_train_summaries=true', '--keep_checkpoint_max=3')


def main_args(*flags: str, base: Sequence[str] = TINY) -> List[str]:
  """The command line of a resnet_main process (for procs.Proc: signals, several workers, a process to kill)."""
  return MAIN + list(base) + list(flags)


def run_cli(*args: str, cwd: str = procs.ROOT, module: bool = True, timeout: float = 300,
            user_env: bool = False) -> 'subprocess.CompletedProcess':
  """resnet_main in a subprocess, run to its end, as a user types it (``module``: ``python -m resnet.resnet_main``,
  else ``python resnet/resnet_main.py``). For what the process itself shows: exit codes, the console, --help,
  seeded runs. ``user_env``: the environment a user has (no TF_CPP_MIN_LOG_LEVEL: resnet_main's own default)."""
  entry = ['-m', 'resnet.resnet_main'] if module else ['resnet/resnet_main.py']
  env = {k: v for k, v in procs.base_env().items() if k != 'TF_CONFIG'}
  if user_env:
    env.pop('TF_CPP_MIN_LOG_LEVEL', None)
  return subprocess.run([procs.PYTHON, *entry, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                        env=env)


@dataclasses.dataclass
class Result:
  """An in-process run of resnet_main: its exit code (0, or 1 with an 'error:' line), stdout and log + stderr."""
  code: int
  out: str
  log: str


def run_in_process(*flags: str, base: Sequence[str] = TINY) -> Result:
  """resnet_main.main with these flags in this process (no TensorFlow start-up: seconds instead of ~20), as the
  command line runs it: flags parsed, params made, the mode run; an 'error:' exit is code 1 with the message in
  ``log``. Not for seeded runs (deterministic ops would stay on in the test process) nor for behaviours of the
  process itself (signals, exit codes of crashes, several workers): those run in a subprocess (``main_args``)."""
  from absl import flags as absl_flags  # pylint: disable=import-outside-toplevel
  from absl import logging as absl_logging  # pylint: disable=import-outside-toplevel
  from resnet import console  # pylint: disable=import-outside-toplevel
  from resnet import resnet_main  # pylint: disable=import-outside-toplevel
  from resnet.estimator import distribution  # pylint: disable=import-outside-toplevel
  if any(f.startswith('--random_seed=') for f in flags):
    raise ValueError('run seeded runs in a subprocess (main_args): deterministic ops cannot be turned off')
  out, err, records = io.StringIO(), io.StringIO(), []

  class Collect(py_logging.Handler):
    def emit(self, record):
      records.append(f'{record.levelname[0]} {record.getMessage()}')

  handler = Collect()
  logger = py_logging.getLogger('absl')
  logger.addHandler(handler)
  verbosity, level = absl_logging.get_verbosity(), logger.level  # restored exactly: later tests' caplog needs it
  code = 0
  original_exit = console.exit_on_op_error
  def op_error_exit(e):  # the program leaves at once (os._exit); here, a SystemExit with its line
    raise SystemExit(f'error: {console.op_error_summary(e)}')
  console.exit_on_op_error = op_error_exit
  resolve = distribution.resolve_strategy_name

  def as_in_a_process_of_its_own(name, tpu=None, use_tpu=None):  # 'auto' sees the 2 logical CPUs conftest made
    resolved = resolve(name, tpu, use_tpu)
    return 'one_device' if resolved == 'mirrored' and name != 'mirrored' else resolved
  distribution.resolve_strategy_name = as_in_a_process_of_its_own
  try:
    absl_flags.FLAGS.unparse_flags()
    absl_flags.FLAGS(['resnet_main', *base, *flags])
    absl_logging.set_verbosity(absl_logging.INFO)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
      resnet_main.main(None)
  except SystemExit as e:
    code = 0 if e.code in (None, 0) else 1
    if isinstance(e.code, str):
      err.write(e.code + '\n')
  finally:
    console.exit_on_op_error = original_exit
    distribution.resolve_strategy_name = resolve
    logger.removeHandler(handler)
    absl_logging.set_verbosity(verbosity)
    absl_flags.FLAGS.unparse_flags()
    logger.setLevel(level)
  return Result(code, out.getvalue(), '\n'.join(records) + '\n' + err.getvalue())


def write_records(path: str, examples: Sequence[tf.train.Example]) -> str:
  with tf.io.TFRecordWriter(path) as writer:
    for ex in examples:
      writer.write(ex.SerializeToString())
  return path


def jpeg_example(rng: np.random.Generator, label: int, name: str, size: int = 40) -> tf.train.Example:
  image = rng.integers(0, 256, size=(size, size, 3), dtype=np.uint8)
  encoded = tf.io.encode_jpeg(image).numpy()
  return example_schema.make_example(encoded, 'JPEG', label, f'class_{label}', size, size, name)


def make_tiny_dataset(data_dir: str, num_train: int = 32, num_validation: int = 16, num_shards: int = 2,
                      seed: int = 0, extra_train: Sequence[tf.train.Example] = ()) -> str:
  """Small JPEG TFRecords in the converter's layout (train-0000i-of-0000n, 1-based labels 1..4)."""
  os.makedirs(data_dir, exist_ok=True)
  rng = np.random.default_rng(seed)
  for split, count in (('train', num_train), ('validation', num_validation)):
    per_shard = -(-count // num_shards)
    for shard in range(num_shards):
      examples = [jpeg_example(rng, 1 + (shard * per_shard + i) % NUM_CLASSES, f'{split}_{shard}_{i}.JPEG')
                  for i in range(min(per_shard, count - shard * per_shard))]
      if split == 'train' and shard == 0:
        examples += list(extra_train)
      write_records(os.path.join(data_dir, '%s-%05d-of-%05d' % (split, shard, num_shards)), examples)
  with open(os.path.join(data_dir, 'labels.txt'), 'w') as f:
    f.write(''.join(f'class_{i}\n' for i in range(1, NUM_CLASSES + 1)))
  return data_dir


def write_summary(data_dir: str) -> str:
  """A summary.json with the converter's per-shard counts (records, bytes, sha256) and split sizes for the shards
  in ``data_dir`` (make_tiny_dataset and tools/make_fake_imagenet write none): what a resumed input computes its
  place from."""
  import hashlib  # pylint: disable=import-outside-toplevel
  import json  # pylint: disable=import-outside-toplevel
  shards, splits = {}, {}
  for name in sorted(os.listdir(data_dir)):
    split = name.split('-')[0]
    if split not in ('train', 'validation', 'test') or '-of-' not in name:
      continue
    path = os.path.join(data_dir, name)
    with open(path, 'rb') as f:
      data = f.read()
    records = sum(1 for _ in tf.data.TFRecordDataset(path))
    shards[name] = {'records': records, 'bytes': len(data), 'sha256': hashlib.sha256(data).hexdigest()}
    entry = splits.setdefault(split, {'images': 0, 'shards': []})
    entry['images'] += records
    entry['shards'].append(name)
  with open(os.path.join(data_dir, 'labels.txt')) as f:
    num_classes = len([line for line in f if line.strip()])
  with open(os.path.join(data_dir, 'summary.json'), 'w') as f:
    json.dump({'num_classes': num_classes, 'splits': splits, 'shards': shards}, f)
  return data_dir


def checkpoint_steps(model_dir: str) -> List[int]:
  state = tf.train.get_checkpoint_state(model_dir)
  if not state:
    return []
  return sorted(int(p.rsplit('-', 1)[1]) for p in state.all_model_checkpoint_paths)


def latest_step(model_dir: str) -> Optional[int]:
  path = tf.train.latest_checkpoint(model_dir)
  return int(path.rsplit('-', 1)[1]) if path else None


def load_checkpoint_fully(path: str) -> Dict[str, np.ndarray]:
  """Reads EVERY tensor of a checkpoint (a partial or corrupt one raises here)."""
  reader = tf.train.load_checkpoint(path)
  return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def global_step_of(path: str) -> int:
  reader = tf.train.load_checkpoint(path)
  return int(reader.get_tensor('global_step/.ATTRIBUTES/VARIABLE_VALUE'))


def model_weights(path: str) -> Dict[str, np.ndarray]:
  """Model variables only (no optimizer slots, no step), keyed by their checkpoint name."""
  return {k: v for k, v in load_checkpoint_fully(path).items()
          if k.startswith('model/') and 'OPTIMIZER_SLOT' not in k}


def restored_steps(log: str) -> List[int]:
  """The global steps the runs in ``log`` resumed from ('Restored <path> (global step N)')."""
  return [int(m) for m in re.findall(r'Restored \S+ \(global step (\d+)\)', log)]


def progress_steps(log: str) -> List[int]:
  """Steps of the per-loop progress lines ('step N/M loss=...')."""
  return [int(m) for m in re.findall(r'\bstep (\d+)/\d+ loss=', log)]


_shared: Dict[str, Tuple[str, str, str]] = {}
_shared_lock = threading.Lock()


def shared_trained_run() -> Tuple[str, str, str]:
  """(model_dir, data_dir, log) of ONE finished tiny training run per session, on TFRecords with bad records.

  The train split holds a non-image record, a truncated JPEG and a record without image/encoded, so this run
  also shows that training skips and counts them. ``--export_dir=<model_dir>/export`` exports once at the end.
  Copy model_dir before changing it.
  """
  with _shared_lock:
    if 'run' not in _shared:
      root = tempfile.mkdtemp(prefix='resnet-shared-run-')
      data_dir = make_tiny_dataset(os.path.join(root, 'data'), extra_train=bad_train_examples())
      model_dir = os.path.join(root, 'model')
      proc = procs.run(main_args('--mode=train', f'--data_dir={data_dir}', f'--model_dir={model_dir}',
                                 # 5 steps x 8 >= the 35 records, unshuffled: every bad record is met.
                                 '--train_steps=5', '--iterations_per_loop=2', '--shuffle_buffer_size=1',
                                 f'--export_dir={os.path.join(model_dir, "export")}'),
                       os.path.join(root, 'train.log'), timeout=240)
      if proc.popen.returncode != 0:
        raise AssertionError(f'shared tiny training run failed ({proc.popen.returncode}):\n{proc.tail()}')
      _shared['run'] = (model_dir, data_dir, proc.log())
    return _shared['run']


def cleanup_shared() -> None:
  for model_dir, _, _ in _shared.values():
    shutil.rmtree(os.path.dirname(model_dir), ignore_errors=True)
  _shared.clear()


atexit.register(cleanup_shared)


def bad_train_examples() -> List[tf.train.Example]:
  """A non-image payload, a truncated JPEG, and a record with no image/encoded at all."""
  rng = np.random.default_rng(1)
  good = jpeg_example(rng, 1, 'ok.JPEG', size=64)
  jpeg = good.features.feature[example_schema.ENCODED].bytes_list.value[0]
  not_image = example_schema.make_example(b'<html>404 Not Found</html>' * 8, 'JPEG', 2, 'class_2', 40, 40,
                                          'bad_not_an_image.JPEG')
  truncated = example_schema.make_example(jpeg[:len(jpeg) // 3], 'JPEG', 3, 'class_3', 64, 64,
                                          'bad_truncated.JPEG')
  missing = tf.train.Example(features=tf.train.Features(feature={
      example_schema.LABEL: tf.train.Feature(int64_list=tf.train.Int64List(value=[1])),
      example_schema.FILENAME: tf.train.Feature(bytes_list=tf.train.BytesList(value=[b'bad_no_encoded.JPEG']))}))
  return [not_image, truncated, missing]


def files_under(path: str) -> List[str]:
  return sorted(os.path.relpath(p, path) for p in glob.glob(os.path.join(path, '**'), recursive=True)
                if os.path.isfile(p))
