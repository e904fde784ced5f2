"""Hooks: what runs between compiled training loops (profiling, preemption, NaN checks, logging), and what looks
at an evaluation on the host (per-class reports, misclassified examples).

The estimator owns *when* a loop runs; hooks only observe loop boundaries and may ask for an earlier one. A hook
never touches the model or the step function, so turning one off costs nothing inside the compiled loop.
"""
import dataclasses
import math
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

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

  def state(self) -> Optional[Dict[str, Any]]:
    """What this hook carries from loop to loop that a resumed run needs to decide as the uninterrupted run would
    (JSON values), or None: saved inside each checkpoint (checkpoints.RunState), taken back by ``restore``."""
    return None

  def restore(self, state: Dict[str, Any]) -> None:
    """Takes back ``state()`` as it was when the checkpoint the variables were restored from was saved; called
    before ``begin`` by the first train() after that restore (not called when the checkpoint holds none for it)."""


def loop_hook_states(hooks: Sequence[LoopHook]) -> Dict[str, Any]:
  """{name: state} of the hooks that carry state: a hook is named by its class (numbered when several of one class
  carry state, in the order given), so a resumed run's hooks find theirs whatever other hooks it runs."""
  states: Dict[str, Any] = {}
  for name, hook in _named(hooks):
    state = hook.state()
    if state is not None:
      states[name] = state
  return states


def restore_loop_hook_states(hooks: Sequence[LoopHook], states: Mapping[str, Any]) -> None:
  """Gives each hook its state from ``states`` (loop_hook_states of the checkpoint restored); others keep theirs."""
  for name, hook in _named(hooks):
    if name in states:
      hook.restore(states[name])


def _named(hooks: Sequence[LoopHook]) -> List[Tuple[str, LoopHook]]:
  seen: Dict[str, int] = {}
  named = []
  for hook in hooks:
    if type(hook).state is LoopHook.state:   # carries nothing
      continue
    name = type(hook).__name__
    seen[name] = seen.get(name, 0) + 1
    named.append((name if seen[name] == 1 else f'{name}#{seen[name]}', hook))
  return named


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
  to TensorBoard as scalars), ``images`` (tag -> uint8 [H, W, 3] for TensorBoard) and ``tensors`` (tag -> (tensor,
  a plugin's SummaryMetadata), e.g. PR curves)."""
  results: Dict[str, Any] = dataclasses.field(default_factory=dict)
  images: Dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
  tensors: Dict[str, Tuple[np.ndarray, Any]] = dataclasses.field(default_factory=dict)


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
  """Catches a finite loss that explodes or a model that collapses, which NanGuard cannot see.

  It watches a smoothed loss: the step-weighted mean of the newest loops after ``after_step`` (the warm-up) that
  cover at least ``window`` steps, so that a lucky or unlucky short loop decides nothing, whatever the loop length,
  and the warm-up's own spikes neither. With a full window, the smoothed loss is *exploded* when it is FACTOR times
  the baseline (``chance``, the loss of a uniform guess; see below), or back above chance after an earlier window
  had reached half of it; and the model has *collapsed* when the smoothed spread of its outputs over the batch
  (``spread_key``) is below COLLAPSED: it answers every input alike. Before the window is full, only an EXTREME loss counts (an explosion
  would otherwise reach NaN first, with a vaguer message). PATIENCE such decisions in a row (counted across train() calls, so
  across train_and_eval's chunks) stop the run (``stop``: raised before the estimator saves that loop) or log a
  warning.

  The explosion threshold's baseline is ``chance`` unless the run starts above it: a head that was not initialised
  at the chance level (a copied head, a changed loss) starts where its outputs put it and falls from there. So the
  loss of a fresh run's first loop (from step 0, warm-up included, before anything could explode), up to
  ``ceiling`` (the loss of outputs that say nothing, logits 0), becomes the baseline, logged, until the smoothed loss
  first falls below chance; a resumed run keeps the baseline its checkpoint saved (chance where it saved none).
  "Back above chance after reaching half of it" always reads chance.

  A resume takes the guard's windows, counts and baseline back from the checkpoint it restores (``state``, saved
  inside each checkpoint: a resume after SIGKILL gets its older checkpoint's), so a stopped-and-resumed run decides
  at the steps and on the values the uninterrupted run does. One difference remains: a stop in mid-loop (SIGINT,
  SIGTERM) splits that loop in two, so a window may end at the split and cover a few steps more or less than the
  uninterrupted run's. A checkpoint without the guard's state (an older one) starts a new window, as before.

  Several workers decide as one: only at loop ends every worker reaches (``Estimator.common_boundary``: a chief's
  profiler may ask for shorter loops than the others run), on the chief's verdict (``Estimator.from_chief``), so they
  stop together or not at all. ``key`` names the logged loop mean to watch (e.g. the loss without weight decay).
  """

  FACTOR = 3.0
  EXTREME = 20.0       # x chance: exploded whatever the window (a healthy run's single loops stay below ~4x)
  PATIENCE = 2
  WINDOW = 50          # steps the smoothed values cover at least
  COLLAPSED = 1e-4     # output spread below which the model answers every input alike
  HISTORY = 8          # loops shown in the message

  def __init__(self, chance: float, after_step: float, stop: bool = True, key: str = 'loss', advice: str = '',
               spread_key: Optional[str] = None, window: int = WINDOW, ceiling: Optional[float] = None):
    self.chance = float(chance)
    self.ceiling = None if ceiling is None else float(ceiling)
    self.baseline = self.chance     # chance, or a fresh run's start up to the ceiling (until below chance)
    self.after_step = after_step
    self.stop = stop
    self.key = key
    self.spread_key = spread_key
    self.window = int(window)
    self.advice = advice
    self._estimator = None
    self._loop_start: Optional[int] = None
    self._loops: list = []          # (end step, steps, value, spread) of the loops the windows cover
    self.history: list = []         # (end step, smoothed value) at each decision, for the message
    self.best: Optional[Tuple[int, float]] = None   # lowest smoothed value over a full window
    self.exploded = 0               # decisions in a row that found an explosion or a collapse
    self.collapsed = False
    self.healthy_step: Optional[int] = None  # where the last loop before the bad ones ended
    self._steps = 0                 # the steps the last smoothed value covers

  def begin(self, estimator, step: int) -> None:
    self._estimator = estimator

  def _watching(self) -> Dict[str, Any]:
    return dict(key=self.key, spread_key=self.spread_key, chance=self.chance, ceiling=self.ceiling,
                window=self.window, after_step=self.after_step)

  def state(self) -> Dict[str, Any]:
    """The windows and counts a decision reads (floats exact through JSON), and what they watch."""
    return dict(watching=self._watching(), loops=[list(loop) for loop in self._loops],
                history=[list(h) for h in self.history], best=list(self.best) if self.best else None,
                exploded=self.exploded, collapsed=self.collapsed, healthy_step=self.healthy_step,
                baseline=self.baseline)

  def restore(self, state: Dict[str, Any]) -> None:
    """A resumed run's guard goes on with the windows of the checkpoint it resumes from, so it decides at the steps
    and on the values the uninterrupted run's guard does. A checkpoint's guard that watched another key, chance,
    window or warm-up is not taken back: a new window, as for a checkpoint that holds none."""
    if state.get('watching') != self._watching():
      logging.info('Divergence guard: the checkpoint\'s guard watched %s, this one watches %s: a new window.',
                   state.get('watching'), self._watching())
      return
    self._loops = [tuple(loop) for loop in state['loops']]
    self.history = [tuple(h) for h in state['history']]
    self.best = tuple(state['best']) if state['best'] else None
    self.exploded, self.collapsed = int(state['exploded']), bool(state['collapsed'])
    self.healthy_step, self.baseline = state['healthy_step'], float(state['baseline'])
    logging.info('Divergence guard: resumed with the window of the checkpoint (%d loops, %d steps; %d bad checks '
                 'in a row).', len(self._loops), sum(n for _, n, _, _ in self._loops), self.exploded)

  def before_loop(self, step: int, num_steps: int) -> None:
    self._loop_start = step

  def _smoothed(self) -> Tuple[float, Optional[float], int]:
    """(loss, spread, steps) over the newest loops covering ``window`` steps (fewer: all there are)."""
    steps = value = spread = spread_steps = 0.0
    for _, n, v, s in reversed(self._loops):
      steps += n
      value += n * v
      if s is not None:
        spread_steps += n
        spread += n * s
      if steps >= self.window:
        break
    return value / steps, (spread / spread_steps if spread_steps else None), int(steps)

  def after_loop(self, step: int, logs: Dict[str, float]) -> None:
    value = logs.get(self.key, logs.get('loss'))
    if value is None or not math.isfinite(value):
      return
    if self._loop_start == 0 and not self._loops and not self.history:   # a fresh run's first loop
      self.baseline = self._baseline(float(value), step)
    if step <= self.after_step:
      return
    spread = logs.get(self.spread_key) if self.spread_key else None
    # Only the loop's steps after the warm-up count (a loop may straddle its end).
    start = max(self._loop_start if self._loop_start is not None else step - 1, int(self.after_step))
    ran = max(step - start, 1)
    self._loops.append((step, ran, float(value), None if spread is None or not math.isfinite(spread) else spread))
    covered, keep = 0, 0  # two windows, and the loops the message shows
    for keep, (_, n, _, _) in enumerate(reversed(self._loops), start=1):
      covered += n
      if covered >= 2 * self.window and keep >= self.HISTORY:
        break
    self._loops = self._loops[-keep:]
    estimator = self._estimator
    if estimator is not None and not estimator.common_boundary(step):
      return
    smoothed, smoothed_spread, self._steps = self._smoothed()
    if smoothed < self.chance:   # the run got past where it started: chance from now on
      self.baseline = self.chance
    # The loops seen (by this process, or restored with its checkpoint) cover a window: the same on every worker,
    # which all see the same steps between common boundaries (and restore the chief's checkpoint).
    full = sum(n for _, n, _, _ in self._loops) >= self.window
    baseline = self.baseline
    exploded = smoothed > self.EXTREME * baseline or full and (smoothed > self.FACTOR * baseline or (
        self.best is not None and self.best[1] < 0.5 * self.chance and smoothed > self.chance))
    collapsed = full and smoothed_spread is not None and smoothed_spread < self.COLLAPSED
    verdict = exploded or collapsed
    if estimator is not None:  # the chief's verdict on every worker (values equal up to rounding, or not at all)
      verdict, collapsed = (bool(v) for v in estimator.from_chief([verdict, collapsed]))
    self.exploded = self.exploded + 1 if verdict else 0
    self.collapsed = collapsed
    self.history = (self.history + [(step, smoothed)])[-self.HISTORY:]
    if full and (self.best is None or smoothed < self.best[1]):
      self.best = (step, smoothed)
    if self.exploded != self.PATIENCE:
      return
    self.healthy_step = self._last_healthy_loop(smoothed)
    message = self.message(step)
    if self.stop:
      raise LossExplodedError(message)
    logging.warning('%s', message)

  def _baseline(self, start: float, step: int) -> float:
    """chance, or the run's start (its first loop's loss) up to the ceiling where the run starts above chance."""
    if self.ceiling is None or start <= self.chance:
      return self.chance
    baseline = min(start, max(self.ceiling, self.chance))
    logging.info('Divergence guard: the run starts at %s %.4g (the mean of its first %d steps), above %.4g for a '
                 'uniform guess (a head not initialised at chance, e.g. copied or trained for another loss): '
                 'explosions are judged against %.4g%s until it falls below chance.', self.key, start, step,
                 self.chance, baseline,
                 f' (outputs that say nothing score {self.ceiling:.4g})' if baseline < start else '')
    return baseline

  def _last_healthy_loop(self, smoothed: float) -> Optional[int]:
    """Where the last loop before the bad ones ended: the checkpoints up to it predate the trouble."""
    base = self.baseline
    limit = min(self.FACTOR * base, smoothed) if smoothed > base else base
    for end, _, value, spread in reversed(self._loops):
      bad = spread is not None and spread < self.COLLAPSED if self.collapsed else value > limit
      if not bad:
        return end
    return None

  def message(self, step: int) -> str:
    shown = ', '.join(f'{s}: {v:.4g}' for s, v in self.history)
    before = (f'Checkpoints up to step {self.healthy_step} predate it' if self.healthy_step is not None
              else f'Every loop since step {self._loops[0][0] - self._loops[0][1]} was past the threshold')
    best = f' and a best of {self.best[1]:.4g} at step {self.best[0]}' if self.best else ''
    if self.collapsed:
      what = (f'the model collapsed to a constant output: its outputs vary across a batch by less than '
              f'{self.COLLAPSED:g} ({self.spread_key}) at {self.PATIENCE} checks in a row, so it answers every input '
              f'alike; {self.key} {self.history[-1][1]:.4g}')
    else:
      what = (f'{self.key} {self.history[-1][1]:.4g} (the mean of the last {self._steps} steps) exploded at '
              f'{self.PATIENCE} checks in a row')
    base = self.baseline
    against = (f'{self.chance:.3g} for a uniform guess' if base == self.chance else
               f'{base:.3g}, where the run started ({self.chance:.3g} for a uniform guess)')
    return (f'Training diverged at step {step}: {what}, against {against}{best}. '
            f'{self.key} by step: {shown}. {before}. {self.advice}'.rstrip())
