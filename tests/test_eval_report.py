"""The eval report and class weights inside the compiled steps, on 1 device and 2 replicas, against hand counts:
confusion matrix and per-class numbers (padding and an empty replica batch included), the misclassified list
joined with file names on the host, the class-weighted training loss, and early stopping on model_dir/best/."""
import csv
import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from resnet.evaluation import eval_report
from resnet.training import mixing
from resnet.training import resnet_model_fn
from resnet.estimator import best_checkpoint
from tests.helpers import tiny

SIZE = 32
CLASSES = 3


def _strategy(replicas):
  return tiny.two_replicas() if replicas == 2 else None


def _images(n, seed):
  # Different brightness and contrast per image, so that an untrained net does not give every image one class.
  base = tf.random.stateless_uniform([n, SIZE, SIZE, 3], seed=[seed, 0], maxval=1.0)
  scale = tf.random.stateless_uniform([n, 1, 1, 1], seed=[seed, 1], minval=20.0, maxval=255.0)
  return (base * scale).numpy()


# 10 examples; the last is padding (label -1). Global batch 4: with 2 replicas the third step gives replica 0
# examples 8-9 and replica 1 an empty batch.
EVAL_LABELS = np.array([0, 1, 2, 0, 1, 2, 2, 1, 0, -1], np.int32)
EVAL_IMAGES = _images(10, seed=5)
EVAL_NAMES = [f'img_{i}.jpg' for i in range(10)]


def _eval_input(params):
  features = {'image': EVAL_IMAGES, 'filename': EVAL_NAMES}
  return tf.data.Dataset.from_tensor_slices((features, EVAL_LABELS)).batch(params['batch_size'])


@pytest.mark.parametrize('replicas', [1, 2])
def test_eval_confusion_matrix_per_class_and_misclassified_equal_a_hand_count(tmp_path, replicas):
  params = tiny.resnet_params(tmp_path, num_label_classes=CLASSES, eval_batch_size=4, num_train_images=64,
                              max_misclassified_rows=100)
  keras.utils.set_random_seed(3)
  estimator = tiny.resnet_estimator(params, _strategy(replicas))
  estimator.build('eval')
  estimator.save()
  names = ['ant', 'bee', 'cat']
  results = estimator.evaluate(_eval_input, hooks=[eval_report.ClassificationReport(names, False, 100)])

  model = estimator.scope.get(resnet_model_fn.MODEL)
  probabilities = tf.nn.softmax(model(EVAL_IMAGES, training=False)).numpy()
  predicted = probabilities.argmax(-1)
  real = EVAL_LABELS >= 0
  assert len(set(predicted[real])) > 1, 'the untrained net predicts one class: the test would be weak'
  matrix = np.zeros((CLASSES, CLASSES), int)
  for label, guess in zip(EVAL_LABELS[real], predicted[real]):
    matrix[label, guess] += 1
  assert results['confusion_matrix'] == matrix.tolist()
  assert results['num_examples'] == 9 == np.sum(results['confusion_matrix'])
  assert results['top_1_accuracy'] == pytest.approx(np.trace(matrix) / 9)
  for c, name in enumerate(names):
    tp, support, as_c = matrix[c, c], matrix[c].sum(), matrix[:, c].sum()
    precision = tp / as_c if as_c else 0.0
    recall = tp / support
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    assert results['per_class'][name] == {'precision': pytest.approx(precision), 'recall': pytest.approx(recall),
                                          'f1': pytest.approx(f1), 'support': support}
  assert results['macro_f1'] == pytest.approx(np.mean([results['per_class'][n]['f1'] for n in names]))

  wrong = {EVAL_NAMES[i]: i for i in np.flatnonzero(real & (predicted != EVAL_LABELS))}
  rows = list(csv.DictReader(open(os.path.join(tmp_path, 'eval_misclassified.csv'))))
  assert {r['image'] for r in rows} == set(wrong) and results['misclassified_examples'] == len(wrong)
  for row in rows:
    i = wrong[row['image']]
    assert (int(row['true_label']), int(row['predicted_label'])) == (EVAL_LABELS[i], predicted[i])
    assert row['true_class'] == names[EVAL_LABELS[i]]
    assert float(row['probability']) == pytest.approx(probabilities[i].max(), abs=1e-5)
  on_disk = json.load(open(os.path.join(tmp_path, 'eval_results.json')))
  assert on_disk['per_class'] == results['per_class'] and on_disk['confusion_matrix'] == matrix.tolist()


TRAIN_LABELS = np.array([0, 1, 2, 0, 1, 2, 0, 0], np.int32)
TRAIN_IMAGES = _images(8, seed=9)
CLASS_WEIGHTS = [1.0, 3.0, 0.5]


def _train_input(params):
  return tf.data.Dataset.from_tensor_slices((TRAIN_IMAGES, TRAIN_LABELS)).repeat().batch(params['batch_size'])


@pytest.mark.parametrize('replicas', [1, 2])
def test_class_weighted_loss_equals_the_hand_computed_one(tmp_path, replicas):
  params = tiny.resnet_params(tmp_path, num_label_classes=CLASSES, train_batch_size=8, num_train_images=64,
                              weight_decay=0.0, class_weights=CLASS_WEIGHTS, train_steps=1)
  keras.utils.set_random_seed(4)
  estimator = tiny.resnet_estimator(params, _strategy(replicas))
  estimator.build('train')
  model = estimator.scope.get(resnet_model_fn.MODEL)
  # Each replica normalises its own examples with its batch's statistics: replica r gets examples 4r..4r+3.
  parts = np.split(np.arange(8), replicas)
  logits = np.concatenate([model(TRAIN_IMAGES[p], training=True).numpy() for p in parts])
  losses = keras.losses.sparse_categorical_crossentropy(TRAIN_LABELS, logits, from_logits=True).numpy()
  expected = float(np.sum(np.take(CLASS_WEIGHTS, TRAIN_LABELS) * losses) / 8)
  unweighted = float(np.mean(losses))
  assert abs(expected - unweighted) > 1e-3 * unweighted
  loss = estimator.train(_train_input, max_steps=1)['loss']
  assert loss == pytest.approx(expected, rel=1e-5)


def test_early_stopping_after_evals_without_improvement_and_a_resumed_run_keeps_the_best(tmp_path):
  # No learning (lr 0) and frozen batch-norm statistics: the accuracy stays the same, so never improves.
  params = tiny.resnet_params(tmp_path, num_label_classes=CLASSES, eval_batch_size=4, num_train_images=64,
                              train_batch_size=4, base_learning_rate=0.0, bn_momentum=0.999999, train_steps=6)

  def run():
    estimator = tiny.resnet_estimator(params)
    best = best_checkpoint.BestCheckpoint(str(tmp_path), 'top_1_accuracy')
    estimator.train_and_evaluate(_train_input, _eval_input, max_steps=6, steps_per_eval=1, best=best,
                                 early_stopping_evals=2)
    return estimator, best

  estimator, best = run()
  assert int(estimator.global_step.numpy()) == 3                 # evals at 1 (best), 2 and 3 (no improvement)
  assert best.checkpoint_path == os.path.join(str(tmp_path), 'best', 'model.ckpt-1')
  assert best.evals_without_improvement == 2
  resumed, best_again = run()                                     # the same command again: stops at once
  assert int(resumed.global_step.numpy()) == 3 and best_again.value == best.value


def test_class_weights_with_mixup_weigh_each_source_of_a_mixed_example(tmp_path):
  """Each mixed example's loss is lam * w_a * CE_a + (1 - lam) * w_b * CE_b: the weighted loss of both sources
  (not their mixed weight times the mixed cross-entropy)."""
  params = tiny.resnet_params(tmp_path, num_label_classes=CLASSES, train_batch_size=8, num_train_images=64,
                              weight_decay=0.0, class_weights=CLASS_WEIGHTS, train_steps=1, mixup_alpha=1.0,
                              random_seed=5)
  keras.utils.set_random_seed(4)
  estimator = tiny.resnet_estimator(params)
  estimator.build('train')
  model = estimator.scope.get(resnet_model_fn.MODEL)
  one_hot = tf.one_hot(TRAIN_LABELS, CLASSES)
  images, mixed = mixing.mix(tf.constant(TRAIN_IMAGES), one_hot, mixing.MixConfig(mixup_alpha=1.0),
                             mixing.mix_seed(tf.constant(0, tf.int64), 5))
  sources = TRAIN_LABELS[::-1]
  i = int(np.flatnonzero(TRAIN_LABELS != sources)[0])
  lam = float(mixed[i, TRAIN_LABELS[i]])
  assert 0.05 < lam < 0.95, lam   # a real mix, or the test would not tell the two formulas apart
  logits = model(images, training=True)
  ce = lambda labels: keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True).numpy()
  weights = np.array(CLASS_WEIGHTS)
  expected = float(np.sum(lam * weights[TRAIN_LABELS] * ce(TRAIN_LABELS)
                          + (1 - lam) * weights[sources] * ce(sources)) / 8)
  mixed_weight_times_mixed_loss = float(np.sum(
      (lam * weights[TRAIN_LABELS] + (1 - lam) * weights[sources])
      * (lam * ce(TRAIN_LABELS) + (1 - lam) * ce(sources))) / 8)
  assert abs(mixed_weight_times_mixed_loss - expected) > 1e-3 * expected
  loss = estimator.train(_train_input, max_steps=1)['loss']
  assert loss == pytest.approx(expected, rel=1e-5)
