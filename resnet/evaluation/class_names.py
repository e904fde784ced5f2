"""Class names by model class id, from labels.txt, with a background class 0 when the model has one class more
(the input pipeline's rule), and the check that predict names classes as the model was trained.

The names come from the data's labels file (``labels_file``, else ``data_dir/labels.txt``); where that is gone (the
data moved), from the run's own record of them (``model_dir/labels.txt``, written when its training started).
"""
import os
from typing import Any, List, Mapping, Optional

from absl import logging

from official_input import dataset_info
from resnet.run_dir import model_dir as model_dir_lib

_said = set()


def data_labels_path(params: Mapping[str, Any]) -> Optional[str]:
  """The data's labels file: labels_file, else data_dir/labels.txt (None for synthetic data)."""
  if params['labels_file']:
    return params['labels_file']
  if dataset_info.is_synthetic(params['data_dir']):
    return None
  return os.path.join(params['data_dir'], dataset_info.LABELS_FILE)


def labels_path(params: Mapping[str, Any]) -> Optional[str]:
  """The data's labels file if it is there, else the run's record of its class names (said once, with why)."""
  path = data_labels_path(params)
  if path and dataset_info.labels_file_exists(path):
    return path
  recorded = model_dir_lib.recorded_class_names_path(params['model_dir'])
  if recorded:
    if path and path not in _said:
      _said.add(path)
      logging.info('%s is not there (the data moved?): class names from the run\'s record, %s.', path, recorded)
    return recorded
  if path and params['model_dir'] and path not in _said:
    _said.add(path)
    logging.warning('Cannot name the classes: %s is not there and the run in %s recorded no class names (runs '
                    'record them since this version). Give --labels_file=<the labels.txt of the training data>.',
                    path, params['model_dir'])
  return path


def read_class_names(params: Mapping[str, Any]) -> List[str]:
  return dataset_info.model_class_names(labels_path(params), params['num_label_classes'])


def has_background(params: Mapping[str, Any]) -> bool:
  """Whether model class 0 is a background class: the input pipeline's rule (one class more than labels.txt
  lists; without labels.txt, ImageNet's 1001)."""
  data_names = dataset_info.model_class_names(labels_path(params), 0)  # 0: labels.txt as it is, no background
  return dataset_info.has_background_class(params['num_label_classes'], len(data_names) or None)


def check_class_names_against_training(params: Mapping[str, Any], trained: Optional[Mapping[str, Any]]) -> None:
  """Names by class id come from labels.txt, with a background class 0 when the model has one class more. A labels
  file with another count than the training run's (``trained``: its recorded params) would shift or drop names (one
  short even makes class 0 look like a background class): refused, naming both files and counts."""
  trained = trained or {}
  trained_path = model_dir_lib.recorded_class_names_path(params['model_dir']) or trained.get('labels_file') or (
      os.path.join(trained['data_dir'], dataset_info.LABELS_FILE) if trained.get('data_dir') else None)
  path = labels_path(params)
  if not trained_path or not path or os.path.abspath(trained_path) == os.path.abspath(path):
    return
  trained_names = dataset_info.model_class_names(trained_path, 0)
  names = dataset_info.model_class_names(path, 0)
  if names and not trained_names:
    logging.warning('Cannot read %s, the class names %s was trained with: the names in the predictions come from %s '
                    'unchecked (they are right only if it lists the same classes in the same order).',
                    trained_path, params['model_dir'], path)
  if trained_names and names and len(names) != len(trained_names):
    background = ' and no background class' if len(trained_names) == params['num_label_classes'] else ''
    raise ValueError(f'{path} lists {len(names)} class names, but the model in {params["model_dir"]} was trained with '
                     f'{trained_path}, which lists {len(trained_names)} ({params["num_label_classes"]} model classes'
                     f'{background}): every predicted class name would be off. Use the training run\'s labels '
                     f'(--labels_file={trained_path}) or one with its {len(trained_names)} names in its order.')
