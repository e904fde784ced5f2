"""Shared pieces of the CLI tests: the tiny run's flags, tiny TFRecord data, checkpoint readers, a shared run.

Why tiny: every resnet_main process costs ~15-25 s on 2 cores (TF import, ResNet-18 build, tracing), so the
tests use ResNet-18 at 32 px, batch 8, float32, and share one trained run (``shared_trained_run``) per session.
"""
import atexit
import glob
import os
import re
import shutil
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

# ResNet-18, 32 px, 4 classes, float32, CPU, no TPU: ~0.05-0.1 s a step on 2 cores.
TINY = ('--resnet_depth=18', '--image_size=32', '--num_label_classes=4', '--precision=float32',
        '--train_batch_size=8', '--eval_batch_size=8', '--predict_batch_size=8', '--num_train_images=64',
        '--use_tpu=false', '--skip_train_summaries=true', '--keep_checkpoint_max=3')


def main_args(*flags: str, base: Sequence[str] = TINY) -> List[str]:
  return MAIN + list(base) + list(flags)


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
