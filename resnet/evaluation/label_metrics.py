"""Multi-label metrics: mAP, micro AP, precision / recall / F1 at 0.5 and at per-class thresholds tuned for F1, and
precision-recall curves; from the scores themselves (``exact_report``), or from score histograms (``report``).

Exact, from the scores (what eval reports where its hook saw every score, and predict on labelled data): average
precision is sklearn's ``average_precision_score`` on the raw scores (the sum over distinct scores, descending, of
the recall gained times the precision there; equal scores tied), whatever their range, and it depends only on the
set of (score, label) pairs: the same bits on one replica or several, in any order. Decisions are what is served:
``probability >= threshold`` on float32 probabilities (``probabilities``, the sigmoid rounded to float32).
Thresholds are tuned among the decisions a served float32 sigmoid can make (``tuned_thresholds``): each class's
F1-best cut between two neighbouring scores, its threshold in the middle of that gap (the mean of the two logits)
and at least MARGIN_ULPS float32 steps from both, so that a served sigmoid a few ulps off (TensorFlow's, XLA's
and numpy's differ by up to 6) decides each validation score as the report counted it; scores closer than that
(the sigmoid saturates above logit ~16) cannot be told apart by any served threshold and are one level here.

From histograms (the fallback where the hook did not see every score: another worker evaluated some): the eval
step sums, per class, how many positives and negatives fell in each of BINS logit bins (``score_bins``: 1/32 of a
logit wide over [-16, 16], the ends open), exactly over replicas, workers and batches; every number is then exact
for scores rounded down to their bin's edge, with the bins' limits: scores beyond logit 16 all tie.
"""
from typing import Any, Dict, Optional, Sequence

import numpy as np

BINS = 1024
LOGIT_LIMIT = 16.0
WIDTH = 2 * LOGIT_LIMIT / BINS
HALF = BINS // 2   # the edge at logit 0: probability 0.5
UNTUNED = 0.5   # the threshold of a class without positives where thresholds are tuned: no F1 to tune on
HISTOGRAMS = 'label_score_histograms'   # the eval sum of the histograms: [2, K, BINS]


def score_bins(logits: np.ndarray) -> np.ndarray:
  """Each logit's bin (numpy; the eval step computes the same in TensorFlow)."""
  return np.clip(np.floor((np.asarray(logits, np.float64) + LOGIT_LIMIT) / WIDTH), 0, BINS - 1).astype(np.int64)


def edge_logits() -> np.ndarray:
  """The logit of each decision edge j = 0..BINS: a score is positive at edge j when its bin is >= j."""
  return -LOGIT_LIMIT + WIDTH * np.arange(BINS + 1)


def edge_probabilities() -> np.ndarray:
  """The probability served for each edge: edge 0 (every score, those clipped below logit -16 too) is 0."""
  probabilities = 1.0 / (1.0 + np.exp(-edge_logits()))
  probabilities[0] = 0.0
  return probabilities


def histograms(logits: np.ndarray, labels: np.ndarray, num_classes: int) -> np.ndarray:
  """[2, K, BINS]: positives, negatives per class and bin, from scores [N, K] and multi-hot labels [N, K] (rows of
  -1, padding, count nowhere). What the eval step sums, in numpy (predict's labelled report)."""
  labels = np.asarray(labels)
  valid = labels[:, 0] >= 0 if labels.size else np.zeros([0], bool)
  bins = score_bins(logits)[valid]
  truth = labels[valid] > 0
  counts = np.zeros([2, num_classes, BINS])
  classes = np.broadcast_to(np.arange(num_classes), bins.shape)
  np.add.at(counts[0], (classes[truth], bins[truth]), 1)
  np.add.at(counts[1], (classes[~truth], bins[~truth]), 1)
  return counts


def at_edges(hist: np.ndarray) -> np.ndarray:
  """[..., BINS + 1]: how many scores are at or above each edge (a reversed cumulative sum)."""
  above = np.cumsum(hist[..., ::-1], axis=-1)[..., ::-1]
  return np.concatenate([above, np.zeros(hist.shape[:-1] + (1,))], axis=-1)


def average_precision(positives: np.ndarray, negatives: np.ndarray) -> np.ndarray:
  """AP of each row of histograms [..., BINS]; NaN for a row without positives."""
  tp, fp = at_edges(positives), at_edges(negatives)
  total = tp[..., :1]
  with np.errstate(invalid='ignore', divide='ignore'):
    recall = tp / total
    precision = np.where(tp + fp > 0, tp / np.maximum(tp + fp, 1), 1.0)
  gained = recall[..., :-1] - recall[..., 1:]   # the recall edge j adds over edge j + 1
  return np.sum(gained * precision[..., :-1], axis=-1)


def _f1(tp, fp, fn):
  with np.errstate(invalid='ignore', divide='ignore'):
    precision = np.where(tp + fp > 0, tp / np.maximum(tp + fp, 1), 0.0)
    recall = np.where(tp + fn > 0, tp / np.maximum(tp + fn, 1), 0.0)
    f1 = np.where(precision + recall > 0, 2 * precision * recall / np.maximum(precision + recall, 1e-12), 0.0)
  return precision, recall, f1


def tuned_edges(positives: np.ndarray, negatives: np.ndarray) -> np.ndarray:
  """Per class, the middle edge of its F1-best plateau (the highest run of edges with the best F1: the same
  decisions, no score between them); HALF for a class without positives."""
  tp, fp = at_edges(positives), at_edges(negatives)
  fn = tp[:, :1] - tp
  _, _, f1 = _f1(tp, fp, fn)
  edges = np.full(f1.shape[0], HALF)
  for c in np.flatnonzero(tp[:, 0] > 0):
    top = f1.shape[1] - 1 - int(np.argmax(f1[c, ::-1]))
    low = top
    while low > 0 and f1[c, low - 1] == f1[c, top]:
      low -= 1
    edges[c] = (low + top) // 2
  return edges


def decisions(positives: np.ndarray, negatives: np.ndarray, edges: Sequence[int]) -> Dict[str, Any]:
  """Precision, recall and F1 of deciding 'positive' at each class's edge: micro (counts pooled) and macro (the
  mean over classes with positives), and per class."""
  tp_all, fp_all = at_edges(positives), at_edges(negatives)
  rows = np.arange(len(edges))
  tp, fp = tp_all[rows, edges], fp_all[rows, edges]
  return _decision_numbers(tp, fp, tp_all[:, 0] - tp)


def _decision_numbers(tp: np.ndarray, fp: np.ndarray, fn: np.ndarray) -> Dict[str, Any]:
  """decisions' numbers from each class's counts of true positives, false positives and false negatives."""
  precision, recall, f1 = _f1(tp, fp, fn)
  micro = _f1(tp.sum(), fp.sum(), fn.sum())
  present = tp + fn > 0
  mean = lambda v: float(np.mean(v[present])) if present.any() else float('nan')
  return {'micro_precision': float(micro[0]), 'micro_recall': float(micro[1]), 'micro_f1': float(micro[2]),
          'macro_precision': mean(precision), 'macro_recall': mean(recall), 'macro_f1': mean(f1),
          'per_class': {'precision': precision, 'recall': recall, 'f1': f1}}


def report(hists: np.ndarray, class_names: Sequence[str]) -> Dict[str, Any]:
  """``exact_report``'s numbers from [2, K, BINS] histograms (the fallback where the scores were not all seen):
  exact for scores rounded down to their bin's edge; thresholds tuned at edges (``tuned_edges``)."""
  positives, negatives = hists[0], hists[1]
  num_classes = positives.shape[0]
  edges = tuned_edges(positives, negatives)
  return _assemble(class_names, average_precision(positives, negatives),
                   float(average_precision(positives.sum(axis=0), negatives.sum(axis=0))),
                   positives.sum(axis=1), decisions(positives, negatives, [HALF] * num_classes),
                   decisions(positives, negatives, edges), edge_probabilities()[edges], 'binned')


def exact_report(scores: np.ndarray, labels: np.ndarray, class_names: Sequence[str],
                 thresholds: Optional[Sequence[float]] = None, served: Optional[np.ndarray] = None
                 ) -> Dict[str, Any]:
  """Every number users of multi-label models read, from each image's scores [N, K] (logits) and multi-hot labels
  [N, K] (padding rows of -1 are left out): ``mAP`` (over classes with positives) and ``micro_AP``, sklearn's on the
  raw scores; micro/macro precision, recall, F1 at 0.5 and (``_tuned``) at each class's threshold;
  ``label_thresholds`` (what predict and export decide with: ``tuned_thresholds`` of these scores, or
  ``thresholds`` where given, as predict on labelled data gives the run's); ``classes_without_positives``; and
  ``per_class``. ``served``: the probabilities decisions compare (default ``probabilities(scores)``; a deployed
  file's own, where its probabilities are also its scores)."""
  scores, truth = _valid(scores, labels)
  served = probabilities(scores) if served is None else np.asarray(served, np.float32)[_valid_rows(labels)]
  positives = truth.sum(axis=0)
  if thresholds is None:
    thresholds = tuned_thresholds(scores, truth)
  limits = np.asarray(thresholds, np.float32)
  return _assemble(class_names, average_precision_exact(scores, truth),
                   float(average_precision_exact(scores.reshape(-1, 1), truth.reshape(-1, 1))[0]), positives,
                   _decided(served, truth, np.full(truth.shape[1], 0.5, np.float32)),
                   _decided(served, truth, limits), limits, 'exact')


def _assemble(class_names: Sequence[str], ap: np.ndarray, micro_ap: float, positives: np.ndarray,
              at_half: Dict[str, Any], tuned: Dict[str, Any], thresholds: np.ndarray, scores: str
              ) -> Dict[str, Any]:
  """The report's one layout, whichever way its numbers were counted (``scores``: 'exact' or 'binned')."""
  num_classes = len(ap)
  names = list(class_names) if len(class_names) == num_classes else [str(i) for i in range(num_classes)]
  present = positives > 0
  out: Dict[str, Any] = {
      'mAP': float(np.mean(ap[present])) if present.any() else float('nan'),
      'micro_AP': micro_ap,
      'classes_with_positives': int(present.sum()),
      'classes_without_positives': [names[i] for i in np.flatnonzero(~present)],
      'ranking': scores,
  }
  out.update({k: v for k, v in at_half.items() if k != 'per_class'})
  out.update({f'{k}_tuned': v for k, v in tuned.items() if k != 'per_class'})
  out['label_thresholds'] = [float(t) for t in thresholds]   # unrounded: the float32 values served
  per_class: Dict[str, Dict[str, Any]] = {}
  for i, name in enumerate(names):
    per_class[name] = {
        'AP': None if not present[i] else round(float(ap[i]), 6), 'positives': int(positives[i]),
        'threshold': float(thresholds[i]),
        **{f'{k}_at_0.5': round(float(at_half['per_class'][k][i]), 6) for k in ('precision', 'recall', 'f1')},
        **{f'{k}_tuned': round(float(tuned['per_class'][k][i]), 6) for k in ('precision', 'recall', 'f1')}}
  out['per_class'] = per_class
  return out


# ----------------------------------------------------------------------------------------------- exact
MARGIN_ULPS = 16   # a tuned threshold's distance from every validation score, in float32 steps


def probabilities(logits: np.ndarray) -> np.ndarray:
  """The float32 probabilities decisions compare: the sigmoid in float64, rounded once, and 0 below float32's
  smallest normal number (logit -87.3), as TensorFlow's float32 sigmoid has it; elsewhere TensorFlow's is within
  6 float32 steps of it (XLA's within 2: measured on 2M logits over [-100, 30]; MARGIN_ULPS leaves room)."""
  with np.errstate(over='ignore'):   # exp(-x) = inf below logit -709: probability 0
    p = (1.0 / (1.0 + np.exp(-np.asarray(logits, np.float64)))).astype(np.float32)
  return np.where(p < np.finfo(np.float32).tiny, np.float32(0), p)


def _valid_rows(labels: np.ndarray) -> np.ndarray:
  labels = np.asarray(labels)
  return labels[:, 0] >= 0 if labels.size else np.zeros([len(labels)], bool)


def _valid(scores: np.ndarray, labels: np.ndarray):
  """(scores, truth) of the rows that are examples (padding rows of -1 left out)."""
  valid = _valid_rows(labels)
  return np.asarray(scores)[valid], np.asarray(labels)[valid] > 0


def _sorted(scores: np.ndarray, truth: np.ndarray):
  """Each column sorted by score, descending: (scores, truth, whether a row ends its run of equal scores)."""
  order = np.argsort(-scores, axis=0, kind='stable')
  s = np.take_along_axis(scores, order, axis=0)
  t = np.take_along_axis(truth, order, axis=0)
  last = np.ones(s.shape, bool)
  last[:-1] = s[:-1] != s[1:]
  return s, t, last


def average_precision_exact(scores: np.ndarray, truth: np.ndarray) -> np.ndarray:
  """sklearn's average_precision_score of each column of scores [N, K] against truth [N, K] (bool); NaN for a
  column without positives. The sum over runs of equal scores (descending) of the recall gained times the
  precision at the run's end: the same bits for any order of the rows (the sum runs over the sorted runs, which
  the set of (score, label) pairs fixes)."""
  scores, truth = np.asarray(scores, np.float64), np.asarray(truth, bool)
  if not scores.size:
    return np.full(scores.shape[1:], np.nan)
  _, t, last = _sorted(scores, truth)
  tp = np.cumsum(t, axis=0, dtype=np.float64)
  chosen = np.arange(1, len(t) + 1, dtype=np.float64)[:, None]
  at_ends = np.where(last, tp, 0.0)
  before = np.concatenate([np.zeros((1, tp.shape[1])), np.maximum.accumulate(at_ends, axis=0)[:-1]])
  gained = np.where(last, (tp - before) * tp / chosen, 0.0)   # recall gained (x positives) times precision
  with np.errstate(invalid='ignore', divide='ignore'):
    return np.sum(gained, axis=0) / tp[-1]


def _decided(served: np.ndarray, truth: np.ndarray, thresholds: np.ndarray) -> Dict[str, Any]:
  """decisions' numbers of ``served >= thresholds`` per class."""
  chosen = served >= thresholds[None, :]
  tp = np.sum(chosen & truth, axis=0)
  return _decision_numbers(tp, np.sum(chosen & ~truth, axis=0), np.sum(truth, axis=0) - tp)


def tuned_thresholds(scores: np.ndarray, truth: np.ndarray, untuned: float = UNTUNED) -> np.ndarray:
  """Each class's F1-best threshold on float32 probabilities [K], ``untuned`` for a class without positives.

  The candidates are the cuts a served threshold can make: between neighbouring scores (sorted by logit) whose
  probabilities are more than 2 x MARGIN_ULPS float32 steps apart (closer ones are one level), and below the
  lowest score. The best cut's F1 wins (the highest of equals); its threshold is the sigmoid of the mean of the
  two logits around the cut, moved to MARGIN_ULPS steps from either side's probability where the mean is closer;
  below the lowest score, MARGIN_ULPS steps under it (every validation score positive, still inside the data)."""
  scores, truth = np.asarray(scores, np.float64), np.asarray(truth, bool)
  out = np.full(scores.shape[1], untuned, np.float32)
  if not scores.size:
    return out
  s, t, _ = _sorted(scores, truth)
  steps = probabilities(s).view(np.int32).astype(np.int64)   # float32 order: probabilities are >= 0
  total = t.sum(axis=0)
  tp = np.cumsum(t, axis=0)
  chosen = np.arange(1, len(s) + 1)
  for c in np.flatnonzero(total > 0):
    cuts = np.append(np.flatnonzero(steps[:-1, c] - steps[1:, c] > 2 * MARGIN_ULPS), len(s) - 1)
    f1 = 2 * tp[cuts, c] / (total[c] + chosen[cuts])
    k = int(cuts[np.argmax(f1)])   # the last row decided positive
    if k == len(s) - 1:
      step = max(steps[k, c] - MARGIN_ULPS, 0)
    else:
      middle = probabilities((s[k, c] + s[k + 1, c]) / 2).view(np.int32)
      step = min(max(int(middle), steps[k + 1, c] + MARGIN_ULPS + 1), steps[k, c] - MARGIN_ULPS)
    out[c] = np.array(step, np.int32).view(np.float32)
  return out


def pr_curve(positives: np.ndarray, negatives: np.ndarray, points: int = 129) -> np.ndarray:
  """TensorBoard's pr_curve tensor [6, points] (TP, FP, TN, FN, precision, recall) of one histogram pair, at
  ``points`` edges from the lowest to the highest (their probabilities are not evenly spaced, as TensorBoard's
  threshold axis assumes: the curve is right, the threshold it shows on hover is not)."""
  edges = np.linspace(0, BINS, points).round().astype(int)
  tp, fp = at_edges(positives)[edges], at_edges(negatives)[edges]
  p_total, n_total = positives.sum(), negatives.sum()
  fn, tn = p_total - tp, n_total - fp
  precision = np.where(tp + fp > 0, tp / np.maximum(tp + fp, 1), 1.0)
  recall = tp / max(p_total, 1)
  return np.stack([tp, fp, tn, fn, precision, recall]).astype(np.float32)

