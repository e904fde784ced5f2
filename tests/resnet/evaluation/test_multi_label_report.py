"""resnet/evaluation/multi_label_report.py: the multi-label eval hook's numbers from every image's logits, the
histograms' where it did not see them all, and the classes it could not tune named in the log, the results and
the thresholds record."""
import json
import types

import numpy as np
import pytest

from resnet.evaluation import label_metrics
from resnet.evaluation import multi_label_report

NAMES = ['a', 'b', 'c']
# Logits far beyond the histograms' [-16, 16], with ties: class a's positives and negatives all above logit 16
# (the histograms tie them all in one bin), class b ranges over +-4000, class c has no positive.
LOGITS = np.array([[40, 4000, 1], [17.5, -4000, 2], [17.25, 25, -3], [17.25, 25, 0.5], [16.5, 3, -1],
                   [30, -2, 4], [16.9, 2, 0], [17.1, -30, 1]], np.float32)
LABELS = np.array([[1, 1, 0], [1, 0, 0], [0, 1, 0], [1, 0, 0], [0, 1, 0], [1, 0, 0], [0, 0, 0], [0, 1, 0]],
                  np.int32)
# sklearn 1.9.1's average_precision_score of classes a and b, computed once in a scratch venv outside the repo.
SKLEARN_AP = {'a': 0.95, 'b': 0.7470238095238095}


def _estimator(tmp_path, chief=True):
  return types.SimpleNamespace(model_dir=str(tmp_path), global_step=types.SimpleNamespace(numpy=lambda: 7),
                               is_chief=chief)


def _evaluate(tmp_path, batches, sums_rows=None):
  """The hook over ``batches`` of (logits, labels) rows, the eval step's histograms over ``sums_rows`` (default:
  the same rows, as one worker sees)."""
  hook = multi_label_report.MultiLabelReport(NAMES, {'weights': 'trained', 'tta': 'none'})
  hook.begin(_estimator(tmp_path), 'eval')
  for logits, labels in batches:
    hook.after_batch({'logits': logits, 'label': labels})
  rows = sums_rows or batches
  hists = sum(label_metrics.histograms(l, y, len(NAMES)) for l, y in rows)
  return hook.end({}, {label_metrics.HISTOGRAMS: hists}).results


def test_eval_reports_sklearns_ap_on_the_raw_logits_whatever_their_range(tmp_path, caplog):
  padding = (np.zeros([3, 3], np.float32), -np.ones([3, 3], np.int32))
  results = _evaluate(tmp_path, [(LOGITS[:5], LABELS[:5]), (LOGITS[5:], LABELS[5:]), padding])
  assert results['ranking'] == 'exact'
  assert results['per_class']['a']['AP'] == round(SKLEARN_AP['a'], 6)
  assert results['per_class']['b']['AP'] == round(SKLEARN_AP['b'], 6)
  assert results['mAP'] == pytest.approx(np.mean(list(SKLEARN_AP.values())), abs=1e-12)
  # The histograms' number for the same logits: every logit above 16 tied.
  binned = label_metrics.report(label_metrics.histograms(LOGITS, LABELS, 3), NAMES)
  assert abs(binned['mAP'] - results['mAP']) > 0.05


def test_classes_without_positives_are_named_in_the_log_the_results_and_the_thresholds_record(tmp_path, monkeypatch):
  lines = []
  monkeypatch.setattr(multi_label_report.logging, 'warning', lambda message, *args: lines.append(message % args))
  results = _evaluate(tmp_path, [(LOGITS, LABELS)])
  assert results['classes_without_positives'] == ['c'] and results['label_thresholds'][2] == label_metrics.UNTUNED
  assert any('1 classes have no positive in this split' in line and 'decide at 0.5 (c)' in line for line in lines)
  with open(tmp_path / multi_label_report.THRESHOLDS_FILE) as f:
    record = json.load(f)['steps']['7']
  assert record['untuned']['classes'] == ['c'] and record['untuned']['threshold'] == label_metrics.UNTUNED
  thresholds, source, _ = multi_label_report.decision_thresholds(str(tmp_path), 7, 3)
  assert thresholds == results['label_thresholds'] and 'without validation positives at 0.5, untuned: c' in source


def test_a_worker_that_saw_a_share_of_the_examples_reports_the_histograms_and_says_so(tmp_path, monkeypatch):
  lines = []
  monkeypatch.setattr(multi_label_report.logging, 'warning', lambda message, *args: lines.append(message % args))
  mine, theirs = (LOGITS[:5], LABELS[:5]), (LOGITS[5:], LABELS[5:])
  results = _evaluate(tmp_path, [mine], sums_rows=[mine, theirs])
  assert results['ranking'] == 'binned'
  assert results['mAP'] == label_metrics.report(label_metrics.histograms(LOGITS, LABELS, 3), NAMES)['mAP']
  assert any('this worker evaluated 5 of the 8 examples' in line for line in lines)
