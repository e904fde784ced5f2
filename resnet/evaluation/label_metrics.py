"""Multi-label metrics from score histograms: mAP, micro AP, precision / recall / F1 at 0.5 and at per-class
thresholds tuned for F1, and precision-recall curves.

The eval step sums, per class, how many positives and negatives fell in each of BINS logit bins (``score_bins``:
1/32 of a logit wide over [-16, 16], the ends open). Sums are exact over replicas, workers and batches, static in
shape (TPUs) and small (2 x classes x 1024), where per-example scores would grow with the eval set; every metric
here is then exact for scores rounded down to their bin's edge. A decision "probability >= t" is exact at each bin
edge, 0.5 among them (logit 0): precision, recall and F1 at 0.5 are exact, and tuned thresholds are bin edges.
Average precision is sklearn's (the sum over thresholds of the recall gained times the precision there), with
scores of one bin tied, as sklearn ties equal scores.
"""
from typing import Any, Dict, Optional, Sequence

import numpy as np

BINS = 1024
LOGIT_LIMIT = 16.0
WIDTH = 2 * LOGIT_LIMIT / BINS
HALF = BINS // 2   # the edge at logit 0: probability 0.5
HISTOGRAMS = 'label_score_histograms'   # the eval sum of the histograms: [2, K, BINS]


def score_bins(logits: np.ndarray) -> np.ndarray:
  """Each logit's bin (numpy; the eval step computes the same in TensorFlow)."""
  return np.clip(np.floor((np.asarray(logits, np.float64) + LOGIT_LIMIT) / WIDTH), 0, BINS - 1).astype(np.int64)


def edge_logits() -> np.ndarray:
  """The logit of each decision edge j = 0..BINS: a score is positive at edge j when its bin is >= j."""
  return -LOGIT_LIMIT + WIDTH * np.arange(BINS + 1)


def edge_probabilities() -> np.ndarray:
  return 1.0 / (1.0 + np.exp(-edge_logits()))


def edge_of_probability(threshold: float) -> int:
  """The lowest edge whose probability is >= ``threshold`` (0.5 -> HALF)."""
  return int(np.searchsorted(edge_probabilities(), threshold * (1 - 1e-9), side='left').clip(0, BINS))


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
  """Per class, the edge that maximises its F1 (the highest of equals); HALF for a class without positives."""
  tp, fp = at_edges(positives), at_edges(negatives)
  fn = tp[:, :1] - tp
  _, _, f1 = _f1(tp, fp, fn)
  best = f1.shape[1] - 1 - np.argmax(f1[:, ::-1], axis=1)
  return np.where(tp[:, 0] > 0, best, HALF)


def decisions(positives: np.ndarray, negatives: np.ndarray, edges: Sequence[int]) -> Dict[str, Any]:
  """Precision, recall and F1 of deciding 'positive' at each class's edge: micro (counts pooled) and macro (the
  mean over classes with positives), and per class."""
  tp_all, fp_all = at_edges(positives), at_edges(negatives)
  rows = np.arange(len(edges))
  tp, fp = tp_all[rows, edges], fp_all[rows, edges]
  fn = tp_all[:, 0] - tp
  precision, recall, f1 = _f1(tp, fp, fn)
  micro = _f1(tp.sum(), fp.sum(), fn.sum())
  present = tp_all[:, 0] > 0
  mean = lambda v: float(np.mean(v[present])) if present.any() else float('nan')
  return {'micro_precision': float(micro[0]), 'micro_recall': float(micro[1]), 'micro_f1': float(micro[2]),
          'macro_precision': mean(precision), 'macro_recall': mean(recall), 'macro_f1': mean(f1),
          'per_class': {'precision': precision, 'recall': recall, 'f1': f1}}


def report(hists: np.ndarray, class_names: Sequence[str], thresholds: Optional[Sequence[float]] = None
           ) -> Dict[str, Any]:
  """Every number users of multi-label models read, from [2, K, BINS] histograms: ``mAP`` (over classes with
  positives), ``micro_AP``, micro/macro precision, recall, F1 at 0.5 and (``_tuned``) at each class's F1-best edge,
  ``label_thresholds`` (those edges as probabilities, what predict and export decide with), and ``per_class``.
  ``thresholds`` given (predict on labelled data): the ``_tuned`` numbers at those instead of tuning them here."""
  positives, negatives = hists[0], hists[1]
  num_classes = positives.shape[0]
  names = list(class_names) if len(class_names) == num_classes else [str(i) for i in range(num_classes)]
  ap = average_precision(positives, negatives)
  present = positives.sum(axis=1) > 0
  at_half = decisions(positives, negatives, [HALF] * num_classes)
  if thresholds is None:
    edges = tuned_edges(positives, negatives)
  else:
    edges = np.array([edge_of_probability(t) for t in thresholds])
  tuned = decisions(positives, negatives, edges)
  probabilities = edge_probabilities()[edges]
  out: Dict[str, Any] = {
      'mAP': float(np.mean(ap[present])) if present.any() else float('nan'),
      'micro_AP': float(average_precision(positives.sum(axis=0), negatives.sum(axis=0))),
      'classes_with_positives': int(present.sum()),
  }
  out.update({k: v for k, v in at_half.items() if k != 'per_class'})
  out.update({f'{k}_tuned': v for k, v in tuned.items() if k != 'per_class'})
  out['label_thresholds'] = [float(p) for p in probabilities]   # unrounded: edge_of_probability finds each edge
  per_class: Dict[str, Dict[str, Any]] = {}
  for i, name in enumerate(names):
    per_class[name] = {
        'AP': None if not present[i] else round(float(ap[i]), 6), 'positives': int(positives[i].sum()),
        'threshold': round(float(probabilities[i]), 6),
        **{f'{k}_at_0.5': round(float(at_half['per_class'][k][i]), 6) for k in ('precision', 'recall', 'f1')},
        **{f'{k}_tuned': round(float(tuned['per_class'][k][i]), 6) for k in ('precision', 'recall', 'f1')}}
  out['per_class'] = per_class
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

