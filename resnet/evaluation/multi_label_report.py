"""What each evaluation of a multi-label run reports (an Estimator eval hook): mAP, micro AP, precision / recall /
F1 at 0.5 and at thresholds tuned on this evaluation, per class, into ``<eval>_results.json`` and TensorBoard (the
scalars, and a precision-recall curve per class and pooled). ``label_thresholds`` in the results (and each
evaluated step's in model_dir/label_thresholds.json) are what predict and export decide with
(``decision_thresholds``, which the multi-label task sets in what it serves): each class's F1-best threshold on
the validation split (label_metrics.tuned_thresholds), and 0.5 for a class without a positive there, named in the
log, the results and the record.
"""
import json
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from absl import logging
import numpy as np
import tensorflow as tf

from official_input import resnet_preprocessing
from resnet.estimator import best_checkpoint
from resnet.estimator import files
from resnet.estimator import hooks as hooks_lib
from resnet.evaluation import label_metrics

# Per-class PR curves in TensorBoard for up to this many classes (the pooled one always).
MAX_CURVES = 100


# The most scores (images x classes) the hook keeps for the exact numbers: 512 MB of float32 logits.
MAX_SCORES = 2 ** 27


class MultiLabelReport(hooks_lib.EvalHook):
  """``tuned_on``: what the evaluation scores (the weights, the test-time views), recorded with its thresholds so
  that predict and export can say when they serve something else.

  The numbers are label_metrics.exact_report's, from every image's logits (the task's eval_outputs), whenever this
  hook saw every example the eval step's sums counted: one worker, with any number of replicas (each batch comes
  with all its replicas' rows). Where it did not (several workers each evaluating their share, or more than
  MAX_SCORES scores), they are the histograms' (label_metrics.report), which every worker sums alike, and the log
  says so."""

  def __init__(self, class_names: Sequence[str], tuned_on: Mapping[str, str]):
    self.class_names = list(class_names)
    self.tuned_on = dict(tuned_on)
    self._record: Optional[Tuple[str, int]] = None
    self._scores: List[np.ndarray] = []
    self._labels: List[np.ndarray] = []
    self._seen = 0
    self._kept = True

  def begin(self, estimator, name: str) -> None:
    # The chief of the run's own evaluation records each step's thresholds (a one-shot eval of an older
    # checkpoint then adds its step instead of replacing the latest one's).
    self._record = ((estimator.model_dir, int(estimator.global_step.numpy()))
                    if estimator.is_chief and name == 'eval' else None)
    self._scores, self._labels, self._seen, self._kept = [], [], 0, True

  def after_batch(self, examples: Mapping[str, np.ndarray]) -> None:
    if 'logits' not in examples:
      self._kept = False
      return
    labels = np.asarray(examples['label'])
    valid = labels[:, 0] >= 0
    self._seen += int(valid.sum())
    if self._kept and self._seen * labels.shape[1] > MAX_SCORES:
      self._kept, self._scores, self._labels = False, [], []
    if self._kept:
      self._scores.append(np.asarray(examples['logits'], np.float32)[valid])
      self._labels.append((labels[valid] > 0).astype(np.int8))

  def end(self, results: Mapping[str, Any], sums: Mapping[str, np.ndarray]) -> hooks_lib.EvalReport:
    hists = sums[label_metrics.HISTOGRAMS]
    examples = int(hists[:, 0].sum())   # each example is a positive or a negative of class 0, once
    if self._kept and self._seen == examples and self._scores:
      out = label_metrics.exact_report(np.concatenate(self._scores), np.concatenate(self._labels),
                                       self.class_names)
    else:
      why = (f'more than {MAX_SCORES} scores to keep' if not self._kept and self._seen == examples
             else f'this worker evaluated {self._seen} of the {examples} examples')
      logging.warning('Multi-label eval: mAP, F1 and the thresholds from score histograms (%s): exact for logits '
                      'rounded down to 1/32, every logit above %g tied.', why, label_metrics.LOGIT_LIMIT)
      out = label_metrics.report(hists, self.class_names)
    self._scores, self._labels = [], []
    out['label_thresholds_tuned_on'] = self.tuned_on
    logging.info('Multi-label eval: mAP=%.4f micro_AP=%.4f; at 0.5: micro_f1=%.4f macro_f1=%.4f; at the tuned '
                 'thresholds: micro_f1=%.4f macro_f1=%.4f (tuned on this split: optimistic for it).', out['mAP'],
                 out['micro_AP'], out['micro_f1'], out['macro_f1'], out['micro_f1_tuned'], out['macro_f1_tuned'])
    untuned = out['classes_without_positives']
    if untuned:
      logging.warning('Multi-label eval: %d classes have no positive in this split, so no threshold was tuned for '
                      'them: they decide at %g (%s). Give the split positives of every class to tune them.',
                      len(untuned), label_metrics.UNTUNED, ', '.join(untuned[:20]) + (', ...' if len(untuned) > 20 else ''))
    if self._record is not None:
      record_thresholds(*self._record, out['label_thresholds'], list(out['per_class']), self.tuned_on, untuned)
    return hooks_lib.EvalReport(results=out, tensors=_pr_curves(hists, list(out['per_class'])))


THRESHOLDS_FILE = 'label_thresholds.json'
KEPT_STEPS = 50


def record_thresholds(model_dir: str, step: int, thresholds: Sequence[float], class_names: Sequence[str],
                      tuned_on: Mapping[str, str], untuned: Sequence[str] = ()) -> None:
  """model_dir/label_thresholds.json: each evaluated step's thresholds (the newest KEPT_STEPS), atomically;
  ``untuned``: the classes without positives in the split, at label_metrics.UNTUNED."""
  path = os.path.join(model_dir, THRESHOLDS_FILE)
  steps = (_read_json(path) or {}).get('steps', {})
  steps[str(step)] = {'thresholds': list(thresholds), 'tuned_on': dict(tuned_on)}
  if untuned:
    steps[str(step)]['untuned'] = {'classes': list(untuned), 'threshold': label_metrics.UNTUNED,
                                   'why': 'no positive in the split the thresholds were tuned on'}
  kept = dict(sorted(steps.items(), key=lambda item: int(item[0]))[-KEPT_STEPS:])
  files.atomic_write(path, json.dumps({'class_names': list(class_names), 'steps': kept}, indent=1))


def _pr_curves(hists: np.ndarray, names: List[str]) -> dict:
  from tensorboard.plugins.pr_curve import metadata  # pylint: disable=g-import-not-at-top
  curves = {'pr_curve/all_classes': label_metrics.pr_curve(hists[0].sum(axis=0), hists[1].sum(axis=0))}
  if len(names) <= MAX_CURVES:
    curves.update({f'pr_curve/{name}': label_metrics.pr_curve(hists[0][i], hists[1][i])
                   for i, name in enumerate(names)})
  return {tag: (curve, metadata.create_summary_metadata(tag, '', curve.shape[1])) for tag, curve in curves.items()}


def warn_if_served_differs(tuned_on: Mapping[str, str], served: Mapping[str, str]) -> None:
  """A warning when the thresholds were tuned on other weights or views than those served (``served_view``)."""
  differs = {k: (v, served[k]) for k, v in tuned_on.items() if k in served and served[k] != v}
  if differs:
    logging.warning('The thresholds were tuned on %s, but this serves %s: its decisions may be off. Evaluate what '
                    'you serve (e.g. export_moving_average=true, or tta=none) for thresholds that fit it.',
                    ', '.join(f'{k}={a}' for k, (a, _) in differs.items()),
                    ', '.join(f'{k}={b}' for k, (_, b) in differs.items()))


def served_view(params: Mapping[str, Any], averaged: bool = True, single_view: bool = False) -> Dict[str, str]:
  """What an evaluation, predict or export with these params scores: the weights and the test-time views."""
  weights = 'moving_average' if params['moving_average_decay'] and averaged else 'trained'
  return {'weights': weights, 'tta': resnet_preprocessing.served_tta(params, deployed=single_view)}


def decision_thresholds(model_dir: str, step: Optional[int], num_classes: int,
                        best: bool = False) -> Tuple[List[float], str, Dict[str, str]]:
  """(each class's threshold, where it came from, what it was tuned on) for the checkpoint at ``step``: those its
  evaluation recorded (model_dir/best/'s record with ``best``, else label_thresholds.json, else an
  eval_results.json of that step); 0.5 for every class, with a warning, where no evaluation of that step
  recorded them."""
  if best:
    path = os.path.join(model_dir, 'best', best_checkpoint.RESULTS_FILE)
    record = _read_json(path) or {}
    found = record.get('label_thresholds'), record.get('global_step'), record.get('label_thresholds_tuned_on')
    untuned = record.get('classes_without_positives') or []
  else:
    path = os.path.join(model_dir, THRESHOLDS_FILE)
    entry = ((_read_json(path) or {}).get('steps') or {}).get(str(step)) if step is not None else None
    found = (entry or {}).get('thresholds'), step, (entry or {}).get('tuned_on')
    untuned = ((entry or {}).get('untuned') or {}).get('classes') or []
    if entry is None:   # a run from before label_thresholds.json: its last evaluation's record
      results = _read_json(os.path.join(model_dir, 'eval_results.json')) or {}
      if results.get('global_step') == step:
        path, found = (os.path.join(model_dir, 'eval_results.json'),
                       (results.get('label_thresholds'), step, results.get('label_thresholds_tuned_on')))
        untuned = results.get('classes_without_positives') or []
  thresholds, at, tuned_on = found
  if thresholds is not None and len(thresholds) == num_classes and (step is None or at == step):
    untuned_note = (f'; {len(untuned)} classes without validation positives at {label_metrics.UNTUNED}, untuned: '
                    + ', '.join(untuned[:20]) + (', ...' if len(untuned) > 20 else '')) if untuned else ''
    return ([float(t) for t in thresholds], f'tuned on the validation split at step {at} ({path}){untuned_note}',
            dict(tuned_on or {}))
  why = ('none recorded' if thresholds is None else f'they are of step {at}, not {step}'
         if len(thresholds) == num_classes else f'{len(thresholds)} thresholds for {num_classes} classes')
  logging.warning('Multi-label decisions at 0.5 for every class: %s has no tuned thresholds for this checkpoint (%s). '
                  'Evaluate it first (--mode=eval) to tune them.', path, why)
  return [0.5] * num_classes, 'the default 0.5 (no evaluation of this checkpoint recorded tuned ones)', {}


def write_export_thresholds(directory: str, thresholds: Sequence[float], class_names: Sequence[str]) -> str:
  """label_thresholds.json beside the exported files: what an app decides with, and --predict_tflite/onnx read."""
  path = os.path.join(directory, THRESHOLDS_FILE)
  files.atomic_write(path, json.dumps({'class_names': list(class_names), 'thresholds': list(thresholds),
                                       'decide': 'probability >= threshold, per class'}, indent=1))
  return path


def deployed_thresholds(file_path: str, num_classes: int) -> Optional[List[float]]:
  """The thresholds exported beside a .tflite/.onnx file, or None."""
  record = _read_json(os.path.join(os.path.dirname(file_path), THRESHOLDS_FILE)) or {}
  thresholds = record.get('thresholds')
  return [float(t) for t in thresholds] if thresholds and len(thresholds) == num_classes else None


def _read_json(path: str) -> Optional[dict]:
  try:
    if not tf.io.gfile.exists(path):
      return None
    with tf.io.gfile.GFile(path) as f:
      record = json.load(f)
  except (ValueError, OSError, tf.errors.OpError) as e:
    logging.warning('Could not read %s (%s).', path, e)
    return None
  return record if isinstance(record, dict) else None
