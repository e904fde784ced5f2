r"""The average of a run's last K checkpoints, as a run to evaluate, predict with and export (timm's
avg_checkpoints.py): every floating-point tensor (weights, batch-norm statistics, moving averages, optimizer
slots) is the mean over the K checkpoints; counters (the global step) and the checkpoint's object graph are the
newest one's, so the program restores it as any of its checkpoints.

  python -m tools.average_checkpoints --model_dir=runs/mine --last=5
  python resnet/resnet_main.py --mode=eval --model_dir=runs/mine/averaged
  python resnet/resnet_main.py --mode=export --model_dir=runs/mine/averaged --export_dir=exports/averaged

The output (``--output_dir``, default MODEL_DIR/averaged) is a finished run of its own: the averaged checkpoint
and its "checkpoint" file, the run's params.yaml and labels.txt, training_ended.json (eval of it ends at its step),
and averaged_from.json naming the checkpoints averaged. It is written in a hidden sibling folder and renamed into
place; an existing output is never overwritten. Keep K checkpoints while training with --keep_checkpoint_max (and
--save_checkpoints_steps).
"""
import json
import os
from typing import Dict, List, Optional, Tuple

from absl import app
from absl import flags
from absl import logging
import numpy as np
import tensorflow as tf

from resnet.run_setup import finished_run
from resnet.estimator import checkpoints
from resnet.estimator import files

FLAGS = flags.FLAGS
COPIED = ('params.yaml', 'labels.txt', 'training_ended.json')  # what makes the output a finished run to read
RECORD = 'averaged_from.json'


def define_flags() -> None:
  """Defined on demand, not at import: resnet_main also has --model_dir, and tests import both modules."""
  definitions = {
      'model_dir': lambda: flags.DEFINE_string('model_dir', None, 'The run whose checkpoints are averaged.'),
      'last': lambda: flags.DEFINE_integer('last', 5, 'How many of its newest complete checkpoints to average.'),
      'output_dir': lambda: flags.DEFINE_string('output_dir', None, 'Where the averaged run goes (a new folder); '
                                                'unset = MODEL_DIR/averaged.'),
  }
  for name, define in definitions.items():
    if name not in FLAGS:
      define()


def complete_checkpoints(model_dir: str) -> List[str]:
  """Every complete checkpoint of ``model_dir``, oldest first."""
  state = tf.train.get_checkpoint_state(model_dir)
  named = set(state.all_model_checkpoint_paths) if state else set()
  named.update(p[:-len('.index')] for p in tf.io.gfile.glob(os.path.join(model_dir, 'model.ckpt-*.index')))
  return sorted((p for p in named if checkpoints.is_complete(p)), key=checkpoints.checkpoint_step)


def averaged_tensors(paths: List[str]) -> Dict[str, Tuple[np.ndarray, tf.DType]]:
  """{key: (value, dtype)}: the mean over ``paths`` of each floating-point tensor, the newest's of the others."""
  readers = [tf.train.load_checkpoint(p) for p in paths]
  newest = readers[-1]
  shapes, dtypes = newest.get_variable_to_shape_map(), newest.get_variable_to_dtype_map()
  for path, reader in zip(paths, readers):
    theirs = reader.get_variable_to_shape_map()
    differ = sorted(k for k in set(shapes) | set(theirs) if shapes.get(k) != theirs.get(k))
    if differ:
      raise ValueError(f'{path} holds other variables or shapes than {paths[-1]} ({len(differ)} differ, e.g. '
                       f'{", ".join(differ[:3])}): checkpoints of one model can be averaged, not of another.')
  tensors = {}
  for key, dtype in dtypes.items():
    if dtype.is_floating:
      total = sum(np.asarray(reader.get_tensor(key), np.float64) for reader in readers)
      tensors[key] = (total / len(readers), dtype)
    else:
      tensors[key] = (newest.get_tensor(key), dtype)
  return tensors


def write_checkpoint(prefix: str, tensors: Dict[str, Tuple[np.ndarray, tf.DType]]) -> None:
  """The tensors under their keys, as TensorFlow's saver writes them (``prefix``.index and .data-*)."""
  keys = sorted(tensors)
  values = [tf.cast(tf.constant(tensors[k][0]), tensors[k][1]) if tensors[k][1].is_floating
            else tf.constant(tensors[k][0], tensors[k][1]) for k in keys]
  tf.raw_ops.SaveV2(prefix=prefix, tensor_names=keys, shape_and_slices=[''] * len(keys), tensors=values)


def average_checkpoints(model_dir: str, last: int, output_dir: Optional[str] = None) -> str:
  """Writes the average of ``model_dir``'s newest ``last`` complete checkpoints as a new run; returns its
  checkpoint path."""
  output_dir = (output_dir or os.path.join(model_dir, 'averaged')).rstrip('/')
  if last < 2:
    raise ValueError(f'--last={last}: average at least 2 checkpoints.')
  if tf.io.gfile.exists(output_dir):
    raise FileExistsError(f'{output_dir} exists: it is left as it is. Remove it, or give another --output_dir.')
  available = complete_checkpoints(model_dir)
  if len(available) < last:
    steps = ', '.join(str(checkpoints.checkpoint_step(p)) for p in available) or 'none'
    raise ValueError(f'{model_dir} holds {len(available)} complete checkpoints (steps {steps}), fewer than '
                     f'--last={last}: average fewer, or keep more while training (--keep_checkpoint_max, '
                     '--save_checkpoints_steps).')
  chosen = available[-last:]
  tensors = averaged_tensors(chosen)
  name = os.path.basename(chosen[-1])
  staging = files.temp_path(output_dir)
  tf.io.gfile.makedirs(staging)
  step = checkpoints.checkpoint_step(chosen[-1])
  try:
    write_checkpoint(os.path.join(staging, name), tensors)
    _write(os.path.join(staging, 'checkpoint'),
           f'model_checkpoint_path: "{name}"\nall_model_checkpoint_paths: "{name}"\n')
    for copied in COPIED:
      if tf.io.gfile.exists(os.path.join(model_dir, copied)):
        tf.io.gfile.copy(os.path.join(model_dir, copied), os.path.join(staging, copied))
    if not tf.io.gfile.exists(os.path.join(staging, finished_run.ENDED_FILE)):  # eval of it ends at its step
      finished_run.record_end(staging, step, 'averaged checkpoints')
    _write(os.path.join(staging, RECORD), json.dumps({
        'model_dir': model_dir, 'checkpoints': [os.path.basename(p) for p in chosen],
        'steps': [checkpoints.checkpoint_step(p) for p in chosen]}, indent=2))
    tf.io.gfile.rename(staging, output_dir)  # a folder rename: atomic on local disks, not on object stores
  except BaseException:
    if tf.io.gfile.exists(staging):
      tf.io.gfile.rmtree(staging)
    raise
  path = os.path.join(output_dir, name)
  logging.info('Averaged %s into %s.', ', '.join(os.path.basename(p) for p in chosen), path)
  return path


def _write(path: str, text: str) -> None:
  with tf.io.gfile.GFile(path, 'w') as f:
    f.write(text)


def main(argv) -> None:
  del argv
  if not FLAGS.model_dir:
    raise app.UsageError('--model_dir is required.')
  try:
    path = average_checkpoints(FLAGS.model_dir, FLAGS.last, FLAGS.output_dir)
  except (ValueError, OSError) as e:
    raise SystemExit(f'error: {e}') from None
  output_dir = os.path.dirname(path)
  print(f'Averaged the last {FLAGS.last} checkpoints of {FLAGS.model_dir} into {path}.\n'
        f'  python resnet/resnet_main.py --mode=eval --model_dir={output_dir}\n'
        f'  python resnet/resnet_main.py --mode=export --model_dir={output_dir} --export_dir=EXPORT_DIR')


def run_main() -> None:
  define_flags()
  app.run(main)


if __name__ == '__main__':
  run_main()
