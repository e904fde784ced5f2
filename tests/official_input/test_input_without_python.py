"""The input graph holds no Python op, so TPU hosts without a Python interpreter (a TPU Node, Colab TPU, a pod's
other hosts) can run it: skip and damage accounting live in TF ops (official_input/accounting.py)."""
import os

import numpy as np
import pytest
import tensorflow as tf

from official_input import imagenet_input as ii
from resnet.estimator import spec
from tests.helpers import cli

PYTHON_OPS = {'PyFunc', 'PyFuncStateless', 'EagerPyFunc'}


def _op_types(dataset: tf.data.Dataset) -> set:
  graph = tf.compat.v1.GraphDef()
  graph.ParseFromString(dataset._as_serialized_graph().numpy())  # pylint: disable=protected-access
  ops = {node.op for node in graph.node}
  for function in graph.library.function:
    ops |= {node.op for node in function.node_def}
  return ops


def _tpu_host_context(pipeline_id: int = 1) -> tf.distribute.InputContext:
  """What TPUStrategy hands input_fn on a pod's second host: 2 hosts feeding 8 cores."""
  return tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=pipeline_id, num_replicas_in_sync=8)


@pytest.fixture(scope='module')
def data_dir(tmp_path_factory):
  path = str(tmp_path_factory.mktemp('data'))
  return cli.make_tiny_dataset(path, num_train=12, num_validation=6, num_shards=2,
                               extra_train=cli.bad_train_examples())


@pytest.mark.parametrize('split, options', [
    ('train', {}), ('train', {'seed': 3}), ('train', {'pipeline': 'basic', 'use_cache': True}),
    ('validation', {}), ('validation', {'num_images': 5}), ('test', {'include_filename': True}),
])
def test_the_tpu_configured_input_graph_holds_no_python_op(data_dir, split, options):
  if split == 'test':
    for name in os.listdir(data_dir):
      if name.startswith('validation-'):
        tf.io.gfile.copy(os.path.join(data_dir, name), os.path.join(data_dir, name.replace('validation', 'test')),
                         overwrite=True)
  source = ii.ImageNetInput(is_training=split == 'train', data_dir=data_dir, split=split, image_size=32,
                            num_label_classes=cli.NUM_CLASSES, fail_on_data_loss=split == 'validation', **options)
  dataset = source.input_fn(spec.RunParams({}, 2, spec.RunContext('train', input_context=_tpu_host_context())))
  ops = _op_types(dataset)
  assert 'FilterDataset' in ops and 'TFRecordDataset' in ops  # the accounting and the reader are in the graph
  assert not ops & PYTHON_OPS, ops & PYTHON_OPS


def test_raw_image_files_input_holds_no_python_op(tmp_path):
  for i in range(3):
    tf.io.write_file(str(tmp_path / f'{i}.jpg'), tf.io.encode_jpeg(np.full((8, 8, 3), i * 40, np.uint8)))
  dataset = ii.ImageFilesInput(str(tmp_path / '*.jpg'), image_size=32).input_fn({'batch_size': 2})
  assert not _op_types(dataset) & PYTHON_OPS


def test_the_check_sees_a_python_op():
  """A negative control: the same inspection finds the op a tf.numpy_function adds."""
  dataset = tf.data.Dataset.range(3).map(lambda x: tf.numpy_function(lambda v: v, [x], tf.int64))
  assert _op_types(dataset) & PYTHON_OPS


def test_counts_from_the_tf_accounting_equal_what_the_pipeline_skipped(data_dir):
  """The counters are read back in Python between loops, though the graph has no Python op."""
  source = ii.ImageNetInput(is_training=True, data_dir=data_dir, image_size=32, num_label_classes=cli.NUM_CLASSES,
                            shuffle_buffer_size=1, seed=1)
  for _ in source.input_fn({'batch_size': 3}).take(8):  # 24 records: every one of the 15 at least once
    pass
  reasons = source.skipped_by_reason
  assert reasons['not an image'] >= 2 and reasons['undecodable image'] >= 1, reasons
