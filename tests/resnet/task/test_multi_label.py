"""Multi-label training pieces: targets, the loss, the eval step's sums and exact metrics, predictions."""
import math
import os

import numpy as np
import pytest
import tensorflow as tf

from resnet.evaluation import label_metrics
from resnet.task import multi_label
from resnet.task import tasks
from resnet.estimator import hooks
from tests.helpers import tiny

LABELS = np.array([[1, 0, 1], [0, 0, 0], [0, 1, 0], [-1, -1, -1]], np.int32)   # the last row is padding


def test_targets_are_multi_hot_smoothed_towards_one_half():
  np.testing.assert_allclose(multi_label.targets(tf.constant(LABELS), 0.2).numpy(),
                             [[0.9, 0.1, 0.9], [0.1, 0.1, 0.1], [0.1, 0.9, 0.1], [0.1, 0.1, 0.1]], rtol=1e-6)
  np.testing.assert_array_equal(multi_label.targets(tf.constant(LABELS), 0.0).numpy()[3], [0, 0, 0])


def test_loss_is_the_mean_over_classes_of_positive_weighted_binary_cross_entropy():
  z = np.array([[1.0, -2.0, 0.5], [0.0, 3.0, -1.0]])
  q = np.array([[0.9, 0.1, 0.9], [0.1, 0.6, 0.1]])
  w = np.array([2.0, 1.0, 0.5])
  s = 1 / (1 + np.exp(-z))
  bce = -(q * np.log(s) + (1 - q) * np.log(1 - s))
  expected = np.mean((1 + (w - 1) * q) * bce, axis=1)
  real = multi_label.per_example_loss(tf.constant(z, tf.float32), tf.constant(q, tf.float32), None,
                                      tf.constant(w, tf.float32))
  np.testing.assert_allclose(real.numpy(), expected, rtol=1e-5)
  # Hard targets: PyTorch's pos_weight, -(w y log s + (1 - y) log(1 - s)), exactly.
  y = (q > 0.5).astype(float)
  hard = multi_label.per_example_loss(tf.constant(z, tf.float32), tf.constant(y, tf.float32), None,
                                      tf.constant(w, tf.float32))
  np.testing.assert_allclose(hard.numpy(), np.mean(-(w * y * np.log(s) + (1 - y) * np.log(1 - s)), axis=1),
                             rtol=1e-5)
  thresholded = multi_label.per_example_loss(tf.constant(z, tf.float32), tf.constant(q, tf.float32), 0.5)
  binary = (q > 0.5).astype(float)
  np.testing.assert_allclose(thresholded.numpy(),
                             np.mean(-(binary * np.log(s) + (1 - binary) * np.log(1 - s)), axis=1), rtol=1e-5)


def test_weights_keep_each_classs_optimum_at_its_smoothed_target():
  """A rare class (w = 99) with smoothing 0.1: a negative's target is 0.05 and the loss is lowest there, where
  pos_weight's would be at 99 x 0.05 / (99 x 0.05 + 0.95) = 0.84."""
  z = tf.Variable(tf.zeros([1, 1]))
  w, q = tf.constant([99.0]), tf.constant([[0.05]])
  for _ in range(300):
    with tf.GradientTape() as tape:
      loss = multi_label.per_example_loss(z, q, None, w)
    z.assign_sub(0.05 * tape.gradient(loss, z))
  assert float(tf.sigmoid(z)[0, 0]) == pytest.approx(0.05, abs=1e-3)


def test_eval_sums_are_the_score_histograms_and_metrics_are_exact_counts():
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(64, 3)).astype(np.float32) * 4
  labels = (rng.uniform(size=(64, 3)) < 0.3).astype(np.int32)
  labels[-5:] = -1
  metrics, sums = multi_label.eval_metrics(tf.constant(logits), tf.constant(labels), tf.zeros([64]))
  np.testing.assert_array_equal(sums[multi_label.HISTOGRAMS].numpy(), label_metrics.histograms(logits, labels, 3))
  valid = labels[:, 0] >= 0
  exact = np.all((logits >= 0) == (labels > 0), axis=1)
  assert float(metrics['exact_match'][0]) == exact[valid].sum() and float(metrics['exact_match'][1]) == valid.sum()
  has = valid & (labels > 0).any(axis=1)
  top_right = labels[np.arange(64), logits.argmax(1)] > 0
  assert float(metrics['precision_at_1'][0]) == (top_right & has).sum()
  assert float(metrics['precision_at_1'][1]) == has.sum()


def test_predictions_decide_at_each_classs_threshold():
  thresholds = multi_label.thresholds_variable(3)
  thresholds.assign([0.5, 0.9, 0.1])
  out = multi_label.predictions(tf.constant([[0.0, 1.0, -1.0]]), thresholds)
  np.testing.assert_allclose(out['probabilities'].numpy(), 1 / (1 + np.exp(-np.array([[0.0, 1.0, -1.0]]))),
                             rtol=1e-6)
  np.testing.assert_array_equal(out['labels'].numpy(), [[1, 0, 1]])
  assert int(out['classes'].numpy()[0]) == 1


def test_the_model_fn_trains_and_evaluates_multi_hot_batches(tmp_path):
  params = tiny.resnet_params(tmp_path, task='multi_label', num_label_classes=3, train_batch_size=4,
                              eval_batch_size=4, num_train_images=8, num_eval_images=4, train_steps=2)
  assert (params['loss'], params['best_metric']) == ('binary_cross_entropy', 'mAP')
  images = np.random.default_rng(0).uniform(0, 255, (4, 32, 32, 3)).astype(np.float32)
  data = lambda p: tf.data.Dataset.from_tensors((images, LABELS))
  estimator = tiny.resnet_estimator(params)
  estimator.train(lambda p: data(p).repeat(), max_steps=2)
  seen = {}

  class Keep(hooks.EvalHook):
    def end(self, results, sums):
      seen.update(sums)
      return super().end(results, sums)
  results = estimator.evaluate(data, hooks=[Keep()])
  assert results['num_examples'] == 3    # the padding row is no example
  assert seen[multi_label.HISTOGRAMS].shape == (2, 3, label_metrics.BINS)
  assert seen[multi_label.HISTOGRAMS].sum() == 9


@pytest.mark.parametrize('overrides,message', [
    (dict(loss='softmax_cross_entropy'), 'softmax makes the classes compete'),
    (dict(teacher_checkpoint='/x'), "distillation's soft term"),
    (dict(class_weights=[1.0, 2.0], class_weight_normalization='weight_sum'), 'class_weight_normalization=batch_size'),
    (dict(best_metric='top_1_accuracy'), 'multi-label eval reports mAP'),
])
def test_what_assumes_one_class_per_image_is_refused(tmp_path, overrides, message):
  with pytest.raises(ValueError, match=message):
    tiny.resnet_params(tmp_path, task='multi_label', **overrides)


def test_single_label_runs_keep_their_loss_and_best_metric(tmp_path):
  params = tiny.resnet_params(tmp_path)
  assert (params['task'], params['loss'], params['best_metric']) == ('single_label', 'softmax_cross_entropy',
                                                                      'top_1_accuracy')


class _Estimator:
  """What the multi-label task's decisions ask of an Estimator."""

  def __init__(self, model_dir):
    self.model_dir = model_dir
    self.variable = multi_label.thresholds_variable(2)
    self.scope = self

  def build(self, mode):
    del mode

  def latest_checkpoint(self):
    return os.path.join(self.model_dir, 'model.ckpt-30')

  def get(self, name):
    assert name == multi_label.THRESHOLDS
    return self.variable


def test_predict_and_export_say_when_they_serve_other_weights_or_views_than_the_thresholds_were_tuned_on(
    tmp_path, monkeypatch):
  from resnet.evaluation import multi_label_report  # pylint: disable=import-outside-toplevel
  lines = []
  record = lambda message, *args: lines.append(message % args)
  for level in ('info', 'warning'):   # what absl logs here, whatever other tests did to its handlers
    monkeypatch.setattr(multi_label_report.logging, level, record)
    monkeypatch.setattr(multi_label.logging, level, record)
  logged = lambda: '\n'.join(lines)
  params = dict(task='multi_label', model_dir=str(tmp_path), num_label_classes=2, moving_average_decay=0.999,
                tta='flip')
  tuned_on = multi_label_report.served_view(params)
  assert tuned_on == {'weights': 'moving_average', 'tta': 'flip'}
  multi_label_report.record_thresholds(str(tmp_path), 30, [0.2, 0.7], ['a', 'b'], tuned_on)
  estimator = _Estimator(str(tmp_path))
  task = tasks.for_params(params)
  assert task.decisions(estimator, None) == (0.2, 0.7)   # predict: what eval scored
  assert 'tuned on the validation split at step 30' in logged() and 'but this serves' not in logged()
  np.testing.assert_allclose(estimator.variable.numpy(), [0.2, 0.7])
  task.decisions(estimator, None, averaged=False, single_view=True)   # an export
  assert 'tuned on weights=moving_average, tta=flip, but this serves weights=trained, tta=none' in logged()
  estimator.latest_checkpoint = lambda: os.path.join(str(tmp_path), 'model.ckpt-40')   # a step not evaluated
  assert task.decisions(estimator, None) == (0.5, 0.5)
  assert 'no tuned thresholds for this checkpoint' in logged()


ML_LABELS = np.array([[1, 0, 1], [0, 0, 0], [0, 1, 0], [1, 1, 1]] * 3 + [[0, 1, 1]] + [[-1, -1, -1]] * 3, np.int32)


def _ml_input(params):
  """16 rows, the last 3 padding (rows of -1), as the eval pipeline pads; batches of the per-replica batch."""
  images = tf.random.stateless_uniform([16, 32, 32, 3], seed=[5, 6], maxval=255.0)
  ds = tf.data.Dataset.from_tensor_slices((images, ML_LABELS))
  if params.context.mode == 'train':
    ds = ds.take(12).repeat()
  return ds.batch(params['batch_size'], drop_remainder=True)


def _ml_eval(model_dir, strategy=None, jit=False, train=False):
  from resnet.evaluation import multi_label_report  # pylint: disable=import-outside-toplevel
  params = tiny.resnet_params(model_dir, task='multi_label', num_label_classes=3, jit_compile=jit, train_steps=3,
                              iterations_per_loop=3, save_checkpoints_steps=3, train_batch_size=4,
                              eval_batch_size=4, predict_batch_size=4, lr_warmup_epochs=0.0, num_train_images=12)
  estimator = tiny.resnet_estimator(params, strategy)
  if train:
    estimator.train(_ml_input, max_steps=3)
  sums = {}

  class Keep(hooks.EvalHook):
    def end(self, results, batch_sums):
      sums.update(batch_sums)
      return super().end(results, batch_sums)
  report = multi_label_report.MultiLabelReport(['a', 'b', 'c'], multi_label_report.served_view(params))
  results = estimator.evaluate(_ml_input, hooks=[Keep(), report])
  predictions = list(estimator.predict(lambda p: _ml_input(p).map(lambda x, y: ({'image': x}, y))))
  return results, sums[multi_label.HISTOGRAMS], predictions


@pytest.mark.slow
def test_multi_label_eval_and_predict_are_the_same_on_two_replicas_compiled_with_xla(tmp_path):
  """The histogram segment sums, exact_match's reduce_all and precision@1's gather under XLA on each replica, the
  sums reduced over replicas, padding rows counted nowhere."""
  one = _ml_eval(str(tmp_path / 'run'), train=True)
  two = _ml_eval(str(tmp_path / 'run'), strategy=tiny.two_replicas(), jit=True)
  assert one[0]['num_examples'] == two[0]['num_examples'] == 13
  for key in ('loss', 'exact_match', 'precision_at_1', 'mAP', 'micro_AP', 'micro_f1', 'macro_f1_tuned'):
    assert two[0][key] == pytest.approx(one[0][key], rel=1e-4, abs=1e-5), key
  assert one[1].sum() == two[1].sum() == 13 * 3
  np.testing.assert_array_equal(one[1].sum(axis=2), two[1].sum(axis=2))   # positives, negatives per class
  real = [p for p in one[2] if p['label'][0] >= 0]
  assert len(real) == 13 and len(one[2]) == len(two[2])
  np.testing.assert_allclose(np.stack([p['probabilities'] for p in two[2]]),
                             np.stack([p['probabilities'] for p in one[2]]), rtol=1e-3, atol=1e-5)
  np.testing.assert_array_equal(np.stack([p['labels'] for p in one[2]]),
                                (np.stack([p['probabilities'] for p in one[2]]) >= 0.5).astype(np.int32))


def _chance(params, counts, images=None):
  """The divergence guard's baseline for a task's params and training counts of each class (of ``images``)."""
  return tasks.for_params(params).chance_loss(counts, images if images is not None else sum(counts or ()))


def test_multi_label_chance_is_a_guess_of_each_classs_rate_positives_weighted():
  """A 17-class Planet-like rate of 0.17: ~0.46 per class (not ln 2 = 0.69, nor the one-label 1/K prior's 0.23);
  with positive weights negatives / positives the positives weigh as much as the negatives."""
  counts = [17] * 17   # of 100 training images
  params = dict(task='multi_label', num_label_classes=17, class_weights=None, class_weight_normalization='batch_size')
  entropy = -(0.17 * math.log(0.17) + 0.83 * math.log(0.83))
  chance, how = _chance(params, counts, 100)
  assert chance == pytest.approx(entropy) and "each class's rate" in how
  weighted = dict(params, class_weights=[0.83 / 0.17] * 17)
  assert _chance(weighted, counts, 100)[0] == pytest.approx(-0.83 * math.log(0.17 * 0.83))
  # Without per-class counts: the one-label prior 1/K, the binary cross-entropy chance above.
  bce = dict(num_label_classes=17, class_weights=None, class_weight_normalization='batch_size',
             loss='binary_cross_entropy')
  assert _chance(params, None)[0] == pytest.approx(_chance(bce, None)[0])


def test_balanced_weights_weigh_each_classs_positives_by_its_negatives_over_positives():
  task = tasks.for_params({'task': 'multi_label', 'num_label_classes': 4})
  assert task.balanced_class_weights([4, 5, 3, 3], 8) == [1.0, 0.6, round(5 / 3, 6), round(5 / 3, 6)]


def test_with_label_smoothing_the_baseline_keeps_the_floor_smoothing_puts_under_every_loss():
  """200 classes at 0.3%, smoothing 0.1: every target is 0.95 or 0.05, so even a perfect model scores H(0.05) =
  0.1985 per class; the old baseline (the rate's entropy, 0.0204) called 3 x 0.0204 = 0.061 diverged, below
  anything a run can reach. The guess is now the mean smoothed target, 0.003 x 0.9 + 0.05."""
  entropy = lambda p: -(p * math.log(p) + (1 - p) * math.log(1 - p))
  params = dict(task='multi_label', num_label_classes=200, class_weights=None, label_smoothing=0.1,
                bce_target_threshold=None)
  chance, how = _chance(params, [3] * 200, 1000)
  floor = entropy(0.05)
  assert chance == pytest.approx(entropy(0.003 * 0.9 + 0.05)) and 'smoothed by 0.1' in how
  assert chance > floor and 1.1 * floor < hooks.DivergenceGuard.FACTOR * chance
  # bce_target_threshold binarises the targets again: the rate's entropy.
  assert _chance(dict(params, bce_target_threshold=0.2), [3] * 200, 1000)[0] == pytest.approx(entropy(0.003))
  # Outputs that say nothing (logits 0) score ln 2 per class, smoothed or not: the guard's ceiling for a start.
  assert tasks.for_params(params).uninformed_loss([3] * 200, 1000) == pytest.approx(math.log(2))


# The eval hook's exact numbers on one replica and on two: logits x1000 with ties (3 rows of eval padding). The
# seeded rows' mAP by sklearn 1.9.1's average_precision_score (computed once in a scratch venv outside the repo).
_RNG = np.random.default_rng(3)
_TRUTH = _RNG.uniform(size=(37, 3)) < [0.2, 0.5, 0.1]
_SCORES = (_RNG.normal(size=(37, 3)) * 3 + _TRUTH * 2).round(1).astype(np.float32) * np.float32(1000)
SKLEARN_MAP = 0.5985152605454187


def _scores_model_fn(features, labels, mode, params):
  """The multi-label task's eval parts of logits that are the features themselves (a variable to checkpoint)."""
  from resnet.estimator.spec import EstimatorSpec, ModeKeys  # pylint: disable=import-outside-toplevel
  scale = params.context.scope.get_or_create('scale', lambda: tf.Variable(1.0))
  if features is None:
    return None
  if mode == ModeKeys.TRAIN:
    return EstimatorSpec(mode, loss=0.0 * scale)
  logits = features * scale
  task = tasks.for_params({'task': 'multi_label', 'num_label_classes': 3})
  metrics, sums, outputs = task.eval_parts(logits, labels, tf.zeros(tf.shape(logits)[:1]))
  return EstimatorSpec(mode, eval_metrics=metrics, eval_sums=sums, eval_outputs=outputs)


def _scores_input(params):
  labels = np.concatenate([_TRUTH.astype(np.int32), -np.ones([3, 3], np.int32)])
  scores = np.concatenate([_SCORES, np.zeros([3, 3], np.float32)])
  ds = tf.data.Dataset.from_tensor_slices((scores, labels))
  if params.context.mode == 'train':
    ds = ds.repeat()
  return ds.batch(params['batch_size'], drop_remainder=True)


def _exact_eval(model_dir, strategy=None):
  from resnet.estimator import estimator as E  # pylint: disable=import-outside-toplevel
  from resnet.estimator.run_config import RunConfig  # pylint: disable=import-outside-toplevel
  from resnet.evaluation import multi_label_report  # pylint: disable=import-outside-toplevel
  runner = E.Estimator(_scores_model_fn, RunConfig(model_dir=model_dir, train_batch_size=8, eval_batch_size=8,
                                                   iterations_per_loop=1, save_checkpoints_steps=1), {}, strategy)
  if strategy is None:
    runner.train(_scores_input, max_steps=1)
  report = multi_label_report.MultiLabelReport(['a', 'b', 'c'], {'weights': 'trained', 'tta': 'none'})
  return runner.evaluate(_scores_input, hooks=[report])


def test_the_exact_numbers_are_the_same_bits_on_one_replica_and_on_two(tmp_path):
  """The hook sees every replica's rows, so the numbers are exact on any number of replicas: sklearn's mAP of
  the raw logits (far beyond the histograms' [-16, 16]), and the same bits, thresholds included, on two."""
  one = _exact_eval(str(tmp_path))
  two = _exact_eval(str(tmp_path), tiny.two_replicas())
  assert one['num_examples'] == two['num_examples'] == 37
  assert one['ranking'] == two['ranking'] == 'exact'
  assert one['mAP'] == pytest.approx(SKLEARN_MAP, abs=1e-12)
  for key in ('mAP', 'micro_AP', 'micro_f1', 'macro_f1_tuned', 'label_thresholds', 'per_class',
              'classes_without_positives'):
    assert two[key] == one[key], key


def test_balanced_weights_with_label_smoothing_weigh_negatives_1_and_positives_w():
  """class_weights=balanced for a class at 0.3% (w = 332.3) with smoothing 0.1: a negative's term weighs exactly
  1 (it weighed 1 + (w - 1) e/2 = 17.6), a positive's w: the mean weight of a term is 2 (1 - r) (positives and
  negatives weigh alike in all), so the loss of outputs that say nothing is under twice the unweighted one (it was
  18.5 times)."""
  task = tasks.for_params({'task': 'multi_label', 'num_label_classes': 1, 'label_smoothing': 0.1,
                           'bce_target_threshold': None, 'class_weights': None})
  w = task.balanced_class_weights([3], 1000)[0]
  z = tf.constant([[-2.0], [1.5]])
  q = multi_label.targets(tf.constant([[0], [1]]), 0.1)
  weighted = multi_label.per_example_loss(z, q, None, tf.constant([w]), 0.1).numpy()
  plain = multi_label.per_example_loss(z, q, None).numpy()
  np.testing.assert_allclose(weighted, [plain[0], w * plain[1]], rtol=1e-6)
  # Mixup's half positive, half negative weighs halfway.
  mixed = 0.5 * q[0] + 0.5 * q[1]
  np.testing.assert_allclose(multi_label.per_example_loss(z[:1], mixed[None], None, tf.constant([w]), 0.1).numpy(),
                             (1 + (w - 1) * 0.5) * multi_label.per_example_loss(z[:1], mixed[None], None).numpy(),
                             rtol=1e-6)
  # Through the task (training): the same; the divergence guard's loss of logits 0 (ln 2 per term, weighted).
  params = {'task': 'multi_label', 'num_label_classes': 1, 'label_smoothing': 0.1, 'bce_target_threshold': None,
            'class_weights': [w], 'class_weight_normalization': 'batch_size'}
  weighted_task = tasks.for_params(params)
  np.testing.assert_allclose(weighted_task.per_example_loss(z, q, training=True).numpy(), weighted, rtol=1e-6)
  plain_task = tasks.for_params(dict(params, class_weights=None))
  ratio = weighted_task.uninformed_loss([3], 1000) / plain_task.uninformed_loss([3], 1000)
  assert ratio == pytest.approx(2 * (1 - 0.003))
