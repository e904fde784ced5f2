"""The export a run asks for (``export_dir``): which checkpoint (the best one or the latest), the SavedModel with
its serving signatures and TF Serving warm-up requests, then the LiteRT and ONNX files measured on the run's own
images.

The chief exports; with several workers its failure stops every worker with it (``Estimator.on_chief``). The
measured files need the run's images, which are read before anything is written, so a missing split fails the
export with nothing half-written.
"""
import contextlib
import functools
from typing import Any, Callable, List, Mapping, Optional, Tuple

from absl import logging
import tensorflow as tf

from official_input import resnet_preprocessing
from params import resnet_config
from resnet.estimator import best_checkpoint as best_checkpoint_lib
from resnet.estimator.estimator import Estimator
from resnet.export import onnx_runtime
from resnet.task import tasks
from resnet.training import resnet_model_fn


def check_needs(params: Mapping[str, Any], mode: str, chief: bool) -> None:
  """Before the run trains: what its export (on the chief, which exports alone) or its predict with an .onnx needs
  installed: tf.lite's converter for .tflite files, the onnx extra for .onnx files; each missing one is named with
  what to do."""
  exporting = chief and mode in resnet_config.EXPORTING and params['export_dir']
  if exporting and (params['export_tflite'] or params['tflite_quantizations']):
    from resnet.export import tflite_export  # pylint: disable=g-import-not-at-top
    tflite_export.converter_class()
  if exporting and (params['export_onnx'] or params['onnx_quantizations']):
    onnx_runtime.require('--export_onnx')
  if mode == 'predict' and params['predict_onnx']:
    onnx_runtime.require('--predict_onnx', ('onnxruntime',))


def export(estimator: Estimator, params: Mapping[str, Any],
           best: Optional[best_checkpoint_lib.BestCheckpoint] = None) -> Optional[str]:
  """The SavedModel (and LiteRT and ONNX files) in params' export_dir; None without one."""
  if not params['export_dir']:
    return None
  checkpoint = best_checkpoint_path(params, best) if params['export_best'] else None  # the same files on every worker
  estimator.load_for_export(checkpoint)
  task = tasks.for_params(params)   # the export serves one view (tta is the model_fn's)
  decisions = task.decisions(estimator, checkpoint, best=checkpoint is not None,
                             averaged=params['export_moving_average'], single_view=True)
  return estimator.on_chief(lambda: _export(estimator, params, checkpoint, decisions),
                            f'export to {params["export_dir"]}')


def _export(estimator: Estimator, params: Mapping[str, Any], checkpoint: Optional[str], decisions: Any) -> str:
  task = tasks.for_params(params)
  weights = resnet_model_fn.averaged_weights(estimator.scope) if params['export_moving_average'] else None

  def predictions(logits):  # what the SavedModel outputs, and the .onnx too
    return task.predictions(logits, estimator.scope)
  # The run's images are read first: a missing split writes nothing.
  formats = deployed_formats(params, measured_images(params), predictions)
  path = estimator.export_saved_model(params['export_dir'], resnet_model_fn.serving_inputs(params),
                                      checkpoint_path=checkpoint, assets_extra_fn=warmup_requests(params),
                                      weights=weights)
  print(f'Exported SavedModel: {path} ({params["precision"]})')
  from resnet.evaluation import class_names  # pylint: disable=g-import-not-at-top
  records = task.write_export_records(path, decisions, lambda: class_names.read_class_names(params))
  if records:
    logging.info('For apps, to decide as predict does: %s', records)
  if formats:
    export_deployed(estimator, params, path, weights, formats, task.answers(decisions))
  return path


def best_checkpoint_path(params: Mapping[str, Any],
                         best: Optional[best_checkpoint_lib.BestCheckpoint]) -> Optional[str]:
  """export_best: model_dir/best/'s checkpoint; None (the latest) when best/ is damaged or its files are gone."""
  if best is None or best.role == 'follower':  # reading only (another job may be updating best/); a follower
    # knows only the writer's step and value, not its file: it reads what the writer committed, as the chief has
    best = best_checkpoint_lib.BestCheckpoint(params['model_dir'], params['best_metric'], params['best_metric_goal'],
                                              role='reader')
  checkpoint = best.checkpoint_path
  if checkpoint is None and not best.damaged:
    raise ValueError(f'export_best=true but {params["model_dir"]}/best/ holds no checkpoint: it is kept by '
                     'train_and_eval (and continuous eval); use mode=train_and_eval, or export_best=false.')
  if checkpoint is not None and tf.io.gfile.exists(checkpoint + '.index'):
    logging.info('Exporting the best checkpoint %s (%s=%.4f).', checkpoint, best.metric, best.value)
    return checkpoint
  gone = f'its checkpoint {checkpoint} is gone (removed during the run?)' if checkpoint else 'it is damaged'
  logging.warning('export_best: %s/best/: %s; exporting the latest checkpoint of %s instead.',
                  params['model_dir'], gone, params['model_dir'])
  return None


def warmup_requests(params: Mapping[str, Any]) -> Optional[Callable[[str], None]]:
  """TF Serving's warm-up records for the export's assets.extra (add_warmup_requests), or None."""
  if not params['add_warmup_requests']:
    return None
  from resnet.export import serving_warmup  # pylint: disable=g-import-not-at-top

  def write(export_dir: str) -> None:
    serving_warmup.write_warmup_requests(export_dir, params['model_name'], 'serving_default', 'input',
                                         params['inference_batch_sizes'],
                                         resnet_preprocessing.image_size(params, training=False))
  return write


def measured_images(params: Mapping[str, Any]):
  """(validation images, their labels, int8 calibration images or None), read once for the .tflite and .onnx files
  measured on them; None when no file is (no quantized .tflite, and no .onnx or a run without records)."""
  from official_input import dataset_info  # pylint: disable=g-import-not-at-top
  from resnet.export import host_images  # pylint: disable=g-import-not-at-top
  onnx = (params['export_onnx'] or params['onnx_quantizations']) and not dataset_info.is_synthetic(params['data_dir'])
  if not (params['tflite_quantizations'] or onnx):
    return None
  images, labels = host_images.host_images(params, 'validation', params['deploy_eval_images'])
  int8 = 'int8' in params['tflite_quantizations'] or 'int8' in params['onnx_quantizations']
  calibration = host_images.host_images(params, 'train', params['deploy_calibration_images'])[0] if int8 else None
  return images, labels, calibration


def deployed_formats(params: Mapping[str, Any], measured,
                     predictions: Optional[Callable[[tf.Tensor], Any]] = None) -> List[Tuple[Callable[..., Any], Any]]:
  """(format, measuring) for each deployed format the params ask for: the format's class with its own options
  (``deploy.DeployFormat``; it takes the float32 model, the image size and the answers), and what its files are
  measured on (``deploy.Measuring``), None for files that are checked but not measured: a .tflite without
  tflite_quantizations, an .onnx of a run without records. ``measured``: measured_images; ``predictions``: what the
  SavedModel outputs for logits (the task's), which the .onnx outputs too."""
  from resnet.export import deploy  # pylint: disable=g-import-not-at-top
  formats = []

  def measuring(kinds):
    from resnet.evaluation import class_names  # pylint: disable=g-import-not-at-top
    images, labels, calibration = measured
    return deploy.Measuring(images, labels, kinds, calibration if 'int8' in kinds else None,
                            params['deploy_min_agreement'], params['deploy_min_class_agreement'],
                            tuple(class_names.read_class_names(params)))

  if params['export_tflite'] or params['tflite_quantizations']:
    from resnet.export import tflite_export  # pylint: disable=g-import-not-at-top
    kinds = params['tflite_quantizations']
    formats.append((functools.partial(tflite_export.TfliteFormat, int8_io=params['tflite_int8_io'],
                                      float_fallback=params['tflite_float_fallback']),
                    measuring(kinds) if kinds else None))
  if params['export_onnx'] or params['onnx_quantizations']:
    from resnet.export import onnx_export  # pylint: disable=g-import-not-at-top
    if measured is None:  # params validation refuses quantized files without records: the float32 file only
      logging.warning('export_onnx: this run has no records (data_dir unset), so model.onnx is checked against its '
                      'weights and the SavedModel on random images but not measured on validation images (no '
                      'onnx_report.txt).')
    formats.append((functools.partial(onnx_export.OnnxFormat, opset=params['onnx_opset'], predictions=predictions),
                    None if measured is None else measuring(params['onnx_quantizations'])))
  return formats


def export_deployed(estimator: Estimator, params: Mapping[str, Any], saved_model_dir: str, weights, formats,
                    answers) -> None:
  """The deployed files of each format (``deployed_formats``), from one float32 copy of the exported weights, each
  checked, measured and written or refused by ``deploy.export``; what was written printed with its table.
  ``answers``: how the files' probabilities are decided, scored and compared (the task's)."""
  from resnet.export import deploy  # pylint: disable=g-import-not-at-top
  with (weights() if weights else contextlib.nullcontext()):
    copy = deploy.float32_copy(estimator.scope.get(resnet_model_fn.MODEL),
                               lambda: resnet_model_fn.build_model({**params, 'precision': 'float32'}))
  image_size = resnet_preprocessing.image_size(params, training=False)
  for make_format, measuring in formats:
    report = deploy.export(make_format(copy, image_size, answers), saved_model_dir, params['precision'], measuring)
    print(report.summary())
    print(report.table, end='')
