"""The loop hooks (estimator/hooks.py): the divergence guard's smoothed loss, its rules both ways (a real healthy noisy
run trains on; explosions and collapse stop), its decisions at common boundaries on the chief's verdict."""
import json
import math
import os

import pytest
import tensorflow as tf

from resnet.estimator import hooks as hooks_lib
from resnet.task import tasks
from tests.helpers import toy
from tests.helpers import procs

CHANCE = math.log(4)
FIXTURES = os.path.join(procs.ROOT, 'tests', 'fixtures')


def _feed(guard, losses, start=10, every=10, spreads=None):
  """Loops of ``every`` steps ending at start, start + every, ...; a single process decides at every loop end."""
  guard.begin(None, 0)
  for i, loss in enumerate(losses):
    step = start + i * every
    guard.before_loop(step - every, every)
    logs = {'cross_entropy': loss, 'loss': loss + 0.3}
    if spreads is not None:
      logs['output_spread'] = spreads[i]
    guard.after_loop(step, logs)


def test_an_exploding_loss_stops_after_two_checks_naming_step_history_and_fixes():
  guard = hooks_lib.DivergenceGuard(CHANCE, after_step=20, key='cross_entropy', advice='Try a lower base_lr.',
                                    window=20)
  with pytest.raises(hooks_lib.LossExplodedError) as error:
    _feed(guard, [1.4, 1.2, 0.9, 5.0, 25.0, 800.0])
  message = str(error.value)
  # The mean of the last 20 steps after the warm-up passes 3 ln 4 at step 50 (15) and stays above it at step 60.
  assert message.startswith('Training diverged at step 60: cross_entropy 412.5 (the mean of the last 20 steps) '
                            'exploded at 2 checks in a row, against 1.39 for a uniform guess'), message
  assert 'by step: 30: 0.9, 40: 2.95, 50: 15, 60: 412.5' in message
  assert message.endswith('Checkpoints up to step 30 predate it. Try a lower base_lr.')


def test_a_run_that_starts_above_chance_is_judged_against_its_start_up_to_the_ceiling():
  """A 1000-class BCE head copied from a softmax run starts at ~ln 2 per class, 90x the prior's chance 0.0079:
  flat at 0.6985 it is no divergence (the old guard stopped it at step 4: 20x chance before its window filled)."""
  chance, ceiling = (1 + math.log(1000)) / 1000, math.log(2)
  guard = hooks_lib.DivergenceGuard(chance, after_step=0, key='cross_entropy', ceiling=ceiling)
  _feed(guard, [0.6986, 0.6985, 0.6985] + [0.6984] * 30, start=2, every=2)
  assert guard.exploded == 0 and guard.baseline == pytest.approx(ceiling)
  # It still stops when the loss then explodes from there, and the message says what it compared with.
  with pytest.raises(hooks_lib.LossExplodedError) as error:
    _feed(guard, [0.69] * 30 + [5.0] * 30, start=70, every=2)
  assert f'against 0.693, where the run started ({chance:.3g} for a uniform guess)' in str(error.value)
  # An explosion from the very start is judged against the ceiling, not the exploded start.
  guard = hooks_lib.DivergenceGuard(chance, after_step=0, key='cross_entropy', ceiling=ceiling)
  with pytest.raises(hooks_lib.LossExplodedError, match=r'\(the mean of the last 4 steps\)'):
    _feed(guard, [40.0, 60.0], start=2, every=2)
  # A run that starts below chance keeps chance as its baseline.
  guard = hooks_lib.DivergenceGuard(CHANCE, after_step=0, key='cross_entropy', ceiling=10.0)
  _feed(guard, [1.2])
  assert guard.baseline == CHANCE


def test_exploded_checks_count_across_train_calls():
  """train_and_eval trains in chunks (one train() call each, often a single loop): the count goes on."""
  guard = hooks_lib.DivergenceGuard(CHANCE, after_step=0, key='cross_entropy', window=10)
  _feed(guard, [1.2, 9.0], every=10)
  guard.begin(None, 20)
  guard.before_loop(20, 10)
  with pytest.raises(hooks_lib.LossExplodedError, match='step 30'):
    guard.after_loop(30, {'cross_entropy': 12.0})


def test_noise_warm_up_spikes_and_a_loss_near_chance_do_not_trip_it():
  guard = hooks_lib.DivergenceGuard(CHANCE, after_step=40, key='cross_entropy')
  # A spike past 3 ln 4 inside the warm-up, one lone spike after it, and a run that stays near chance.
  _feed(guard, [1.4, 9.0, 9.0, 1.3, 5.0, 1.2, 1.5, 1.45, 1.39, 1.6, 1.3])
  assert guard.exploded == 0


def test_a_lucky_short_loop_sets_no_best_and_a_noisy_healthy_run_trains_on():
  """The issue's false alarm: two classes, 10% wrong labels, small_data's recipe at 5 steps a loop. One lucky loop
  (0.2473 at step 10) set the old 'best', and two noisy loops just above chance (ln 2 = 0.693) counted as an
  explosion. A best now needs a full window, and the smoothed loss never left the range of a healthy run."""
  guard = hooks_lib.DivergenceGuard(math.log(2), after_step=10, key='cross_entropy')
  trace = [0.70, 0.2473, 0.78, 0.80, 0.802, 0.76, 0.74, 0.71, 0.69, 0.66, 0.64, 0.70, 0.62, 0.60, 0.55]
  _feed(guard, trace, start=5, every=5)
  assert guard.exploded == 0 and guard.best[1] > 0.5 * math.log(2)


def test_a_recorded_healthy_noisy_run_trains_on():
  """A real run (tests/fixtures/noisy_two_class_run.json says how it was made): its cross-entropy spiked to 3.2x
  chance right after the warm-up and stayed above chance for 70 steps; it ended at validation top-1 0.95."""
  with open(os.path.join(FIXTURES, 'noisy_two_class_run.json')) as f:
    run = json.load(f)
  guard = hooks_lib.DivergenceGuard(math.log(2), after_step=run['warmup_steps'], key='cross_entropy')
  steps, values = zip(*run['cross_entropy'])
  guard.begin(None, 0)
  for start, (step, value) in zip((0,) + steps, zip(steps, values)):
    guard.before_loop(start, step - start)
    guard.after_loop(step, {'cross_entropy': value})
  assert guard.exploded == 0


def test_a_resumed_run_decides_only_once_its_own_loops_fill_a_window():
  """Resumed at step 100 (warm-up 20, window 20): its first two 5-step loops at 5x chance are no full window yet
  (the step count alone said full, and two loops stopped the run); the window fills at 120."""
  guard = hooks_lib.DivergenceGuard(CHANCE, after_step=20, key='cross_entropy', window=20)
  _feed(guard, [5 * CHANCE, 5 * CHANCE], start=105, every=5)
  assert guard.exploded == 0
  with pytest.raises(hooks_lib.LossExplodedError, match='step 125'):
    _feed(guard, [5 * CHANCE] * 3, start=115, every=5)


def test_a_loss_back_above_chance_after_learning_is_divergence_too():
  guard = hooks_lib.DivergenceGuard(CHANCE, after_step=0, key='cross_entropy', window=20)
  with pytest.raises(hooks_lib.LossExplodedError, match='step 90'):
    # The 20-step mean falls below half of ln 4 (0.69), then comes back above ln 4 (at 80 and 90).
    _feed(guard, [1.3, 0.9, 0.5, 0.4, 0.4, 0.5, 2.0, 2.2, 2.4])


def test_a_collapse_to_constant_output_stops_the_run_naming_it():
  """A model that answers every input alike: the loss sits near chance and never trips the loss rules; the spread of
  its outputs over the batch says it."""
  guard = hooks_lib.DivergenceGuard(CHANCE, after_step=20, key='cross_entropy', spread_key='output_spread',
                                    window=20)
  with pytest.raises(hooks_lib.LossExplodedError) as error:
    _feed(guard, [1.4, 1.39, 1.386, 1.386, 1.386, 1.386], spreads=[0.3, 0.01, 0.0, 0.0, 1e-7, 0.0])
  assert 'collapsed to a constant output' in str(error.value) and 'step 50' in str(error.value)


def test_warn_mode_warns_once_per_episode_and_goes_on(caplog):
  guard = hooks_lib.DivergenceGuard(CHANCE, after_step=0, stop=False, key='cross_entropy', window=10)
  _feed(guard, [1.0, 6.0, 7.0, 8.0, 9.0])
  warnings = [r for r in caplog.records if 'Training diverged' in r.getMessage()]
  assert len(warnings) == 1 and 'step 30' in warnings[0].getMessage()


def test_several_workers_decide_at_common_boundaries_on_the_chiefs_verdict():
  """The chief's profiler asks for 1-step loops; the guard decides only where every worker's loop ends, and takes
  the chief's verdict there (one collective), so the workers stop together or not at all."""
  class Runner:
    shared = []

    def common_boundary(self, step):
      return step % 5 == 0

    def from_chief(self, values):
      self.shared.append(list(values))
      return [0.0, 0.0]  # the chief saw no explosion

  runner = Runner()
  guard = hooks_lib.DivergenceGuard(CHANCE, after_step=0, key='cross_entropy', window=5)
  guard.begin(runner, 0)
  for step in range(1, 21):  # this worker's values exploded, the chief's did not
    guard.before_loop(step - 1, 1)
    guard.after_loop(step, {'cross_entropy': 50.0})
  assert len(runner.shared) == 4 and all(v == [1.0, 0.0] for v in runner.shared)   # decided at 5, 10, 15, 20
  assert guard.exploded == 0


def test_the_estimator_stops_before_saving_the_exploded_loop_and_keeps_earlier_checkpoints(tmp_path):
  """A linear model at a learning rate of 50: the cross-entropy grows without bound while it stays finite."""
  runner = toy.make_runner(tmp_path, params={'lr': 50.0}, iterations_per_loop=2, save_checkpoints_steps=2)
  guard = hooks_lib.DivergenceGuard(math.log(3), after_step=2, key='loss', window=2)
  with pytest.raises(hooks_lib.LossExplodedError) as error:
    runner.train(toy.train_input, max_steps=200, hooks=[hooks_lib.NanGuard(), guard])
  step = int(str(error.value).split('at step ')[1].split(':')[0])
  history = [v for _, v in guard.history]
  assert all(math.isfinite(v) for v in history) and history[-1] > 3 * math.log(3)
  latest = tf.train.latest_checkpoint(str(tmp_path))
  assert latest is not None and int(latest.rsplit('-', 1)[1]) == step - 2  # the second exploded loop was not saved
  # Exploded loops may have been saved before the smoothed loss decided: the message says which checkpoints predate
  # the trouble, or that every loop since the warm-up was past the threshold.
  if guard.healthy_step is None:
    assert 'Every loop since step 2 was past the threshold' in str(error.value)
  else:
    assert guard.healthy_step < step and f'Checkpoints up to step {guard.healthy_step} predate it' in str(error.value)


def test_a_weighted_explosion_stops_against_the_real_chance():
  chance, _ = tasks.for_params(dict(num_label_classes=2, class_weights=[1.0, 100.0],
                                    class_weight_normalization='batch_size')).chance_loss([99, 1], 100)
  guard = hooks_lib.DivergenceGuard(chance, after_step=0, key='cross_entropy', window=10)
  with pytest.raises(hooks_lib.LossExplodedError):
    _feed(guard, [1.2, 1.1, 9.0, 14.0, 30.0])   # far below the old threshold of 3 x 35


def test_a_raised_baseline_lasts_until_the_loss_falls_below_chance_and_a_resumed_run_keeps_chance():
  """Only a fresh run's first loop (from step 0) sets a raised baseline, and only until the run gets below chance:
  a climb back to where it started then stops it ('back above chance after reaching half of it')."""
  guard = hooks_lib.DivergenceGuard(CHANCE, after_step=0, key='cross_entropy', ceiling=10.0, window=10)
  _feed(guard, [3.0])
  assert guard.baseline == 3.0
  _feed(guard, [0.5, 0.5], start=20)
  assert guard.baseline == CHANCE
  with pytest.raises(hooks_lib.LossExplodedError, match=f'against {CHANCE:.3g} for a uniform guess'):
    _feed(guard, [3.0, 3.0], start=40)
  resumed = hooks_lib.DivergenceGuard(CHANCE, after_step=0, key='cross_entropy', ceiling=10.0, window=10)
  _feed(resumed, [3.0], start=110)   # its first loop starts at step 100: not where the run started
  assert resumed.baseline == CHANCE
  # An explosion inside the warm-up is not taken for the start: the first loop is from step 0, before it.
  warm = hooks_lib.DivergenceGuard(CHANCE, after_step=20, key='cross_entropy', ceiling=10.0, window=10)
  with pytest.raises(hooks_lib.LossExplodedError):
    _feed(warm, [1.3, 9.0, 9.0, 9.0, 9.0])
  assert warm.baseline == CHANCE
