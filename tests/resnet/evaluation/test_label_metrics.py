"""Multi-label metrics from score histograms, against direct computations on the scores themselves."""
import numpy as np

from resnet.evaluation import label_metrics as lm


def _logit(p):
  p = np.asarray(p, np.float64)
  return np.log(p / (1 - p))


def _exact_ap(scores: np.ndarray, truth: np.ndarray) -> float:
  """sklearn's average_precision_score: sum over distinct thresholds (descending) of recall gained x precision."""
  ap, seen_recall = 0.0, 0.0
  for t in np.unique(scores)[::-1]:
    chosen = scores >= t
    tp = np.sum(truth & chosen)
    recall = tp / truth.sum()
    ap += (recall - seen_recall) * tp / chosen.sum()
    seen_recall = recall
  return ap


def _binned(logits):
  """Scores as the histograms see them: each logit rounded down to its bin's edge."""
  return lm.edge_logits()[lm.score_bins(logits)]


def test_average_precision_is_sklearns_on_its_documented_example():
  # sklearn's docstring example: y_true [0, 0, 1, 1], scores [0.1, 0.4, 0.35, 0.8] -> AP 0.8333.
  hists = lm.histograms(_logit([[0.1], [0.4], [0.35], [0.8]]), np.array([[0], [0], [1], [1]]), 1)
  np.testing.assert_allclose(lm.average_precision(hists[0], hists[1]), [0.8333333], atol=1e-6)


def test_ap_f1_and_counts_equal_the_direct_computation_on_binned_scores_ties_included():
  rng = np.random.default_rng(0)
  n, k = 400, 5
  truth = rng.uniform(size=(n, k)) < [0.05, 0.2, 0.5, 0.3, 0.1]
  logits = rng.normal(size=(n, k)) * 2 + truth * 1.5
  logits[:40, 0] = 3.0   # ties between positives and negatives in one bin
  labels = truth.astype(np.int32)
  labels = np.concatenate([labels, -np.ones((7, k), np.int32)])   # padding rows count nowhere
  logits = np.concatenate([logits, rng.normal(size=(7, k))])
  hists = lm.histograms(logits, labels, k)
  assert hists.sum() == n * k
  binned = _binned(logits[:n])
  ap = lm.average_precision(hists[0], hists[1])
  for c in range(k):
    np.testing.assert_allclose(ap[c], _exact_ap(binned[:, c], truth[:, c]), rtol=1e-9)
  np.testing.assert_allclose(lm.average_precision(hists[0].sum(0), hists[1].sum(0)),
                             _exact_ap(binned.ravel(), truth.ravel()), rtol=1e-9)
  # At 0.5 (logit 0, an edge): exact for the raw scores, not only the binned ones.
  decided = logits[:n] >= 0
  at_half = lm.decisions(hists[0], hists[1], [lm.HALF] * k)
  tp, fp, fn = (np.sum(truth & decided), np.sum(~truth & decided), np.sum(truth & ~decided))
  np.testing.assert_allclose(at_half['micro_precision'], tp / (tp + fp))
  np.testing.assert_allclose(at_half['micro_recall'], tp / (tp + fn))
  f1 = [2 * np.sum(truth[:, c] & decided[:, c]) / (truth[:, c].sum() + decided[:, c].sum()) for c in range(k)]
  np.testing.assert_allclose(at_half['macro_f1'], np.mean(f1))


def test_tuned_thresholds_maximise_each_classs_f1_and_predict_reproduces_them():
  rng = np.random.default_rng(1)
  n, k = 300, 3
  truth = rng.uniform(size=(n, k)) < 0.2
  logits = rng.normal(size=(n, k)) + truth * 1.2 - 1.0
  hists = lm.histograms(logits, truth.astype(np.int32), k)
  report = lm.report(hists, ['a', 'b', 'c'])
  for c, threshold in enumerate(report['label_thresholds']):
    probabilities = 1 / (1 + np.exp(-logits[:, c]))
    best = max(2 * np.sum(truth[:, c] & (probabilities >= t)) / (truth[:, c].sum() + np.sum(probabilities >= t))
               for t in lm.edge_probabilities())
    chosen = probabilities >= threshold
    f1 = 2 * np.sum(truth[:, c] & chosen) / (truth[:, c].sum() + chosen.sum())
    np.testing.assert_allclose(f1, best)
    np.testing.assert_allclose(report['per_class'][['a', 'b', 'c'][c]]['f1_tuned'], best, atol=1e-6)
  assert report['macro_f1_tuned'] >= report['macro_f1']
  # Predict on labelled data hands the recorded thresholds back: the same edges, the same numbers.
  again = lm.report(hists, ['a', 'b', 'c'], thresholds=report['label_thresholds'])
  for key in ('micro_f1_tuned', 'macro_f1_tuned', 'micro_precision_tuned', 'label_thresholds'):
    assert again[key] == report[key]


def test_a_class_without_positives_has_no_ap_is_left_out_of_map_and_keeps_half():
  truth = np.array([[1, 0], [0, 0], [1, 0], [0, 0]])
  logits = np.array([[2.0, -1.0], [-2.0, 0.5], [1.0, -3.0], [0.5, -1.0]])
  report = lm.report(lm.histograms(logits, truth, 2), ['seen', 'never'])
  assert report['per_class']['never']['AP'] is None
  assert report['mAP'] == report['per_class']['seen']['AP'] == 1.0
  assert report['classes_with_positives'] == 1
  assert report['label_thresholds'][1] == 0.5
  assert report['micro_precision'] == 2 / 4   # 'never' decided positive once at 0.5, 'seen' 3 times (2 right)


def test_pr_curve_is_tensorboards_six_rows_from_all_scores_to_none():
  hists = lm.histograms(_logit([[0.1], [0.4], [0.35], [0.8]]), np.array([[0], [0], [1], [1]]), 1)
  curve = lm.pr_curve(hists[0][0], hists[1][0])
  assert curve.shape == (6, 129)
  tp, fp, tn, fn, precision, recall = curve
  assert (tp[0], fp[0], tn[0], fn[0], recall[0]) == (2, 2, 0, 0, 1.0)
  assert (tp[-1], fp[-1], recall[-1]) == (0, 0, 0.0)
  np.testing.assert_allclose(tp + fn, 2)
