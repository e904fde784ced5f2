"""What a resume restores beside the variables (issue 56): the divergence guard's windows (hooks.LoopHook.state, saved
inside each checkpoint by checkpoints.RunState) and early stopping's count, so that a run stopped and resumed decides
at the steps the uninterrupted run does."""
import json
import math
import os
import shutil

import pytest
import tensorflow as tf

from resnet.estimator import best_checkpoint
from resnet.estimator import estimator as E
from resnet.estimator import hooks as hooks_lib
from tests.helpers import toy

CHANCE = math.log(4)
# Loops of 10 steps ending at 10, 20, ...: a run that learns (its window reaches half of chance) and then climbs back
# above chance ('back above chance after reaching half of it' needs the best the guard kept); and one that starts
# above chance (a raised baseline, kept until it falls below chance) and explodes against that baseline.
RUNS = {
    'back above chance': dict(guard=dict(after_step=20, window=20),
                              losses=[1.4, 1.3, 1.0, 0.8, 0.6, 0.5, 0.5, 0.55, 0.6, 1.0, 1.5, 1.7, 1.9, 2.2, 2.4]),
    'raised baseline': dict(guard=dict(after_step=0, window=20, ceiling=10.0),
                            losses=[3.0, 2.9, 2.8, 3.2, 4.5, 5.0, 5.5, 7.0, 9.5, 10.0, 11.0, 12.0, 13.0]),
    'collapse': dict(guard=dict(after_step=20, window=20, spread_key='output_spread'),
                     losses=[1.4, 1.39, 1.386, 1.386, 1.386, 1.386, 1.386, 1.386],
                     spreads=[0.3, 0.2, 0.1, 0.01, 1e-5, 1e-6, 0.0, 0.0]),
}


def _guard(run):
  return hooks_lib.DivergenceGuard(CHANCE, key='cross_entropy', **RUNS[run]['guard'])


def _loops(guard, run, first, last):
  """Loops ``first`` to ``last`` (exclusive) of ``run``; the verdict: (step, message) of the stop, or None."""
  losses, spreads = RUNS[run]['losses'], RUNS[run].get('spreads')
  for i in range(first, min(last, len(losses))):
    step = 10 * (i + 1)
    guard.before_loop(step - 10, 10)
    logs = {'cross_entropy': losses[i]}
    if spreads:
      logs['output_spread'] = spreads[i]
    try:
      guard.after_loop(step, logs)
    except hooks_lib.LossExplodedError as e:
      return step, str(e)
  return None


def _through_a_checkpoint(guard):
  """The guard's state as a checkpoint carries it: JSON."""
  return json.loads(json.dumps(hooks_lib.loop_hook_states([hooks_lib.NanGuard(), guard])))


@pytest.mark.parametrize('run', sorted(RUNS))
def test_a_guard_stopped_and_restored_anywhere_stops_where_and_as_the_uninterrupted_guard(run):
  uninterrupted = _guard(run)
  uninterrupted.begin(None, 0)
  verdict = _loops(uninterrupted, run, 0, 100)
  assert verdict is not None
  stop_loop = verdict[0] // 10
  differ = 0
  for stops in [(k,) for k in range(1, stop_loop)] + [(2, 5, 6), (1, stop_loop - 1)]:
    guard, start = _guard(run), 0
    for k in stops + (100,):
      guard.begin(None, 10 * start)
      got = _loops(guard, run, start, k)
      if got is not None:
        break
      state = _through_a_checkpoint(guard)
      guard = _guard(run)   # a new process: a new guard, given the checkpoint's state
      hooks_lib.restore_loop_hook_states([hooks_lib.NanGuard(), guard], state)
      start = k
    assert got == verdict, (stops, got, verdict)
    # Without the state, the resumed guard decides otherwise (later, earlier or never) at some stop.
    fresh, start = _guard(run), stops[-1]
    fresh.begin(None, 10 * start)
    differ += _loops(fresh, run, start, 100) != verdict
  assert differ


def test_a_guard_that_watched_otherwise_starts_a_new_window():
  guard = _guard('back above chance')
  guard.begin(None, 0)
  _loops(guard, 'back above chance', 0, 6)
  state = _through_a_checkpoint(guard)
  other = hooks_lib.DivergenceGuard(CHANCE, key='cross_entropy', after_step=20, window=30)
  hooks_lib.restore_loop_hook_states([other], state)
  assert other.state()['loops'] == [] and other.best is None
  same = _guard('back above chance')
  hooks_lib.restore_loop_hook_states([same], state)
  assert same.state() == guard.state()


# --- through the Estimator ------------------------------------------------------------------------------------

def _placed_input(params):
  """toy's training input, resumed where the steps trained so far end (as the real input is)."""
  return toy.train_input(params).skip(params.context.start_step)


class _StopAt(hooks_lib.LoopHook):
  def __init__(self, runner, step):
    self.runner, self.step = runner, step

  def after_loop(self, step, logs):
    if step == self.step:
      self.runner.request_stop('test')


class _States(hooks_lib.LoopHook):
  """The guard's state at train()'s start and after each loop (what a save there writes)."""

  def __init__(self, guard):
    self.guard, self.at_begin, self.saved = guard, None, {}

  def begin(self, estimator, step):
    self.at_begin = json.dumps(self.guard.state())

  def after_loop(self, step, logs):
    self.saved[step] = json.dumps(self.guard.state())


def _exploding(model_dir):
  """A linear model at a learning rate of 3: the loss falls, then explodes (the guard stops it at step 16)."""
  return toy.make_runner(model_dir, params={'lr': 3.0}, iterations_per_loop=2, save_checkpoints_steps=2,
                         keep_checkpoint_max=100)


def _guard_for_toy():
  return hooks_lib.DivergenceGuard(math.log(3), after_step=2, key='loss', window=4)


def _stopped_at(runner, guard, hooks=()):
  with pytest.raises(hooks_lib.LossExplodedError) as error:
    runner.train(_placed_input, max_steps=200, hooks=[hooks_lib.NanGuard(), guard, *hooks])
  return str(error.value)


def test_the_estimator_saves_the_guard_in_each_checkpoint_and_a_resume_takes_back_its_checkpoints(tmp_path):
  whole_guard = _guard_for_toy()
  recorder = _States(whole_guard)
  verdict = _stopped_at(_exploding(tmp_path / 'whole'), whole_guard, [recorder])
  stop = int(verdict.split('at step ')[1].split(':')[0])
  assert stop >= 8, verdict   # room to stop before it
  # The same run (from the same step-2 checkpoint: the toy's initial weights are drawn unseeded) stopped as SIGINT
  # stops it, after the first exploded check, then resumed by a new process's runner and guard.
  whole = str(tmp_path / 'whole')
  os.makedirs(tmp_path / 'parts')
  for name in os.listdir(whole):
    if name.startswith('model.ckpt-2.'):
      shutil.copy(os.path.join(whole, name), str(tmp_path / 'parts'))
  first = _exploding(tmp_path / 'parts')
  with pytest.raises(E.TrainingInterrupted):
    first.train(_placed_input, max_steps=200, hooks=[hooks_lib.NanGuard(), _guard_for_toy(), _StopAt(first, stop - 2)])
  assert _stopped_at(_exploding(tmp_path / 'parts'), _guard_for_toy()) == verdict
  # Killed (SIGKILL) after saving step stop - 2: the checkpoints after step 4 lost. The resume takes back step 4's
  # guard, not a newer one's.
  for name in os.listdir(whole):
    if name.startswith('model.ckpt-') and int(name.split('-')[1].split('.')[0]) > 4:
      os.remove(os.path.join(whole, name))
  guard = _guard_for_toy()
  resumed = _States(guard)
  assert _stopped_at(_exploding(tmp_path / 'whole'), guard, [resumed]) == verdict
  assert resumed.at_begin == recorder.saved[4] != recorder.saved[stop - 2]


def test_a_checkpoint_holds_the_guard_of_its_own_step(tmp_path):
  runner = _exploding(tmp_path)
  guard = _guard_for_toy()
  recorder = _States(guard)
  _stopped_at(runner, guard, [recorder])
  for step in (2, 4, 6):
    reader = tf.train.load_checkpoint(os.path.join(str(tmp_path), f'model.ckpt-{step}'))
    saved = json.loads(reader.get_tensor('loop_hooks/.ATTRIBUTES/py_state'))
    assert saved == {'DivergenceGuard': json.loads(recorder.saved[step])}


class _Evaluated(hooks_lib.EvalHook):
  def __init__(self):
    self.steps = []

  def end(self, results, sums):
    self.steps.append(results['global_step'])
    return hooks_lib.EvalReport()


def _train_and_evaluate(model_dir, stop_at=None):
  """No learning (a learning rate of 0): the first evaluation stays the best, so the run stops early after two more."""
  runner = toy.make_runner(model_dir, params={'lr': 0.0}, iterations_per_loop=1, save_checkpoints_steps=1)
  best = best_checkpoint.BestCheckpoint(str(model_dir), 'accuracy')
  evaluated = _Evaluated()
  runner.train_and_evaluate(toy.train_input, toy.eval_input, max_steps=40, steps_per_eval=4, best=best,
                            early_stopping_evals=2, eval_hooks=[evaluated],
                            hooks=[_StopAt(runner, stop_at)] if stop_at else [])
  return runner, evaluated.steps


def test_early_stopping_resumed_mid_chunk_evaluates_and_stops_at_the_uninterrupted_runs_steps(tmp_path):
  runner, steps = _train_and_evaluate(tmp_path / 'whole')
  assert steps == [4, 8, 12] and int(runner.global_step.numpy()) == 12
  with pytest.raises(E.TrainingInterrupted, match='step 6'):
    _train_and_evaluate(tmp_path / 'parts', stop_at=6)   # stopped in the second chunk, after one evaluation
  runner, steps = _train_and_evaluate(tmp_path / 'parts')
  assert steps == [8, 12] and int(runner.global_step.numpy()) == 12   # not 6 (the stop) and 10
  progress = json.loads((tmp_path / 'parts' / 'best' / 'progress.json').read_text())
  assert progress == json.loads((tmp_path / 'whole' / 'best' / 'progress.json').read_text())
