"""Preemption and crashes, with real resnet_main processes on one model_dir: nothing is lost beyond a checkpoint.

One chain of runs of the SAME command (tiny ResNet-18, synthetic data, checkpoints every LOOP steps) is driven
once per module, and each test checks one stage of it:

  1. SIGTERM mid-training  -> a checkpoint at the current step, exit code 0 ("Training interrupted (SIGTERM)").
  2. rerun, SIGINT         -> resumes from 1's step; a checkpoint at the current step, exit code 0.
  3. rerun, kill -9 while a checkpoint is being written -> the partial one is never the latest; the latest loads.
  4. rerun, kill -9 at a random moment, twice -> the latest checkpoint loads.
  5. rerun to the end      -> resumes from the last complete checkpoint and stops at exactly train_steps.

A resumed run must restore exactly the latest checkpoint left by the previous stage: steps after it are redone
(unavoidable after kill -9), steps up to it are never redone or lost. Exit codes: resnet_main catches
runner.TrainingInterrupted and returns normally, so SIGTERM/SIGINT give 0. A signal that arrives before training
starts (TF import, model build) still has Python's default effect (exit -15 / KeyboardInterrupt) and loses nothing,
since that process has not trained yet.
"""
import dataclasses
import os
import random
import re
import signal
import time
from typing import Dict, List, Optional

import pytest
import tensorflow as tf

from tests.helpers import cli
from tests.helpers import procs

pytestmark = pytest.mark.slow  # end to end: whole runs, processes or their shared fixtures

TRAIN_STEPS = 160     # each stage advances at most ~2 loops, so the chain stays short of it until the end
LOOP = 20              # iterations_per_loop = save_checkpoints_steps
START_TIMEOUT = 240    # TF import + build + trace on 2 busy cores
EXIT_TIMEOUT = 120
RNG = random.Random()  # the chosen delays are recorded in each stage (shown on failure)


@dataclasses.dataclass
class Stage:
  name: str
  code: Optional[int]
  log: str
  latest_before: Optional[int]
  latest_after: Optional[int]
  note: Dict[str, object] = dataclasses.field(default_factory=dict)
  checkpoints: Dict[int, str] = dataclasses.field(default_factory=dict)  # listed step -> 'ok' or the load error
  latest_global_step: Optional[int] = None  # the global_step variable inside the latest checkpoint

  def __post_init__(self):
    """Inspects model_dir right when the stage ends (later stages change it)."""
    model_dir = self.note.pop('model_dir')
    for step in cli.checkpoint_steps(model_dir):
      try:
        cli.load_checkpoint_fully(os.path.join(model_dir, f'model.ckpt-{step}'))
        self.checkpoints[step] = 'ok'
      except Exception as e:  # pylint: disable=broad-except
        self.checkpoints[step] = f'{type(e).__name__}: {e}'
    latest = tf.train.latest_checkpoint(model_dir)
    if latest:
      self.latest_global_step = cli.global_step_of(latest)

  def describe(self) -> str:
    return (f'stage {self.name}: exit {self.code}, latest checkpoint {self.latest_before} -> {self.latest_after} '
            f'(global step {self.latest_global_step}), checkpoints {self.checkpoints}, {self.note}\n'
            f'--- log tail ---\n{self.log[-3000:]}')


def _command(model_dir: str) -> List[str]:
  return cli.main_args('--mode=train', f'--model_dir={model_dir}', f'--train_steps={TRAIN_STEPS}',
                       f'--iterations_per_loop={LOOP}', f'--save_checkpoints_steps={LOOP}',
                       '--train_batch_size=4', '--synthetic_data=random')


def _saves(log: str) -> int:
  return log.count('Saved checkpoint')


def _signal_at_a_random_moment(proc: procs.Proc, sig: int, marker: str, max_delay: float) -> Dict[str, object]:
  """After ``marker`` appears in the log, waits a random 0.05..max_delay s and sends ``sig``.

  The wait is cut short by the next checkpoint save, so that every stage advances at most about one loop whatever
  the machine's speed, and the chain never runs into train_steps early.
  """
  procs.wait_for(lambda: marker in proc.log(), START_TIMEOUT, repr(marker), alive=proc)
  saves = _saves(proc.log())
  delay = RNG.uniform(0.05, max_delay)
  deadline = time.time() + delay
  while time.time() < deadline and _saves(proc.log()) == saves and proc.poll() is None:
    time.sleep(0.01)
  proc.send(sig)
  return {'after': marker.strip(), 'planned_delay_s': round(delay, 3), 'cut_short': _saves(proc.log()) != saves}


def _run_and_signal(model_dir: str, log_path: str, name: str, sig: int, marker: str, max_delay: float) -> Stage:
  before = cli.latest_step(model_dir)
  with procs.processes() as started:
    proc = procs.Proc(_command(model_dir), log_path)
    started.append(proc)
    note = _signal_at_a_random_moment(proc, sig, marker, max_delay)
    code = proc.wait(EXIT_TIMEOUT)
  return Stage(name, code, proc.log(), before, cli.latest_step(model_dir), {**note, 'model_dir': model_dir})


def _kill_during_checkpoint_write(model_dir: str, log_path: str) -> Stage:
  """SIGKILL the moment a new ``model.ckpt-N_temp`` appears (TF writes there, then merges and renames)."""
  before = cli.latest_step(model_dir)
  pattern = re.compile(r'model\.ckpt-(\d+)_temp$')
  note: Dict[str, object] = {'model_dir': model_dir}
  with procs.processes() as started:
    proc = procs.Proc(_command(model_dir), log_path)
    started.append(proc)
    deadline = time.time() + START_TIMEOUT
    while 'killed_while_writing' not in note:
      if time.time() > deadline or proc.poll() is not None:
        raise AssertionError(f'saw no checkpoint being written (exit {proc.poll()}):\n{proc.tail()}')
      for entry in os.listdir(model_dir):
        match = pattern.match(entry)
        if match and int(match.group(1)) > (before or 0):
          proc.send(signal.SIGKILL)
          note['killed_while_writing'] = int(match.group(1))
          break
      time.sleep(0.001)
    code = proc.wait(EXIT_TIMEOUT)
  note['left_behind'] = sorted(e for e in os.listdir(model_dir) if f'ckpt-{note["killed_while_writing"]}' in e)
  return Stage('kill -9 during write', code, proc.log(), before, cli.latest_step(model_dir), note)


def _finish(model_dir: str, log_path: str) -> Stage:
  before = cli.latest_step(model_dir)
  proc = procs.run(_command(model_dir), log_path, timeout=START_TIMEOUT + 120)
  return Stage('finish', proc.popen.returncode, proc.log(), before, cli.latest_step(model_dir),
               {'model_dir': model_dir})


@pytest.fixture(scope='module')
def chain(module_tmp) -> Dict[str, Stage]:
  root = module_tmp.mktemp('preemption')
  model_dir = str(root / 'model')
  stages: Dict[str, Stage] = {}
  # SIGTERM and SIGINT: mid-loop, shortly after this run's first checkpoint (training is under way).
  stages['sigterm'] = _run_and_signal(model_dir, str(root / '1.log'), 'SIGTERM', signal.SIGTERM,
                                      'Saved checkpoint', 0.6)
  stages['sigint'] = _run_and_signal(model_dir, str(root / '2.log'), 'SIGINT', signal.SIGINT,
                                     'Saved checkpoint', 0.6)
  stages['kill_write'] = _kill_during_checkpoint_write(model_dir, str(root / '3.log'))
  # kill -9 early (restoring, building, tracing or the first loop), then later (training or saving).
  stages['kill_random'] = _run_and_signal(model_dir, str(root / '4.log'), 'kill -9 at random', signal.SIGKILL,
                                          'Restored ', 4.0)
  stages['kill_random_late'] = _run_and_signal(model_dir, str(root / '5.log'), 'kill -9 at random, later',
                                               signal.SIGKILL, 'Saved checkpoint', 1.0)
  stages['finish'] = _finish(model_dir, str(root / '6.log'))
  return stages


def _assert_interrupted_cleanly(stage: Stage, signame: str) -> int:
  assert stage.code == 0, stage.describe()
  match = re.search(rf'Training interrupted \({signame}\) at step (\d+); checkpoint saved', stage.log)
  assert match and f'{signame} received: saving a checkpoint at the current step' in stage.log, stage.describe()
  step = int(match.group(1))
  # The checkpoint is at the step reached (also the last progress line), not at an older loop boundary.
  assert stage.latest_after == step == cli.progress_steps(stage.log)[-1], stage.describe()
  assert step < TRAIN_STEPS and stage.latest_global_step == step, stage.describe()
  assert set(stage.checkpoints.values()) == {'ok'}, stage.describe()
  return step


def _assert_resumed_from(stage: Stage, step: Optional[int]) -> None:
  assert cli.restored_steps(stage.log)[:1] == [step], stage.describe()


def test_sigterm_saves_a_checkpoint_at_the_current_step_and_exits_0(chain):
  stage = chain['sigterm']
  step = _assert_interrupted_cleanly(stage, 'SIGTERM')
  assert step >= LOOP, stage.describe()


def test_sigint_resumes_then_saves_a_checkpoint_at_the_current_step_and_exits_0(chain):
  stage = chain['sigint']
  _assert_resumed_from(stage, chain['sigterm'].latest_after)
  step = _assert_interrupted_cleanly(stage, 'SIGINT')
  assert step > chain['sigterm'].latest_after, stage.describe()


def test_kill9_during_checkpoint_write_never_leaves_a_partial_latest(chain):
  stage = chain['kill_write']
  assert stage.code == -signal.SIGKILL, stage.describe()
  _assert_resumed_from(stage, chain['sigint'].latest_after)
  interrupted = stage.note['killed_while_writing']
  # Every listed checkpoint, the latest included, loads in full: a partial one is never listed.
  assert stage.latest_after is not None and stage.latest_global_step == stage.latest_after, stage.describe()
  assert set(stage.checkpoints.values()) == {'ok'}, stage.describe()
  if stage.latest_after != interrupted:  # (the kill can land just after the write completed: then it is listed)
    assert stage.latest_after < interrupted and interrupted not in stage.checkpoints, stage.describe()
    assert f'model.ckpt-{interrupted}_temp' in stage.note['left_behind'], stage.describe()  # it was mid-write


@pytest.mark.parametrize('name, previous', [('kill_random', 'kill_write'), ('kill_random_late', 'kill_random')])
def test_kill9_at_a_random_moment_leaves_a_loadable_latest_checkpoint(chain, name, previous):
  stage = chain[name]
  assert stage.code == -signal.SIGKILL, stage.describe()
  _assert_resumed_from(stage, chain[previous].latest_after)
  assert stage.latest_after is not None and stage.latest_global_step == stage.latest_after, stage.describe()
  assert set(stage.checkpoints.values()) == {'ok'}, stage.describe()


def test_rerun_continues_from_the_last_checkpoint_to_exactly_train_steps(chain):
  stage = chain['finish']
  assert stage.code == 0, stage.describe()
  _assert_resumed_from(stage, chain['kill_random_late'].latest_after)
  steps = cli.progress_steps(stage.log)
  assert steps == sorted(set(steps)) and steps[0] > stage.latest_before and steps[-1] == TRAIN_STEPS, \
      stage.describe()
  assert stage.latest_after == stage.latest_global_step == TRAIN_STEPS, stage.describe()
  assert set(stage.checkpoints.values()) == {'ok'}, stage.describe()
  # The resumed chain: every run started exactly where the previous one's last complete checkpoint was.
  order = ['sigterm', 'sigint', 'kill_write', 'kill_random', 'kill_random_late', 'finish']
  for previous, current in zip(order, order[1:]):
    assert chain[current].latest_before == chain[previous].latest_after
  print('\n' + '\n'.join(f'{chain[n].name}: exit {chain[n].code}, restored {cli.restored_steps(chain[n].log)[:1]}, '
                          f'latest {chain[n].latest_before} -> {chain[n].latest_after}, {chain[n].note}'
                          for n in order))
