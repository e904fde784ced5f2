"""Each deployed file measured by what it outputs (issue 54, item 4): the decisions a file serves (the .onnx files'
``labels`` and ``classes``) are the ones compared with the SavedModel's, pooled and per class; its quantized kinds
decide at float32 thresholds from their own probabilities (a float16 ``labels`` decided at thresholds rounded to
float16 made a class no image reaches); a file that loses a rare class passes the pooled agreement but not the
class floor; the refusals name the measure they report. A small Keras model (8x8 images, 4 classes) whose head is
shifted so that some classes sit at the thresholds that rounding moves (0.9999 and 1 - 3e-7)."""
import glob
import json
import os

import numpy as np
import onnx
import pytest
import tensorflow as tf

from resnet.export import deploy
from resnet.export import deploy_report
from resnet.export import onnx_export
from resnet.export import onnx_runtime
from resnet.export import tflite_export
from resnet.task import answers
from tests.helpers import small_model

SIZE = small_model.SIZE
NEAR_ONE = (0.9999, float(np.float32(1 - 3e-7)))  # float16 rounds both to 1.0


def _model(images, logits_at, seed=0):
  """small_model's network with its head shifted so that class c's median logit over ``images`` is
  ``logits_at[c]``."""
  model = small_model.model(seed)
  kernel, bias = model.layers[-1].get_weights()
  median = np.median(model(images, training=False).numpy(), axis=0)
  model.layers[-1].set_weights([kernel, (bias + np.asarray(logits_at) - median).astype(np.float32)])
  return model


def _logit(p):
  return float(np.log(p / (1 - p)))


def _predictions(answer, thresholds=None):
  """What the export serves for logits (multi_label.predictions / single_label's): probabilities, classes and,
  multi-label, the labels decided at ``thresholds`` (the answers' unless given) held in a variable."""
  if isinstance(answer, answers.TopOne):
    return lambda logits: {'probabilities': tf.nn.softmax(logits), 'classes': tf.argmax(logits, axis=-1)}
  variable = tf.Variable(thresholds or answer.thresholds, dtype=tf.float32)

  def predictions(logits):
    probabilities = tf.sigmoid(logits)
    return {'probabilities': probabilities, 'classes': tf.argmax(logits, axis=-1),
            'labels': tf.cast(probabilities >= variable, tf.int32)}
  predictions.variable = variable
  return predictions


def _saved_model(model, directory, predictions):
  """A SavedModel whose ``serving_images`` signature outputs ``predictions`` (what the export's does)."""
  module = tf.Module()
  module.model, module.variables_ = model, [getattr(predictions, 'variable', tf.Variable(0.0))]

  @tf.function(input_signature=[tf.TensorSpec([None, SIZE, SIZE, 3], tf.float32, name='images')])
  def serving_images(images):
    return predictions(model(images, training=False))
  tf.saved_model.save(module, directory, signatures={'serving_images': serving_images})
  return directory


def _multi_label(images, seed=0):
  """A model with classes 0 and 1 at 0.9999 and 1 - 3e-7 (half the images above, half below) and its answers."""
  model = _model(images, [_logit(NEAR_ONE[0]), 15.2, 0.0, 0.0], seed)
  return model, answers.Thresholded(NEAR_ONE + (0.5, 0.5))


@pytest.mark.parametrize('seed', [0, 1])
def test_every_onnx_kind_outputs_the_labels_its_probabilities_give_at_float32_thresholds(seed):
  """The float16 file's labels were decided at float16 thresholds (0.9999 and 1 - 3e-7 both 1.0: a class no image
  reached, where the SavedModel decides it for half of them); now each kind compares in float32, so its labels are
  what its probabilities output gives at the thresholds predict reads beside it."""
  images, _ = small_model.images(200, seed=1)
  model, answer = _multi_label(images, seed)
  fmt = onnx_export.OnnxFormat(model, SIZE, answer, opset=15, predictions=_predictions(answer))
  float32 = fmt.convert('float32')
  calibration, _ = small_model.images(32, seed=2)
  saved = (tf.sigmoid(model(images, training=False)).numpy() >= np.float32(answer.thresholds))
  assert 0.2 < saved[:, 0].mean() < 0.8   # the premise: class 0 is decided for some images and not for others
  for kind in ('float32', 'float16', 'int8'):
    data = float32 if kind == 'float32' else onnx_export.quantize(float32, kind, calibration)
    outputs = onnx_runtime.Model(data).outputs(images)
    np.testing.assert_array_equal(outputs['labels'], answer.decide(outputs['probabilities']), err_msg=kind)
    assert outputs['labels'][:, 0].any(), kind   # class 0 is not dead
  float16 = onnx.load_from_string(onnx_export.quantize(float32, 'float16'))
  compare = next(n for n in float16.graph.node if n.op_type == 'GreaterOrEqual')
  (threshold,) = [i for i in float16.graph.initializer if i.name in compare.input]
  assert threshold.data_type == onnx.TensorProto.FLOAT   # the thresholds stay float32 in the float16 file


def test_an_int8_onnx_computes_its_probabilities_in_float_from_its_dequantized_logits():
  """uint8 probabilities (1/255 apart) put every image at 1.0 >= 0.9999: a class decided for all; the node computing
  the probabilities, and the comparison after it, are left out of the quantization."""
  images, _ = small_model.images(200, seed=1)
  model, answer = _multi_label(images)
  fmt = onnx_export.OnnxFormat(model, SIZE, answer, opset=15, predictions=_predictions(answer))
  calibration, _ = small_model.images(32, seed=2)
  int8 = onnx_export.quantize(fmt.convert('float32'), 'int8', calibration)
  producer = {o: n for n in onnx.load_from_string(int8).graph.node for o in n.output}
  assert producer['probabilities'].op_type == 'Sigmoid'   # not a DequantizeLinear of quantized sigmoids
  probabilities = onnx_runtime.Model(int8).probabilities(images)[:, 0]
  assert np.all(probabilities < 1.0) and 0.2 < np.mean(probabilities >= NEAR_ONE[0]) < 0.8


def test_a_file_is_measured_by_the_labels_it_outputs_not_by_its_probabilities_decided_again(tmp_path):
  """A file whose labels are decided at other thresholds than its probabilities (and the SavedModel's) agree with
  passes no more: the measure compares what it outputs."""
  images, _ = small_model.images(40, seed=1)
  model = small_model.model()
  answer = answers.Thresholded((0.5,) * 4)
  probabilities = tf.sigmoid(model(images, training=False)).numpy()
  directory = _saved_model(model, str(tmp_path / 'export'), _predictions(answer))
  elsewhere = tuple(float(np.quantile(probabilities[:, c], 0.9)) for c in range(4))
  fmt = onnx_export.OnnxFormat(model, SIZE, answer, opset=15, predictions=_predictions(answer, elsewhere))
  labels = (np.random.default_rng(3).uniform(size=(40, 4)) < 0.4).astype(np.int64)
  report = deploy.export(fmt, directory, 'float32', deploy.Measuring(images, labels))
  saved, float32 = report.measured
  served = onnx_runtime.Model(os.path.join(directory, 'model.onnx')).outputs(images)
  expected = answer.agreement(served['labels'], answer.decide(probabilities))
  assert float32.agreement == pytest.approx(expected) and float32.agreement < 0.5
  assert saved.agreement == 1.0 and saved.agreement_name == 'Jaccard index of positive labels'


def _rare_class_lost(images, task):
  """(model, the same model with class 3 never decided, answers): class 3 decided for ~7% of ``images`` (14 of 200:
  at least answers.CLASS_MIN_IMAGES, so judged)."""
  model = small_model.model()
  logits = model(images, training=False).numpy()
  kernel, bias = model.layers[-1].get_weights()
  if task == 'multi_label':
    probabilities = tf.sigmoid(logits).numpy()
    thresholds = tuple(float(np.median(probabilities[:, c])) for c in range(3)) + (
        float(np.quantile(probabilities[:, 3], 0.93)),)
    answer = answers.Thresholded(thresholds)
  else:
    margin = logits[:, 3] - np.max(logits[:, :3], axis=1)
    bias = bias + np.array([0, 0, 0, -np.quantile(margin, 0.93)], np.float32)   # class 3 top-1 on ~7%
    model.layers[-1].set_weights([kernel, bias])
    answer = answers.TopOne()
  lost = small_model.model()
  lost.layers[-1].set_weights([kernel, bias - np.array([0, 0, 0, 100], np.float32)])
  return model, lost, answer


@pytest.mark.parametrize('task', ['multi_label', 'single_label'])
def test_a_file_that_loses_a_rare_class_passes_the_pooled_agreement_and_is_refused_by_the_class_floor(
    tmp_path, monkeypatch, task):
  images, _ = small_model.images(200, seed=1)
  model, lost, answer = _rare_class_lost(images, task)
  directory = _saved_model(model, str(tmp_path / 'export'), _predictions(answer))
  fmt = onnx_export.OnnxFormat(model, SIZE, answer, opset=15, predictions=_predictions(answer))
  lost_file = onnx_export.OnnxFormat(lost, SIZE, answer, opset=15, predictions=_predictions(answer)).convert('float32')
  quantize = onnx_export.quantize
  monkeypatch.setattr(onnx_export, 'quantize',
                      lambda data, kind, calibration=None: lost_file if kind == 'int8' else quantize(data, kind))
  labels = (np.random.default_rng(3).uniform(size=(200, 4)) < 0.4).astype(np.int64) if task == 'multi_label' else (
      np.random.default_rng(3).integers(0, 4, 200))
  calibration, _ = small_model.images(8, seed=2)
  names = ('cat', 'dog', 'fox', 'owl')
  measuring = deploy.Measuring(images, labels, ['float16', 'int8'], calibration, 0.9, 0.0, names)
  rows = deploy.export(fmt, directory, 'float32', measuring).measured   # the pooled gate alone keeps it
  int8 = rows[-1]
  assert int8.kind == 'int8' and int8.kept and int8.agreement >= 0.9   # the pooled measure hides the lost class
  assert (int8.worst_class, int8.class_agreement) == ('3 (owl)', 0.0)
  for path in glob.glob(os.path.join(directory, 'model*.onnx')):
    os.remove(path)
  measure = 'a Jaccard index of' if task == 'multi_label' else "agrees with the SavedModel's top-1 on"
  with pytest.raises(deploy.QuantizationError, match=rf'model_int8.onnx agrees with the SavedModel on class 3 '
                     rf'\(owl\) with a Jaccard index of 0.0000 .* below deploy_min_class_agreement=0.5; pooled, it '
                     rf'(has )?{measure} .*: it was not written\. .* or lower deploy_min_class_agreement'):
    deploy.export(fmt, directory, 'float32', deploy.Measuring(images, labels, ['float16', 'int8'], calibration,
                                                               0.9, 0.5, names))
  assert sorted(os.path.basename(p) for p in glob.glob(os.path.join(directory, '*.onnx'))) == [
      'model.onnx', 'model_float16.onnx']
  table = (tmp_path / 'export' / 'onnx_report.txt').read_text()
  assert '| model_int8.onnx (not written: below deploy_min_class_agreement) |' in table
  assert '| 3 (owl): 0.0000 |' in table


class _Decisions:
  """A runner whose file outputs ``classes``."""
  runtime = 'fake'

  def __init__(self, classes):
    self.classes = classes

  def outputs(self, images):
    return {'classes': self.classes, 'probabilities': np.zeros((len(images), 1000), np.float32)}

  def latency_ms(self, image):
    return 0.0


def _reference(predicted, num_classes):
  """A Reference to the SavedModel's ``predicted`` classes without a SavedModel (``measure`` alone)."""
  reference = deploy.Reference.__new__(deploy.Reference)
  reference.answers, reference.images, reference.labels = answers.TopOne(), np.zeros((len(predicted), 1)), predicted
  reference.class_names, reference.num_classes, reference.predicted = (), num_classes, predicted
  return reference


def test_many_classes_on_few_images_are_judged_only_where_a_class_has_enough_images():
  """1000 classes on 500 images: most hold 0-1 images, where one flip is a Jaccard index of 0; such classes are not
  held to the floor (counted), a class of CLASS_MIN_IMAGES images or more lost entirely still is."""
  rng = np.random.default_rng(0)
  predicted = rng.integers(0, 1000, 500)
  predicted[:12] = 7                                   # class 7: 12 images (the others: a few at most)
  predicted[np.isin(predicted[12:], [7, 8]).nonzero()[0] + 12] = 9
  assert answers.CLASS_MIN_IMAGES <= 12 and np.bincount(predicted[12:]).max() < answers.CLASS_MIN_IMAGES
  flipped = predicted.copy()
  flipped[12:17] = (flipped[12:17] + 1) % 1000         # 5 flips: 99% pooled top-1 agreement
  reference = _reference(predicted, 1000)
  row = reference.measure('model_int8.onnx', 'int8', b'', _Decisions(flipped))
  assert row.agreement == pytest.approx(0.99)
  assert row.class_agreement >= 0.5 and row.worst_class == '7'   # accepted: the one judged class agrees
  assert row.classes_too_small == len(set(predicted) | set(flipped)) - 1
  lost = flipped.copy()
  lost[:12] = 8                                        # class 7 never decided: its 12 images go to class 8
  row = reference.measure('model_int8.onnx', 'int8', b'', _Decisions(lost))
  assert row.agreement == pytest.approx(0.966) and row.agreement >= 0.9
  assert (row.class_agreement, row.worst_class) == (0.0, '7')   # still refused by deploy_min_class_agreement=0.5
  assert '| 7: 0.0000 (' in deploy_report.table([row], 500)


def test_a_multi_label_refusal_names_the_jaccard_index_not_a_share_of_images(tmp_path, monkeypatch):
  images, _ = small_model.images(40, seed=1)
  model = small_model.model()
  answer = answers.Thresholded((0.5,) * 4)
  directory = _saved_model(model, str(tmp_path / 'export'), _predictions(answer))
  fmt = onnx_export.OnnxFormat(model, SIZE, answer, opset=15, predictions=_predictions(answer))
  never = _predictions(answer, (2.0,) * 4)   # decides nothing: a Jaccard index of 0
  monkeypatch.setattr(onnx_export, 'quantize', lambda data, kind, calibration=None: onnx_export.OnnxFormat(
      model, SIZE, answer, opset=15, predictions=never).convert('float32'))
  labels = (np.random.default_rng(3).uniform(size=(40, 4)) < 0.4).astype(np.int64)
  with pytest.raises(deploy.QuantizationError, match=r"model_float16.onnx has a Jaccard index of 0.0000 with the "
                     r"SavedModel's positive labels on 40 validation images \(of the image x class pairs either "
                     r'calls positive, the share both do\), below deploy_min_agreement=0.9 \(micro F1 0.0000 vs '):
    deploy.export(fmt, directory, 'float32', deploy.Measuring(images, labels, ['float16']))


def test_a_tflite_decides_from_its_float32_probabilities_and_an_int8_one_that_loses_a_class_is_refused(tmp_path):
  """A .tflite outputs probabilities only, decided at the float32 thresholds as predict decides them: float16
  weights compute in float32 on LiteRT's CPU kernels, so at 0.9999 it differs only by its rounded weights; a
  full-integer file's probabilities are 1/256 apart (at most 255/256), so no image reaches 0.9999: refused by the
  class floor, naming the class."""
  images, _ = small_model.images(100, seed=1)
  model, answer = _multi_label(images)
  directory = _saved_model(model, str(tmp_path / 'export'), _predictions(answer))
  labels = (np.random.default_rng(3).uniform(size=(100, 4)) < 0.4).astype(np.int64)
  calibration, _ = small_model.images(16, seed=2)
  fmt = tflite_export.TfliteFormat(model, SIZE, answer)
  with pytest.raises(deploy.QuantizationError, match=r'model_int8.tflite agrees with the SavedModel on class 0 with '
                     r'a Jaccard index of 0.0000 .* below deploy_min_class_agreement=0.5'):
    deploy.export(fmt, directory, 'float32', deploy.Measuring(images, labels, ['float16', 'int8'], calibration,
                                                               0.0, 0.5))
  rows = {r['kind']: r for r in json.loads((tmp_path / 'export' / 'tflite_report.json').read_text())['rows']}
  assert rows['float16']['class_agreement'] >= 0.9 and rows['float16']['kept']
  assert not rows['int8']['kept'] and rows['int8']['worst_class'] == '0'
  assert rows['int8']['refused_by'] == 'deploy_min_class_agreement'


def test_the_per_class_agreement_is_each_classs_jaccard_index():
  top_one = answers.TopOne()
  # class 0: {0, 1} vs {0}: 1/2; class 1: {2} vs {1, 2}: 1/2; class 2: {3} both: 1; class 3: never decided: NaN
  np.testing.assert_allclose(top_one.per_class(np.array([0, 0, 1, 2]), np.array([0, 1, 1, 2]), 4),
                             [0.5, 0.5, 1.0, np.nan])
  thresholded = answers.Thresholded((0.5, 0.5))
  mine, theirs = np.array([[1, 0], [1, 1], [0, 0]]), np.array([[1, 0], [0, 1], [0, 0]])
  np.testing.assert_allclose(thresholded.per_class(mine, theirs, 2), [0.5, 1.0])
  # A file's own decisions where it outputs them, else its probabilities decided.
  assert thresholded.decided({'probabilities': np.array([[0.7, 0.2]]), 'labels': np.array([[0, 1]])}).tolist() == [
      [0, 1]]
  assert thresholded.decided({'probabilities': np.array([[0.7, 0.2]])}).tolist() == [[1, 0]]
  assert top_one.decided({'probabilities': np.array([[0.1, 0.9]]), 'classes': np.array([0])}).tolist() == [0]
