"""resnet/task/single_label.py: the single-label task's loss baseline (what the divergence guard compares with),
its balanced class weights, and where its class weights go (the targets)."""
import math

import numpy as np
import pytest
import tensorflow as tf

from resnet.task import single_label
from resnet.task import tasks


def _chance(params, counts, images=None):
  """The divergence guard's baseline for a task's params and training counts of each class (of ``images``)."""
  return tasks.for_params(params).chance_loss(counts, images if images is not None else sum(counts or ()))


def test_a_uniform_guess_scores_ln_k_times_the_frequency_weighted_class_weight():
  """Binary, 1% positives, weights [1, 100]: ln 2 x (0.99 + 1.00) = 1.38 (the old guard assumed 35, so a weighted
  run could explode unnoticed); 'balanced' on a 100-class long tail: ln 100 = 4.6 (the old guard assumed 22)."""
  base = dict(num_label_classes=2, class_weights=[1.0, 100.0], class_weight_normalization='batch_size')
  chance, how = _chance(base, [99, 1])
  assert chance == pytest.approx(math.log(2) * 1.99) and 'mean class weight 1.99' in how
  assert _chance({**base, 'class_weight_normalization': 'weight_sum'}, [99, 1])[0] == \
      pytest.approx(math.log(2))
  counts = [1000 // (c + 1) for c in range(100)]
  balanced = [sum(counts) / (100 * n) for n in counts]
  params = dict(num_label_classes=100, class_weights=balanced, class_weight_normalization='batch_size')
  assert _chance(params, counts)[0] == pytest.approx(math.log(100))
  assert _chance(dict(params, class_weights=None), None)[0] == pytest.approx(math.log(100))
  # Without training counts (synthetic labels are uniform): the plain mean.
  assert _chance(base, None)[0] == pytest.approx(math.log(2) * 50.5)


def test_under_binary_cross_entropy_a_uniform_guess_is_every_sigmoid_at_1_over_k_where_the_head_starts(tmp_path):
  """Not ln 2 (every sigmoid at 0.5): that is ~90 times a healthy 1000-class BCE loss, and the guard would miss
  an explosion; nor ln K, the softmax loss's."""
  from resnet.model import tf1_names  # pylint: disable=import-outside-toplevel
  from resnet.training import resnet_model_fn  # pylint: disable=import-outside-toplevel
  from tests.helpers import tiny  # pylint: disable=import-outside-toplevel
  bce = dict(num_label_classes=1000, class_weights=None, class_weight_normalization='batch_size',
             loss='binary_cross_entropy', bce_target_threshold=None)
  chance, how = _chance(bce, None)
  assert chance == pytest.approx((1 + math.log(1000)) / 1000, rel=1e-3) and 'sigmoids at 1/1000' in how
  # An untrained head's logits are the prior's, and score it on a one-hot target.
  params = tiny.resnet_params(tmp_path, num_label_classes=4, loss='binary_cross_entropy')
  bias = tf1_names.tf1_variable_map(resnet_model_fn.build_model(params))['dense/bias'].numpy()
  assert bias == pytest.approx([-math.log(3)] * 4)
  loss = tasks.for_params(params).per_example_loss(tf.constant([bias]), tf.constant([[0.0, 1.0, 0.0, 0.0]]))
  assert float(loss[0]) == pytest.approx(_chance(dict(bce, num_label_classes=4), None)[0])
  softmax = tiny.resnet_params(tmp_path, num_label_classes=4)
  assert not tf1_names.tf1_variable_map(resnet_model_fn.build_model(softmax))['dense/bias'].numpy().any()
  weighted = dict(bce, num_label_classes=2, class_weights=[1.0, 100.0])
  assert _chance(weighted, [99, 1])[0] == pytest.approx(math.log(2) * 1.99)


def test_balanced_weights_make_every_class_weigh_as_much_and_a_class_without_images_keeps_1():
  task = tasks.for_params({'task': None, 'num_label_classes': 4})
  weights = task.balanced_class_weights([0, 90, 10, 20], 120)
  assert weights == pytest.approx([1.0, 120 / 270, 120 / 30, 120 / 60], rel=1e-5)
  counts = np.array([0, 90, 10, 20])
  assert np.sum(counts * np.array(weights))/ 120 == pytest.approx(1.0, rel=1e-5)   # each class weighs 1/3


def test_training_targets_carry_the_class_weights_and_eval_targets_do_not():
  params = {'task': 'single_label', 'num_label_classes': 3, 'label_smoothing': 0.0, 'class_weights': [1.0, 2.0, 5.0]}
  task = tasks.for_params(params)
  labels = tf.constant([2, 0])
  np.testing.assert_allclose(task.targets(labels, training=True).numpy(), [[0, 0, 5], [1, 0, 0]])
  np.testing.assert_allclose(task.targets(labels).numpy(), [[0, 0, 1], [1, 0, 0]])
  np.testing.assert_allclose(task.example_weights(task.targets(labels, training=True)).numpy(), [5, 1])


def test_label_smoothing_as_keras():
  smoothed = single_label.smoothed_one_hot(tf.constant([2, -1]), 5, 0.1).numpy()
  np.testing.assert_allclose(smoothed[0], [0.02, 0.02, 0.92, 0.02, 0.02], rtol=1e-6)
  assert smoothed[1].argmax() == 0  # padding labels (-1) count as class 0; their weight is 0 anyway
