"""Reproducible runs: seeding and deterministic kernels, switched on by the program, never by a constructor.

Deterministic ops are process-wide and cannot be turned off again, so only the program (``resnet_main``, a tool, a
test) knows whether the whole process should pay for them; the Estimator leaves them alone.
"""
import keras
import tensorflow as tf


def make_deterministic(seed: int) -> None:
  """Seeds Python, NumPy, TF and Keras and turns on deterministic kernels: reruns give identical weights.

  Call it once, before the strategy and model are built (weights are drawn when they are created).
  """
  keras.utils.set_random_seed(seed)
  tf.config.experimental.enable_op_determinism()


def op_determinism_enabled() -> bool:
  """Whether deterministic ops are on in this process (TensorFlow 2.21 has no public getter; False if unknown)."""
  try:
    from tensorflow.python.framework import config as tf_config  # pylint: disable=g-import-not-at-top
    return bool(tf_config.is_op_determinism_enabled())
  except (ImportError, AttributeError):
    return False
