"""SavedModel export in TF Serving's layout: ``<export_dir_base>/<version>/``, written whole or not at all."""
import contextlib
import os
import time
from typing import Any, Callable, ContextManager, Mapping, Optional

from absl import logging
import tensorflow as tf

from resnet.estimator import files
from resnet.estimator.spec import ModeKeys, ServingInput


def serving_function(model_fn: Callable, serving: ServingInput, params: Mapping[str, Any]) -> Callable:
  def serve(**inputs):
    features = serving.features_fn(**inputs)
    return model_fn(features, None, ModeKeys.PREDICT, params).predictions
  return tf.function(serve)


def _next_version_dir(export_dir_base: str) -> str:
  version = int(time.time())
  while tf.io.gfile.exists(os.path.join(export_dir_base, str(version))):
    version += 1
  return os.path.join(export_dir_base, str(version))


def export_saved_model(export_dir_base: str, objects: Mapping[str, Any], model_fn: Callable,
                       serving_inputs: Mapping[str, ServingInput], params: Mapping[str, Any],
                       assets_extra_fn: Optional[Callable[[str], None]] = None,
                       weights: Optional[Callable[[], ContextManager]] = None) -> str:
  """Saves ``objects`` (what prediction uses) with one signature per serving input; returns the version dir.

  ``assets_extra_fn(tmp_dir)`` may add files (e.g. ``assets.extra/``) before the directory is published;
  ``weights()`` is a context in which the variables hold the weights to export (e.g. moving averages).
  An existing version is never overwritten; a failed export leaves nothing under a version name.
  """
  module = tf.Module()
  module.objects = dict(objects)
  signatures = {}
  for name, serving in serving_inputs.items():  # concrete functions only: a tf.function saved as an attribute
    # is traced again by the save (its cache key holds the save context), a build of the model per signature
    signatures[name] = serving_function(model_fn, serving, params).get_concrete_function(**serving.input_signature)
  final_dir = _next_version_dir(export_dir_base)
  tmp_dir = files.temp_path(final_dir)
  try:
    tf.io.gfile.makedirs(export_dir_base)
    with (weights() if weights else contextlib.nullcontext()):
      tf.saved_model.save(module, tmp_dir, signatures=signatures)
    if assets_extra_fn:
      assets_extra_fn(tmp_dir)
    tf.io.gfile.rename(tmp_dir, final_dir)
  except (OSError, tf.errors.OpError) as e:
    _remove_tree(tmp_dir)
    raise files.WriteError(final_dir, e) from e
  except BaseException:
    _remove_tree(tmp_dir)
    raise
  logging.info('Exported SavedModel to %s (signatures: %s)', final_dir, ', '.join(signatures))
  return final_dir


def _remove_tree(path: str) -> None:
  try:
    if tf.io.gfile.exists(path):
      tf.io.gfile.rmtree(path)
  except (OSError, tf.errors.OpError):
    pass
