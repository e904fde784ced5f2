"""The training loss of resnet_model_fn with class weights, on 1 device and 2 replicas, against a hand computation:
weighted examples, and mixed examples weighing each source."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from official_input import resnet_preprocessing

from resnet.task import tasks
from resnet.training import mixing
from resnet.training import resnet_model_fn
from tests.helpers import tiny

SIZE = 32
CLASSES = 3


TRAIN_LABELS = np.array([0, 1, 2, 0, 1, 2, 0, 0], np.int32)
TRAIN_IMAGES = tiny.varied_images(8, seed=9, size=SIZE)
CLASS_WEIGHTS = [1.0, 3.0, 0.5]


def _train_input(params):
  return tf.data.Dataset.from_tensor_slices((TRAIN_IMAGES, TRAIN_LABELS)).repeat().batch(params['batch_size'])


@pytest.mark.slow
@pytest.mark.parametrize('replicas', [1, 2])
def test_class_weighted_loss_equals_the_hand_computed_one(tmp_path, replicas):
  params = tiny.resnet_params(tmp_path, num_label_classes=CLASSES, train_batch_size=8, num_train_images=64,
                              weight_decay=0.0, class_weights=CLASS_WEIGHTS, train_steps=1)
  keras.utils.set_random_seed(4)
  estimator = tiny.resnet_estimator(params, tiny.strategy(replicas))
  estimator.build('train')
  model = estimator.scope.get(resnet_model_fn.MODEL)
  # Each replica normalises its own examples with its batch's statistics: replica r gets examples 4r..4r+3.
  parts = np.split(np.arange(8), replicas)
  logits = np.concatenate([model(TRAIN_IMAGES[p], training=True).numpy() for p in parts])
  losses = keras.losses.sparse_categorical_crossentropy(TRAIN_LABELS, logits, from_logits=True).numpy()
  expected = float(np.sum(np.take(CLASS_WEIGHTS, TRAIN_LABELS) * losses) / 8)
  unweighted = float(np.mean(losses))
  assert abs(expected - unweighted) > 1e-3 * unweighted
  loss = estimator.train(_train_input, max_steps=1)['loss']
  assert loss == pytest.approx(expected, rel=1e-5)


@pytest.mark.slow
def test_class_weights_with_mixup_weigh_each_source_of_a_mixed_example(tmp_path):
  """Each mixed example's loss is lam * w_a * CE_a + (1 - lam) * w_b * CE_b: the weighted loss of both sources
  (not their mixed weight times the mixed cross-entropy)."""
  params = tiny.resnet_params(tmp_path, num_label_classes=CLASSES, train_batch_size=8, num_train_images=64,
                              weight_decay=0.0, class_weights=CLASS_WEIGHTS, train_steps=1, mixup_alpha=1.0,
                              random_seed=5)
  keras.utils.set_random_seed(4)
  estimator = tiny.resnet_estimator(params)
  estimator.build('train')
  model = estimator.scope.get(resnet_model_fn.MODEL)
  one_hot = tf.one_hot(TRAIN_LABELS, CLASSES)
  images, mixed = mixing.mix(tf.constant(TRAIN_IMAGES), one_hot, mixing.MixConfig(mixup_alpha=1.0),
                             mixing.mix_seed(tf.constant(0, tf.int64), 5))
  sources = TRAIN_LABELS[::-1]
  i = int(np.flatnonzero(TRAIN_LABELS != sources)[0])
  lam = float(mixed[i, TRAIN_LABELS[i]])
  assert 0.05 < lam < 0.95, lam   # a real mix, or the test would not tell the two formulas apart
  logits = model(images, training=True)
  ce = lambda labels: keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True).numpy()
  weights = np.array(CLASS_WEIGHTS)
  expected = float(np.sum(lam * weights[TRAIN_LABELS] * ce(TRAIN_LABELS)
                          + (1 - lam) * weights[sources] * ce(sources)) / 8)
  mixed_weight_times_mixed_loss = float(np.sum(
      (lam * weights[TRAIN_LABELS] + (1 - lam) * weights[sources])
      * (lam * ce(TRAIN_LABELS) + (1 - lam) * ce(sources))) / 8)
  assert abs(mixed_weight_times_mixed_loss - expected) > 1e-3 * expected
  loss = estimator.train(_train_input, max_steps=1)['loss']
  assert loss == pytest.approx(expected, rel=1e-5)


@pytest.mark.slow
def test_flip_tta_averages_each_image_with_its_mirror_in_eval_and_predict_and_export_serves_one_view(tmp_path):
  params = tiny.resnet_params(tmp_path, tta='flip', weight_decay=0.0, num_label_classes=3, train_batch_size=4,
                              eval_batch_size=4, predict_batch_size=4, train_steps=1, num_train_images=64)
  images = tiny.varied_images(8, seed=3)
  labels = np.array([0, 1, 2, 0, 1, 2, 0, 1], np.int32)
  estimator = tiny.resnet_estimator(params)
  estimator.train(lambda p: tf.data.Dataset.from_tensor_slices((images, labels)).repeat().batch(p['batch_size']),
                  max_steps=1)
  model = estimator.scope.get(resnet_model_fn.MODEL)
  single = tf.nn.softmax(model(images, training=False)).numpy()
  mirrored = tf.nn.softmax(model(images[:, :, ::-1], training=False)).numpy()   # left-right: the width axis
  assert np.max(np.abs(single - mirrored)) > 1e-3   # the two views answer differently
  expected = (single + mirrored) / 2
  predicted = list(estimator.predict(lambda p: tf.data.Dataset.from_tensor_slices(images).batch(p['batch_size'])))
  np.testing.assert_allclose(np.stack([p['probabilities'] for p in predicted]), expected, rtol=1e-5, atol=1e-6)
  results = estimator.evaluate(lambda p: tf.data.Dataset.from_tensor_slices((images, labels)).batch(p['batch_size']))
  assert results['loss'] == pytest.approx(float(np.mean(-np.log(expected[np.arange(8), labels]))), rel=1e-5)
  assert results['top_1_accuracy'] == pytest.approx(float(np.mean(expected.argmax(axis=1) == labels)))
  path = estimator.export_saved_model(str(tmp_path / 'export'), resnet_model_fn.serving_inputs(params))
  served = tf.saved_model.load(path).signatures['serving_images'](images=tf.constant(images))['probabilities']
  np.testing.assert_allclose(served.numpy(), single, rtol=1e-5, atol=1e-6)


def test_flip_tta_stays_finite_where_a_class_underflows_in_both_views():
  """log(mean probability) would be -inf for a logit gap of ~100: the eval loss NaN, top-k wrong."""
  from resnet.estimator.spec import RunContext, RunParams  # pylint: disable=import-outside-toplevel
  params = RunParams({'tta': 'flip', 'loss': 'softmax_cross_entropy'}, 1, RunContext('eval'))
  extreme = lambda images, training: (tf.constant([[0.0, 300.0, -300.0]])
                                      + tf.reduce_mean(images, [1, 2, 3])[:, None] * 0)
  logits = resnet_model_fn.inference_logits(extreme, tf.zeros([1, 4, 4, 3]), params)
  assert np.all(np.isfinite(logits.numpy()))
  np.testing.assert_allclose(tf.nn.softmax(logits).numpy(), [[0.0, 1.0, 0.0]], atol=1e-7)
  loss = tasks.for_params(params).per_example_loss(logits, tf.constant([[0.05, 0.9, 0.05]]))
  assert np.isfinite(float(loss[0]))
  assert bool(tf.math.in_top_k(tf.constant([1]), logits, 2)[0])


def test_flip_tta_under_binary_cross_entropy_averages_the_sigmoids():
  """BCE models each class's sigmoid: TTA averages those, and the eval loss reads the average (finite at the
  extremes); averaging softmax probabilities would give another loss and another argmax."""
  from resnet.estimator.spec import RunContext, RunParams  # pylint: disable=import-outside-toplevel
  params = RunParams({'tta': 'flip', 'loss': 'binary_cross_entropy', 'bce_target_threshold': None}, 1,
                     RunContext('eval'))
  # The "model" reads the first row's first 3 pixels: the mirrored view reads the last 3, reversed.
  row = np.array([[4.0, -1.0, 0.5, 200.0, -3.0, -300.0]], np.float32)
  images = tf.constant(np.tile(row[:, None, :, None], [1, 2, 1, 3]))
  fake = lambda x, training: x[:, 0, :3, 0]
  logits = resnet_model_fn.inference_logits(fake, images, params)
  sigmoid = lambda z: 1.0 / (1.0 + np.exp(-np.asarray(z, np.float64)))
  mean = (sigmoid([4.0, -1.0, 0.5]) + sigmoid([-300.0, -3.0, 200.0])) / 2
  np.testing.assert_allclose(sigmoid(logits.numpy()[0]), mean, rtol=1e-6)
  assert np.all(np.isfinite(logits.numpy()))
  targets = np.array([[0.0, 0.0, 1.0]])
  loss = tasks.for_params(params).per_example_loss(logits, tf.constant(targets, tf.float32))
  expected = -np.mean(targets * np.log(mean) + (1 - targets) * np.log(1 - mean))
  assert float(loss[0]) == pytest.approx(expected, rel=1e-5)


@pytest.mark.slow
def test_ten_crop_tta_averages_the_ten_views_in_eval_and_predict_and_the_input_gives_the_larger_view(tmp_path):
  params = tiny.resnet_params(tmp_path, tta='ten_crop', weight_decay=0.0, num_label_classes=3, eval_batch_size=4,
                              predict_batch_size=4, num_train_images=64)
  from official_input import imagenet_input  # pylint: disable=import-outside-toplevel
  source = imagenet_input.ImageNetInput.from_params(params, 'validation')
  assert (source.image_size, source.crop_fraction) == (37, 1.0)   # 32 + round(32 / 7)
  images = tiny.varied_images(8, seed=5, size=37)
  labels = np.array([0, 1, 2, 0, 1, 2, 0, 1], np.int32)
  estimator = tiny.resnet_estimator(params)
  estimator.build('eval')
  estimator.save()   # untrained weights: what predict and eval restore
  model = estimator.scope.get(resnet_model_fn.MODEL)
  views = resnet_preprocessing.tta_views(tf.constant(images), params)
  expected = np.mean([tf.nn.softmax(model(v, training=False)).numpy() for v in views], axis=0)
  single = tf.nn.softmax(model(views[0], training=False)).numpy()
  assert np.max(np.abs(single - expected)) > 1e-3   # the views answer differently
  predicted = list(estimator.predict(lambda p: tf.data.Dataset.from_tensor_slices(images).batch(p['batch_size'])))
  np.testing.assert_allclose(np.stack([p['probabilities'] for p in predicted]), expected, rtol=1e-5, atol=1e-6)
  results = estimator.evaluate(lambda p: tf.data.Dataset.from_tensor_slices((images, labels)).batch(p['batch_size']))
  assert results['loss'] == pytest.approx(float(np.mean(-np.log(expected[np.arange(8), labels]))), rel=1e-5)


def test_the_model_fn_is_traced_without_autograph():
  """It is tensor ops with Python ifs on params: AutoGraph converting it and all it calls cost ~3 s a start."""
  from tensorflow.python.autograph.impl import api as autograph_api  # pylint: disable=import-outside-toplevel
  assert autograph_api.is_autograph_artifact(resnet_model_fn.resnet_model_fn)  # do_not_convert's mark
