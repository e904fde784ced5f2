"""The eval report inside the compiled steps, on 1 device and 2 replicas, against hand counts: confusion matrix and
per-class numbers (padding and an empty replica batch included), the misclassified list joined with file names on
the host."""
import csv
import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from resnet.evaluation import eval_report
from resnet.training import resnet_model_fn
from tests.helpers import tiny

SIZE = 32
CLASSES = 3


# 10 examples; the last is padding (label -1). Global batch 4: with 2 replicas the third step gives replica 0
# examples 8-9 and replica 1 an empty batch.
EVAL_LABELS = np.array([0, 1, 2, 0, 1, 2, 2, 1, 0, -1], np.int32)
EVAL_IMAGES = tiny.varied_images(10, seed=5, size=SIZE)
EVAL_NAMES = [f'img_{i}.jpg' for i in range(10)]


def _eval_input(params):
  features = {'image': EVAL_IMAGES, 'filename': EVAL_NAMES}
  return tf.data.Dataset.from_tensor_slices((features, EVAL_LABELS)).batch(params['batch_size'])


@pytest.mark.slow
@pytest.mark.parametrize('replicas', [1, 2])
def test_eval_confusion_matrix_per_class_and_misclassified_equal_a_hand_count(tmp_path, replicas):
  params = tiny.resnet_params(tmp_path, num_label_classes=CLASSES, eval_batch_size=4, num_train_images=64,
                              max_misclassified_rows=100)
  keras.utils.set_random_seed(3)
  estimator = tiny.resnet_estimator(params, tiny.strategy(replicas))
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


