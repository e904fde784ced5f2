"""Hooks: what runs between compiled training loops (profiling, preemption, NaN checks, logging), and what looks
at an evaluation on the host (per-class reports, misclassified examples).

The estimator owns *when* a loop runs; hooks only observe loop boundaries and may ask for an earlier one. A hook
never touches the model or the step function, so turning one off costs nothing inside the compiled loop.
"""
import dataclasses
import math
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

import numpy as np

from absl import logging


class LoopHook:
  """Base class; override what you need. All steps are global steps."""

  # When any active hook sets this, the estimator wraps each loop call in a profiler step marker
  # (tf.profiler.experimental.Trace('train', step_num=..., _r=1)), so profile tools see steps.
  step_markers: bool = False

  def begin(self, estimator, step: int) -> None:
    """Called once at the start of Estimator.train(), with the step training resumes from."""

  def next_boundary(self, step: int) -> Optional[int]:
    """The next global step (> step) at which this hook wants a loop to end, or None for no preference.

    The estimator ends each loop at the earliest of: step + iterations_per_loop, the next checkpoint step,
    max_steps, and every hook's boundary. Returning step + 1 gives one step per loop (per-step markers).
    """
    return None

  def before_loop(self, step: int, num_steps: int) -> None:
    """Called right before a loop of ``num_steps`` steps that starts at ``step``."""

  def after_loop(self, step: int, logs: Dict[str, float]) -> None:
    """Called after a loop; ``step`` is the global step reached; logs hold loss, steps_per_sec and model_fn's
    scalars. A hook may add entries: they are logged and written to TensorBoard like the others."""

  def end(self, step: int) -> None:
    """Called once when Estimator.train() returns or raises (always, in a finally block)."""


class ExamplesPerSecond(LoopHook):
  """Adds ``name`` (steps/s x the global batch) to each loop's logs: the progress line shows it in ``unit`` and
  TensorBoard gets it as a scalar. The estimator itself only knows steps; the application names what a step eats
  (``images_per_sec``, ``img/s``)."""

  def __init__(self, global_batch_size: int, name: str = 'examples_per_sec', unit: str = 'examples/s'):
    self.global_batch_size = int(global_batch_size)
    self.name, self.unit = name, unit

  def after_loop(self, step: int, logs: Dict[str, float]) -> None:
    logs[self.name] = logs['steps_per_sec'] * self.global_batch_size


class DivergenceError(FloatingPointError):
  """Training diverged: the loss became NaN or Inf, or exploded."""


class NonFiniteLossError(DivergenceError):
  """Training produced a NaN or Inf loss."""


class LossExplodedError(DivergenceError):
  """A finite training loss exploded (DivergenceGuard)."""


class NanGuard(LoopHook):
  """Stops training on a NaN/Inf loss before the estimator checkpoints the bad weights.

  The estimator calls after_loop before saving, so raising here leaves the last good checkpoint the latest one.
  """

  def after_loop(self, step: int, logs: Dict[str, float]) -> None:
    loss = logs.get('loss')
    if loss is not None and not math.isfinite(loss):
      raise NonFiniteLossError(
          f'Loss is {loss} in the loop ending at step {step}: training stopped without saving this loop. The '
          f'latest checkpoint predates it (its weights may already have been diverging if the loss was '
          f'exploding). Try a lower base_learning_rate, precision=float32, or check the data.')


class CounterLogger(LoopHook):
  """Logs a monotonically growing counter (e.g. skipped corrupt records) whenever it changes."""

  def __init__(self, what: str, read: Callable[[], int]):
    self.what = what
    self.read = read
    self.last = 0

  def after_loop(self, step: int, logs: Dict[str, float]) -> None:
    value = int(self.read())
    if value != self.last:
      logging.warning('%d %s so far (step %d).', value, self.what, step)
      self.last = value
    if value:
      logs[self.what.replace(' ', '_')] = float(value)


@dataclasses.dataclass
class EvalReport:
  """What an eval hook adds: ``results`` (JSON values merged into <name>_results.json; numbers among them also go
  to TensorBoard as scalars) and ``images`` (tag -> uint8 [H, W, 3] for TensorBoard)."""
  results: Dict[str, Any] = dataclasses.field(default_factory=dict)
  images: Dict[str, np.ndarray] = dataclasses.field(default_factory=dict)


class EvalHook:
  """Sees one evaluation on the host, after the compiled steps: the per-example outputs of model_fn's
  ``eval_outputs`` batch by batch (with ``label`` and the string features; padding included: label -1), then
  the totals. Every worker calls it on the examples it evaluated; the totals are the same on all."""

  def begin(self, estimator, name: str) -> None:
    """Called before the first batch; ``name`` is the evaluation's (``eval``: model_dir/eval_results.json)."""

  def after_batch(self, examples: Mapping[str, np.ndarray]) -> None:
    """One batch of this worker's replicas, as numpy arrays with a leading example dimension."""

  def end(self, results: Mapping[str, Any], sums: Mapping[str, np.ndarray]) -> EvalReport:
    """``results``: the metrics, global_step, num_examples, checkpoint; ``sums``: model_fn's eval_sums."""
    return EvalReport()


class DivergenceGuard(LoopHook):
  """Catches a finite loss that explodes, which NanGuard cannot see: after ``after_step`` (the warm-up), a loop
  whose mean loss is FACTOR times the loss of a uniform guess (``chance``), or that is back above chance after the
  run had reached half of it, counts as exploded; PATIENCE such loops in a row (counted across train() calls, so
  across train_and_eval's chunks) stop the run (``stop``: raised before the estimator saves that loop) or log a
  warning. ``key`` names the logged loop mean to watch (e.g. the loss without weight decay, which starts far from
  zero on its own)."""

  FACTOR = 3.0
  PATIENCE = 2
  HISTORY = 8

  def __init__(self, chance: float, after_step: float, stop: bool = True, key: str = 'loss', advice: str = ''):
    self.chance = float(chance)
    self.after_step = after_step
    self.stop = stop
    self.key = key
    self.advice = advice
    self.history: list = []
    self.best: Optional[Tuple[int, float]] = None
    self.exploded = 0
    self.healthy_step: Optional[int] = None  # where the last loop before the exploded ones ended

  def _explodes(self, value: float) -> bool:
    if value > self.FACTOR * self.chance:
      return True
    return self.best is not None and self.best[1] < 0.5 * self.chance and value > self.chance

  def after_loop(self, step: int, logs: Dict[str, float]) -> None:
    value = logs.get(self.key, logs.get('loss'))
    if value is None or not math.isfinite(value):
      return
    if step > self.after_step and self._explodes(value):
      if not self.exploded:
        self.healthy_step = self.history[-1][0] if self.history else None
      self.exploded += 1
    else:
      self.exploded = 0
    self.history = (self.history + [(step, value)])[-self.HISTORY:]
    if self.best is None or value < self.best[1]:
      self.best = (step, value)
    if self.exploded != self.PATIENCE:
      return
    message = self.message(step)
    if self.stop:
      raise LossExplodedError(message)
    logging.warning('%s', message)

  def message(self, step: int) -> str:
    shown = ', '.join(f'{s}: {v:.4g}' for s, v in self.history)
    before = (f'Checkpoints up to step {self.healthy_step} predate the explosion' if self.healthy_step is not None
              else 'It exploded from the first loop')
    return (f'Training diverged at step {step}: {self.key} {self.history[-1][1]:.4g}, exploded for {self.PATIENCE} '
            f'loops in a row, against {self.chance:.3g} for a uniform guess and a best of {self.best[1]:.4g} at '
            f'step {self.best[0]}. {self.key} by step: {shown}. {before}. {self.advice}'.rstrip())
