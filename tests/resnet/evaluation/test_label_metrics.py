"""Multi-label metrics from score histograms, against direct computations on the scores themselves."""
import numpy as np
import pytest

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


def test_binned_thresholds_are_the_middle_of_the_f1_plateau_and_edge_zero_is_served_as_zero():
  """The histograms' fallback: a class whose positives all score above logit 16 and negatives below 1.9 has an F1
  plateau from edge 573 (the first above 1.9's bin) to the top bin's edge 1023; its threshold is the plateau's
  middle edge (logit 8.94), not its highest (0.9999998839, which called a positive at logit 12 negative). Every
  score positive is edge 0: served as 0, which calls everything positive, as the report counted (not
  sigmoid(-16) = 1.1e-7, which calls the scores below logit -16 negative)."""
  logits = np.array([[17.0], [18.0], [30.0], [1.9], [-3.0], [-1.0]])
  truth = np.array([[1], [1], [1], [0], [0], [0]])
  hists = lm.histograms(logits, truth, 1)
  edge = lm.tuned_edges(hists[0], hists[1])[0]
  assert edge == (lm.score_bins([1.9])[0] + 1 + lm.BINS - 1) // 2 == 798
  threshold = lm.report(hists, ['a'])['label_thresholds'][0]
  assert threshold == pytest.approx(1 / (1 + np.exp(-(-16 + 798 / 32))))
  assert threshold < 1 / (1 + np.exp(-12.0))   # a held-out positive at logit 12 is called positive
  everything = lm.histograms(np.array([[-20.0], [-18.0], [3.0]]), np.array([[1], [1], [1]]), 1)
  assert lm.tuned_edges(everything[0], everything[1])[0] == 0
  assert lm.report(everything, ['a'])['label_thresholds'] == [0.0]


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


# ------------------------------------------------------------------------------------------------ exact
# sklearn 1.9.1's average_precision_score, computed once in a scratch venv outside the repo (the project does not
# import sklearn): the literals below. _exact_ap above agrees with it to 4e-16 on 2,000 random cases.
TIES_AND_RANGE = (np.array([1, 0, 1, 1, 0, 0, 1, 0, 1, 0, 1, 0], bool),
                  np.array([40, 40, 17.5, 17.25, 17.25, 3, 3, -20, -1e4, 1e4, 17.25, 16.0], np.float32),
                  0.496031746031746)
HARD_NEGATIVES_NEAR_17 = (np.r_[np.ones(8, bool), np.zeros(10, bool)],
                          np.array([17.2, 17.9, 18.5, 19.0, 21.0, 25.0, 16.9, 30.0,
                                    16.6, 16.8, 17.0, 17.1, 16.95, 10.0, 5.0, 0.0, -3.0, -8.0], np.float32),
                          0.9659090909090909)


@pytest.mark.parametrize('case', [TIES_AND_RANGE, HARD_NEGATIVES_NEAR_17])
def test_exact_ap_is_sklearns_on_the_raw_scores_ties_and_any_range(case):
  truth, scores, sklearn_ap = case
  for scale in (1.0, 8.0, 1000.0):   # the same ranking: the same AP (the histograms' falls: every logit > 16 ties)
    ap = lm.average_precision_exact((scores * scale)[:, None], truth[:, None])[0]
    assert ap == pytest.approx(sklearn_ap, abs=1e-12)
  report = lm.exact_report(scores[:, None] * 8, truth[:, None].astype(np.int32), ['c'])
  assert report['mAP'] == pytest.approx(sklearn_ap, abs=1e-12) and report['ranking'] == 'exact'


def test_exact_ap_equals_the_reference_on_random_scores_and_any_order_gives_the_same_bits():
  rng = np.random.default_rng()   # unseeded
  n, k = 300, 6
  truth = rng.uniform(size=(n, k)) < rng.uniform(0.02, 0.6, size=k)
  truth[0] = True
  logits = (rng.normal(size=(n, k)) * 10 ** rng.uniform(0, 3, size=k) + truth * 5).astype(np.float32)
  logits[:50, 1] = logits[0, 1]   # ties of positives and negatives
  logits = np.round(logits, 1)
  ap = lm.average_precision_exact(logits, truth)
  for c in range(k):
    assert ap[c] == pytest.approx(_exact_ap(logits[:, c], truth[:, c]), abs=1e-12)
  micro = lm.average_precision_exact(logits.reshape(-1, 1), truth.reshape(-1, 1))[0]
  assert micro == pytest.approx(_exact_ap(logits.ravel(), truth.ravel()), abs=1e-12)
  order = rng.permutation(n)
  assert lm.average_precision_exact(logits[order], truth[order]).tolist() == ap.tolist()


def _served(logits, thresholds):
  """What the served model decides: TensorFlow's float32 sigmoid >= the float32 thresholds."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  return tf.sigmoid(tf.constant(logits, tf.float32)).numpy() >= np.asarray(thresholds, np.float32)


def test_tuned_thresholds_sit_in_the_middle_of_the_best_gap_and_serve_what_the_report_counted():
  """Class a's validation positives all score above logit 16, its negatives below 2: the threshold is the sigmoid
  of the gap's middle logit (1.9 + 17) / 2, so a held-out positive at logit 12 is called positive
  (the histograms' highest edge, 0.9999998839, called it negative). Class b: F1 is best with every validation
  score positive, the lowest at logit -30: its threshold is just under that score's probability, and the served
  sigmoid calls all of them positive, as the report's recall 1.0 says. Class c has no positive: 0.5, named."""
  logits = np.array([[17.0, -30.0, 1.0], [18.0, -25.0, -2.0], [30.0, 2.0, 0.3], [1.9, 3.0, -1.0],
                     [-3.0, 4.0, -5.0], [-1.0, -20.0, 2.0]], np.float32)
  truth = np.array([[1, 1, 0], [1, 1, 0], [1, 0, 0], [0, 1, 0], [0, 1, 0], [0, 1, 0]], np.int32)
  report = lm.exact_report(logits, truth, ['a', 'b', 'c'])
  a, b, c = report['label_thresholds']
  assert a == pytest.approx(1 / (1 + np.exp(-(17.0 + 1.9) / 2)), rel=1e-6)
  assert _served(np.array([[12.0]]), [a])[0, 0]
  assert 0 < b < lm.probabilities(-30.0) and report['per_class']['b']['recall_tuned'] == 1.0
  assert c == lm.UNTUNED and report['classes_without_positives'] == ['c']
  # The served decisions are the ones the report counted, class by class.
  served = _served(logits, report['label_thresholds'])
  for i, name in enumerate('abc'):
    tp = np.sum(served[:, i] & (truth[:, i] > 0))
    f1 = 2 * tp / max(truth[:, i].sum() + served[:, i].sum(), 1)
    assert report['per_class'][name]['f1_tuned'] == pytest.approx(f1, abs=1e-6), name
  assert report['per_class']['a']['f1_tuned'] == 1.0


def test_tuned_thresholds_maximise_f1_over_what_a_served_threshold_can_decide():
  """Unseeded scores over a wide range, many above logit 13 where float32 sigmoids are a few steps apart or tie:
  each threshold's F1 is the best of the cuts a served threshold can make (between probabilities more than
  2 x MARGIN_ULPS float32 steps apart, or below all), and TensorFlow's sigmoid decides every score as the report
  counts."""
  rng = np.random.default_rng()
  n, k = 400, 4
  truth = rng.uniform(size=(n, k)) < [0.05, 0.2, 0.5, 0.3]
  truth[0] = True
  logits = (rng.normal(size=(n, k)) * [3, 6, 10, 20] + truth * [4, 8, 15, 25]).astype(np.float32)
  report = lm.exact_report(logits, truth.astype(np.int32), 'abcd')
  served = _served(logits, report['label_thresholds'])
  probabilities = lm.probabilities(logits)
  for c in range(k):
    levels = np.unique(probabilities[:, c])[::-1]
    apart = levels[:-1].view(np.int32).astype(np.int64) - levels[1:].view(np.int32) > 2 * lm.MARGIN_ULPS
    cuts = list(levels[:-1][apart]) + [levels[-1]]   # the lowest probability decided positive
    best = max(2 * np.sum(truth[:, c] & (probabilities[:, c] >= t)) / (truth[:, c].sum() +
                                                                        np.sum(probabilities[:, c] >= t))
               for t in cuts)
    tp = np.sum(served[:, c] & truth[:, c])
    f1 = 2 * tp / (truth[:, c].sum() + served[:, c].sum())
    assert report['per_class']['abcd'[c]]['f1_tuned'] == pytest.approx(f1, abs=1e-6)
    assert f1 == pytest.approx(best, abs=1e-12)
  assert report['macro_f1_tuned'] >= report['macro_f1']


def test_given_thresholds_report_the_decisions_at_them():
  rng = np.random.default_rng()
  logits = rng.normal(size=(50, 2)).astype(np.float32) * 4
  truth = (rng.uniform(size=(50, 2)) < 0.4).astype(np.int32)
  report = lm.exact_report(logits, truth, ['a', 'b'], thresholds=[0.3, 0.8])
  assert report['label_thresholds'] == pytest.approx([0.3, 0.8])
  chosen = lm.probabilities(logits) >= np.float32([0.3, 0.8])
  tp = np.sum(chosen & (truth > 0))
  assert report['micro_precision_tuned'] == pytest.approx(tp / chosen.sum())
