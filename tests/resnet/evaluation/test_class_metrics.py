"""Per-class numbers, the misclassified list, the confusion image, balanced class weights, the small-data advice and
model_dir/best/: the host-side pieces of the eval report, against hand counts (no model; fast)."""
import csv
import os

import numpy as np
import pytest

from resnet.evaluation import class_metrics
from resnet.evaluation import confusion_image

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


# ------------------------------------------------------------------------------------------------ best checkpoint
