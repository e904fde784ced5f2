"""resnet/evaluation/predictions.py: the labelled multi-label report predict writes beside its CSV, from the logits as
eval counts them."""
import json

import numpy as np
import pytest

from resnet.evaluation import label_metrics
from resnet.evaluation import predictions
from tests.helpers import tiny


def _params(tmp_path):
  (tmp_path / 'data').mkdir(exist_ok=True)
  (tmp_path / 'data' / 'labels.txt').write_text('a\nb\nc\n')
  return tiny.resnet_params(tmp_path / 'run', data_dir=str(tmp_path / 'data'), num_label_classes=3,
                            task='multi_label')


def _predict(tmp_path, labels, logits, thresholds, with_logits=True, served=None):
  """predict's CSV and report over these images' predictions, an eval padding row after each."""
  rows = predictions.MultiLabelRows(_params(tmp_path), ['a', 'b', 'c'], thresholds)
  served = 1 / (1 + np.exp(-logits.astype(np.float64))) if served is None else served
  outputs = []
  for i, (label, z, p) in enumerate(zip(labels, logits, served.astype(np.float32))):
    outputs.append({'filename': f'{i}.jpg'.encode(), 'label': label, 'probabilities': p,
                    **({'logits': z} if with_logits else {})})
    outputs.append({'filename': b'', 'label': np.full([3], -1), 'probabilities': p})   # padding
  output = str(tmp_path / 'predictions.csv')
  assert predictions.write(outputs, output, rows) == len(labels)
  with open(rows.labelled.write(output)) as f:
    return json.load(f)


def test_predicts_labelled_report_is_evals_for_the_same_logits(tmp_path):
  """Logits above 13, which float32 probabilities cannot tell apart (the old report rebuilt logits from them and
  its mAP differed from eval's): predict's report is eval's, at eval's thresholds the tuned numbers too."""
  rng = np.random.default_rng()   # unseeded
  labels = (rng.uniform(size=[40, 3]) < 0.4).astype(np.int64)
  labels[0] = 1
  logits = (rng.normal(size=[40, 3]) * 4 + labels * 14).astype(np.float32)
  evaluated = label_metrics.exact_report(logits, labels, ['a', 'b', 'c'])
  written = _predict(tmp_path, labels, logits, evaluated['label_thresholds'])
  assert written['num_examples'] == 40
  for key in ('mAP', 'micro_AP', 'micro_f1', 'macro_f1', 'micro_f1_tuned', 'macro_f1_tuned', 'label_thresholds',
              'per_class'):
    assert written[key] == evaluated[key], key


def test_the_report_decides_with_the_probabilities_the_csv_decides_with(tmp_path):
  """The logits rank, the served probabilities decide, as in the CSV beside the report: an image whose served
  probability (0.49) is below the threshold is a miss in both, whatever sigmoid(logit) (0.5025) would say."""
  labels = np.array([[1, 0, 0], [1, 0, 0]])
  logits = np.array([[0.01, -5, -5], [5, -5, -5]], np.float32)
  served = np.array([[0.49, 0.01, 0.01], [0.99, 0.01, 0.01]], np.float32)
  written = _predict(tmp_path, labels, logits, [0.5, 0.5, 0.5], served=served)
  assert written['micro_f1_tuned'] == pytest.approx(2 / 3)   # 1 hit, 1 miss; deciding by the logits: 1.0


def test_a_deployed_files_probabilities_are_its_scores(tmp_path):
  """--predict_tflite/onnx: the file serves probabilities only; they rank (ties and all) and decide."""
  labels = np.array([[1, 0, 1], [0, 1, 0], [1, 1, 0], [0, 0, 1]])
  logits = np.array([[20, -1, 3], [18, 2, -2], [3, 1, 0], [-2, -3, 4]], np.float32)
  written = _predict(tmp_path, labels, logits, [0.5, 0.5, 0.5], with_logits=False)
  served = (1 / (1 + np.exp(-logits.astype(np.float64)))).astype(np.float32)
  assert written['mAP'] == label_metrics.exact_report(served, labels, ['a', 'b', 'c'], [0.5] * 3,
                                                      served=served)['mAP']
  assert predictions.LabelledMultiLabel(_params(tmp_path), [0.5] * 3).write(str(tmp_path / 'none.csv')) is None
