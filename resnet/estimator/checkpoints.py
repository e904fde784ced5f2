"""Checkpoints in model_dir, and which checkpoint the variables currently hold.

Only the chief's files count. Every worker must take part in saving (sync-on-read variables), so the others write
a throw-away copy to a private temp directory that is deleted at exit (as orbit does).
"""
import atexit
import os
import re
import shutil
import tempfile
import time
from typing import Any, Callable, Dict, Optional, Tuple

from absl import logging
import tensorflow as tf

CHECKPOINT_NAME = 'model.ckpt'
# What the variables hold when it is no checkpoint: their initial values, or weights trained in this process
# since the last save.
INITIAL = '<initial values>'
TRAINED = '<trained, unsaved>'


def checkpoint_step(path: str) -> int:
  """The global step encoded in a checkpoint path ``.../model.ckpt-<step>``; -1 if there is none."""
  try:
    return int(path.rsplit('-', 1)[1])
  except (IndexError, ValueError):
    return -1


_DATA_SUFFIX = re.compile(r'\.data-\d{5}-of-\d{5}$')


def resolve(path: str) -> str:
  """A checkpoint prefix from a prefix, a ``.index``/``.data-*`` file name, the ``checkpoint`` state file, or a
  directory (its latest; without a state file, as in copied checkpoints, the highest step among ``*.index``)."""
  if tf.io.gfile.isdir(path):
    return _latest_in_directory(path)
  if os.path.basename(path) == 'checkpoint':  # the CheckpointManager's state file: its directory was meant
    return _latest_in_directory(os.path.dirname(path) or '.')
  prefix = _DATA_SUFFIX.sub('', path)
  for suffix in ('.index', '.meta'):
    if prefix.endswith(suffix):
      prefix = prefix[:-len(suffix)]
  if not (tf.io.gfile.exists(prefix + '.index') or tf.io.gfile.exists(prefix)):
    raise FileNotFoundError(f'Checkpoint {path} not found (no {prefix}.index). Pass a checkpoint prefix such as '
                            f'model_dir/model.ckpt-1000, or a directory holding checkpoints.')
  return prefix


def _latest_in_directory(directory: str) -> str:
  latest = tf.train.latest_checkpoint(directory)
  if latest:
    return latest
  indexes = tf.io.gfile.glob(os.path.join(directory, '*.index'))
  if not indexes:
    raise FileNotFoundError(f'No checkpoint found in directory {directory} (no "checkpoint" state file and no '
                            f'*.index files).')
  return max(indexes, key=lambda p: (checkpoint_step(p[:-len('.index')]), p))[:-len('.index')]


class Checkpoints:
  """Saves and restores the global step plus every object model_fn created; tracks ``holds``."""

  def __init__(self, model_dir: str, is_chief: bool, keep_checkpoint_max: int, global_step: tf.Variable,
               objects: Callable[[], Dict[str, Any]]):
    self.model_dir = model_dir
    self._is_chief = is_chief
    self._keep = keep_checkpoint_max
    self._global_step = global_step
    self._objects = objects
    self._manager: Optional[tf.train.CheckpointManager] = None
    self._manager_keys: Tuple[str, ...] = ()
    self.holds: Optional[str] = None  # None: nothing loaded yet; else a checkpoint path, INITIAL or TRAINED
    self._saved_here: Optional[str] = None  # the model_dir path of this process's last save

  def wait_for(self, path: str, timeout: float) -> None:
    """Returns once checkpoint ``path`` is complete and readable; a clear error after ``timeout``. The .index is
    written last, but on a loaded machine it can be seen before it is whole ('too short to be an sstable'), so
    it must also open."""
    start, next_log = time.time(), time.time() + 30.0
    while not _readable(path):
      if time.time() - start > timeout:
        raise FileNotFoundError(f'{path} did not appear within {timeout:g} s: is model_dir on storage every worker '
                                f'shares (e.g. gs://), and is the chief (worker 0) still running?')
      if time.time() > next_log:
        logging.info('Waiting for the chief to finish writing %s ...', path)
        next_log = time.time() + 30.0
      time.sleep(0.1)

  @property
  def holds_own_training(self) -> bool:
    """Whether the variables hold this process's latest training, saved (the chief's path) or not."""
    return self.holds == TRAINED or (self.holds is not None and self.holds == self._saved_here)

  def checkpoint(self) -> tf.train.Checkpoint:
    return tf.train.Checkpoint(global_step=self._global_step, **self._objects())

  def latest(self) -> Optional[str]:
    return tf.train.latest_checkpoint(self.model_dir)

  def path_for_step(self, step: int) -> str:
    """The chief's checkpoint of ``step`` in model_dir (every worker names the chief's file)."""
    return os.path.join(self.model_dir, f'{CHECKPOINT_NAME}-{step}')

  def _manager_for_current_objects(self) -> tf.train.CheckpointManager:
    keys = tuple(sorted(self._objects()))
    if self._manager is None or keys != self._manager_keys:
      directory, keep = self.model_dir, self._keep
      if not self._is_chief:
        directory, keep = tempfile.mkdtemp(prefix='resnet-worker-ckpt-'), 1
        atexit.register(shutil.rmtree, directory, ignore_errors=True)
      self._manager = tf.train.CheckpointManager(self.checkpoint(), directory, max_to_keep=keep,
                                                 checkpoint_name=CHECKPOINT_NAME, step_counter=self._global_step)
      self._manager_keys = keys
    return self._manager

  def restore(self, path: Optional[str]) -> Optional[str]:
    """Restores ``path`` into the objects (None: keeps initial values); returns the path."""
    if not path:
      self.holds = INITIAL
      return None
    self.checkpoint().restore(path).expect_partial()
    # Objects the checkpoint lacks keep whatever they held; those that care are told (moving averages start from
    # the restored weights, not from random ones).
    in_checkpoint = {key.split('/', 1)[0] for key, _ in tf.train.list_variables(path)}
    for name, obj in self._objects().items():
      if name not in in_checkpoint and hasattr(obj, 'not_in_checkpoint'):
        obj.not_in_checkpoint(path)
    self.holds = path
    logging.info('Restored %s (global step %d).', path, int(self._global_step.numpy()))
    return path

  def objects_added(self) -> None:
    """New objects are at their initial values: reload unless the variables hold unsaved training."""
    if self.holds != TRAINED:
      self.holds = None

  def save(self) -> str:
    """A checkpoint at the current global step (none written if one exists for this step)."""
    manager = self._manager_for_current_objects()
    step = int(self._global_step.numpy())
    if not (manager.latest_checkpoint and checkpoint_step(manager.latest_checkpoint) == step):
      written = manager.save(checkpoint_number=step)
      logging.info('Saved checkpoint %s', written)
    # Every worker names the chief's file: the workers' variables are equal, a non-chief's copy is throw-away.
    path = self.path_for_step(step)
    self.holds = self._saved_here = path
    return path


def _readable(path: str) -> bool:
  if not tf.io.gfile.exists(path + '.index'):
    return False
  try:
    tf.train.load_checkpoint(path)
    return True
  except tf.errors.OpError:  # DataLossError for a partial index, NotFoundError for a data file not yet renamed
    return False
