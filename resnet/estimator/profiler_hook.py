"""In-process profile capture between training loops, and the on-demand profiler server.

The reference (tensorflow/tpu ``TPUProfilerHook``) shelled out to ``capture_tpu_profile`` every N steps. Here the
trainer's own process starts and stops ``tf.profiler.experimental`` at loop boundaries, so captures need no TPU
name, no subprocess and no gRPC port, and they land where TensorBoard's profile tab looks:
``<model_dir>/plugins/profile/<YYYY_MM_DD_HH_MM_SS>/<host>.xplane.pb``.

Why captures start and stop at loop boundaries, in loops of one step (measured with TF 2.21 + xprof 2.24):
- ``start()`` took 0.2 ms and ``stop()`` 8 ms for a small capture (it writes the xplane; more for a big trace), so
  doing both between loops is cheap.
- xprof finds no steps at all when a profile contains a ``tf.while_loop`` (a ``tf.range`` loop in a
  ``tf.function``): it then groups events by loop iteration instead of by the ``Trace(..., _r=1)`` step markers, and
  the overview and input-pipeline tools report "No step time measured". A background-thread ``stop()`` after
  ``duration_ms`` would cut a multi-step loop in half and capture while-loops; stopping at a boundary while the hook
  asks for 1-step loops captures whole, individually marked steps. The Estimator runs such 1-step loops without
  a while loop (a plain step function), or the profile has no steps.
- The profiler names a run by the wall-clock second at ``stop()``; two captures stopped within one second share a
  directory and the second overwrites the first. The hook waits for the next second in that (rare) case.
- A periodic capture lasts ``duration_ms`` rounded up to the next step boundary (at least one step). xprof leaves
  the first and last step of a capture of more than ~5 steps out of its statistics.
- TF 2.21 ignores ``ProfilerOptions`` (it logs "host_tracer_level expects an i value" and traces at the defaults:
  host level 2, device level 1, no Python tracer), so the hook passes none.
"""
import dataclasses
import math
import os
import time
from typing import Any, List, Mapping, Optional, Sequence, Set, Tuple, Union

from absl import logging
import tensorflow as tf

from resnet.estimator.hooks import LoopHook

ProfileSteps = Union[str, Sequence[int], None]


def parse_profile_steps(profile_steps: ProfileSteps) -> Optional[Tuple[int, int]]:
  """'A,B' (or (A, B)) -> (A, B): the window of global steps A..B-1; '' or None -> None."""
  if profile_steps is None or (isinstance(profile_steps, str) and not profile_steps.strip()):
    return None
  if isinstance(profile_steps, str):
    parts = [p.strip() for p in profile_steps.split(',')]
  else:
    parts = list(profile_steps)
  try:
    start, stop = (int(p) for p in parts)
  except (TypeError, ValueError):
    raise ValueError(f"profile_steps must be 'A,B' with integers 0 <= A < B, got {profile_steps!r}") from None
  if not 0 <= start < stop:
    raise ValueError(f'profile_steps must satisfy 0 <= A < B, got {start},{stop}')
  return start, stop


@dataclasses.dataclass
class Capture:
  """One profile capture: the global steps it covers (start..end-1) and the run directory it wrote."""
  kind: str  # 'periodic' or 'window'
  start_step: int
  start_time: float
  end_step: Optional[int] = None
  recording: bool = True  # False: the profiler could not start (the loops ran as if it had)
  run_dir: Optional[str] = None
  xplane_files: Tuple[str, ...] = ()


def _run_dirs(profile_dir: str) -> List[str]:
  if not tf.io.gfile.isdir(profile_dir):
    return []
  return [d.rstrip('/') for d in tf.io.gfile.listdir(profile_dir)]


def _wait_for_unused_run_name(profile_dir: str) -> None:
  """Sleeps into the next second when a run named after this second already exists (else it is overwritten)."""
  taken = set(_run_dirs(profile_dir))
  for _ in range(3):
    now = time.time()
    names = {time.strftime('%Y_%m_%d_%H_%M_%S', t(now)) for t in (time.localtime, time.gmtime)}
    if not names & taken:
      return
    time.sleep(1.0 - math.fmod(now, 1.0) + 0.01)


class ProfilerHook(LoopHook):
  """Captures profiles every N steps (``duration_ms`` each) and/or once over the steps of ``profile_steps``.

  Periodic mode: captures start at loop boundaries on multiples of N after training starts (the first loop, which
  traces and compiles, is never captured) and last ``duration_ms``, rounded up to a step. A capture due while the
  previous one still runs is skipped with a log line, so captures never overlap.
  Window mode (``profile_steps=(A, B)``): one capture of the global steps A..B-1, i.e. boundaries at A and B.
  Both modes ask for a 1-step loop just before a capture (so a 1-step function is traced outside it) and 1-step
  loops during it. ``step_markers`` is always on: one ``Trace`` per loop costs microseconds.

  Several workers: every worker needs the same loop boundaries (each step is a collective, and workers whose
  compiled loops differ in length wait for each other forever), so every worker has this hook and only the chief
  ``records``; when a periodic capture ends (its duration, on the chief's clock) is the chief's decision, shared
  (``Estimator.from_chief``) at each 1-step loop of a capture.
  """

  step_markers = True

  def __init__(self, profile_every_n_steps: int = 0, duration_ms: int = 1000,
               profile_steps: ProfileSteps = None, logdir: Optional[str] = None, records: bool = True):
    if profile_every_n_steps < 0:
      raise ValueError(f'profile_every_n_steps must be >= 0, got {profile_every_n_steps}')
    if duration_ms <= 0:
      raise ValueError(f'duration_ms must be > 0, got {duration_ms}')
    self._every_n = int(profile_every_n_steps)
    self._window = parse_profile_steps(profile_steps)
    if not self._every_n and self._window is None:
      raise ValueError('ProfilerHook needs profile_every_n_steps > 0 or profile_steps; '
                       'without either, do not create it (resnet/profiling.py does not)')
    self._duration_s = duration_ms / 1000.0
    self._logdir = logdir
    self._records = records
    self._estimator: Any = None
    self._next_due: Optional[int] = None
    self._begun = False
    self._active: Optional[Capture] = None
    self._runs_before: Set[str] = set()
    self.captures: List[Capture] = []
    self.skipped_steps: List[int] = []

  @property
  def profile_dir(self) -> str:
    return os.path.join(self._logdir, 'plugins', 'profile')

  def begin(self, estimator: Any, step: int) -> None:
    """Schedules captures; a later train() call with the same hook (train_and_eval) keeps the schedule."""
    if self._logdir is None:
      self._logdir = getattr(estimator, 'model_dir', None)
    if not self._logdir:
      raise ValueError('ProfilerHook needs a logdir: pass logdir= or give the Estimator a model_dir')
    self._estimator = estimator
    first_call, self._begun = not self._begun, True
    if self._every_n:
      if first_call:  # never capture the first loop: it traces and compiles
        self._next_due = (step // self._every_n + 1) * self._every_n
      else:  # already compiled: a capture due exactly at this step still happens
        self._next_due = max(self._next_due or 0, -(-step // self._every_n) * self._every_n)
    if self._window is not None:
      self._window = self._clip_window(self._window, step, first_call)

  @staticmethod
  def _clip_window(window: Tuple[int, int], step: int, first_call: bool) -> Optional[Tuple[int, int]]:
    start, stop = window
    if stop <= step:
      logging.warning('profile_steps %d,%d: training resumes at step %d, after the window; no capture.',
                      start, stop, step)
      return None
    if start < step or (start == step and first_call):
      logging.warning('profile_steps %d,%d: starting the capture at step %d%s.', start, stop, step,
                      '; its first loop includes tracing and compilation' if first_call else '')
      return step, stop
    return window

  def _due_now(self, step: int) -> bool:
    window_due = self._window is not None and self._window[0] <= step < self._window[1]
    return window_due or (self._next_due is not None and step >= self._next_due)

  def next_boundary(self, step: int) -> Optional[int]:
    if self._active is not None or self._due_now(step):
      return step + 1
    targets = [self._next_due] if self._next_due is not None else []
    if self._window is not None:
      targets.append(self._window[0])
    target = min(t for t in targets if t > step) if targets else None
    if target is None:
      return None
    return target - 1 if target - 1 > step else target  # a 1-step warm-up loop right before the capture

  def before_loop(self, step: int, num_steps: int) -> None:
    if self._active is not None:
      self._skip_periodic_due(step)
      return
    if self._window is not None and self._window[0] <= step < self._window[1]:
      self._start('window', step)
      if self._active is not None:
        self._skip_periodic_due(step)
    elif self._next_due is not None and step >= self._next_due:
      self._advance_due(step)
      self._start('periodic', step)

  def _advance_due(self, step: int) -> None:
    self._next_due = (step // self._every_n + 1) * self._every_n

  def _skip_periodic_due(self, step: int) -> None:
    if self._next_due is not None and step >= self._next_due:
      logging.info('Profiler is already running (capture from step %d); skipping the capture due at step %d.',
                   self._active.start_step, self._next_due)
      self.skipped_steps.append(self._next_due)
      self._advance_due(step)

  def after_loop(self, step: int, logs: Mapping[str, float]) -> None:
    capture = self._active
    if capture is None:
      return
    if capture.kind == 'window':
      if step >= self._window[1]:
        self._window = None
        self._stop(step)
      return
    done = time.time() - capture.start_time >= self._duration_s or (self._window is not None and
                                                                      step >= self._window[0])
    if getattr(self._estimator, 'workers', 1) > 1:  # the chief's clock decides, for every worker
      done = bool(self._estimator.from_chief([done])[0])
    if done:
      self._stop(step)

  def end(self, step: int) -> None:
    """Stops a capture in progress, so its profile is written even when training stops early or fails."""
    if self._active is not None:
      if self._active.kind == 'window':
        self._window = None  # captured (in part); a later train() call does not capture the rest again
      self._stop(step)

  def _start(self, kind: str, step: int) -> None:
    self._active = Capture(kind=kind, start_step=step, start_time=time.time())
    if not self._records:  # another worker records; this one keeps the same loop boundaries
      return
    self._runs_before = set(_run_dirs(self.profile_dir))
    try:
      tf.profiler.experimental.start(self._logdir)  # default levels; TF 2.21 ignores ProfilerOptions anyway
    except (tf.errors.OpError, RuntimeError) as e:
      # Another session (e.g. a remote capture through the profiler server) is running: skip it, never fail
      # training; the capture's 1-step loops still run, as on the other workers.
      logging.warning('Could not start a profile capture at step %d (%s); skipping it.', step, e)
      self._active.recording = False
      return
    logging.info('Profiling from step %d (%s capture) into %s', step, kind, self.profile_dir)

  def _stop(self, step: int) -> None:
    capture, self._active = self._active, None
    capture.end_step = step
    if not self._records or not capture.recording:
      return
    _wait_for_unused_run_name(self.profile_dir)
    try:
      tf.profiler.experimental.stop()
    except (tf.errors.OpError, RuntimeError) as e:
      logging.warning('Stopping the profile capture of steps [%d, %d) failed: %s', capture.start_step, step, e)
      return
    self._record_output(capture)
    self.captures.append(capture)

  def _record_output(self, capture: Capture) -> None:
    new_runs = sorted(set(_run_dirs(self.profile_dir)) - self._runs_before)
    runs = new_runs or sorted(_run_dirs(self.profile_dir))
    if not runs:
      logging.warning('Profile capture of steps [%d, %d) wrote no run under %s', capture.start_step,
                      capture.end_step, self.profile_dir)
      return
    capture.run_dir = os.path.join(self.profile_dir, runs[-1])
    capture.xplane_files = tuple(sorted(tf.io.gfile.glob(os.path.join(capture.run_dir, '*.xplane.pb'))))
    logging.info('Profile of steps [%d, %d) (%d steps, %.2f s) written to %s (view: tensorboard --logdir %s, '
                 'Profile tab)', capture.start_step, capture.end_step, capture.end_step - capture.start_step,
                 time.time() - capture.start_time, capture.run_dir, self._logdir)
