"""A toy model_fn (a dense layer on 4 features, 3 classes) and its inputs: the Estimator's tests run the runner
with it, model-agnostic as the runner is, in a fraction of a ResNet's time."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from official_input import contract
from resnet.estimator import estimator as E
from resnet.estimator.run_config import RunConfig
from resnet.estimator.spec import EstimatorSpec, ModeKeys

X = np.random.RandomState(0).randn(100, 4).astype('float32')
Y = ((X[:, 0] > 0).astype('int32') + (X[:, 1] > 1).astype('int32'))


def toy_model_fn(features, labels, mode, params):
  scope = params.context.scope
  model = scope.get_or_create('model', lambda: keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)]))
  if mode == ModeKeys.TRAIN:
    opt = scope.get_or_create('optimizer', lambda: _optimizer(model, params))
  if features is None:
    return None
  if mode == ModeKeys.TRAIN:
    with tf.GradientTape() as tape:
      logits = model(features, training=True)
      per_example = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
      loss = tf.nn.compute_average_loss(
          per_example, global_batch_size=params['batch_size'] * params.context.num_replicas)
      loss += params.get('loss_offset', 0.0)
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    replica = tf.distribute.get_replica_context().replica_id_in_sync_group
    return EstimatorSpec(mode, loss=loss, scalars={'replica_id': tf.cast(replica, tf.float32)})
  logits = model(features, training=False)
  if mode == ModeKeys.EVAL:
    weights = tf.cast(labels >= 0, tf.float32)
    correct = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), tf.maximum(labels, 0)), tf.float32)
    return EstimatorSpec(mode, eval_metrics={'accuracy': (tf.reduce_sum(correct * weights),
                                                            tf.reduce_sum(weights))})
  return EstimatorSpec(mode, predictions={'classes': tf.argmax(logits, -1)})


def _optimizer(model, params):
  opt = keras.optimizers.SGD(params.get('lr', 0.1), momentum=0.9)
  opt.build(model.trainable_variables)
  return opt


def train_input(params):
  return tf.data.Dataset.from_tensor_slices((X, Y)).repeat().batch(params['batch_size'], drop_remainder=True)


def eval_input(params):
  ds = tf.data.Dataset.from_tensor_slices((X, Y))
  context = contract.input_context(params)
  if context is not None and context.num_input_pipelines > 1:
    ds = ds.shard(context.num_input_pipelines, context.input_pipeline_id)
  return ds.batch(params['batch_size'])


def make_runner(model_dir, strategy=None, params=None, **config):
  defaults = dict(train_batch_size=8, eval_batch_size=8, predict_batch_size=8, iterations_per_loop=10,
                  save_checkpoints_steps=20)
  defaults.update(config)
  return E.Estimator(toy_model_fn, RunConfig(model_dir=str(model_dir), **defaults), params or {}, strategy)


def two_device_strategy():
  devices = tf.config.list_logical_devices('CPU')
  if len(devices) < 2:
    pytest.skip('needs two logical CPU devices (set up in conftest before TF initialises)')
  return tf.distribute.MirroredStrategy([d.name for d in devices[:2]])
