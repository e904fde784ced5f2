"""model_dir/best/ (estimator/best_checkpoint.py): the best checkpoint by a metric, early stopping's count, a
resumed run's state, damaged records, and one decision for all workers."""
import json
import os

import pytest
import tensorflow as tf

from resnet.estimator import best_checkpoint
from tests.helpers import toy


def _fake_checkpoint(model_dir, step):
  for suffix in ('.index', '.data-00000-of-00001'):
    (model_dir / f'model.ckpt-{step}{suffix}').write_text(f'step {step}')
  return str(model_dir / f'model.ckpt-{step}')


def _results(model_dir, step, accuracy, loss=1.0):
  return {'top_1_accuracy': accuracy, 'loss': loss, 'global_step': step, 'num_examples': 8,
          'checkpoint': _fake_checkpoint(model_dir, step)}


def test_best_checkpoint_keeps_the_best_and_counts_evals_without_improvement(tmp_path):
  best = best_checkpoint.BestCheckpoint(str(tmp_path), 'top_1_accuracy')
  assert best.goal == 'max' and best.checkpoint_path is None
  assert best.update(_results(tmp_path, 1, 0.5))
  assert best.update(_results(tmp_path, 2, 0.75))
  assert not best.update(_results(tmp_path, 3, 0.75))     # a tie is no improvement
  assert not best.update(_results(tmp_path, 4, float('nan')))
  (tmp_path / 'model.ckpt-2.index').unlink()                 # keep_checkpoint_max deletes its original
  best_dir = tmp_path / 'best'
  assert sorted(os.listdir(best_dir)) == ['checkpoint', 'eval_results.json', 'model.ckpt-2.data-00000-of-00001',
                                          'model.ckpt-2.index', 'progress.json']
  assert (best_dir / 'model.ckpt-2.index').read_text() == 'step 2'
  assert 'model.ckpt-2' in (best_dir / 'checkpoint').read_text()
  assert json.loads((best_dir / 'eval_results.json').read_text())['top_1_accuracy'] == 0.75
  assert best.evals_without_improvement == 2 and best.should_stop(2) and not best.should_stop(3)
  assert not best.should_stop(0)
  # A resumed run keeps the best and the count.
  resumed = best_checkpoint.BestCheckpoint(str(tmp_path), 'top_1_accuracy')
  assert resumed.value == 0.75 and resumed.evals_without_improvement == 2
  assert resumed.checkpoint_path == str(best_dir / 'model.ckpt-2')


def test_best_checkpoint_minimises_losses_and_names_unknown_metrics(tmp_path):
  best = best_checkpoint.BestCheckpoint(str(tmp_path), 'loss')
  assert best.goal == 'min'
  best.update(_results(tmp_path, 1, 0.5, loss=2.0))
  assert best.update(_results(tmp_path, 2, 0.4, loss=1.0))
  assert best_checkpoint.BestCheckpoint(str(tmp_path), 'top_1_accuracy', 'min').goal == 'min'
  with pytest.raises(ValueError, match="best_metric='macro_f2'.*loss, top_1_accuracy"):
    best_checkpoint.BestCheckpoint(str(tmp_path / 'other'), 'macro_f2').update(_results(tmp_path, 3, 0.5))


def test_a_best_update_cut_short_is_undone_on_open(tmp_path):
  best = best_checkpoint.BestCheckpoint(str(tmp_path), 'top_1_accuracy')
  best.update(_results(tmp_path, 1, 0.5))
  # A crash after copying step 2's files, before eval_results.json (the commit point) was replaced.
  best_dir = tmp_path / 'best'
  for name in ('model.ckpt-2.index', '.model.ckpt-2.data-00000-of-00001.tmp-0123'):
    (best_dir / name).write_text('partial')
  reopened = best_checkpoint.BestCheckpoint(str(tmp_path), 'top_1_accuracy')
  assert reopened.value == 0.5
  assert sorted(os.listdir(best_dir)) == ['checkpoint', 'eval_results.json', 'model.ckpt-1.data-00000-of-00001',
                                          'model.ckpt-1.index', 'progress.json']


def test_a_vanished_checkpoint_is_not_kept(tmp_path):
  best = best_checkpoint.BestCheckpoint(str(tmp_path), 'top_1_accuracy')
  results = _results(tmp_path, 1, 0.5)
  for path in tmp_path.glob('model.ckpt-1.*'):
    path.unlink()
  assert not best.update(results) and best.checkpoint_path is None


def test_opening_best_by_another_metric_or_as_a_reader_deletes_nothing(tmp_path):
  (tmp_path / 'params.yaml').write_text('resnet_depth: 50\nstride_in_1x1: true\n')
  best_checkpoint.BestCheckpoint(str(tmp_path), 'top_1_accuracy', companions=('params.yaml',)).update(
      _results(tmp_path, 1, 0.5))
  best_dir = tmp_path / 'best'
  kept = sorted(os.listdir(best_dir))
  assert 'params.yaml' in kept   # a warm start from best/ builds the run's architecture
  reader = best_checkpoint.BestCheckpoint(str(tmp_path), 'loss', role='reader')   # e.g. --mode=export
  assert reader.checkpoint_path == str(best_dir / 'model.ckpt-1') and reader.metric == 'top_1_accuracy'
  by_loss = best_checkpoint.BestCheckpoint(str(tmp_path), 'loss', companions=('params.yaml',))
  assert by_loss.checkpoint_path is None and sorted(os.listdir(best_dir)) == kept   # replaced only on a new best
  by_loss.update(_results(tmp_path, 2, 0.4, loss=0.9))
  assert json.loads((best_dir / 'eval_results.json').read_text())['best_metric'] == 'loss'
  assert 'model.ckpt-1.index' not in os.listdir(best_dir)


def test_a_step_saved_but_not_evaluated_is_noticed_on_resume(tmp_path):
  best = best_checkpoint.BestCheckpoint(str(tmp_path), 'top_1_accuracy')
  best.update(_results(tmp_path, 2, 0.5))
  best.update(_results(tmp_path, 4, 0.4))
  resumed = best_checkpoint.BestCheckpoint(str(tmp_path), 'top_1_accuracy')
  assert not resumed.needs_evaluation(4) and resumed.needs_evaluation(6)


def test_a_stop_between_the_commit_and_progress_json_neither_reevaluates_nor_stops_early(tmp_path):
  best = best_checkpoint.BestCheckpoint(str(tmp_path), 'top_1_accuracy')
  best.update(_results(tmp_path, 2, 0.5))
  best.update(_results(tmp_path, 4, 0.4))                      # progress: 1 evaluation without improvement
  stale = (tmp_path / 'best' / 'progress.json').read_text()
  best.update(_results(tmp_path, 6, 0.7))                      # a new best ...
  (tmp_path / 'best' / 'progress.json').write_text(stale)      # ... and a stop before progress.json was written
  resumed = best_checkpoint.BestCheckpoint(str(tmp_path), 'top_1_accuracy')
  assert resumed.value == 0.7 and not resumed.needs_evaluation(6) and resumed.evals_without_improvement == 0


@pytest.mark.parametrize('damage', ['not json', 'files gone', 'a list', 'binary', 'empty', 'a directory',
                                    'a null metric'])
def test_a_damaged_best_record_warns_keeps_every_file_and_is_rebuilt(tmp_path, caplog, damage):
  best = best_checkpoint.BestCheckpoint(str(tmp_path), 'top_1_accuracy')
  best.update(_results(tmp_path, 2, 0.5))
  best_dir = tmp_path / 'best'
  if damage == 'not json':
    (best_dir / 'eval_results.json').write_text('{"top_1_accuracy": 0.5, "glo')
  elif damage == 'a list':
    (best_dir / 'eval_results.json').write_text('[1, 2]')
  elif damage == 'a null metric':  # valid JSON, a null where the number belongs: comparing with it would crash
    record = json.loads((best_dir / 'eval_results.json').read_text())
    (best_dir / 'eval_results.json').write_text(json.dumps(dict(record, top_1_accuracy=None)))
  elif damage == 'binary':
    (best_dir / 'eval_results.json').write_bytes(bytes(range(256)) * 4)
  elif damage == 'empty':
    (best_dir / 'eval_results.json').write_bytes(b'')
  elif damage == 'a directory':
    (best_dir / 'eval_results.json').unlink()
    (best_dir / 'eval_results.json').mkdir()
    (best_dir / 'eval_results.json' / 'note.txt').write_text('mine')
  else:
    for path in best_dir.glob('model.ckpt-2.*'):
      path.unlink()
  kept = sorted(os.listdir(best_dir))
  resumed = best_checkpoint.BestCheckpoint(str(tmp_path), 'top_1_accuracy')
  assert resumed.best is None and sorted(os.listdir(best_dir)) == kept       # nothing deleted on open
  assert any('eval_results.json' in r.getMessage() for r in caplog.records if r.levelname == 'WARNING')
  assert resumed.update(_results(tmp_path, 4, 0.3))                          # rebuilt by the next evaluation
  assert json.loads((best_dir / 'eval_results.json').read_text())['global_step'] == 4
  if damage == 'a directory':  # set aside, never deleted
    (aside,) = best_dir.glob('eval_results.json.damaged-*')
    assert (aside / 'note.txt').read_text() == 'mine'


@pytest.mark.parametrize('damage', ['binary', 'a directory', 'nulls', 'a list'])
def test_a_damaged_progress_record_is_ignored_and_rewritten(tmp_path, caplog, damage):
  best = best_checkpoint.BestCheckpoint(str(tmp_path), 'top_1_accuracy')
  best.update(_results(tmp_path, 2, 0.5))
  progress = tmp_path / 'best' / 'progress.json'
  progress.unlink()
  if damage == 'binary':
    progress.write_bytes(b'\xf7\x00\xff' * 10)
  elif damage == 'nulls':
    progress.write_text('{"best_step": 2, "evals_without_improvement": null, "last_evaluated_step": 2}')
  elif damage == 'a list':
    progress.write_text('[2, 0]')
  else:
    progress.mkdir()
  resumed = best_checkpoint.BestCheckpoint(str(tmp_path), 'top_1_accuracy')
  assert resumed.value == 0.5     # the committed best stands; the count starts again
  assert any('progress.json' in r.getMessage() for r in caplog.records if r.levelname == 'WARNING')
  resumed.update(_results(tmp_path, 4, 0.4))
  assert json.loads(progress.read_text())['evals_without_improvement'] == 1


def test_a_best_removed_during_the_run_is_noticed(tmp_path, caplog):
  best = best_checkpoint.BestCheckpoint(str(tmp_path), 'top_1_accuracy')
  best.update(_results(tmp_path, 2, 0.5))
  for path in (tmp_path / 'best').iterdir():
    path.unlink()
  best.update(_results(tmp_path, 4, 0.4))
  assert any('no longer holds the best checkpoint model.ckpt-2' in r.getMessage() for r in caplog.records)


def test_a_follower_worker_takes_the_writers_decisions_and_writes_nothing(tmp_path):
  """The collective share, done by hand: the writer's values, in call order, are what the follower receives."""
  sent = []
  writer = best_checkpoint.BestCheckpoint(str(tmp_path), 'top_1_accuracy',
                                          share=lambda values: sent.append(list(values)) or list(values))
  # A follower would read best/ as the writer does (no adopting another metric) but decides nothing itself.
  follower = best_checkpoint.BestCheckpoint(str(tmp_path), 'top_1_accuracy', role='follower',
                                            share=lambda values: sent.pop(0))
  results = _results(tmp_path, 2, 0.5)
  assert writer.update(results) and follower.update(results) and not sent
  results = _results(tmp_path, 4, 0.75)
  (tmp_path / 'model.ckpt-4.index').unlink()   # keep_checkpoint_max deleted it before the writer could copy it
  best_files = sorted(os.listdir(tmp_path / 'best'))
  assert not writer.update(results)
  assert not follower.update(results)          # on its own it would have counted 0.75 > 0.5 as an improvement
  assert follower.evals_without_improvement == writer.evals_without_improvement == 1
  assert follower.should_stop(1) and writer.should_stop(1) and follower.value == 0.5
  assert sorted(os.listdir(tmp_path / 'best')) == best_files


def test_a_follower_that_read_best_differently_starts_from_the_writers_state(tmp_path):
  best_checkpoint.BestCheckpoint(str(tmp_path), 'top_1_accuracy').update(_results(tmp_path, 2, 0.5))
  writer_state = [1.0, 2.0, 0.5, 3.0, 6.0]  # best at step 2 (0.5), 3 evaluations without improvement, last at 6
  (tmp_path / 'best' / 'eval_results.json').write_text('{')   # the follower reads it damaged (mid-update)
  follower = best_checkpoint.BestCheckpoint(str(tmp_path), 'top_1_accuracy', role='follower',
                                            share=lambda values: writer_state)
  assert follower.best is None
  assert not follower.needs_evaluation(6) and follower.needs_evaluation(8)
  assert follower.should_stop(3) and follower.value == 0.5 and follower.checkpoint_path is None
  assert (tmp_path / 'best' / 'eval_results.json').read_text() == '{'   # a follower repairs nothing


def test_one_process_shares_its_own_values():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from resnet.estimator import distribution  # pylint: disable=g-import-not-at-top
  for strategy in (tf.distribute.get_strategy(), tf.distribute.OneDeviceStrategy('/cpu:0')):
    assert distribution.from_chief(strategy, [1, 2.5, -1]) == [1.0, 2.5, -1.0]


def test_a_writer_that_fails_to_keep_a_best_stops_every_worker(tmp_path, monkeypatch):
  """An error while the chief copies into best/ (no space, a storage error) is shared before it is raised: the
  followers stop with the chief instead of waiting for it in the next collective."""
  sent = []
  writer = best_checkpoint.BestCheckpoint(str(tmp_path), 'top_1_accuracy',
                                          share=lambda values: sent.append(list(values)) or list(values))
  follower = best_checkpoint.BestCheckpoint(str(tmp_path), 'top_1_accuracy', role='follower',
                                            share=lambda values: sent.pop(0))

  def full_disk(*args):
    raise OSError(28, 'No space left on device')
  monkeypatch.setattr(best_checkpoint.BestCheckpoint, '_keep', full_disk)
  results = _results(tmp_path, 2, 0.5)
  with pytest.raises(OSError, match='No space'):
    writer.update(results)
  with pytest.raises(RuntimeError, match='could not keep the best checkpoint'):
    follower.update(results)


@pytest.mark.slow
def test_early_stopping_after_evals_without_improvement_and_a_resumed_run_keeps_the_best(tmp_path):
  # No learning (a learning rate of 0): the accuracy stays the same, so never improves after the first evaluation.
  def run():
    runner = toy.make_runner(tmp_path, params={'lr': 0.0}, iterations_per_loop=1, save_checkpoints_steps=1)
    best = best_checkpoint.BestCheckpoint(str(tmp_path), 'accuracy')
    runner.train_and_evaluate(toy.train_input, toy.eval_input, max_steps=6, steps_per_eval=1, best=best,
                              early_stopping_evals=2)
    return runner, best

  runner, best = run()
  assert int(runner.global_step.numpy()) == 3                     # evals at 1 (best), 2 and 3 (no improvement)
  assert best.checkpoint_path == os.path.join(str(tmp_path), 'best', 'model.ckpt-1')
  assert best.evals_without_improvement == 2
  resumed, best_again = run()                                     # the same command again: stops at once
  assert int(resumed.global_step.numpy()) == 3 and best_again.value == best.value


def _evaluated(step, accuracy):
  return {'global_step': step, 'top_1_accuracy': accuracy, 'checkpoint': ''}


def test_best_checkpoint_names_a_first_evaluation_that_every_later_one_fell_below(tmp_path):
  best = best_checkpoint.BestCheckpoint(str(tmp_path), 'top_1_accuracy', role='reader')
  best.best = {**_evaluated(50, 0.4), 'best_checkpoint': 'model.ckpt-50'}   # as update() keeps it
  best._first_step_of_run = 50  # pylint: disable=protected-access
  assert best.worse_since_first_evaluation() is None  # nothing worse yet
  best.update(_evaluated(100, 0.2))
  best.update(_evaluated(150, 0.1))
  message = best.worse_since_first_evaluation()
  assert "first evaluation (top_1_accuracy=0.4000 at step 50)" in message and 'all 2 evaluation(s)' in message


def test_a_best_that_is_not_the_first_evaluation_says_nothing(tmp_path):
  best = best_checkpoint.BestCheckpoint(str(tmp_path), 'top_1_accuracy', role='reader')
  best.update(_evaluated(50, 0.2))
  best.best = {**_evaluated(100, 0.5), 'best_checkpoint': 'model.ckpt-100'}
  best.update(_evaluated(150, 0.3))
  assert best.worse_since_first_evaluation() is None


def test_train_and_evaluate_warns_when_the_first_evaluation_stays_the_best(tmp_path, caplog, monkeypatch):
  runner = toy.make_runner(tmp_path, iterations_per_loop=5, save_checkpoints_steps=5)
  accuracies = iter([0.6, 0.4, 0.3])

  def evaluate(*args, **kwargs):  # a run that got worse after its first evaluation
    step = int(runner.global_step.numpy())
    return {'global_step': step, 'top_1_accuracy': next(accuracies),
            'checkpoint': tf.train.latest_checkpoint(str(tmp_path))}

  monkeypatch.setattr(runner, 'evaluate', evaluate)
  best = best_checkpoint.BestCheckpoint(str(tmp_path), 'top_1_accuracy')
  runner.train_and_evaluate(toy.train_input, toy.eval_input, max_steps=15, steps_per_eval=5,
                            best=best)
  warnings = [r.getMessage() for r in caplog.records if r.levelname == 'WARNING']
  assert any("this run's first evaluation (top_1_accuracy=0.6000 at step 5) and all 2 evaluation(s) after it "
             "were worse" in w for w in warnings), warnings


def test_a_best_checkpoint_from_a_history_that_is_gone_is_named(tmp_path):
  best = best_checkpoint.BestCheckpoint(str(tmp_path), 'top_1_accuracy')
  best.best = {'global_step': 6, 'top_1_accuracy': 0.9, 'best_metric': 'top_1_accuracy', 'best_checkpoint': 'x'}
  assert best.ahead_of(6) is None
  message = best.ahead_of(4)
  assert 'holds the best checkpoint of step 6 (top_1_accuracy=0.9), but training goes on from step 4' in message
  assert 'move' in message and 'away' in message
