"""Modern recipe ingredients in the train step and the export: gradient accumulation, mixup/CutMix, eval_image_size,
TFLite. The CLI runs them together in tests/resnet/test_resnet_main.py."""
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from official_input import resnet_preprocessing
from resnet.training import resnet_model_fn
from resnet.export import tflite_export
from tests.helpers import tiny

SIZE = 32


def _repeating_input(params):
  """Two images in turn, A B A B ...: every micro-batch of 2 or more even examples has the batch's statistics, so
  batch norm cannot tell micro-batches from the batch."""
  pair = tf.random.stateless_uniform([2, SIZE, SIZE, 3], seed=[3, 4], maxval=255.0)
  images = tf.tile(pair, [32, 1, 1, 1])
  labels = tf.constant([0, 1] * 32, tf.int32)
  if params['task'] == 'multi_label':   # multi-hot rows: the first image has class 0, the second both
    labels = tf.constant([[1, 0], [1, 1]] * 32, tf.int32)
  return tf.data.Dataset.from_tensor_slices((images, labels)).repeat().batch(params['batch_size'],
                                                                            drop_remainder=True)


def _one_update(model_dir, accumulate, strategy=None, **overrides):
  """(trainable weights before, after) one update from seeded initial weights."""
  settings = dict(train_batch_size=8, gradient_accumulation_steps=accumulate, train_steps=1, lr_warmup_epochs=0.0,
                  num_train_images=64, weight_decay=1e-3, base_learning_rate=3.0)
  params = tiny.resnet_params(model_dir, **{**settings, **overrides})
  keras.utils.set_random_seed(7)  # the same initial weights for every call
  estimator = tiny.resnet_estimator(params, strategy)
  estimator.build('train')
  model = estimator.scope.get(resnet_model_fn.MODEL)
  # Trainable weights: batch norm's moving averages take one step per micro-batch (as in other frameworks).
  before = [w.numpy().copy() for w in model.trainable_weights]
  estimator.train(_repeating_input, max_steps=1)
  assert int(estimator.global_step.numpy()) == 1  # one update, whatever the number of micro-batches
  return before, [w.numpy().copy() for w in model.trainable_weights]


@pytest.mark.slow
@pytest.mark.parametrize('replicas', [1, 2])
def test_accumulated_micro_batches_make_the_same_update_as_one_batch(tmp_path, replicas):
  strategy = tiny.two_replicas() if replicas == 2 else None
  before, whole = _one_update(tmp_path / 'k1', 1, strategy)
  same_start, accumulated = _one_update(tmp_path / 'k2', 2 if replicas == 2 else 4, strategy)  # micro-batch: 2
  for a, b in zip(before, same_start):
    np.testing.assert_array_equal(a, b)
  updates = [(w - b, a - b) for w, a, b in zip(whole, accumulated, before)]
  assert sum(np.abs(u).max() > 1e-6 for u, _ in updates) > len(updates) // 2  # the update is not trivially zero
  for update, accumulated_update in updates:
    # The same update up to float32 summation order (a wrong scale, a decay applied per micro-batch or a lost
    # micro-batch would be off by tens of percent).
    error = np.linalg.norm(accumulated_update - update)
    assert error <= 2e-3 * np.linalg.norm(update) + 1e-6


@pytest.mark.slow
def test_accumulation_is_exact_for_multi_hot_targets_with_class_weights_and_smoothing(tmp_path):
  multi = dict(task='multi_label', class_weights=[1.0, 3.0], label_smoothing=0.1)
  before, whole = _one_update(tmp_path / 'k1', 1, **multi)
  _, accumulated = _one_update(tmp_path / 'k4', 4, **multi)
  updates = [(w - b, a - b) for w, a, b in zip(whole, accumulated, before)]
  assert sum(np.abs(u).max() > 1e-6 for u, _ in updates) > len(updates) // 2
  for update, accumulated_update in updates:
    assert np.linalg.norm(accumulated_update - update) <= 2e-3 * np.linalg.norm(update) + 1e-6


def test_accumulation_that_does_not_divide_the_batch_names_the_fix(tmp_path):
  with pytest.raises(ValueError, match='must divide the per-replica batch'):
    _one_update(tmp_path, 3)


@pytest.mark.slow
def test_mixup_and_cutmix_change_the_update_and_stay_seeded(tmp_path):
  _, plain = _one_update(tmp_path / 'plain', 1, random_seed=5)
  _, mixed = _one_update(tmp_path / 'mixed', 1, random_seed=5, mixup_alpha=0.4, cutmix_alpha=1.0)
  _, again = _one_update(tmp_path / 'again', 1, random_seed=5, mixup_alpha=0.4, cutmix_alpha=1.0)
  assert any(not np.allclose(a, b) for a, b in zip(plain, mixed))
  for a, b in zip(mixed, again):  # the same mix (stateless draws); CPU kernels may differ in the last bit
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_eval_image_size_sets_eval_input_and_export_but_not_training(tmp_path):
  params = tiny.resnet_params(tmp_path, image_size=32, eval_image_size=48)
  unset = tiny.resnet_params(tmp_path / 'b', image_size=40)
  assert resnet_preprocessing.image_size(unset, training=False) == 40  # unset = image_size
  from official_input import imagenet_input  # pylint: disable=import-outside-toplevel
  assert imagenet_input.ImageNetInput.from_params(params, 'train').image_size == 32
  assert imagenet_input.ImageNetInput.from_params(params, 'validation').image_size == 48
  assert imagenet_input.ImageNetInput.from_params(params, 'test').image_size == 48
  serving = resnet_model_fn.serving_inputs(params)
  assert serving['serving_images'].input_signature['images'].shape[1:3] == (48, 48)


@pytest.mark.slow
def test_tflite_equals_the_saved_model_within_1e_4_and_a_mismatch_is_an_error(tmp_path):
  params = tiny.resnet_params(tmp_path / 'model', image_size=SIZE, num_label_classes=3)
  keras.utils.set_random_seed(3)
  estimator = tiny.resnet_estimator(params)
  estimator.train(_repeating_input, max_steps=1)
  model = estimator.scope.get(resnet_model_fn.MODEL)
  export = estimator.export_saved_model(str(tmp_path / 'export'), resnet_model_fn.serving_inputs(params))
  build = lambda: resnet_model_fn.build_model(params)  # pylint: disable=unnecessary-lambda-assignment
  report = tflite_export.export_tflite(export, model, build, SIZE, 'float32')
  assert report.path == os.path.join(export, 'model.tflite') and os.path.getsize(report.path) == report.bytes
  assert report.ops > 20 and report.max_difference <= 1e-4
  images = tflite_export.parity_images(SIZE, 3, seed=9)
  served = tf.saved_model.load(export).signatures['serving_images'](images=tf.constant(images))
  lite = tflite_export.tflite_probabilities(open(report.path, 'rb').read(), images)
  np.testing.assert_allclose(lite, served['probabilities'].numpy(), atol=1e-4)
  assert lite.shape == (3, 3) and np.allclose(lite.sum(axis=1), 1.0, atol=1e-5)

  assert report.saved_model_difference <= 1e-4
  written = open(report.path, 'rb').read()

  head = model.get_layer('dense')
  head.kernel.assign(head.kernel * 3.0)  # weights changed after the export: the .tflite no longer matches it
  with pytest.raises(RuntimeError, match='differs from the SavedModel.*was not written'):
    tflite_export.export_tflite(export, model, build, SIZE, 'float32')
  assert open(report.path, 'rb').read() == written   # the earlier file is kept whole


@pytest.mark.slow
def test_a_faulty_conversion_fails_the_export_in_every_precision(tmp_path, monkeypatch):
  """A bfloat16 SavedModel differs from any float32 .tflite by its rounding, so that comparison cannot catch a
  conversion fault; the .tflite against the float32 weights it came from can, in every precision."""
  params = tiny.resnet_params(tmp_path / 'model', image_size=SIZE, num_label_classes=3, precision='bfloat16')
  keras.utils.set_random_seed(3)
  estimator = tiny.resnet_estimator(params)
  estimator.train(_repeating_input, max_steps=1)
  model = estimator.scope.get(resnet_model_fn.MODEL)
  export = estimator.export_saved_model(str(tmp_path / 'export'), resnet_model_fn.serving_inputs(params))
  build = lambda: resnet_model_fn.build_model({**params, 'precision': 'float32'})  # pylint: disable=unnecessary-lambda-assignment
  real_convert = tflite_export.convert

  def faulty(copy, image_size, **kwargs):  # a converter that loses part of the head
    copy.get_layer('dense').kernel.assign(copy.get_layer('dense').kernel * 0.5)
    flatbuffer = real_convert(copy, image_size, **kwargs)
    copy.get_layer('dense').kernel.assign(copy.get_layer('dense').kernel * 2.0)
    return flatbuffer

  monkeypatch.setattr(tflite_export, 'convert', faulty)
  with pytest.raises(RuntimeError, match='differs from the float32 weights it was converted from'):
    tflite_export.export_tflite(export, model, build, SIZE, 'bfloat16')
  assert not os.path.exists(os.path.join(export, tflite_export.TFLITE_NAME))
  monkeypatch.setattr(tflite_export, 'convert', real_convert)
  report = tflite_export.export_tflite(export, model, build, SIZE, 'bfloat16')
  assert report.max_difference <= 1e-4 and report.saved_model_difference > 0  # bfloat16 rounding, logged
