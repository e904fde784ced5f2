"""What tests/conftest.py changes in the test processes, and that it reaches every kind of iterator."""
import numpy as np
import tensorflow as tf
from tensorflow.python.data.ops import dataset_ops  # pylint: disable=g-direct-tensorflow-import

from official_input import imagenet_input
from tests.helpers import tiny


def _autotune_of_iterated(monkeypatch, make_iterator) -> list:
  """The autotune setting of every dataset an iterator is made of, as TensorFlow finalises it."""
  seen = []
  hook = dataset_ops.DatasetV2._apply_debug_options  # pylint: disable=protected-access

  def spy(self):
    finalised = hook(self)
    seen.append(finalised.options().autotune.enabled)
    return finalised
  monkeypatch.setattr(dataset_ops.DatasetV2, '_apply_debug_options', spy)
  make_iterator()
  return seen


def test_iterators_of_the_test_processes_run_without_the_autotune_thread(monkeypatch):
  plain = tf.data.Dataset.range(8).map(lambda x: x * 2, num_parallel_calls=tf.data.AUTOTUNE).prefetch(-1)
  assert _autotune_of_iterated(monkeypatch, lambda: next(iter(plain))) == [False]
  pipeline = imagenet_input.ImageNetInput(is_training=True, data_dir=None, image_size=32, num_label_classes=3)
  strategy = tiny.two_replicas()   # a multi-device iterator: one finalised dataset per replica's pipeline
  seen = _autotune_of_iterated(monkeypatch, lambda: next(iter(strategy.distribute_datasets_from_function(
      lambda ctx: pipeline.input_fn({'batch_size': 2})))))
  assert seen and not any(seen), seen


def test_tensorflows_own_hook_leaves_autotuning_on_with_the_same_elements(monkeypatch):
  """The negative control of the check above (without conftest's hook the same spy sees autotuning unset: on), and
  what the suite relies on: the elements and their order do not depend on it."""
  dataset = tf.data.Dataset.range(40).map(lambda x: x * 3, num_parallel_calls=tf.data.AUTOTUNE).batch(4).prefetch(-1)
  without, with_autotune = [], []
  assert _autotune_of_iterated(monkeypatch, lambda: without.extend(b.numpy() for b in dataset)) == [False]
  monkeypatch.setattr(dataset_ops.DatasetV2, '_apply_debug_options', lambda self: self)  # TensorFlow's, outside debug
  seen = _autotune_of_iterated(monkeypatch, lambda: with_autotune.extend(b.numpy() for b in dataset))
  assert seen == [None]   # unset: TensorFlow's default, autotuning on
  np.testing.assert_array_equal(np.concatenate(with_autotune), np.concatenate(without))
  np.testing.assert_array_equal(np.concatenate(without), np.arange(40) * 3)
