"""The divergence guard of a ResNet run: its baseline is what a guess that ignores the image scores under this run's
loss and weighting, which the run's task reckons (``Task.chance_loss``, from the training counts of each model
class in summary.json); the loss of outputs that say nothing (logits 0, ``Task.uninformed_loss``), the most a fresh
run's start may raise that baseline to (hooks.DivergenceGuard); and the fixes worth naming.
"""
from typing import Any, Mapping, Optional, Sequence, Tuple

from absl import logging

from official_input import dataset_info
from resnet.estimator import hooks as hooks_lib
from resnet.task import tasks
from resnet.training import lr_schedules
from resnet.training import resnet_model_fn


def train_counts(params: Mapping[str, Any]) -> Tuple[Optional[Sequence[int]], int]:
  """(the training images of each model class, the training images), or (None, 0) where the data does not say."""
  if dataset_info.is_synthetic(params['data_dir']):
    return None, 0
  try:
    info = dataset_info.read_dataset_info(params['data_dir'], params['labels_file'])
  except (ValueError, OSError):
    return None, 0
  if info is None:
    return None, 0
  return dataset_info.model_class_counts(info, params['num_label_classes']), info.num_train_images or 0


def guard(params: Mapping[str, Any]) -> hooks_lib.DivergenceGuard:
  """The DivergenceGuard for ``params``: its chance level (logged), the warm-up it waits out, and the advice."""
  task = tasks.for_params(params)
  counts = train_counts(params)
  chance, how = task.chance_loss(*counts)
  logging.info('Divergence guard: a uniform guess scores cross_entropy %.4g (%s).', chance, how)
  fixes = [f'a lower base_learning_rate (now {params["base_learning_rate"]:g})'] + task.divergence_fixes()
  if params['precision'] != 'float32':
    fixes.append(f'precision=float32 (now {params["precision"]})')
  stop = params['on_divergence'] == 'stop'
  advice = f'Try {", ".join(fixes)}.'
  if stop:
    advice = f'The run stops here: no checkpoint of this loop, nothing exported. {advice} on_divergence=warn goes on.'
  return hooks_lib.DivergenceGuard(chance, lr_schedules.warmup_steps(params), stop=stop,
                                   ceiling=task.uninformed_loss(*counts),
                                   key=resnet_model_fn.CROSS_ENTROPY, spread_key=resnet_model_fn.OUTPUT_SPREAD,
                                   advice=advice)
