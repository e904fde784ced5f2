"""What each evaluation of a multi-label run reports (an Estimator eval hook): mAP, micro AP, precision / recall /
F1 at 0.5 and at thresholds tuned on this evaluation, per class, into ``<eval>_results.json`` and TensorBoard (the
scalars, and a precision-recall curve per class and pooled). ``label_thresholds`` in the results are what predict
and export decide with (``decision_thresholds``): each class's F1-best threshold on the validation split.
"""
import json
import os
from typing import Any, List, Mapping, Optional, Sequence, Tuple

from absl import logging
import numpy as np
import tensorflow as tf

from resnet.estimator import best_checkpoint
from resnet.estimator import checkpoints
from resnet.estimator import hooks as hooks_lib
from resnet.estimator.spec import ModeKeys
from resnet.evaluation import label_metrics
from resnet.training import multi_label

# Per-class PR curves in TensorBoard for up to this many classes (the pooled one always).
MAX_CURVES = 100


class MultiLabelReport(hooks_lib.EvalHook):

  def __init__(self, class_names: Sequence[str]):
    self.class_names = list(class_names)

  def end(self, results: Mapping[str, Any], sums: Mapping[str, np.ndarray]) -> hooks_lib.EvalReport:
    hists = sums[multi_label.HISTOGRAMS]
    out = label_metrics.report(hists, self.class_names)
    logging.info('Multi-label eval: mAP=%.4f micro_AP=%.4f; at 0.5: micro_f1=%.4f macro_f1=%.4f; at the tuned '
                 'thresholds: micro_f1=%.4f macro_f1=%.4f (tuned on this split: optimistic for it).', out['mAP'],
                 out['micro_AP'], out['micro_f1'], out['macro_f1'], out['micro_f1_tuned'], out['macro_f1_tuned'])
    return hooks_lib.EvalReport(results=out, tensors=_pr_curves(hists, list(out['per_class'])))


def _pr_curves(hists: np.ndarray, names: List[str]) -> dict:
  from tensorboard.plugins.pr_curve import metadata  # pylint: disable=g-import-not-at-top
  curves = {'pr_curve/all_classes': label_metrics.pr_curve(hists[0].sum(axis=0), hists[1].sum(axis=0))}
  if len(names) <= MAX_CURVES:
    curves.update({f'pr_curve/{name}': label_metrics.pr_curve(hists[0][i], hists[1][i])
                   for i, name in enumerate(names)})
  return {tag: (curve, metadata.create_summary_metadata(tag, '', curve.shape[1])) for tag, curve in curves.items()}


def use_decision_thresholds(estimator, params: Mapping[str, Any], checkpoint: Optional[str] = None,
                            best: bool = False) -> Optional[List[float]]:
  """Sets the thresholds predict and export decide with, for ``checkpoint`` (default: the latest; ``best``:
  model_dir/best/'s) and returns them; None for a single-label run."""
  if not multi_label.enabled(params):
    return None
  estimator.build(ModeKeys.PREDICT)
  path = checkpoint or estimator.latest_checkpoint()
  step = checkpoints.checkpoint_step(path) if path else None
  thresholds, source = decision_thresholds(params['model_dir'], step, params['num_label_classes'], best)
  estimator.scope.get(multi_label.THRESHOLDS).assign(thresholds)
  logging.info('Multi-label decisions: per-class thresholds %s: %s', source,
               ', '.join(f'{t:.3f}' for t in thresholds[:20]) + (', ...' if len(thresholds) > 20 else ''))
  return thresholds


def decision_thresholds(model_dir: str, step: Optional[int], num_classes: int,
                        best: bool = False) -> Tuple[List[float], str]:
  """(each class's threshold, where it came from) for the checkpoint at ``step``: the ``label_thresholds`` its
  evaluation recorded (model_dir/best/'s record with ``best``, else eval_results.json); 0.5 for every class, with
  a warning, where no evaluation of that step recorded them."""
  path = os.path.join(model_dir, 'best', best_checkpoint.RESULTS_FILE) if best else os.path.join(model_dir,
                                                                                                 'eval_results.json')
  record = _read_json(path)
  thresholds = record.get('label_thresholds') if record else None
  if thresholds is not None and len(thresholds) == num_classes and (step is None or record.get('global_step') == step):
    return [float(t) for t in thresholds], f'tuned on the validation split at step {record.get("global_step")} ({path})'
  why = ('none recorded' if thresholds is None else f'they are of step {record.get("global_step")}, not {step}'
         if len(thresholds) == num_classes else f'{len(thresholds)} thresholds for {num_classes} classes')
  logging.warning('Multi-label decisions at 0.5 for every class: %s has no tuned thresholds for this checkpoint (%s). '
                  'Evaluate it first (--mode=eval) to tune them.', path, why)
  return [0.5] * num_classes, 'the default 0.5 (no evaluation of this checkpoint recorded tuned ones)'


def _read_json(path: str) -> Optional[dict]:
  if not tf.io.gfile.exists(path):
    return None
  try:
    with tf.io.gfile.GFile(path) as f:
      record = json.load(f)
  except (ValueError, OSError) as e:
    logging.warning('Could not read %s (%s).', path, e)
    return None
  return record if isinstance(record, dict) else None
