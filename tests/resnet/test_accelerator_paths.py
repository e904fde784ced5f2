"""GPU/TPU paths, tested the closest way a CPU allows: XLA on each replica step, TPU dtype and shape rules traced
from every replica function, and MirroredStrategy over two logical CPU devices."""
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from official_input import contract
from resnet.training import resnet_model_fn
from resnet.estimator import loops
from resnet.estimator.spec import ModeKeys
from tests.helpers import tiny

pytestmark = pytest.mark.slow  # end to end: whole runs, processes or their shared fixtures

# What a TPU cannot hold: 64-bit floats, strings, resources passed as data, complex numbers.
TPU_UNSUPPORTED = {tf.float64.as_datatype_enum, tf.string.as_datatype_enum, tf.complex64.as_datatype_enum,
                   tf.complex128.as_datatype_enum}
BATCH, SIZE = 2, 32


def unsupported_dtypes(concrete: tf.types.experimental.ConcreteFunction) -> set:
  """(op, dtype) of every node, in the graph and in every nested function body, whose type attrs a TPU lacks.

  Assert ops, the constants feeding only them, and unread constants are skipped: XLA compiles them to nothing, so
  their message strings never reach the device.
  """
  graph_def = concrete.graph.as_graph_def()
  bodies = [list(graph_def.node)] + [list(f.node_def) for f in graph_def.library.function]
  found = set()
  for nodes in bodies:
    consumers = {}
    for node in nodes:
      for name in node.input:
        consumers.setdefault(name.lstrip('^').split(':')[0], set()).add(node.op)
    # Skipped: Asserts and what only feeds them, and constants nothing reads (both compile to nothing).
    found |= _unsupported(n for n in nodes if n.op not in ('Assert', 'NoOp')
                          and consumers.get(n.name, set()) != {'Assert'}
                          and not (n.op == 'Const' and n.name not in consumers))
  for graph in _func_graphs(concrete.graph):  # output types that are no attr (e.g. AsString's string)
    for op in graph.get_operations():
      if op.type != 'Assert' and not all(c.type == 'Assert' for o in op.outputs for c in o.consumers() or [None]
                                         if c is not None):
        found |= {(op.type, o.dtype.name) for o in op.outputs if o.dtype.as_datatype_enum in TPU_UNSUPPORTED}
  return found


def _func_graphs(graph) -> list:
  """The graph and the graphs of every function it calls, nested ones and control-flow branches included."""
  graphs, pending = [], [graph]
  while pending:
    current = pending.pop()
    if any(current is g for g in graphs):
      continue
    graphs.append(current)
    pending += [f.graph for f in current._functions.values()  # pylint: disable=protected-access
                if getattr(f, 'graph', None) is not None]
  return graphs


def _unsupported(nodes) -> set:
  found = set()
  for node in nodes:
    for attr in node.attr.values():
      types = [attr.type] if attr.type else list(attr.list.type)
      found |= {(node.op, tf.as_dtype(t).name) for t in types if t in TPU_UNSUPPORTED}
  return found


def has_static_batch(concrete) -> bool:
  tensors = tf.nest.flatten(concrete.structured_outputs) + list(concrete.inputs)
  return all(t.shape.rank is None or t.shape.rank == 0 or t.shape[0] is not None
             for t in tensors if t.dtype != tf.resource)


def replica_functions(estimator):
  """Every replica function, traced on fixed-batch specs: train, eval, predict and the serving device part."""
  images = tf.TensorSpec([BATCH, SIZE, SIZE, 3], tf.float32)
  labels = tf.TensorSpec([BATCH], tf.int32)
  fns = estimator.replica_fns
  for mode in (ModeKeys.TRAIN, ModeKeys.EVAL, ModeKeys.PREDICT):
    estimator.build(mode)
  predict_params = estimator.mode_params(ModeKeys.PREDICT)
  serving = resnet_model_fn.serving_inputs(predict_params)['serving_images']

  def serving_device_part(images):
    features = serving.features_fn(images=images)
    return resnet_model_fn.resnet_model_fn(features, None, ModeKeys.PREDICT, predict_params).predictions

  return {
      'train': tf.function(fns.train()).get_concrete_function(images, labels),
      'eval': tf.function(fns.eval()).get_concrete_function(images, labels),
      'predict': tf.function(fns.predict()).get_concrete_function({'image': images}, labels),
      'serving': tf.function(serving_device_part).get_concrete_function(images),
  }


@pytest.fixture(scope='module')
def traced(tmp_path_factory):
  params = tiny.resnet_params(tmp_path_factory.mktemp('trace'), train_steps=4)
  return replica_functions(tiny.resnet_estimator(params))


@pytest.mark.parametrize('name', ['train', 'eval', 'predict', 'serving'])
def test_replica_functions_use_only_tpu_dtypes_and_static_batches(traced, name):
  assert unsupported_dtypes(traced[name]) == set()
  assert has_static_batch(traced[name])


def test_the_dtype_check_catches_float64_and_strings():
  bad = tf.function(lambda x: (tf.cast(x, tf.float64), tf.strings.as_string(x))).get_concrete_function(
      tf.TensorSpec([2], tf.float32))
  assert {'float64', 'string'} <= {dtype for _, dtype in unsupported_dtypes(bad)}
  # A string made inside a nested function (as the eval replica function is, off TPUs) and inside a branch.
  inner = tf.function(lambda x: tf.strings.length(tf.strings.as_string(x)))
  nested = tf.function(lambda x: tf.cond(x[0] > 0, lambda: inner(x), lambda: tf.zeros([2], tf.int32)))
  assert ('AsString', 'string') in unsupported_dtypes(nested.get_concrete_function(tf.TensorSpec([2], tf.float32)))
  dynamic = tf.function(lambda x: x * 2).get_concrete_function(tf.TensorSpec([None, 3], tf.float32))
  assert not has_static_batch(dynamic)


def test_predict_keeps_file_names_out_of_the_replica_function():
  features = {'image': tf.zeros([2, 4]), 'filename': tf.constant(['a', 'b'])}
  device, host = loops.split_host_features(features)
  assert list(device) == ['image'] and list(host) == ['filename']


def _input_fn(params):
  images = tf.random.stateless_uniform([16, SIZE, SIZE, 3], seed=[1, 2], maxval=255.0)
  labels = tf.constant([0, 1] * 8, tf.int32)
  ds = tf.data.Dataset.from_tensor_slices((images, labels))
  if params.context.mode == ModeKeys.TRAIN:
    ds = ds.repeat()
  context = contract.input_context(params)
  if context is not None and context.num_input_pipelines > 1:
    ds = ds.shard(context.num_input_pipelines, context.input_pipeline_id)
  return ds.batch(params['batch_size'], drop_remainder=True)


def _round_trip(model_dir, jit: bool, strategy=None, train: bool = True):
  params = tiny.resnet_params(model_dir, jit_compile=jit, train_steps=3, iterations_per_loop=3,
                              save_checkpoints_steps=3, train_batch_size=4, eval_batch_size=4,
                              predict_batch_size=4, lr_warmup_epochs=0.0, num_train_images=16)
  keras.utils.set_random_seed(5)  # the same initial weights for every call
  estimator = tiny.resnet_estimator(params, strategy)
  if train:
    estimator.train(_input_fn, max_steps=3)
  results = estimator.evaluate(_input_fn)
  predictions = list(estimator.predict(lambda p: _input_fn(p).map(lambda x, y: {'image': x})))
  export = estimator.export_saved_model(os.path.join(model_dir, 'export'), resnet_model_fn.serving_inputs(params))
  served = tf.saved_model.load(export).signatures['serving_images'](
      images=tf.random.stateless_uniform([2, SIZE, SIZE, 3], seed=[7, 7], maxval=255.0))
  return results, predictions, served['probabilities'].numpy()


def test_jit_round_trip_gives_the_same_metrics_predictions_and_export(tmp_path):
  plain = _round_trip(str(tmp_path / 'plain'), jit=False)
  jit = _round_trip(str(tmp_path / 'jit'), jit=True)
  for key in ('top_1_accuracy', 'top_5_accuracy', 'loss'):
    assert jit[0][key] == pytest.approx(plain[0][key], rel=1e-4, abs=1e-5), key
  assert jit[0]['num_examples'] == plain[0]['num_examples'] == 16
  assert len(jit[1]) == len(plain[1]) == 16
  np.testing.assert_allclose(np.stack([p['probabilities'] for p in jit[1]]),
                             np.stack([p['probabilities'] for p in plain[1]]), rtol=1e-3, atol=1e-5)
  np.testing.assert_allclose(jit[2], plain[2], rtol=1e-3, atol=1e-5)


def test_two_replica_mirrored_eval_equals_one_device(tmp_path):
  devices = tf.config.list_logical_devices('CPU')
  if len(devices) < 2:
    pytest.skip('needs two logical CPU devices (set up in conftest before TF initialises)')
  strategy = tf.distribute.MirroredStrategy([d.name for d in devices[:2]])
  model_dir = str(tmp_path / 'run')
  one = _round_trip(model_dir, jit=False)
  # The same checkpoint evaluated, predicted and exported by two replicas (XLA on each replica step).
  two = _round_trip(model_dir, jit=True, strategy=strategy, train=False)
  for key in ('top_1_accuracy', 'top_5_accuracy', 'loss'):
    assert two[0][key] == pytest.approx(one[0][key], rel=1e-4, abs=1e-5), key
  assert two[0]['num_examples'] == one[0]['num_examples'] == 16
  np.testing.assert_allclose(np.stack([p['probabilities'] for p in two[1]]),
                             np.stack([p['probabilities'] for p in one[1]]), rtol=1e-3, atol=1e-5)
  np.testing.assert_allclose(two[2], one[2], rtol=1e-3, atol=1e-5)
