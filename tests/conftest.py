"""Test-session set-up: quiet TensorFlow logs and two logical CPU devices for MirroredStrategy tests."""
import os
import sys

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '1')  # the kernels resnet_main runs (it says why); CLI children inherit it
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)

import tensorflow as tf  # pylint: disable=g-import-not-at-top

try:
  _cpu = tf.config.list_physical_devices('CPU')[0]
  tf.config.set_logical_device_configuration(
      _cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()])
except RuntimeError:  # devices already initialised by an earlier import; mirrored tests skip themselves
  pass
