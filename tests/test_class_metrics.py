"""Per-class numbers, the misclassified list, the confusion image, balanced class weights, the small-data advice and
model_dir/best/: the host-side pieces of the eval report, against hand counts (no model; fast)."""
import csv
import json
import os

import numpy as np
import pytest

from official_input import dataset_info
from resnet import run_params
from resnet.evaluation import class_metrics
from resnet.evaluation import confusion_image
from resnet.estimator import best_checkpoint

# rows = true, columns = predicted; class 'c' is never predicted, class 'd' has no examples.
MATRIX = np.array([[3, 1, 0, 0],
                   [2, 4, 0, 0],
                   [1, 0, 0, 1],
                   [0, 0, 0, 0]])
NAMES = ['a', 'b', 'c', 'd']


def test_class_report_equals_the_hand_count():
  report = class_metrics.class_report(MATRIX.astype(np.float32), NAMES)
  a, b, c, d = (report['per_class'][n] for n in NAMES)
  # a: TP 3, predicted 6, support 4; b: TP 4, predicted 5, support 6; c: TP 0, predicted 0, support 2.
  assert a == {'precision': 3 / 6, 'recall': 3 / 4, 'f1': pytest.approx(2 * 0.5 * 0.75 / 1.25), 'support': 4}
  assert b == {'precision': 4 / 5, 'recall': 4 / 6, 'f1': pytest.approx(2 * 0.8 * (4 / 6) / (0.8 + 4 / 6)),
               'support': 6}
  assert c == {'precision': 0.0, 'recall': 0.0, 'f1': 0.0, 'support': 2}   # zero_division=0
  assert d['support'] == 0 and d['precision'] == 0.0                       # predicted once, wrongly
  # Macro averages over the classes with support (a, b, c): an absent class does not pull them down.
  assert report['macro_recall'] == pytest.approx((3 / 4 + 4 / 6 + 0) / 3)
  assert report['macro_precision'] == pytest.approx((3 / 6 + 4 / 5 + 0) / 3)
  assert report['macro_f1'] == pytest.approx((a['f1'] + b['f1']) / 3)
  assert report['confusion_matrix'] == MATRIX.tolist() and report['class_names'] == NAMES
  assert isinstance(report['confusion_matrix'][0][0], int)


def test_a_background_class_is_left_out_of_the_per_class_numbers():
  with_background = np.zeros((3, 3))
  with_background[1:, 1:] = [[2, 1], [0, 3]]
  with_background[2, 0] = 1   # one image predicted as background: still counted in its true class's row
  report = class_metrics.class_report(with_background, ['background', 'x', 'y'], background=True)
  assert set(report['per_class']) == {'x', 'y'}
  assert report['per_class']['y'] == {'precision': 3 / 4, 'recall': 3 / 4, 'f1': pytest.approx(0.75), 'support': 4}
  assert np.sum(report['confusion_matrix']) == 7


def test_count_matrix_skips_padding():
  labels = np.array([0, 1, 1, -1, 2])
  predicted = np.array([0, 0, 1, 2, 2])
  np.testing.assert_array_equal(class_metrics.count_matrix(labels, predicted, 3),
                                [[1, 0, 0], [1, 1, 0], [0, 0, 1]])


def test_misclassified_keeps_the_most_confident_mistakes_under_the_cap(tmp_path):
  listed = class_metrics.Misclassified(max_rows=2)
  listed.add(['i0', 'i1', 'i2', 'i3', 'pad'], np.array([0, 1, 1, 0, -1]), np.array([1, 1, 0, 1, 0]),
             np.array([0.6, 0.99, 0.9, 0.7, 0.95]))
  listed.add(['i4'], np.array([1]), np.array([0]), np.array([0.5]))
  assert listed.count == 4 and listed.rows == 2          # i0, i2, i3, i4 are wrong; i1 right; padding skipped
  path = str(tmp_path / 'eval_misclassified.csv')
  listed.write(path, ['cat', 'dog'])
  rows = list(csv.DictReader(open(path)))
  assert [r['image'] for r in rows] == ['i2', 'i3']        # the two most confident mistakes, most confident first
  assert rows[0] == {'image': 'i2', 'true_label': '1', 'true_class': 'dog', 'predicted_label': '0',
                     'predicted_class': 'cat', 'probability': '0.900000'}
  assert os.listdir(tmp_path) == ['eval_misclassified.csv']  # no temporary file left beside it


@pytest.mark.parametrize('classes', [5, 100])
def test_the_confusion_image_is_readable_for_5_and_100_classes(classes):
  rng = np.random.default_rng(0)
  matrix = np.diag(rng.integers(5, 40, classes)).astype(float) + (rng.random((classes, classes)) < 0.03)
  names = [f'class_{i}' for i in range(classes)]
  image = confusion_image.render(matrix, names, 'eval step 1')
  assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3
  assert 200 < image.shape[0] < 1000 and 200 < image.shape[1] < 1000    # fits a TensorBoard card
  # Diagonal cells (mostly right) are dark, off-diagonal ones light: sample the centre of two cells.
  cell = int(np.clip(confusion_image.TARGET_SIDE // classes, 1, confusion_image.MAX_CELL))
  bottom, right = image.shape[0] - 8, image.shape[1] - 8
  diagonal = image[bottom - cell // 2 - 1, right - cell // 2 - 1]
  off = image[bottom - cell // 2 - 1, right - cell - cell // 2 - 1]
  assert diagonal.sum() < 300 < off.sum(), (diagonal, off)
  # Names on the axes only when a cell fits a line of text: long names widen the margin for 5 classes only.
  wide = confusion_image.render(matrix, [f'a_much_longer_class_name_{i}' for i in range(classes)])
  assert (wide.shape[1] > confusion_image.render(matrix, names).shape[1]) == (classes == 5)


def _summary(tmp_path, per_class):
  (tmp_path / 'labels.txt').write_text(''.join(f'{n}\n' for n in per_class))
  (tmp_path / 'summary.json').write_text(json.dumps({
      'num_classes': len(per_class),
      'splits': {'train': {'images': sum(per_class.values()), 'per_class': per_class},
                 'validation': {'images': 8, 'per_class': {n: 2 for n in per_class}}}}))
  return str(tmp_path)


def test_balanced_class_weights_from_summary_json(tmp_path):
  data_dir = _summary(tmp_path, {'cats': 90, 'dogs': 10, 'owls': 20})
  params = run_params.make_params({'data_dir': data_dir, 'class_weights': 'balanced'})
  assert params.num_label_classes == 3
  assert params.class_weights == pytest.approx([120 / (3 * 90), 120 / (3 * 10), 120 / (3 * 20)], rel=1e-5)
  with_background = run_params.make_params({'data_dir': data_dir, 'class_weights': 'balanced',
                                               'num_label_classes': 4})
  assert with_background.class_weights[0] == 1.0 and len(with_background.class_weights) == 4
  info = dataset_info.read_dataset_info(data_dir)
  assert info.train_class_counts == (90, 10, 20)


def test_balanced_class_weights_without_counts_name_the_fix(tmp_path):
  (tmp_path / 'summary.json').write_text(json.dumps({'num_classes': 2}))
  with pytest.raises(ValueError, match='per-class training counts.*class_weights as a list'):
    run_params.make_params({'data_dir': str(tmp_path), 'class_weights': 'balanced'})
  with pytest.raises(ValueError, match='class_weights lists 3 weights for num_label_classes=2'):
    run_params.make_params({'data_dir': str(tmp_path), 'class_weights': [1, 2, 3]})


def test_class_weights_that_cannot_work_are_named(tmp_path, caplog):
  """All-zero weights would train on weight decay alone; balanced weights cannot help a class with no training
  images (it keeps 1 and is never learned): an error and a warning naming the class."""
  with pytest.raises(ValueError, match=r'class_weights=\[0, 0.0\] are all 0: the training loss would be weight decay'):
    run_params.make_params({'num_label_classes': 2, 'class_weights': [0, 0.0]})
  data_dir = _summary(tmp_path, {'cats': 90, 'dogs': 0, 'owls': 20})
  params = run_params.make_params({'data_dir': data_dir, 'class_weights': 'balanced'})
  assert params.class_weights[1] == 1.0
  warnings = [r.getMessage() for r in caplog.records if r.levelname == 'WARNING']
  assert any('no training images of dogs' in w for w in warnings), warnings


def test_small_data_with_the_imagenet_recipe_gets_advice(tmp_path):
  data_dir = _summary(tmp_path, {'cats': 900, 'dogs': 100})
  advice = run_params.recipe_advice(run_params.make_params({'data_dir': data_dir}))
  assert 'small_data' in advice and 'flowers_finetune' in advice and '1000 images' in advice
  small_data = run_params.make_params({'data_dir': data_dir}, config_files=['small_data'])
  assert run_params.recipe_advice(small_data) is None
  fine_tuning = run_params.make_params({'data_dir': data_dir, 'resnet_checkpoint': '/w/ckpt'})
  assert run_params.recipe_advice(fine_tuning) is None
  assert run_params.recipe_advice(run_params.make_params({})) is None   # synthetic / ImageNet


# ------------------------------------------------------------------------------------------------ best checkpoint
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


@pytest.mark.parametrize('damage', ['not json', 'files gone', 'a list', 'binary', 'empty', 'a directory'])
def test_a_damaged_best_record_warns_keeps_every_file_and_is_rebuilt(tmp_path, caplog, damage):
  best = best_checkpoint.BestCheckpoint(str(tmp_path), 'top_1_accuracy')
  best.update(_results(tmp_path, 2, 0.5))
  best_dir = tmp_path / 'best'
  if damage == 'not json':
    (best_dir / 'eval_results.json').write_text('{"top_1_accuracy": 0.5, "glo')
  elif damage == 'a list':
    (best_dir / 'eval_results.json').write_text('[1, 2]')
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


@pytest.mark.parametrize('damage', ['binary', 'a directory'])
def test_a_damaged_progress_record_is_ignored_and_rewritten(tmp_path, caplog, damage):
  best = best_checkpoint.BestCheckpoint(str(tmp_path), 'top_1_accuracy')
  best.update(_results(tmp_path, 2, 0.5))
  progress = tmp_path / 'best' / 'progress.json'
  progress.unlink()
  if damage == 'binary':
    progress.write_bytes(b'\xf7\x00\xff' * 10)
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


@pytest.mark.parametrize('task_type,task_id,has_chief,expected', [
    ('chief', 0, True, True), ('worker', 0, True, False), ('worker', 0, False, True), ('worker', 1, False, False),
    ('evaluator', 0, False, False)])
def test_one_chief_per_cluster(task_type, task_id, has_chief, expected):
  """With a chief job, worker 0 is not a second chief (before: two writers on model_dir and best/)."""
  from resnet.estimator import distribution  # pylint: disable=g-import-not-at-top
  assert distribution.chief_task(task_type, task_id, has_chief) is expected
