"""TF Serving warm-up file (resnet/export/serving_warmup.py): records, field numbers, JPEG payloads, atomic writes.

The file is checked twice: with the module's descriptor-built classes, and by decoding the protobuf wire format by
hand (below), so a wrong field number in the declarations cannot pass by being read back with the same mistake.
"""
import os

import numpy as np
import pytest
import tensorflow as tf

from resnet.export import serving_warmup as warmup

IMAGE_SIZE = 32


# ------------------------------------------------------------------------------------------------ wire decoding
def read_varint(data: bytes, pos: int):
  value, shift = 0, 0
  while True:
    byte = data[pos]
    pos += 1
    value |= (byte & 0x7F) << shift
    shift += 7
    if not byte & 0x80:
      return value, pos


def wire_fields(data: bytes) -> list:
  """[(field number, value)] of one message: ints for varints, bytes for length-delimited fields."""
  fields, pos = [], 0
  while pos < len(data):
    key, pos = read_varint(data, pos)
    number, wire_type = key >> 3, key & 7
    if wire_type == 0:
      value, pos = read_varint(data, pos)
    elif wire_type == 2:
      length, pos = read_varint(data, pos)
      value, pos = data[pos:pos + length], pos + length
    else:
      raise AssertionError(f'unexpected wire type {wire_type} for field {number}')
    fields.append((number, value))
  return fields


def only(fields: list, number: int):
  values = [v for n, v in fields if n == number]
  assert len(values) == 1, (number, fields)
  return values[0]


def records(path: str) -> list:
  return [r.numpy() for r in tf.data.TFRecordDataset(path)]


# ------------------------------------------------------------------------------------------------ tests
def test_field_numbers_are_tf_servings():
  # tensorflow_serving/apis/model.proto: string name = 1; string signature_name = 3;
  assert warmup.ModelSpec.DESCRIPTOR.fields_by_name['name'].number == 1
  assert warmup.ModelSpec.DESCRIPTOR.fields_by_name['signature_name'].number == 3
  # tensorflow_serving/apis/predict.proto: ModelSpec model_spec = 1; map<string, TensorProto> inputs = 2;
  assert warmup.PredictRequest.DESCRIPTOR.fields_by_name['model_spec'].number == 1
  assert warmup.PredictRequest.DESCRIPTOR.fields_by_name['inputs'].number == 2
  # tensorflow_serving/apis/prediction_log.proto: PredictLog { PredictRequest request = 1; }
  # PredictionLog { oneof log_type { ... PredictLog predict_log = 6; } }
  assert warmup.PredictLog.DESCRIPTOR.fields_by_name['request'].number == 1
  assert warmup.PredictionLog.DESCRIPTOR.fields_by_name['predict_log'].number == 6
  assert warmup.PredictionLog.DESCRIPTOR.fields_by_name['predict_log'].containing_oneof.name == 'log_type'
  assert warmup.PredictRequest.DESCRIPTOR.fields_by_name['inputs'].message_type.GetOptions().map_entry
  assert warmup.PredictionLog.DESCRIPTOR.full_name == 'tensorflow.serving.PredictionLog'


def test_one_parsable_record_per_batch_size(tmp_path):
  path = warmup.write_warmup_requests(str(tmp_path), 'resnet', 'serving_default', 'input', [1, 3, 8], IMAGE_SIZE)
  assert path == os.path.join(str(tmp_path), 'assets.extra', 'tf_serving_warmup_requests')
  assert os.listdir(tmp_path / 'assets.extra') == ['tf_serving_warmup_requests']  # no temporary file left
  logs = warmup.read_warmup_requests(path)
  assert len(logs) == 3
  for log, batch in zip(logs, [1, 3, 8]):
    assert log.WhichOneof('log_type') == 'predict_log'
    request = log.predict_log.request
    assert (request.model_spec.name, request.model_spec.signature_name) == ('resnet', 'serving_default')
    assert list(request.inputs) == ['input']
    tensor = request.inputs['input']
    assert tensor.dtype == tf.string.as_datatype_enum
    assert [d.size for d in tensor.tensor_shape.dim] == [batch]
    images = tf.make_ndarray(tensor)
    assert images.shape == (batch,)
    decoded = [tf.io.decode_jpeg(image).numpy() for image in images]
    assert all(d.shape == (IMAGE_SIZE, IMAGE_SIZE, 3) and d.dtype == np.uint8 for d in decoded)
    if batch > 1:
      assert not np.array_equal(decoded[0], decoded[1])  # distinct images, not one repeated


def test_wire_format_decoded_by_hand(tmp_path):
  path = warmup.write_warmup_requests(str(tmp_path), 'my_model', 'serving_default', 'input', [2], IMAGE_SIZE)
  (record,) = records(path)
  prediction_log = wire_fields(record)
  assert [n for n, _ in prediction_log] == [6]                          # PredictionLog.predict_log = 6
  request = wire_fields(only(wire_fields(only(prediction_log, 6)), 1))  # PredictLog.request = 1
  model_spec = wire_fields(only(request, 1))                            # PredictRequest.model_spec = 1
  assert only(model_spec, 1) == b'my_model'                             # ModelSpec.name = 1
  assert only(model_spec, 3) == b'serving_default'                      # ModelSpec.signature_name = 3
  entry = wire_fields(only(request, 2))                                 # PredictRequest.inputs = 2 (map entry)
  assert only(entry, 1) == b'input'                                     # map key = 1
  tensor = wire_fields(only(entry, 2))                                  # map value = 2: a TensorProto
  # tensorflow/core/framework/tensor.proto: DataType dtype = 1; TensorShapeProto tensor_shape = 2;
  # repeated bytes string_val = 8. types.proto: DT_STRING = 7. tensor_shape.proto: repeated Dim dim = 2;
  # Dim { int64 size = 1; }
  assert only(tensor, 1) == 7
  dims = [only(wire_fields(d), 1) for n, d in wire_fields(only(tensor, 2)) if n == 2]
  assert dims == [2]
  payloads = [v for n, v in tensor if n == 8]
  assert len(payloads) == 2
  assert all(p[:3] == b'\xff\xd8\xff' for p in payloads)  # the JPEG start-of-image marker
  assert tf.io.decode_jpeg(payloads[1]).shape == (IMAGE_SIZE, IMAGE_SIZE, 3)


class JpegServer(tf.Module):
  """A stand-in for the exported model: a string batch input named 'input' that must decode as JPEG."""

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name='input')])
  def serve(self, input):  # pylint: disable=redefined-builtin
    images = tf.map_fn(lambda b: tf.io.decode_jpeg(b, channels=3), input, fn_output_signature=tf.uint8)
    return {'shape': tf.shape(images)}


def test_requests_replay_against_a_saved_model_signature(tmp_path):
  """What TF Serving does with the file: feed each request's inputs to the named signature by input key."""
  module = JpegServer()
  tf.saved_model.save(module, str(tmp_path), signatures={'serving_default': module.serve})
  path = warmup.write_warmup_requests(str(tmp_path), 'resnet', batch_sizes=[2, 5], image_size=IMAGE_SIZE)
  loaded = tf.saved_model.load(str(tmp_path))
  for log, batch in zip(warmup.read_warmup_requests(path), [2, 5]):
    request = log.predict_log.request
    signature = loaded.signatures[request.model_spec.signature_name]
    inputs = {key: tf.constant(tf.make_ndarray(tensor)) for key, tensor in request.inputs.items()}
    assert list(signature(**inputs)['shape'].numpy()) == [batch, IMAGE_SIZE, IMAGE_SIZE, 3]


def test_requests_per_batch_size_repeats_in_order(tmp_path):
  path = warmup.write_warmup_requests(str(tmp_path), 'resnet', batch_sizes=[4, 2], image_size=IMAGE_SIZE,
                                      requests_per_batch_size=2)
  sizes = [log.predict_log.request.inputs['input'].tensor_shape.dim[0].size
           for log in warmup.read_warmup_requests(path)]
  assert sizes == [4, 4, 2, 2]


def test_a_failed_write_leaves_the_previous_file_and_no_temporary(tmp_path, monkeypatch):
  path = warmup.write_warmup_requests(str(tmp_path), 'resnet', batch_sizes=[1], image_size=IMAGE_SIZE)
  before = open(path, 'rb').read()
  calls = []

  def failing(*args):
    calls.append(args)
    if len(calls) == 2:
      raise RuntimeError('disk full')
    return real(*args)

  real = warmup.prediction_log
  monkeypatch.setattr(warmup, 'prediction_log', failing)
  with pytest.raises(RuntimeError, match='disk full'):
    warmup.write_warmup_requests(str(tmp_path), 'other', batch_sizes=[1, 2], image_size=IMAGE_SIZE)
  assert open(path, 'rb').read() == before
  assert os.listdir(tmp_path / 'assets.extra') == ['tf_serving_warmup_requests']
  monkeypatch.undo()
  warmup.write_warmup_requests(str(tmp_path), 'other', batch_sizes=[1, 2], image_size=IMAGE_SIZE)
  assert [log.predict_log.request.model_spec.name for log in warmup.read_warmup_requests(path)] == ['other'] * 2


def test_bad_input_names_the_problem(tmp_path):
  with pytest.raises(FileNotFoundError, match='export the SavedModel first'):
    warmup.write_warmup_requests(str(tmp_path / 'missing'), 'resnet')
  with pytest.raises(ValueError, match='inference_batch_sizes must be positive integers'):
    warmup.write_warmup_requests(str(tmp_path), 'resnet', batch_sizes=[8, 0])
  with pytest.raises(ValueError, match='inference_batch_sizes'):
    warmup.write_warmup_requests(str(tmp_path), 'resnet', batch_sizes=[])
  with pytest.raises(ValueError, match='inference_batch_sizes'):
    warmup.write_warmup_requests(str(tmp_path), 'resnet', batch_sizes=[2.5])
  with pytest.raises(ValueError, match='model_name must be a non-empty string'):
    warmup.write_warmup_requests(str(tmp_path), '')
  assert not os.path.exists(tmp_path / 'assets.extra')
