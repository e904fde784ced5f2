"""ONNX exports (float32, float16, static int8) converted by tf2onnx and run by ONNX Runtime, measured on the run's
own images; predict with an .onnx; the missing extra and a TensorFlow without tf.lite each named in one message.
The first tests use a small Keras model (fast); the last exports a finished tiny ResNet-18 run through the CLI."""
import csv
import glob
import importlib
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
import pytest
import tensorflow as tf

from params import resnet_config
from resnet.run_setup import run_params
from resnet.estimator import files
from resnet.task import answers
from resnet.export import deploy
from resnet.export import deploy_report
from resnet.export import exporting
from resnet.export import litert_runtime
from resnet.export import onnx_export
from resnet.export import onnx_runtime
from resnet.export import tflite_export
from tests.helpers import cli
from tests.helpers import procs
from tests.helpers import small_model

SIZE = small_model.SIZE


def test_the_quantization_kinds_are_the_params_choices():
  assert resnet_config.ONNX_QUANTIZATIONS == onnx_export.QUANTIZATIONS == onnx_export.OnnxFormat.kinds


@pytest.mark.slow  # a new interpreter: tf2onnx's import changes the variable once a process
def test_importing_tf2onnx_keeps_the_log_level_of_the_process():
  code = ('import os; os.environ["TF_CPP_MIN_LOG_LEVEL"] = "1"; from resnet.export import onnx_export; '
          'onnx_export.import_tf2onnx(); print(os.environ["TF_CPP_MIN_LOG_LEVEL"])')
  out = subprocess.run([sys.executable, '-c', code], cwd=procs.ROOT, env=procs.base_env(), capture_output=True,
                       text=True, timeout=120, check=True).stdout
  assert out.strip().splitlines()[-1] == '1'


def test_the_file_computes_what_the_weights_do_for_any_batch_in_the_opset_named():
  model = small_model.model()
  data = onnx_export.convert(model, SIZE, opset=15)
  proto = onnx.load_from_string(data)
  assert {o.domain: o.version for o in proto.opset_import}[''] == 15
  (images_input,) = proto.graph.input
  assert images_input.name == 'images'
  assert [d.dim_param or d.dim_value for d in images_input.type.tensor_type.shape.dim] == ['batch', SIZE, SIZE, 3]
  served = onnx_runtime.Model(data)
  assert served.image_size == SIZE and served.num_classes == 4 and served.runtime.startswith('ONNX Runtime')
  images, _ = small_model.images(5, seed=1)
  expected = tf.nn.softmax(model(images, training=False)).numpy()
  for batch in (1, 2, 5):  # batches of 1, 2 (and a last one of 1) and 5 through the dynamic batch dimension
    np.testing.assert_allclose(served.probabilities(images, batch_size=batch), expected, atol=1e-6)
  probabilities, classes = served.session.run(['probabilities', 'classes'], {'images': images})
  np.testing.assert_array_equal(classes, probabilities.argmax(axis=1))
  assert served.latency_ms(images[0]) > 0


def test_a_multi_label_file_serves_sigmoids_and_decides_at_the_thresholds():
  """The .onnx outputs what the SavedModel does (the task's predictions): multi-label, the labels decided at the
  thresholds the run keeps in a variable, frozen into the file."""
  model = small_model.model()
  thresholds = tf.Variable([0.3, 0.5, 0.7, 0.9])

  def predictions(logits):
    probabilities = tf.sigmoid(logits)
    return {'probabilities': probabilities, 'classes': tf.argmax(logits, axis=-1),
            'labels': tf.cast(probabilities >= thresholds, tf.int32)}
  fmt = onnx_export.OnnxFormat(model, SIZE, answers.Thresholded((0.3, 0.5, 0.7, 0.9)), opset=15, predictions=predictions)
  served = onnx_runtime.Model(fmt.convert('float32'))
  images, _ = small_model.images(5, seed=1)
  probabilities, labels, classes = served.session.run(['probabilities', 'labels', 'classes'], {'images': images})
  np.testing.assert_allclose(probabilities, tf.sigmoid(model(images, training=False)).numpy(), atol=1e-6)
  np.testing.assert_array_equal(labels, probabilities >= thresholds.numpy())
  np.testing.assert_array_equal(classes, probabilities.argmax(axis=1))


def _exports(tmp_path, kinds, min_agreement=0.0):
  """(model, its SavedModel's directory, its ONNX format (opset 13), what its files are measured on)."""
  model = small_model.model()
  directory = small_model.saved_model(model, str(tmp_path / 'export'))
  images, labels = small_model.images(40, seed=1)
  calibration, _ = small_model.images(16, seed=2)
  return model, directory, onnx_export.OnnxFormat(model, SIZE, opset=13), deploy.Measuring(
      images, labels, kinds, calibration, min_agreement)


def test_each_file_is_measured_on_the_images_written_and_reported(tmp_path):
  model, directory, fmt, exports = _exports(tmp_path, ['float16', 'int8'])
  report = deploy.export(fmt, directory, 'float32', exports)
  rows = report.measured
  assert report.summary().startswith(f'Exported ONNX: {directory}/model.onnx (') and 'opset 13' in report.summary()
  assert [r.kind for r in rows] == ['saved_model', 'float32', 'float16', 'int8']
  assert all(r.runtime.startswith('ONNX Runtime') for r in rows[1:])
  by_kind = {r.kind: r for r in rows}
  assert by_kind['float32'].agreement == 1.0 and by_kind['float16'].agreement >= 0.95
  for kind in ('float32', 'float16', 'int8'):
    path = os.path.join(directory, fmt.file_name(kind))
    assert os.path.getsize(path) == by_kind[kind].bytes
    assert onnx_runtime.Model(path).probabilities(exports.images[:3]).shape == (3, 4)
  weights = tf.nn.softmax(model(exports.images, training=False)).numpy()
  float16 = onnx_runtime.Model(os.path.join(directory, 'model_float16.onnx')).probabilities(exports.images)
  np.testing.assert_allclose(float16, weights, atol=5e-3)   # float16 compute, float32 input and output
  int8 = onnx.load(os.path.join(directory, 'model_int8.onnx'))
  assert any(node.op_type == 'QuantizeLinear' for node in int8.graph.node)   # QDQ: quantized, not a copy
  report = json.loads((tmp_path / 'export' / 'onnx_report.json').read_text())
  assert report['num_images'] == 40 and [r['name'] for r in report['rows']] == [
      'SavedModel (float32)', 'model.onnx', 'model_float16.onnx', 'model_int8.onnx']
  assert '| model_int8.onnx |' in (tmp_path / 'export' / 'onnx_report.txt').read_text()
  # The SavedModel's size counts its own files, not the deployed files and reports now beside them.
  assert deploy_report.directory_bytes(directory) == rows[0].bytes


@pytest.mark.parametrize('refused,advice', [('int8', 'calibrate on more training images'),
                                            ('float16', 'export model.onnx alone')])
def test_a_file_below_the_agreement_threshold_is_not_written_and_the_rest_stays(tmp_path, monkeypatch, refused,
                                                                                  advice):
  model, directory, fmt, exports = _exports(tmp_path, ['float16', 'int8'], min_agreement=0.9)
  predicted = tf.nn.softmax(model(exports.images, training=False)).numpy().argmax(axis=1)
  rare = int(np.argmin(np.bincount(predicted, minlength=4)))
  quantize = onnx_export.quantize

  def disagreeing(float32_file, kind, calibration=None):
    if kind != refused:
      return quantize(float32_file, kind, calibration)
    other = small_model.model()   # answers the class the SavedModel answers least, for every image
    kernel, _ = other.layers[-1].get_weights()
    other.layers[-1].set_weights([np.zeros_like(kernel), np.eye(4, dtype=np.float32)[rare] * 10])
    return onnx_export.convert(other, SIZE, 13)
  monkeypatch.setattr(onnx_export, 'quantize', disagreeing)
  with pytest.raises(deploy.QuantizationError, match=rf'model_{refused}.onnx agrees .* of 40 validation images, '
                     rf'below deploy_min_agreement=0.9 .* To keep it: {advice}'):
    deploy.export(fmt, directory, 'float32', exports)
  written = sorted(os.path.basename(p) for p in glob.glob(str(tmp_path / 'export' / '*.onnx')))
  assert written == (['model.onnx'] if refused == 'float16' else ['model.onnx', 'model_float16.onnx'])
  assert not [n for n in os.listdir(directory) if files.is_temp(n)]
  assert f'model_{refused}.onnx (not written: below deploy_min_agreement)' in (
      tmp_path / 'export' / 'onnx_report.txt').read_text()


def test_a_quantizer_failure_names_the_file_and_keeps_the_table_of_the_files_before_it(tmp_path, monkeypatch):
  from onnxruntime import quantization  # pylint: disable=import-outside-toplevel
  _, directory, fmt, exports = _exports(tmp_path, ['float16', 'int8'])

  def failing(*args, **kwargs):
    raise RuntimeError('no kernel for op Foo')
  monkeypatch.setattr(quantization, 'quantize_static', failing)
  with pytest.raises(deploy.QuantizationError, match=r'int8 ONNX quantization failed \(no kernel for op Foo\): '
                     r'model_int8.onnx was not written. Export float16 instead'):
    deploy.export(fmt, directory, 'float32', exports)
  assert not os.path.exists(os.path.join(directory, 'model_int8.onnx'))
  assert '| model_float16.onnx |' in (tmp_path / 'export' / 'onnx_report.txt').read_text()


def test_int8_is_prepared_then_quantized_per_channel(monkeypatch):
  from onnxruntime.quantization import shape_inference  # pylint: disable=import-outside-toplevel
  prepared = []
  real = shape_inference.quant_pre_process
  monkeypatch.setattr(shape_inference, 'quant_pre_process', lambda *a, **k: prepared.append(a) or real(*a, **k))
  model = small_model.model()
  calibration, _ = small_model.images(16, seed=2)
  int8 = onnx.load_from_string(onnx_export.quantize(onnx_export.convert(model, SIZE, 13), 'int8', calibration))
  assert len(prepared) == 1   # ONNX Runtime's recommended preparation ran first
  scales = [i for i in int8.graph.initializer if 'scale' in i.name and list(i.dims) == [8]]
  assert scales   # one scale per output channel of the 8-channel conv


def test_a_conversion_that_differs_from_its_weights_writes_nothing(tmp_path, monkeypatch):
  _, directory, fmt, exports = _exports(tmp_path, [])
  convert, other = onnx_export.convert, small_model.model(seed=1)
  monkeypatch.setattr(onnx_export, 'convert', lambda net, size, opset, outputs: convert(other, size, opset, outputs))
  with pytest.raises(RuntimeError, match=r'The ONNX conversion differs from the float32 weights .* was not written '
                     r'.* Export without export_onnx and onnx_quantizations'):
    deploy.export(fmt, directory, 'float32', exports)
  assert not glob.glob(str(tmp_path / 'export' / '*.onnx'))


def test_a_file_that_differs_from_a_float32_saved_model_writes_nothing(tmp_path):
  _, directory, _, exports = _exports(tmp_path, [])
  other = onnx_export.OnnxFormat(small_model.model(seed=1), SIZE, opset=13)  # other weights
  with pytest.raises(RuntimeError, match=r'The ONNX model differs from the SavedModel by .* was not written'):
    deploy.export(other, directory, 'float32', exports)
  assert not glob.glob(str(tmp_path / 'export' / '*.onnx'))


def test_a_file_its_runtime_cannot_run_writes_nothing(tmp_path, monkeypatch):
  _, directory, fmt, exports = _exports(tmp_path, [])

  def broken(data):
    raise RuntimeError('Could not find an implementation for Foo(1) node')
  monkeypatch.setattr(fmt, 'load', broken)
  with pytest.raises(RuntimeError, match=r'ONNX Runtime cannot run the converted model \(Could not find an '
                     r'implementation for Foo\(1\) node\): .*model.onnx was not written .* report the op it names'):
    deploy.export(fmt, directory, 'float32', exports)
  assert not glob.glob(str(tmp_path / 'export' / '*.onnx'))


def _params(tmp_path, **values):
  return run_params.make_params({'model_dir': str(tmp_path / 'run'), 'image_size': 32, **values})


def _without(monkeypatch, missing):
  real = importlib.import_module

  def import_module(name, *args):
    if name == missing:
      raise ImportError(f"No module named '{missing}'")
    return real(name, *args)
  monkeypatch.setattr(onnx_runtime.importlib, 'import_module', import_module)


def test_without_the_extra_one_message_names_the_install_command_before_anything_runs(tmp_path, monkeypatch):
  _without(monkeypatch, 'tf2onnx')
  exporting_run = _params(tmp_path, export_dir=str(tmp_path / 'export'), export_onnx=True)
  with pytest.raises(ValueError, match=r"--export_onnx needs the ONNX packages .* tf2onnx could not be imported .* "
                     r"pip install -e '\.\[onnx\]'"):
    exporting.check_needs(exporting_run, 'train', chief=True)
  exporting.check_needs(exporting_run, 'eval', chief=True)    # eval exports nothing
  exporting.check_needs(exporting_run, 'train', chief=False)  # the chief exports alone
  exporting.check_needs(_params(tmp_path, predict_onnx='m.onnx'), 'predict', chief=True)  # ONNX Runtime is enough
  _without(monkeypatch, 'onnxruntime')
  with pytest.raises(ValueError, match=r"--predict_onnx needs the ONNX packages .* onnxruntime could not be imported"):
    exporting.check_needs(_params(tmp_path, predict_onnx='m.onnx'), 'predict', chief=True)
  # Through the command line: refused before anything trains or is written.
  run = tmp_path / 'cli_run'
  result = cli.run_in_process('--mode=train', f'--model_dir={run}', f'--export_dir={tmp_path / "export"}',
                              '--export_onnx=true', '--train_steps=1')
  assert result.code == 1 and "pip install -e '.[onnx]'" in result.log
  assert not run.exists()


def test_onnx_quantizations_need_the_runs_records_and_predict_takes_one_file(tmp_path):
  with pytest.raises(ValueError, match=r'onnx_quantizations calibrates int8 .* set --data_dir'):
    _params(tmp_path, export_dir=str(tmp_path / 'export'), onnx_quantizations=['int8'])
  with pytest.raises(ValueError, match=r"one of \['float16', 'int8'\]"):
    _params(tmp_path, export_dir=str(tmp_path / 'export'), onnx_quantizations=['dynamic_int8'])
  with pytest.raises(ValueError, match='predict with one file at a time'):
    _params(tmp_path, predict_onnx='a.onnx', predict_tflite='a.tflite')
  with pytest.raises(ValueError, match='a .tflite or .onnx file serves one view'):
    _params(tmp_path, predict_onnx='a.onnx', tta='flip')


def test_without_records_the_float32_file_is_checked_but_not_measured(tmp_path, caplog):
  params = _params(tmp_path, export_dir=str(tmp_path / 'export'), export_onnx=True)
  assert exporting.measured_images(params) is None
  ((make_format, measuring),) = exporting.deployed_formats(params, None)
  assert measuring is None
  assert any('not measured on validation images' in r.getMessage() for r in caplog.records)
  model = small_model.model()
  fmt = make_format(model, SIZE, answers.TopOne())
  assert isinstance(fmt, onnx_export.OnnxFormat) and fmt.opset == 17
  directory = small_model.saved_model(model, str(tmp_path / 'export'))
  report = deploy.export(fmt, directory, 'float32', measuring)
  assert report.measured == () and report.table == '' and report.max_difference <= 1e-4
  assert os.path.exists(os.path.join(directory, 'model.onnx'))
  assert not os.path.exists(os.path.join(directory, 'onnx_report.txt'))


def test_a_tensorflow_without_tf_lite_is_told_what_to_do_before_training(tmp_path, monkeypatch):
  """TensorFlow is moving tf.lite into LiteRT, whose wheel has no converter for TensorFlow models yet."""
  monkeypatch.setattr(tf, 'lite', None)
  params = _params(tmp_path, export_dir=str(tmp_path / 'export'), export_tflite=True)
  with pytest.raises(tflite_export.NoConverterError, match=r'has no tf.lite.TFLiteConverter .*TensorFlow 2.21.*'
                     r'--export_onnx'):
    exporting.check_needs(params, 'train', chief=True)
  with pytest.raises(tflite_export.NoConverterError):
    tflite_export.convert(small_model.model(), SIZE)
  exporting.check_needs(_params(tmp_path, export_dir=str(tmp_path / 'export'), export_onnx=True), 'train',
                        chief=True)   # ONNX needs no tf.lite
  # Without ai-edge-litert either, running a .tflite names the package to install.
  monkeypatch.setitem(sys.modules, 'ai_edge_litert.interpreter', None)
  with pytest.raises(ValueError, match='pip install ai-edge-litert'):
    litert_runtime.runtime()


@pytest.fixture(scope='module')
def onnx_run(module_tmp):
  """A copy of the session's finished tiny run, exported with every ONNX file through the CLI with nothing
  restated (depth, classes, image size and data come from its params.yaml)."""
  model_dir, data_dir, _ = cli.shared_trained_run()
  root = module_tmp.mktemp('onnx')
  run = root / 'model'
  shutil.copytree(model_dir, run, ignore=shutil.ignore_patterns('export'))
  result = cli.run_in_process('--mode=export', f'--model_dir={run}', f'--export_dir={root / "export"}',
                              '--export_onnx=true', '--onnx_quantizations=float16,int8', '--deploy_eval_images=16',
                              '--deploy_calibration_images=8', '--deploy_min_agreement=0',
                              '--deploy_min_class_agreement=0', '--use_tpu=false', base=())
  return root, run, data_dir, result


@pytest.mark.slow
def test_a_finished_run_exports_measured_onnx_files_with_nothing_restated(onnx_run):
  root, _, _, result = onnx_run
  assert result.code == 0, result.log[-3000:]
  (version,) = glob.glob(str(root / 'export' / '*'))
  assert sorted(os.path.basename(p) for p in glob.glob(os.path.join(version, '*.onnx'))) == [
      'model.onnx', 'model_float16.onnx', 'model_int8.onnx']
  assert 'Exported ONNX:' in result.out and '| model_int8.onnx |' in result.out and 'ONNX Runtime' in result.out
  report = json.loads(open(os.path.join(version, 'onnx_report.json')).read())
  assert report['num_images'] == 16 and report['rows'][1]['agreement'] == 1.0   # model.onnx vs the SavedModel
  served = onnx_runtime.Model(os.path.join(version, 'model.onnx'))
  assert (served.image_size, served.num_classes) == (32, 4)


def _predicted_classes(path):
  with open(path) as f:
    return [(row['image'], row['top1_label']) for row in csv.DictReader(f)]


@pytest.mark.slow
def test_predict_with_the_onnx_file_writes_what_the_checkpoint_predicts(onnx_run, tmp_path):
  root, run, data_dir, _ = onnx_run
  (version,) = glob.glob(str(root / 'export' / '*'))
  outputs = {}
  for name, flags in (('checkpoint', []), ('onnx', [f'--predict_onnx={version}/model.onnx'])):
    outputs[name] = tmp_path / f'{name}.csv'
    result = cli.run_in_process('--mode=predict', f'--model_dir={run}', f'--data_dir={data_dir}',
                                f'--predict_output={outputs[name]}', '--use_tpu=false', *flags, base=())
    assert result.code == 0, result.log[-3000:]
  assert 'ONNX Runtime' in result.log
  checkpoint, deployed = (outputs[n].read_text().splitlines() for n in ('checkpoint', 'onnx'))
  assert checkpoint[0] == deployed[0] and len(deployed) == len(checkpoint) > 1
  assert _predicted_classes(outputs['onnx']) == _predicted_classes(outputs['checkpoint'])
  assert (tmp_path / 'onnx_report.json').exists()   # the labelled per-class report, as for the checkpoint
  missing = cli.run_in_process('--mode=predict', f'--model_dir={run}', f'--data_dir={data_dir}',
                               f'--predict_onnx={root / "none.onnx"}', '--use_tpu=false', base=())
  assert missing.code == 1 and 'no such file' in missing.log and 'model*.onnx' in missing.log
