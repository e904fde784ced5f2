"""No silent divergence: a finite loss that explodes stops the run (or warns) naming the step, the history and the
fixes; checkpoints stay; and the best checkpoint says when it is the first evaluation of a run that got worse."""
import math
import os
import subprocess

import pytest
import tensorflow as tf

from resnet.estimator import best_checkpoint
from resnet.estimator import hooks as hooks_lib
from tests import test_estimator
from tests.helpers import cli
from tests.helpers import procs

CHANCE = math.log(4)


def _feed(guard, losses, start=10, every=10):
  guard.begin(None, 0)
  for i, loss in enumerate(losses):
    guard.after_loop(start + i * every, {'cross_entropy': loss, 'loss': loss + 0.3})


def test_an_exploding_loss_stops_after_two_loops_naming_step_history_and_fixes():
  guard = hooks_lib.DivergenceGuard(CHANCE, after_step=20, key='cross_entropy', advice='Try a lower base_lr.')
  with pytest.raises(hooks_lib.LossExplodedError) as error:
    _feed(guard, [1.4, 1.2, 0.9, 5.0, 25.0, 800.0])
  message = str(error.value)
  assert message.startswith('Training diverged at step 50: cross_entropy 25')   # the second loop above 3 ln 4
  assert '30: 0.9, 40: 5, 50: 25' in message and 'best of 0.9 at step 30' in message
  assert message.endswith('Checkpoints up to step 30 predate the explosion. Try a lower base_lr.')


def test_exploded_loops_count_across_train_calls():
  """train_and_eval trains in chunks (one train() call each, often a single loop): the count goes on."""
  guard = hooks_lib.DivergenceGuard(CHANCE, after_step=0, key='cross_entropy')
  guard.begin(None, 0)
  guard.after_loop(10, {'cross_entropy': 1.2})
  guard.after_loop(20, {'cross_entropy': 9.0})
  guard.begin(None, 20)
  with pytest.raises(hooks_lib.LossExplodedError, match='step 30'):
    guard.after_loop(30, {'cross_entropy': 12.0})


def test_noise_warm_up_spikes_and_a_loss_near_chance_do_not_trip_it():
  guard = hooks_lib.DivergenceGuard(CHANCE, after_step=40, key='cross_entropy')
  # A spike past 3 ln 4 inside the warm-up, one lone spike after it, and a run that stays near chance.
  _feed(guard, [1.4, 9.0, 9.0, 1.3, 5.0, 1.2, 1.5, 1.45, 1.39, 1.6, 1.3])
  assert guard.exploded == 0


def test_a_loss_back_above_chance_after_learning_is_divergence_too():
  guard = hooks_lib.DivergenceGuard(CHANCE, after_step=0, key='cross_entropy')
  with pytest.raises(hooks_lib.LossExplodedError, match='step 60'):
    _feed(guard, [1.3, 0.9, 0.5, 0.4, 1.5, 1.6])   # below half of ln 4 (0.69), then above ln 4 twice (50, 60)


def test_warn_mode_warns_once_per_episode_and_goes_on(caplog):
  guard = hooks_lib.DivergenceGuard(CHANCE, after_step=0, stop=False, key='cross_entropy')
  _feed(guard, [1.0, 6.0, 7.0, 8.0, 9.0])
  warnings = [r for r in caplog.records if 'Training diverged' in r.getMessage()]
  assert len(warnings) == 1 and 'step 30' in warnings[0].getMessage()


def test_the_estimator_stops_before_saving_the_exploded_loop_and_keeps_earlier_checkpoints(tmp_path):
  """A linear model at a learning rate of 50: the cross-entropy grows without bound while it stays finite."""
  runner = test_estimator.make_runner(tmp_path, params={'lr': 50.0}, iterations_per_loop=2,
                                      save_checkpoints_steps=2)
  guard = hooks_lib.DivergenceGuard(math.log(3), after_step=2, key='loss')
  with pytest.raises(hooks_lib.LossExplodedError) as error:
    runner.train(test_estimator.train_input, max_steps=200, hooks=[hooks_lib.NanGuard(), guard])
  step = int(str(error.value).split('at step ')[1].split(':')[0])
  history = [v for _, v in guard.history]
  assert all(math.isfinite(v) for v in history) and history[-1] > 3 * math.log(3)
  latest = tf.train.latest_checkpoint(str(tmp_path))
  assert latest is not None and int(latest.rsplit('-', 1)[1]) == step - 2  # the second exploded loop was not saved
  # The first exploded loop may have been saved: the message names the last step before the explosion.
  assert f'Checkpoints up to step {guard.healthy_step} predate the explosion' in str(error.value)
  assert guard.healthy_step == step - 4


def _results(step, accuracy):
  return {'global_step': step, 'top_1_accuracy': accuracy, 'checkpoint': ''}


def test_best_checkpoint_names_a_first_evaluation_that_every_later_one_fell_below(tmp_path):
  best = best_checkpoint.BestCheckpoint(str(tmp_path), 'top_1_accuracy', role='reader')
  best.best = {**_results(50, 0.4), 'best_checkpoint': 'model.ckpt-50'}   # as update() keeps it
  best._first_step_of_run = 50  # pylint: disable=protected-access
  assert best.worse_since_first_evaluation() is None  # nothing worse yet
  best.update(_results(100, 0.2))
  best.update(_results(150, 0.1))
  message = best.worse_since_first_evaluation()
  assert "first evaluation (top_1_accuracy=0.4000 at step 50)" in message and 'all 2 evaluation(s)' in message


def test_a_best_that_is_not_the_first_evaluation_says_nothing(tmp_path):
  best = best_checkpoint.BestCheckpoint(str(tmp_path), 'top_1_accuracy', role='reader')
  best.update(_results(50, 0.2))
  best.best = {**_results(100, 0.5), 'best_checkpoint': 'model.ckpt-100'}
  best.update(_results(150, 0.3))
  assert best.worse_since_first_evaluation() is None


def test_a_diverging_cli_run_exits_with_the_message_keeps_checkpoints_and_exports_nothing(tmp_path):
  from tools import imagenet_to_gcs, make_demo_dataset  # pylint: disable=import-outside-toplevel
  make_demo_dataset.make_demo_dataset(str(tmp_path / 'images'), num_classes=4, images_per_class=8,
                                      image_size=(40, 56), seed=0)
  data = str(tmp_path / 'records')
  imagenet_to_gcs.convert_dataset(str(tmp_path / 'images'), data, num_workers=1, seed=0)
  model_dir, export_dir = str(tmp_path / 'run'), str(tmp_path / 'export')
  # Class weights of 50 on a tiny ResNet at a learning rate of 400: the cross-entropy explodes, finite.
  base = [f for f in cli.TINY if not f.startswith('--num_train_images')]  # the data's summary.json counts them
  proc = subprocess.run(cli.main_args(
      f'--data_dir={data}', f'--model_dir={model_dir}', f'--export_dir={export_dir}', '--mode=train',
      '--train_steps=40', '--iterations_per_loop=2', '--save_checkpoints_steps=2', '--lr_warmup_epochs=0',
      '--base_learning_rate=400', '--param_overrides=class_weights=[50,50,50,50]', base=base),
      env=procs.base_env(), capture_output=True, text=True, timeout=600, check=False)
  assert proc.returncode != 0, proc.stderr[-3000:]
  assert 'error: Training diverged at step' in proc.stderr, proc.stderr[-3000:]
  assert 'a lower base_learning_rate (now 400)' in proc.stderr and 'milder class_weights' in proc.stderr
  assert tf.train.latest_checkpoint(model_dir) is not None and not os.path.exists(export_dir)


def test_train_and_evaluate_warns_when_the_first_evaluation_stays_the_best(tmp_path, caplog, monkeypatch):
  runner = test_estimator.make_runner(tmp_path, iterations_per_loop=5, save_checkpoints_steps=5)
  accuracies = iter([0.6, 0.4, 0.3])

  def evaluate(*args, **kwargs):  # a run that got worse after its first evaluation
    step = int(runner.global_step.numpy())
    return {'global_step': step, 'top_1_accuracy': next(accuracies),
            'checkpoint': tf.train.latest_checkpoint(str(tmp_path))}

  monkeypatch.setattr(runner, 'evaluate', evaluate)
  best = best_checkpoint.BestCheckpoint(str(tmp_path), 'top_1_accuracy')
  runner.train_and_evaluate(test_estimator.train_input, test_estimator.eval_input, max_steps=15, steps_per_eval=5,
                            best=best)
  warnings = [r.getMessage() for r in caplog.records if r.levelname == 'WARNING']
  assert any("this run's first evaluation (top_1_accuracy=0.6000 at step 5) and all 2 evaluation(s) after it "
             "were worse" in w for w in warnings), warnings
