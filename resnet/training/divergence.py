"""The divergence guard of a ResNet run, beside the loss it reads: what a uniform guess scores under this run's
weighting, and the fixes worth naming.

The training cross-entropy (``resnet_model_fn.CROSS_ENTROPY``) of a model that answers 1/K for every class is
``ln K * sum(targets)`` per example. Targets sum to 1 (label smoothing keeps the sum), to the example's class weight
w_y with ``class_weights``, and mixup/CutMix mix two examples' weights, whose expectation is again E[w_y]. So a
uniform guess scores ``ln K`` with ``class_weight_normalization=weight_sum`` (the sum of weights divides), and
``ln K * E[w_y]`` with ``batch_size``, E over the classes' training frequencies (summary.json's counts; uniform
where the data has none, as synthetic labels are). ``balanced`` weights make E[w_y] = 1.

Under ``loss=binary_cross_entropy`` the uniform guess is a sigmoid of 1/K for every class (where the head's prior
init starts, resnet_model_fn.build_model): ``(ln K + (K - 1) ln(K / (K - 1))) / K`` per class against a one-hot,
about ``(1 + ln K) / K``, takes ``ln K``'s place. (``ln 2``, every sigmoid at 0.5, would be ~90 times a healthy
1000-class loss: the guard would miss an explosion.) Multi-label data (``task=multi_label``): a guess of each
class's rate in the training images, its binary cross-entropy averaged over the classes (positives weighted by
class_weights); 1/K is that rate for one label per image, the same number as above.
"""
import math
from typing import Any, Mapping, Optional, Sequence, Tuple

from absl import logging

from official_input import dataset_info
from resnet.estimator import hooks as hooks_lib
from resnet.training import lr_schedules
from resnet.training import resnet_model_fn


def class_frequencies(params: Mapping[str, Any]) -> Optional[Sequence[float]]:
  """Each model class's share of the training images (summary.json), or None where the data does not say."""
  info = _info(params)
  counts = list(info.train_class_counts) if info is not None else []
  if not counts:
    return None
  if dataset_info.has_background_class(params['num_label_classes'], len(counts)):
    counts = [0] + counts
  total = sum(counts)
  if len(counts) != params['num_label_classes'] or not total:
    return None
  return [c / total for c in counts]


def positive_rates(params: Mapping[str, Any]) -> Optional[Sequence[float]]:
  """Multi-label data: each model class's share of the training images it is in (summary.json), or None."""
  info = _info(params)
  if info is None or not info.train_class_counts or not info.num_train_images:
    return None
  counts = list(info.train_class_counts)
  if dataset_info.has_background_class(params['num_label_classes'], len(counts)):
    counts = [0] + counts
  if len(counts) != params['num_label_classes']:
    return None
  return [min(c / info.num_train_images, 1.0) for c in counts]


def _multi_label_chance(params: Mapping[str, Any], rates: Optional[Sequence[float]]) -> Tuple[float, str]:
  """A guess of each class's rate p (1/K where the data does not say), without looking at the image: the mean
  over classes of ``w p (-ln p) + (1 - p) (-ln(1 - p))``, w the class's positive weight (class_weights)."""
  classes = int(params['num_label_classes'])
  known = rates is not None
  rates = [min(max(r, 1e-6), 1 - 1e-6) for r in rates] if known else [1.0 / max(classes, 2)] * classes
  weights = params['class_weights'] if isinstance(params['class_weights'], list) else [1.0] * classes
  terms = [w * p * -math.log(p) + (1 - p) * -math.log(1 - p) for p, w in zip(rates, weights)]
  how = ("binary cross-entropy of each class's rate in the training images" if known
         else f'binary cross-entropy of sigmoids at 1/{classes} (the data records no per-class counts)')
  if isinstance(params['class_weights'], list):
    how += ', its positives weighted by class_weights'
  return sum(terms) / len(terms), how


def _info(params: Mapping[str, Any]) -> Optional[dataset_info.DatasetInfo]:
  if dataset_info.is_synthetic(params['data_dir']):
    return None
  try:
    return dataset_info.read_dataset_info(params['data_dir'], params['labels_file'])
  except (ValueError, OSError):
    return None


def uniform_guess_loss(params: Mapping[str, Any],
                       frequencies: Optional[Sequence[float]] = None) -> Tuple[float, str]:
  """(the cross-entropy of a uniform guess under this run's weighting, how it was reckoned). Multi-label:
  ``frequencies`` are each class's positive rate (positive_rates)."""
  if params.get('task') == 'multi_label':
    return _multi_label_chance(params, frequencies)
  classes = max(int(params['num_label_classes']), 2)
  chance, named = math.log(classes), f'ln {classes}'
  if params.get('loss') == 'binary_cross_entropy':
    chance = (math.log(classes) + (classes - 1) * math.log(classes / (classes - 1))) / classes
    named = f'binary cross-entropy of sigmoids at 1/{classes}'
  weights = params['class_weights']
  if not weights or isinstance(weights, str) or params['class_weight_normalization'] == 'weight_sum':
    return chance, named
  if frequencies is None or len(frequencies) != len(weights):
    mean, over = sum(weights) / len(weights), 'the classes (no training counts to weigh them by)'
  else:
    mean, over = sum(f * w for f, w in zip(frequencies, weights)), 'the training images of each class'
  return chance * mean, f'{named} x the mean class weight {mean:.4g} over {over}'


def guard(params: Mapping[str, Any]) -> hooks_lib.DivergenceGuard:
  """The DivergenceGuard for ``params``: its chance level (logged), the warm-up it waits out, and the advice."""
  rates = positive_rates(params) if params.get('task') == 'multi_label' else class_frequencies(params)
  chance, how = uniform_guess_loss(params, rates)
  logging.info('Divergence guard: a uniform guess scores cross_entropy %.4g (%s).', chance, how)
  fixes = [f'a lower base_learning_rate (now {params["base_learning_rate"]:g})']
  if params['class_weights']:
    fixes.append('milder class_weights' + (' or class_weight_normalization=weight_sum'
                                            if params['class_weight_normalization'] == 'batch_size'
                                            and params.get('task') != 'multi_label' else ''))
  if params['precision'] != 'float32':
    fixes.append(f'precision=float32 (now {params["precision"]})')
  stop = params['on_divergence'] == 'stop'
  advice = f'Try {", ".join(fixes)}.'
  if stop:
    advice = f'The run stops here: no checkpoint of this loop, nothing exported. {advice} on_divergence=warn goes on.'
  return hooks_lib.DivergenceGuard(chance, lr_schedules.warmup_steps(params), stop=stop,
                                   key=resnet_model_fn.CROSS_ENTROPY, spread_key=resnet_model_fn.OUTPUT_SPREAD,
                                   advice=advice)
