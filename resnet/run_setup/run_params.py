"""The run's params: ``params/``'s table and override syntaxes, plus the values that only files know.

``params/`` is pure (it reads no data, runs or weights); here the program fills what the user left unset from
files: the class and image counts from ``data_dir/summary.json`` (a contradicting value is an error),
``class_weights=balanced`` from its per-class counts, and the ``Variant`` params (how the weights compute) from
``model_dir/params.yaml`` of a resumed run or from the warm-start weights (a foreign file's format, or our run's
params.yaml). And the advice that needs the data: small data trained with the ImageNet recipe.
"""
import contextlib
import os
from typing import Any, Dict, Iterator, Mapping, Optional, Sequence, Tuple, Union

from absl import logging
import tensorflow as tf

from official_input import dataset_info
from official_input import resnet_preprocessing
from params import architectures
from params import params_dict
from params import merging
from params import model_config
from params import resnet_config
from resnet.run_setup import finished_run
from resnet.task import task as task_lib
from resnet.task import tasks
from resnet.run_dir import model_dir as model_dir_lib
from resnet.run_dir import params_files
from resnet.estimator import checkpoints
from resnet.estimator import files
from resnet.training import mixing
from resnet.weights import foreign_weights


def make_params(overrides: Union[None, merging.Source, Sequence[merging.Labelled]] = None, *,
                config_files: Sequence[Union[str, Tuple[str, str]]] = (),
                fill_from_data: bool = True, from_run: Optional[Sequence[str]] = None) -> params_dict.ParamsDict:
  """``merging.make_params`` with what needs files: ``config_files`` (paths, or names in ``params/configs/``
  such as ``'demo'``; any may be a ``(label, name)`` pair), override strings that name a YAML file, and the unset
  values filled from files: with ``fill_from_data`` the counts from data_dir's summary.json (else ImageNet's) and
  balanced class weights; always the Variant params. ``from_run`` (the keys the user gave; eval, predict and
  export): what a finished run supplies comes from model_dir's params.yaml unless given (``finished_run``)."""
  configs = []
  for item in config_files:
    label, name = item if isinstance(item, tuple) else (f'config file {item}', item)
    with merging.labelled_errors(label):
      path = params_files.resolve_config_file(name)
      configs.append((f'{label} from {path}', params_files.read_params(path).as_dict()))
  run_values, run_fallbacks = [], []
  if from_run is not None:
    supplied, fallback = finished_run.fills(finished_run.given_keys(from_run, [values for _, values in configs]))
    run_values, run_fallbacks = [supplied], [fallback]
  data = [data_counts] + run_fallbacks + [imagenet_counts, _balanced] if fill_from_data else []
  return merging.make_params(overrides, configs=configs, fills=run_values + data + [task_defaults, variant_defaults],
                                   read_file=params_files.read_text, validators=VALIDATORS)


def quantized_exports_have_data(values: Mapping[str, Any]) -> None:
  """Quantized .tflite and .onnx files are calibrated and measured on the run's records: refused up front without
  them."""
  for key in ('tflite_quantizations', 'onnx_quantizations'):
    if values[key] and values['export_dir'] and dataset_info.is_synthetic(values['data_dir']):
      raise ValueError(f'{key} calibrates int8 on the run\'s training records and measures every file on its '
                       'validation records, and this run has none (data_dir unset: synthetic data): set --data_dir '
                       f'to the converted records, or export without {key}')


# The components that take a group of params check their own rules (one place for each rule).
VALIDATORS = (model_config.validate, resnet_preprocessing.AugmentConfig.from_params, mixing.MixConfig.from_params,
              quantized_exports_have_data)


def _balanced(values: Mapping[str, Any]) -> Dict[str, Any]:
  """class_weights=balanced becomes its list (params.yaml records the list)."""
  return {'class_weights': balanced_class_weights(values)} if values['class_weights'] == 'balanced' else {}


def balanced_class_weights(values: Mapping[str, Any]) -> list:
  """class_weights=balanced resolved from data_dir/summary.json, logged per class; params.yaml records the list."""
  info = dataset_info.read_dataset_info(values['data_dir'], values['labels_file'])
  if info is None:
    raise ValueError(f"class_weights=balanced takes the per-class training counts from data_dir/summary.json, and "
                     f"data_dir={values['data_dir']!r} has none: give class_weights as a list, one weight per class.")
  counts = dataset_info.model_class_counts(info, values['num_label_classes'])
  if counts is None:
    raise ValueError(f"class_weights=balanced needs the per-class training counts of {info.summary_path} "
                     "(splits.train.per_class), which it does not record for the model's "
                     f"num_label_classes={values['num_label_classes']}: re-run `python -m tools.imagenet_to_gcs`, or "
                     'give class_weights as a list, one weight per class.')
  weights = tasks.for_params(values).balanced_class_weights(counts, info.num_train_images or 0)
  names = dataset_info.model_class_names(os.path.join(info.data_dir, dataset_info.LABELS_FILE),
                                         values['num_label_classes']) or [str(i) for i in range(len(weights))]
  shown = ', '.join(f'{name}={w:.4g}' for name, w in list(zip(names, weights))[:20])
  logging.info('class_weights=balanced, from the train counts in %s: %s%s', info.summary_path, shown,
               ', ...' if len(weights) > 20 else '')
  empty = [name for name, count in zip(info.class_names, info.train_class_counts) if not count]
  if empty:
    logging.warning('class_weights=balanced: %s has no training images of %s, which keep a weight of 1 and which '
                    'the model will never learn to predict: add images of them, or remove them from the dataset.',
                    info.summary_path, ', '.join(empty[:20]) + (', ...' if len(empty) > 20 else ''))
  return weights


def data_counts(values: Mapping[str, Any]) -> Dict[str, Any]:
  """Values for the unset class and image counts from data_dir/summary.json.

  A set value that contradicts the data is an error naming both values and the fix (a background class or an
  eval subset are warnings: they may be meant).
  """
  fills: Dict[str, Any] = {}
  try:
    info = dataset_info.read_dataset_info(values['data_dir'], values['labels_file'])
  except tf.errors.OpError as e:  # unreachable storage: the input pipeline will name the problem when it reads
    logging.warning('Could not read the dataset summary in %s (%s): using the params as given.',
                    values['data_dir'], e.message.splitlines()[0])
    info = None
  if info is not None:
    explicit = {k for k in dataset_info.CHECKED_PARAMS if values.get(k) is not None}
    filled, warnings, errors = dataset_info.check_params_against(info, values, explicit)
    if errors:
      raise ValueError('Params contradict the data: ' + ' '.join(errors))
    for warning in warnings:
      logging.warning('%s', warning)
    if values.get('task') is None:
      filled['task'] = info.task
    elif values['task'] == 'single_label' and info.task == 'multi_label':
      raise ValueError(f'task=single_label, but {info.summary_path} says the data is multi_label: its negatives and '
                       'images of several labels would be skipped as bad records. Leave task unset (multi-label '
                       'training), or convert the data with one label per image.')
    elif values['task'] != info.task:
      logging.warning('task=%s on the single-label data in %s: each image is a multi-hot row of its one label.',
                      values['task'], info.summary_path)
    if filled:
      logging.info('From %s: %s', info.summary_path, ', '.join(f'{k}={v}' for k, v in sorted(filled.items())))
    fills.update(filled)
  return fills


def task_defaults(values: Mapping[str, Any]) -> Dict[str, Any]:
  """task (single_label where no summary.json said), then the loss and best_metric of that task where unset
  (``Task.defaults``); logged for any task but the default (a single-label run keeps the defaults it always had)."""
  task = tasks.for_params(values)
  fills = {'task': task.name} if values['task'] is None else {}
  fills.update({key: value for key, value in task.defaults.items() if values[key] is None})
  if task.name != task_lib.DEFAULT and len(fills) > ('task' in fills):
    logging.info('task=%s: %s.', task.name, ', '.join(f'{k}={v}' for k, v in fills.items() if k != 'task'))
  return fills


def imagenet_counts(values: Mapping[str, Any]) -> Dict[str, Any]:
  """ImageNet's class and image counts for those still unset (no summary.json said)."""
  fills = {}
  for key, value in resnet_config.IMAGENET_COUNTS.items():
    if values[key] is None:
      fills[key] = value
      if not dataset_info.is_synthetic(values['data_dir']):
        logging.warning('%s is unset and %s has no summary.json: using ImageNet\'s %d.', key, values['data_dir'],
                        value)
  return fills


def variant_defaults(values: Mapping[str, Any]) -> Dict[str, Any]:
  """Values for the unset Variant params (how the weights compute: ``architectures.VARIANT_PARAMS``).

  From the first source that has them: model_dir's params.yaml when model_dir holds a checkpoint (a resumed,
  evaluated or exported run keeps the function it was trained as); else --resnet_checkpoint (a foreign weights file
  says how its framework computes; a checkpoint of this program, the params.yaml of its run); else the reference's
  v1.5. A value set explicitly that contradicts the warm-start weights is an error naming both values, because the
  weights would compute another function than the one they were trained as.
  """
  unset = [key for key in architectures.VARIANT_PARAMS if values[key] is None]
  source, found = _resumed_variant(values['model_dir'])
  if not found and values['resnet_checkpoint']:
    source, found = _warm_start_variant(values['resnet_checkpoint'])
    conflicts = [f'{key}={values[key]!r} is set, but {source} needs {key}={found[key]!r}' for key in found
                 if values[key] is not None and found[key] != values[key]]
    if conflicts:
      raise ValueError('Params contradict the warm-start weights: ' + '; '.join(conflicts) + '. Leave these params '
                       'unset (they are then taken from the weights), or warm-start from other weights.')
  fills = {key: found.get(key, architectures.VARIANT_DEFAULTS[key]) for key in unset}
  from_source = {key: value for key, value in fills.items() if key in found}
  if from_source:
    logging.info('From %s: %s', source, ', '.join(f'{k}={v!r}' for k, v in from_source.items()))
  return fills


def _run_variant(directory: str) -> Dict[str, Any]:
  """The Variant params recorded in a run directory's params.yaml (none if it has none, or is unreachable)."""
  recorded = model_dir_lib.recorded_params(directory)  # damaged or unreachable: a warning, nothing taken from it
  if recorded is None:
    return {}
  # A params.yaml older than a Variant param ran with its v1.5 default.
  return {key: recorded[key] if recorded.get(key) is not None else architectures.VARIANT_DEFAULTS[key]
          for key in architectures.VARIANT_PARAMS}


def _resumed_variant(model_dir: Optional[str]) -> Tuple[str, Dict[str, Any]]:
  if not model_dir:
    return '', {}
  recorded = _run_variant(model_dir)
  if not recorded:
    return '', {}
  if not checkpoints.has_checkpoint(model_dir):
    return '', {}
  return f'the run in {model_dir} (params.yaml)', recorded


def _warm_start_variant(checkpoint: str) -> Tuple[str, Dict[str, Any]]:
  """What --resnet_checkpoint computes: read from a foreign weights file, or recorded beside our checkpoint."""
  header = directory = None
  with _unreachable_storage(checkpoint):
    header = foreign_weights.inspect(checkpoint)
    if header is None:
      directory = checkpoint if foreign_weights.is_directory(checkpoint) else os.path.dirname(checkpoint)
  if header is not None:
    logging.info('Warm-start weights: %s', header.describe())
    return f'{checkpoint} ({header.title()})', header.variant
  if not directory:
    return '', {}
  return f'the run of {checkpoint} ({os.path.join(directory, "params.yaml")})', _run_variant(directory)


@contextlib.contextmanager
def _unreachable_storage(path: str) -> Iterator[None]:
  """Unreachable gs:// storage is a warning here: the Variant params keep their defaults, and the warm start (which
  checks the weights against the model) or the model_dir check names the problem when they read."""
  if not files.is_url(path):
    yield
    return
  try:
    yield
  except tf.errors.OpError as e:
    logging.warning('Could not read %s (%s): stride_in_1x1, stem_pool_padding, ... are not read from it.', path,
                    e.message.splitlines()[0])


SMALL_DATA_IMAGES = 100_000
IMAGENET_CROP_AREA = [0.08, 1.0]


def recipe_advice(values: Mapping[str, Any]) -> Optional[str]:
  """A warning for training from scratch on small data with ImageNet's recipe (8%-area crops, a 90-epoch stepwise
  schedule), which fits small data badly, naming the configs made for it; None otherwise."""
  images = values['num_train_images']
  if (dataset_info.is_synthetic(values['data_dir']) or images is None or images >= SMALL_DATA_IMAGES
      or values['resnet_checkpoint'] or values['lr_schedule'] != 'stepwise'
      or list(values['crop_area_range']) != IMAGENET_CROP_AREA):
    return None
  return (f'The training set has {images} images, but this run trains from scratch with the ImageNet recipe '
          f'(crop_area_range={IMAGENET_CROP_AREA}, the stepwise 90-epoch schedule), which does much worse on small '
          'data. From scratch: --config_file=small_data (ResNet-18, LAMB, milder crops, cosine schedule). From '
          'ImageNet weights: --config_file=flowers_finetune --resnet_checkpoint=<weights>. See docs/data.md, "Your '
          'own data: which config".')
