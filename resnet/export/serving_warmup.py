"""TF Serving warm-up requests for an exported SavedModel (``--add_warmup_requests``).

TF Serving replays ``<export_dir>/assets.extra/tf_serving_warmup_requests`` -- a TFRecord file of serialized
``tensorflow.serving.PredictionLog`` protos -- when it loads a model, so the first real request does not pay for
graph optimisation and kernel autotuning at each batch size. We write one ``PredictLog`` per batch size (more with
``requests_per_batch_size``) whose ``PredictRequest`` feeds ``batch`` encoded JPEGs of ``image_size`` pixels to
the string input of the serving signature.

Why no ``tensorflow-serving-api`` package: it pins TensorFlow versions and would be a dependency for four tiny
messages. The messages are declared here instead, with protobuf's descriptor API (a ``FileDescriptorProto`` with
TF Serving's exact field numbers, ``SERVING_FIELD_NUMBERS``), in a private descriptor pool: a real
``tensorflow_serving`` import in the same process registers the same full names in the default pool, which would
clash. ``TensorProto`` is TensorFlow's own message (``tensorflow/core/framework/tensor.proto``); its file and
dependencies are copied into the private pool so the ``inputs`` map can refer to it. A descriptor-built class,
rather than a hand-written wire encoder, lets protobuf do the encoding (map entries, nested lengths) and lets
callers and tests parse the file back. Only the fields we write are declared; unknown fields are not needed.
"""
import os
from typing import Dict, Sequence, Tuple

from absl import logging
from google.protobuf import descriptor_pb2
from google.protobuf import descriptor_pool
from google.protobuf import message_factory
import numpy as np
import tensorflow as tf
from tensorflow.core.framework import tensor_pb2

from resnet.estimator import files

WARMUP_DIRECTORY = 'assets.extra'
WARMUP_FILE_NAME = 'tf_serving_warmup_requests'
SERVING_PACKAGE = 'tensorflow.serving'
_PROTO_FILE = 'resnet/serving_warmup_messages.proto'  # our declaration's file name inside the private pool
_TENSOR_PROTO = '.tensorflow.TensorProto'

# message -> ((field, number), ...): the fields we write, numbered as in TF Serving's tensorflow_serving/apis/
# model.proto, predict.proto and prediction_log.proto. A wrong number would make TF Serving read another field.
_F = descriptor_pb2.FieldDescriptorProto
SERVING_FIELD_NUMBERS: Dict[str, Tuple[Tuple[str, int], ...]] = {
    'ModelSpec': (('name', 1), ('signature_name', 3)),                        # model.proto
    'PredictRequest': (('model_spec', 1), ('inputs', 2)),                     # predict.proto
    'PredictLog': (('request', 1),),                                          # prediction_log.proto
    'PredictionLog': (('predict_log', 6),),                                   # prediction_log.proto (oneof)
}
_FIELD_TYPES = {
    ('ModelSpec', 'name'): (_F.TYPE_STRING, None),
    ('ModelSpec', 'signature_name'): (_F.TYPE_STRING, None),
    ('PredictRequest', 'model_spec'): (_F.TYPE_MESSAGE, '.tensorflow.serving.ModelSpec'),
    ('PredictRequest', 'inputs'): (_F.TYPE_MESSAGE, '.tensorflow.serving.PredictRequest.InputsEntry'),
    ('PredictLog', 'request'): (_F.TYPE_MESSAGE, '.tensorflow.serving.PredictRequest'),
    ('PredictionLog', 'predict_log'): (_F.TYPE_MESSAGE, '.tensorflow.serving.PredictLog'),
}


def _add_with_dependencies(pool: descriptor_pool.DescriptorPool, file_descriptor, added: set) -> None:
  if file_descriptor.name in added:
    return
  for dependency in file_descriptor.dependencies:
    _add_with_dependencies(pool, dependency, added)
  proto = descriptor_pb2.FileDescriptorProto()
  file_descriptor.CopyToProto(proto)
  pool.Add(proto)
  added.add(file_descriptor.name)


def _file_proto() -> descriptor_pb2.FileDescriptorProto:
  proto = descriptor_pb2.FileDescriptorProto(name=_PROTO_FILE, package=SERVING_PACKAGE, syntax='proto3',
                                             dependency=[tensor_pb2.DESCRIPTOR.name])
  for message_name, fields in SERVING_FIELD_NUMBERS.items():
    message = proto.message_type.add(name=message_name)
    for field_name, number in fields:
      field_type, type_name = _FIELD_TYPES[(message_name, field_name)]
      label = _F.LABEL_REPEATED if field_name == 'inputs' else _F.LABEL_OPTIONAL
      field = message.field.add(name=field_name, number=number, type=field_type, label=label)
      if type_name:
        field.type_name = type_name
    if message_name == 'PredictRequest':  # map<string, TensorProto> inputs = 2: a nested map-entry message
      entry = message.nested_type.add(name='InputsEntry')
      entry.options.map_entry = True
      entry.field.add(name='key', number=1, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL)
      entry.field.add(name='value', number=2, type=_F.TYPE_MESSAGE, label=_F.LABEL_OPTIONAL, type_name=_TENSOR_PROTO)
    if message_name == 'PredictionLog':  # predict_log sits in the 'log_type' oneof
      message.oneof_decl.add(name='log_type')
      message.field[0].oneof_index = 0
  return proto


def _build_messages() -> Dict[str, type]:
  pool = descriptor_pool.DescriptorPool()
  _add_with_dependencies(pool, tensor_pb2.DESCRIPTOR, set())
  pool.Add(_file_proto())
  return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f'{SERVING_PACKAGE}.{name}'))
          for name in SERVING_FIELD_NUMBERS}


MESSAGES = _build_messages()
ModelSpec = MESSAGES['ModelSpec']
PredictRequest = MESSAGES['PredictRequest']
PredictLog = MESSAGES['PredictLog']
PredictionLog = MESSAGES['PredictionLog']


def _validate(export_dir: str, model_name: str, signature_name: str, input_name: str,
              batch_sizes: Sequence[int], image_size: int, requests_per_batch_size: int) -> None:
  if not tf.io.gfile.isdir(export_dir):
    raise FileNotFoundError(f'Serving warm-up: export directory {export_dir} does not exist; export the '
                            f'SavedModel first and pass its (timestamped) directory.')
  for label, value in (('model_name', model_name), ('signature_name', signature_name),
                       ('input_name', input_name)):
    if not value or not isinstance(value, str):
      raise ValueError(f'Serving warm-up: {label} must be a non-empty string, got {value!r}.')
  if not batch_sizes or not all(isinstance(b, (int, np.integer)) and not isinstance(b, bool) and b > 0
                                for b in batch_sizes):
    raise ValueError(f'Serving warm-up: inference_batch_sizes must be positive integers (e.g. 1,8,64), got '
                     f'{list(batch_sizes)!r}.')
  if image_size < 8:
    raise ValueError(f'Serving warm-up: image_size must be >= 8 pixels, got {image_size}.')
  if requests_per_batch_size <= 0:
    raise ValueError(f'Serving warm-up: requests_per_batch_size must be >= 1, got {requests_per_batch_size}.')


def jpeg_batch(batch_size: int, image_size: int, seed: int = 0) -> np.ndarray:
  """``batch_size`` distinct random RGB images of ``image_size`` squared pixels as JPEG bytes (object array)."""
  images = tf.random.stateless_uniform([batch_size, image_size, image_size, 3], seed=[seed, 7], maxval=256,
                                       dtype=tf.int32)
  images = tf.cast(images, tf.uint8)
  return np.array([tf.io.encode_jpeg(images[i], quality=90).numpy() for i in range(batch_size)], dtype=object)


def prediction_log(model_name: str, signature_name: str, input_name: str, images: np.ndarray):
  """One ``PredictionLog`` whose predict request feeds ``images`` (encoded bytes) to ``input_name``."""
  log = PredictionLog()
  request = log.predict_log.request
  request.model_spec.name = model_name
  request.model_spec.signature_name = signature_name
  tensor = tf.make_tensor_proto(images, dtype=tf.string, shape=[len(images)])
  request.inputs[input_name].ParseFromString(tensor.SerializeToString())  # TensorFlow's class -> the pool's
  return log


def write_warmup_requests(export_dir: str, model_name: str, signature_name: str = 'serving_default',
                          input_name: str = 'input', batch_sizes: Sequence[int] = (8,), image_size: int = 224,
                          requests_per_batch_size: int = 1) -> str:
  """Writes ``<export_dir>/assets.extra/tf_serving_warmup_requests`` atomically; returns its path.

  One record per batch size and repetition, in ``batch_sizes`` order. ``model_name`` must be the name TF Serving
  serves the model under (``--model_name`` of tensorflow_model_server), or the server rejects the warm-up.
  """
  batch_sizes = list(batch_sizes)
  _validate(export_dir, model_name, signature_name, input_name, batch_sizes, image_size, requests_per_batch_size)
  batch_sizes = [int(b) for b in batch_sizes]
  directory = os.path.join(export_dir, WARMUP_DIRECTORY)
  tf.io.gfile.makedirs(directory)
  path = os.path.join(directory, WARMUP_FILE_NAME)
  temporary = f'{path}.tmp-{os.getpid()}'
  try:
    with tf.io.TFRecordWriter(temporary) as writer:
      for index, batch_size in enumerate(batch_sizes):
        for repetition in range(requests_per_batch_size):
          images = jpeg_batch(batch_size, image_size, seed=index * requests_per_batch_size + repetition)
          writer.write(prediction_log(model_name, signature_name, input_name, images).SerializeToString())
    tf.io.gfile.rename(temporary, path, overwrite=True)
  finally:
    files.remove_quietly(temporary)
  logging.info('Wrote %d TF Serving warm-up requests (batch sizes %s, %dx%d JPEGs, model %r, signature %r) to %s.',
               len(batch_sizes) * requests_per_batch_size, batch_sizes, image_size, image_size, model_name,
               signature_name, path)
  return path


def read_warmup_requests(path: str) -> list:
  """The ``PredictionLog`` messages of a warm-up file (for checks and tests)."""
  logs = []
  for record in tf.data.TFRecordDataset(path):
    log = PredictionLog()
    log.ParseFromString(record.numpy())
    logs.append(log)
  return logs
