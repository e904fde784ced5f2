"""Checkpoints in model_dir, and which checkpoint the variables currently hold.

Only the chief's files count. Every worker must take part in saving (sync-on-read variables), so the others write
a throw-away copy to a private temp directory that is deleted at exit (as orbit does).

The latest checkpoint is the newest *complete* one (``latest``), not merely the one the ``checkpoint`` state file
names: TensorFlow's own lookup returns nothing when that one's files are gone (deleted by hand, say), and a run
would then start again from step 0 over the checkpoints that are still there. A missing or incomplete newest
checkpoint is named, with the one used instead; with no complete checkpoint left beside checkpoint files, it is an
error naming the files and the fix. A training run's chief repairs the state file to name what it resumes from.
"""
import atexit
import json
import os
import re
import shutil
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from absl import logging
import tensorflow as tf

CHECKPOINT_NAME = 'model.ckpt'
# What the variables hold when it is no checkpoint: their initial values, or weights trained in this process
# since the last save.
INITIAL = '<initial values>'
TRAINED = '<trained, unsaved>'
# Checkpoint entries beside global_step and the objects: the seed of an unseeded run's input order, and the states
# of the random streams Keras keeps out of a model's checkpoint (seed_states).
INPUT_SEED = 'input_seed'
# The input layout a run trains with: (global batch, input pipelines, step it began, records taken before it).
INPUT_LAYOUT = 'input_layout'
RANDOM_STREAMS = 'random_streams'
SEED_STATE_NAME = 'seed_generator_state'
# The loop hooks' states (hooks.LoopHook.state: the divergence guard's windows), one JSON string (RunState).
LOOP_HOOKS = 'loop_hooks'


class RunState(tf.train.experimental.PythonState):
  """JSON values a run carries from loop to loop outside its variables (the loop hooks' states), saved inside each
  checkpoint rather than in a file beside it: a resume takes back exactly those of the checkpoint it restores (after
  a SIGKILL, an older one's, never a newer one's), and they travel with the checkpoint (best/, copies)."""

  def __init__(self):
    self.current: Callable[[], Dict[str, Any]] = dict  # what a save writes (the Estimator's train() sets it)
    self.restored: Dict[str, Any] = {}                # what the checkpoint last restored held ({}: none)
    self.restored_from: Optional[str] = None          # that checkpoint

  def serialize(self) -> str:
    return json.dumps(self.current(), sort_keys=True)

  def deserialize(self, string_value) -> None:
    self.restored = json.loads(string_value)


def checkpoint_step(path: str) -> int:
  """The global step encoded in a checkpoint path ``.../model.ckpt-<step>``; -1 if there is none."""
  try:
    return int(path.rsplit('-', 1)[1])
  except (IndexError, ValueError):
    return -1


_DATA_SUFFIX = re.compile(r'\.data-\d{5}-of-\d{5}$')


def seed_states(objects: Dict[str, Any]) -> Dict[str, Any]:
  """The state variables of the Keras SeedGenerators in ``objects`` (dropout, stochastic depth and DropBlock masks
  draw from them), by a checkpoint-safe name. Keras leaves them out of a model's checkpoint: a resumed run would
  draw its masks again from the first state, and end elsewhere than the run it continues. Found by their Keras
  name (duck typing: this runner imports nothing of Keras)."""
  states, seen = {}, set()
  for name, obj in sorted(objects.items()):
    for variable in getattr(obj, 'variables', None) or ():
      path = str(getattr(variable, 'path', ''))
      if path.endswith(SEED_STATE_NAME) and id(variable) not in seen:
        seen.add(id(variable))
        states[re.sub(r'[^A-Za-z0-9_]', '.', f'{name}/{path}')] = variable
  return states


class IncompleteCheckpoints(FileNotFoundError):
  """model_dir has checkpoint files but no complete checkpoint."""


_warned = set()


def _candidates(directory: str) -> Tuple[List[str], List[str]]:
  """(the checkpoints the state file names, every checkpoint named by it or by an index file), newest first."""
  state = tf.train.get_checkpoint_state(directory)
  named = set(state.all_model_checkpoint_paths) | {state.model_checkpoint_path} if state else set()
  named.discard('')
  paths = set(named)
  paths.update(p[:-len('.index')] for p in tf.io.gfile.glob(os.path.join(directory, f'{CHECKPOINT_NAME}-*.index')))
  newest_first = lambda items: sorted(items, key=lambda p: (checkpoint_step(p), p), reverse=True)
  return newest_first(named), newest_first(paths)


def latest(directory: str) -> Optional[str]:
  """The newest complete checkpoint in ``directory`` (None when it holds none at all). When a newer one the state
  file names is missing or incomplete, a warning names it and the checkpoint used instead (an index file the state
  file does not name yet is a checkpoint being written: passed over in silence); IncompleteCheckpoints when
  checkpoint files are there but none is complete."""
  if not tf.io.gfile.isdir(directory):
    return None
  named, candidates = _candidates(directory)
  if not candidates:
    return None
  skipped = []
  for path in candidates:
    if is_complete(path):
      if skipped and (directory, path) not in _warned:
        _warned.add((directory, path))
        logging.warning('%s: the newest checkpoint%s %s missing or incomplete (deleted?): using %s, the newest '
                        'complete one (step %d).', directory, 's' if len(skipped) > 1 else '',
                        ', '.join(_describe(p) for p in skipped) + (' are' if len(skipped) > 1 else ' is'),
                        os.path.basename(path), checkpoint_step(path))
      return path
    if path in named:
      skipped.append(path)
  if not named:  # only index files of checkpoints being written
    return None
  raise IncompleteCheckpoints(
      f'{directory} has checkpoint files but no complete checkpoint: {", ".join(_describe(p) for p in skipped)}. '
      f'Nothing was started over them. Restore the missing files; or, to start this run again from step 0 (its '
      f'training is then lost), move its checkpoint files and the "checkpoint" file away; or use a new model_dir.')


def _describe(path: str) -> str:
  name = os.path.basename(path)
  if not tf.io.gfile.exists(path + '.index'):
    return f'{name} (no {name}.index)'
  return f'{name} (unreadable: a data file is missing or damaged)'


def has_checkpoint(directory: str) -> bool:
  """Whether ``directory`` holds checkpoint files at all (complete or not: either way it is no new run)."""
  return tf.io.gfile.isdir(directory) and bool(_candidates(directory)[1])


def repair_state(directory: str, path: str) -> None:
  """Makes the state file name ``path`` (the checkpoint a training run resumes from) and list only complete
  checkpoints, with their times (the CheckpointManager rotates by them), so that saving and rotating go on from it.
  Writes nothing when it already does."""
  _, candidates = _candidates(directory)
  complete = [p for p in reversed(candidates) if checkpoint_step(p) <= checkpoint_step(path) and is_complete(p)]
  state = tf.train.get_checkpoint_state(directory)
  if (state is not None and state.model_checkpoint_path == path
      and list(state.all_model_checkpoint_paths) == complete):
    return
  recorded = dict(zip(state.all_model_checkpoint_paths, state.all_model_checkpoint_timestamps)) if state else {}
  times = [recorded.get(p) or tf.io.gfile.stat(p + '.index').mtime_nsec / 1e9 for p in complete]
  preserved = state.last_preserved_timestamp if state else None
  tf.compat.v1.train.update_checkpoint_state(directory, path, all_model_checkpoint_paths=complete,
                                             all_model_checkpoint_timestamps=times,
                                             last_preserved_timestamp=min([preserved or min(times)] + times) - 1)
  logging.info('%s/checkpoint now names %s, the checkpoint this run resumes from.', directory, os.path.basename(path))


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
  found = latest(directory)
  if found:
    return found
  indexes = tf.io.gfile.glob(os.path.join(directory, '*.index'))  # copied checkpoints of any name
  if not indexes:
    raise FileNotFoundError(f'No checkpoint found in directory {directory} (no "checkpoint" state file and no '
                            f'*.index files).')
  return max(indexes, key=lambda p: (checkpoint_step(p[:-len('.index')]), p))[:-len('.index')]


class Checkpoints:
  """Saves and restores the global step plus every object model_fn created; tracks ``holds``."""

  def __init__(self, model_dir: str, is_chief: bool, keep_checkpoint_max: int, global_step: tf.Variable,
               objects: Callable[[], Dict[str, Any]],
               check: Optional[Callable[[str, Dict[str, Any]], None]] = None,
               input_seed: Optional[tf.Variable] = None, input_layout: Optional[tf.Variable] = None):
    self.model_dir = model_dir
    self._input_seed = input_seed
    self._input_layout = input_layout
    self._check = check  # the application's check that a checkpoint fits its objects, before any restore
    self._is_chief = is_chief
    self._keep = keep_checkpoint_max
    self._global_step = global_step
    self._objects = objects
    self._manager: Optional[tf.train.CheckpointManager] = None
    self._manager_keys: Tuple[str, ...] = ()
    self.holds: Optional[str] = None  # None: nothing loaded yet; else a checkpoint path, INITIAL or TRAINED
    self._saved_here: Optional[str] = None  # the model_dir path of this process's last save
    self.run_state = RunState()

  def wait_for(self, path: str, timeout: float) -> None:
    """Returns once checkpoint ``path`` is complete and readable; a clear error after ``timeout``. The .index is
    written last, but on a loaded machine it can be seen before it is whole ('too short to be an sstable'), so
    it must also open."""
    start, next_log = time.time(), time.time() + 30.0
    while not is_complete(path):
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

  def checkpoint(self, objects: Optional[Dict[str, Any]] = None) -> tf.train.Checkpoint:
    """The step, the objects, and what else a run carries from step to step: the input seed, the random streams
    (``seed_states``) and the loop hooks' states (``run_state``). The input's place is the step's (spec.RunContext.start_step) under the input layout saved
    with it (Estimator.input_place: a resume with another batch or pipeline count is not step x its batch)."""
    objects = self._objects() if objects is None else objects
    extras: Dict[str, Any] = {INPUT_SEED: self._input_seed} if self._input_seed is not None else {}
    if self._input_layout is not None:
      extras[INPUT_LAYOUT] = self._input_layout
    extras[LOOP_HOOKS] = self.run_state
    states = seed_states(objects)
    if states:
      extras[RANDOM_STREAMS] = tf.train.Checkpoint(**states)
    return tf.train.Checkpoint(global_step=self._global_step, **extras, **objects)

  def latest(self) -> Optional[str]:
    return latest(self.model_dir)

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
    objects = self._objects()
    if self._check is not None:   # it may name stand-ins that read the checkpoint's layout into the same variables
      objects = self._check(path, objects) or objects
    self.run_state.restored, self.run_state.restored_from = {}, path   # {} unless the checkpoint holds some
    self.checkpoint(objects).restore(path).expect_partial()
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
      # tf.train.Checkpoint's save_counter (which save adds 1 to) holds the step: a count of saves would differ
      # between a run a signal stopped (one save more) and the uninterrupted run, whose checkpoints are otherwise
      # equal entry for entry.
      manager.checkpoint.save_counter.assign(step - 1)
      written = manager.save(checkpoint_number=step)
      logging.info('Saved checkpoint %s', written)
    # Every worker names the chief's file: the workers' variables are equal, a non-chief's copy is throw-away.
    path = self.path_for_step(step)
    self.holds = self._saved_here = path
    return path


def is_complete(path: str) -> bool:
  """The index parses and every data shard it was written with is there (the reader opens shards lazily, so a
  deleted .data file would otherwise pass until the restore)."""
  if not tf.io.gfile.exists(path + '.index'):
    return False
  try:
    tf.train.load_checkpoint(path)
  except tf.errors.OpError:  # DataLossError for a partial index, NotFoundError for a data file not yet renamed
    return False
  shards = tf.io.gfile.glob(path + '.data-?????-of-?????')
  count = int(shards[0][-5:]) if shards else 1
  return len(shards) == count
