"""``model_dir/best/``: the checkpoint with the best value of one eval metric so far, and early stopping on it.

It lives beside, not among, the rolling checkpoints that ``keep_checkpoint_max`` deletes. ``best/`` is itself a
checkpoint directory (``ckpt-N.index``, ``ckpt-N.data-*``, ``checkpoint``), so ``eval_checkpoint=<model_dir>/best``
and warm starts read it like any other, plus ``eval_results.json``: the results that made it the best.

Atomic without directory renames (object stores have none): the new checkpoint's files (and the application's
``companions``, e.g. its params file so that a warm start from ``best/`` builds the same architecture) are copied
in under their own names, each file atomically; then ``eval_results.json``, written atomically, is the commit
point; then the ``checkpoint`` pointer and the removal of the previous files follow. Opening a ``best/`` that a
crash left half-updated, as its writer, finishes or undoes the update from ``eval_results.json``; a reader
(export) never changes it. ``progress.json`` counts evaluations without improvement and records the last
evaluated step, so that a resumed run evaluates a checkpoint its predecessor saved but did not evaluate, and stops
early where an uninterrupted run would.

Several workers decide as one: the chief (``writer``) alone writes the files, and every
decision that steers training (whether an evaluation improved, the count towards early stopping, which step still
needs an evaluation) is the chief's, handed to the ``follower`` workers by ``share``. A follower that judged on its
own could count an improvement the chief could not keep (its checkpoint vanished) or read ``best/`` differently,
stop at another step and leave the others waiting in a collective forever.
"""
import json
import math
import os
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from absl import logging
import tensorflow as tf

from resnet.estimator import files

BEST_DIR = 'best'
RESULTS_FILE = 'eval_results.json'
PROGRESS_FILE = 'progress.json'
GOALS = ('auto', 'max', 'min')
# writer: the chief of the job that evaluates (keeps best/); follower: another worker of that job (decides as the
# writer does, writes nothing); reader: a job that only looks (export), taking best/ whichever metric chose it.
ROLES = ('writer', 'follower', 'reader')
Share = Callable[[Sequence[float]], List[float]]  # the writer's values, on every worker


def metric_goal(metric: str, goal: str = 'auto') -> str:
  """'max' or 'min'; 'auto' minimises losses and errors and maximises everything else (accuracies, f1)."""
  if goal not in GOALS:
    raise ValueError(f'best_metric_goal must be one of {list(GOALS)}, got {goal!r}.')
  if goal != 'auto':
    return goal
  return 'min' if any(word in metric for word in ('loss', 'error')) else 'max'


class BestCheckpoint:
  """Tracks and keeps the best checkpoint by ``metric``. Only the ``writer`` touches the files; with several
  workers, ``share`` (see the module docstring) makes its decisions every worker's."""

  def __init__(self, model_dir: str, metric: str, goal: str = 'auto', role: str = 'writer',
               share: Optional[Share] = None, companions: Sequence[str] = ()):
    if role not in ROLES:
      raise ValueError(f'role must be one of {list(ROLES)}, got {role!r}.')
    self.model_dir = model_dir
    self.directory = os.path.join(model_dir, BEST_DIR)
    self.metric = metric
    self.goal = metric_goal(metric, goal)
    self.role = role
    self.writer = role == 'writer'
    self._share = share
    self.companions = tuple(companions)  # files of model_dir copied with each best (the application's, e.g. its params)
    self._agreed = share is None  # the opening state is agreed before the first decision
    self.best: Optional[Dict[str, Any]] = None
    self._committed: Optional[Dict[str, Any]] = None  # what best/ holds now, whatever metric chose it
    self.evals_without_improvement = 0
    self.last_evaluated_step = -1
    self._first_step_of_run: Optional[int] = None  # this process's first evaluation
    self._open()

  # ------------------------------------------------------------------------------------------------ reading
  def _read_json(self, name: str) -> Optional[Dict[str, Any]]:
    """The record, or None when missing or damaged in any way (bad JSON, binary, truncated, a directory): a
    damaged one is a warning, never a reason to stop, and nothing is deleted."""
    record = files.read_json_record(os.path.join(self.directory, name), 'JSON record')
    if record.value is not None and not isinstance(record.value, dict):
      record = files.Record(record.path, problem=f'{record.path} is not a JSON record (a {type(record.value).__name__})')
    if record.damaged:
      logging.warning('%s (damaged?): ignoring it.', record.problem)
    return record.value if not record.damaged else None

  def _holds_files(self, record: Mapping[str, Any]) -> bool:
    name = record.get('best_checkpoint') if isinstance(record, dict) else None
    return bool(name) and tf.io.gfile.exists(os.path.join(self.directory, f'{name}.index'))

  def _open(self) -> None:
    if self.role == 'follower':  # it takes the writer's state before its first decision (_agree)
      self.best = self._committed = None
      self.damaged = False
      return
    best = self._committed = self._read_json(RESULTS_FILE)
    damaged = best is None and tf.io.gfile.exists(os.path.join(self.directory, RESULTS_FILE))
    if best is not None and not (_is_number(best.get(best.get('best_metric', self.metric)))
                                 and _is_number(best.get('global_step')) and self._holds_files(best)):
      logging.warning('%s names checkpoint %r, whose files are not in %s (or the record is incomplete): ignoring '
                      'it.', os.path.join(self.directory, RESULTS_FILE), best.get('best_checkpoint'), self.directory)
      best = self._committed = None
      damaged = True
    self.damaged = damaged
    if damaged and self.writer:  # never a reason to stop: nothing is deleted, and the next new best replaces it all
      logging.warning('The next evaluation rebuilds the best checkpoint in %s; training goes on.', self.directory)
    if best is not None and self.role == 'reader':  # whichever metric chose it
      self.metric, self.goal = best.get('best_metric', self.metric), best.get('best_metric_goal', self.goal)
    if best is not None and (best.get('best_metric'), best.get('best_metric_goal')) != (self.metric, self.goal):
      logging.warning('%s holds the best checkpoint by %s (%s), not best_metric=%s (%s): the next evaluation replaces '
                      'it.', self.directory, best.get('best_metric'), best.get('best_metric_goal'), self.metric,
                      self.goal)
      best = None
    self.best = best
    progress = self._read_json(PROGRESS_FILE) or {}
    if not isinstance(progress, dict) or not all(_is_number(progress.get(k, 0)) for k in (
        'evals_without_improvement', 'last_evaluated_step')):
      logging.warning('%s holds values that are not numbers (damaged?): ignoring it.',
                      os.path.join(self.directory, PROGRESS_FILE))
      progress = {}
    if best is not None and progress.get('best_step') == best.get('global_step'):
      self.evals_without_improvement = int(progress.get('evals_without_improvement', 0))
      self.last_evaluated_step = int(progress.get('last_evaluated_step', best['global_step']))
    elif best is not None:  # committed a new best, stopped before progress.json: that evaluation improved
      self.last_evaluated_step = int(best['global_step'])
    if self.writer and tf.io.gfile.isdir(self.directory) and not damaged:
      self._tidy()
    if best is not None:
      logging.info('Best checkpoint so far: %s=%.4f at step %d (%s).', self.metric, best[self.metric],
                   best['global_step'], self.checkpoint_path)

  def _tidy(self) -> None:
    """Makes the pointer agree with eval_results.json and removes the files of any other checkpoint (a crash's) and
    temporary files; anything else (a damaged record set aside, a user's file) stays."""
    keep = set()
    if self._committed is not None:
      name = self._committed['best_checkpoint']
      files.atomic_write(os.path.join(self.directory, 'checkpoint'),
                         f'model_checkpoint_path: "{name}"\nall_model_checkpoint_paths: "{name}"\n')
      keep.update(os.path.basename(p) for p in tf.io.gfile.glob(os.path.join(self.directory, name + '.*')))
    for entry in tf.io.gfile.listdir(self.directory):
      entry = entry.rstrip('/')
      checkpoint_file = entry.endswith('.index') or '.data-' in entry
      if entry not in keep and (checkpoint_file or files.is_temp(entry)):
        tf.io.gfile.remove(os.path.join(self.directory, entry))

  def _writable(self, name: str) -> str:
    """The path of record ``name``; a directory found in its place is set aside (kept, renamed), with a warning."""
    path = os.path.join(self.directory, name)
    if tf.io.gfile.isdir(path):
      aside = files.set_aside(path)
      logging.warning('%s was a directory, not a record: kept as %s; %s is written anew.', path, aside, name)
    return path

  def _agree(self) -> None:
    """Once, before the first decision: every worker takes the writer's opening state (what it read from best/
    and progress.json, which a follower may have read damaged, or mid-update, differently)."""
    if self._agreed:
      return
    self._agreed = True
    mine = self.best or {}
    has_best, step, value, count, last = self._share([
        self.best is not None, mine.get('global_step', -1), mine.get(self.metric, 0.0),
        self.evals_without_improvement, self.last_evaluated_step])
    if not has_best:
      self.best = None
    elif self.best is None or int(round(step)) != self.best['global_step']:
      self.best = {'global_step': int(round(step)), self.metric: value, 'best_checkpoint': ''}
    self.evals_without_improvement, self.last_evaluated_step = int(round(count)), int(round(last))

  @property
  def checkpoint_path(self) -> Optional[str]:
    """The best checkpoint's prefix (``<model_dir>/best/ckpt-N``), or None before the first evaluation (and on a
    follower that only knows the writer's step and value)."""
    name = self.best.get('best_checkpoint') if self.best else None
    return os.path.join(self.directory, name) if name else None

  @property
  def value(self) -> Optional[float]:
    return self.best[self.metric] if self.best else None

  # ------------------------------------------------------------------------------------------------ updating
  def _better(self, value: float) -> bool:
    if not math.isfinite(value):
      return False
    if self.best is None:
      return True
    return value > self.value if self.goal == 'max' else value < self.value

  def update(self, results: Mapping[str, Any]) -> bool:
    """Takes one evaluation's results (with its ``checkpoint``); returns whether it became the best."""
    if self.metric not in results or not isinstance(results[self.metric], (int, float)):
      numeric = sorted(k for k, v in results.items() if isinstance(v, (int, float)) and k not in (
          'global_step', 'num_examples', 'seconds'))
      raise ValueError(f'best_metric={self.metric!r} is not a metric of this evaluation; it reports: '
                       f'{", ".join(numeric)}.')
    value = float(results[self.metric])
    self._agree()
    self.last_evaluated_step = int(results['global_step'])
    if self.writer and self.best is not None and not self._holds_files(self.best):
      logging.warning('%s no longer holds the best checkpoint %s (removed during the run?): the next improvement on '
                      '%s=%.4f writes it again; until then export_best exports the latest checkpoint.',
                      self.directory, self.best['best_checkpoint'], self.metric, self.value)
    if self._first_step_of_run is None:
      self._first_step_of_run = self.last_evaluated_step
    source = results.get('checkpoint') or ''
    name = os.path.basename(source)
    record = {**results, 'best_metric': self.metric, 'best_metric_goal': self.goal, 'best_checkpoint': name,
              'checkpoint': os.path.join(self.directory, name)}
    improved = self._better(value) and bool(source)
    error: Optional[BaseException] = None
    if self.writer:  # the copy and progress.json: each failure is shared below, so every worker stops with it
      try:
        if improved:
          improved = self._keep(source, record)
        self._write_progress(record if improved else self.best, 0 if improved else self.evals_without_improvement + 1)
      except Exception as e:  # pylint: disable=broad-except  (shared first, raised below on every worker)
        improved, error = False, e
    if self._share is not None:  # the writer's verdict: it alone knows whether its writes succeeded
      shared_improved, failed = self._share([improved, error is not None])
      improved = bool(shared_improved)
      if failed and error is None:
        raise RuntimeError(f'The chief could not keep the best checkpoint in {self.directory} (its log says why); '
                           'this worker stops with it.')
    if error is not None:
      raise error
    if improved:
      self.best = record
      self.evals_without_improvement = 0
      logging.info('New best checkpoint: %s=%.4f at step %d, kept in %s.', self.metric, value,
                   results['global_step'], self.directory)
    else:
      self.evals_without_improvement += 1
      if self.best is not None:
        logging.info('%s=%.4f does not improve on the best %.4f (step %d): %d evaluation(s) without improvement.',
                     self.metric, value, self.value, self.best['global_step'], self.evals_without_improvement)
    return improved

  def _write_progress(self, best: Optional[Mapping[str, Any]], evals_without_improvement: int) -> None:
    if best is not None:
      files.atomic_write(self._writable(PROGRESS_FILE), json.dumps({
          'best_step': best['global_step'], 'evals_without_improvement': evals_without_improvement,
          'last_evaluated_step': self.last_evaluated_step}))

  def _keep(self, source: str, record: Dict[str, Any]) -> bool:
    """Copies the checkpoint ``source`` in and commits it with ``record``; False if it vanished first
    (keep_checkpoint_max)."""
    try:
      sources = tf.io.gfile.glob(source + '.*')
      if not any(s.endswith('.index') for s in sources):
        raise tf.errors.NotFoundError(None, None, f'{source}.index')
      tf.io.gfile.makedirs(self.directory)
      sources = sources + [p for p in (os.path.join(self.model_dir, c) for c in self.companions)
                           if tf.io.gfile.exists(p)]
      for path in sources:
        target = os.path.join(self.directory, os.path.basename(path))
        tmp = files.temp_path(target)
        tf.io.gfile.copy(path, tmp, overwrite=True)
        tf.io.gfile.rename(tmp, target, overwrite=True)
    except tf.errors.NotFoundError:
      logging.warning('Checkpoint %s vanished before it could be kept as the best; keeping %s.', source,
                      self.checkpoint_path)
      return False
    files.atomic_write(self._writable(RESULTS_FILE), json.dumps(record, indent=2, sort_keys=True))
    self.best = self._committed = record
    self._tidy()
    return True

  def worse_since_first_evaluation(self) -> Optional[str]:
    """A warning when the best is this run's first evaluation and every one after it was worse: the signature of a
    run that diverged after it, which early stopping and the best checkpoint would otherwise pass over in silence."""
    if (self.best is None or self.evals_without_improvement < 1
        or self.best['global_step'] != self._first_step_of_run):
      return None
    return (f'The best checkpoint is this run\'s first evaluation ({self.metric}={self.value:.4f} at step '
            f'{self.best["global_step"]}) and all {self.evals_without_improvement} evaluation(s) after it were '
            f'worse: training may have diverged after step {self.best["global_step"]} (look at the training loss). '
            f'{self.checkpoint_path} holds the best weights.')

  def ahead_of(self, step: int) -> Optional[str]:
    """A warning when best/ holds a checkpoint past ``step`` (where training resumes or starts): it comes from a
    history that is gone (checkpoints deleted, a run started over), and stays the best to beat unless removed."""
    held = self.best or self._committed
    if not held or int(held.get('global_step', -1)) <= step:
      return None
    return (f'{self.directory} holds the best checkpoint of step {held["global_step"]} ({held.get("best_metric")}='
            f'{held.get(held.get("best_metric"), float("nan")):.4g}), but training goes on from step {step}: it comes '
            f'from training whose later checkpoints are gone. It stays the best to beat (and export_best exports '
            f'it while it is); move {self.directory} away to start its record with this run.')

  def needs_evaluation(self, step: int) -> bool:
    """Whether ``step`` (a resumed run's checkpoint) was saved but never evaluated, e.g. by a preempted run."""
    self._agree()
    return self.best is not None and step > self.last_evaluated_step

  def should_stop(self, patience: int) -> bool:
    """True after ``patience`` (> 0) evaluations in a row without improvement."""
    self._agree()
    return patience > 0 and self.best is not None and self.evals_without_improvement >= patience


def _is_number(value: Any) -> bool:
  """A record's number: a damaged record may hold null, a string or a list where a number belongs."""
  return isinstance(value, (int, float)) and not isinstance(value, bool)
