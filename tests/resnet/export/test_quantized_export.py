"""Quantized LiteRT exports (float16, dynamic-range int8, full-integer int8), measured on the run's own images and
run by LiteRT's own runtime (ai-edge-litert); predict with a .tflite; export a finished run without restating its
params. The first tests use a small Keras model (fast); the last runs the CLI end to end on a tiny ResNet-18."""
import glob
import json
import os
import types
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from absl import flags
from params import resnet_config
from resnet import resnet_flags
from resnet.run_dir import model_dir as model_dir_lib
from resnet.run_setup import run_params
from resnet.task import answers
from resnet.export import deploy
from resnet.export import deploy_report
from resnet.export import litert_runtime
from resnet.export import onnx_export
from resnet.export import tflite_export
from tests.helpers import cli
from tests.helpers import small_model

SIZE = small_model.SIZE


def test_the_quantization_kinds_are_the_params_choices():
  assert resnet_config.TFLITE_QUANTIZATIONS == tflite_export.QUANTIZATIONS == tflite_export.TfliteFormat.kinds


def test_the_constants_mirrored_across_layers_are_equal():
  formats = (tflite_export.TfliteFormat, onnx_export.OnnxFormat)
  assert deploy_report.DEPLOYED_FILES == tuple(f.suffix for f in formats)
  assert deploy_report.REPORT_NAMES == tuple(f.report_name for f in formats)


def test_the_former_tflite_names_of_the_shared_params_are_accepted_everywhere(tmp_path):
  """deploy_* were tflite_* before the .onnx files shared them: flags, overrides, config files and a run's
  params.yaml with the old names still work."""
  old = {'tflite_calibration_images': 9, 'tflite_eval_images': 7, 'tflite_min_agreement': 0.5}
  new = {'deploy_calibration_images': 9, 'deploy_eval_images': 7, 'deploy_min_agreement': 0.5}
  assert {k: resnet_config.ALIASES[k] for k in old} == {k: n for k, n in zip(old, new)}
  made = run_params.make_params(old, fill_from_data=False)
  assert {k: made[k] for k in new} == new and made['tflite_min_agreement'] == 0.5
  run = tmp_path / 'run'
  run.mkdir()
  (run / 'params.yaml').write_text(''.join(f'{k}: {v}\n' for k, v in old.items()))
  assert model_dir_lib.recorded_params(str(run)) == new   # a finished run's records, read under the new names
  from_file = run_params.make_params(config_files=[str(run / 'params.yaml')], fill_from_data=False)
  assert {k: from_file[k] for k in new} == new
  flag_values = flags.FlagValues()
  resnet_flags.define_flags(flag_values)
  flag_values(['resnet_main', '--tflite_min_agreement=0.25', '--tflite_eval_images=3'])
  from_flags = resnet_flags.params_from_flags(flag_values, fill_from_data=False)
  assert (from_flags.deploy_min_agreement, from_flags.deploy_eval_images) == (0.25, 3)


def test_quantized_files_are_refused_without_records_by_one_rule(tmp_path):
  """One rule (run_params' validator: synthetic data is dataset_info's rule), before anything trains or is
  written; the export itself only asserts it."""
  synthetic = {'model_dir': str(tmp_path / 'run'), 'export_dir': str(tmp_path / 'export'), 'data_dir': 'null'}
  for key in ('tflite_quantizations', 'onnx_quantizations'):
    other = ({'tflite_quantizations', 'onnx_quantizations'} - {key}).pop()
    with pytest.raises(ValueError, match=rf'{key} calibrates int8 .* set --data_dir'):
      run_params.quantized_exports_have_data({**synthetic, key: ['int8'], other: []})
  run_params.quantized_exports_have_data({**synthetic, 'data_dir': '/records', 'tflite_quantizations': ['int8'],
                                          'onnx_quantizations': []})
  with pytest.raises(ValueError, match=r'tflite_quantizations calibrates int8 .* set --data_dir') as error:
    run_params.make_params({**synthetic, 'tflite_quantizations': ['int8']}, fill_from_data=False)
  assert str(error.value).count('calibrates int8') == 1


def test_each_quantized_file_is_measured_written_and_run_by_litert(tmp_path):
  model = small_model.model()
  directory = small_model.saved_model(model, str(tmp_path / 'export'))
  images, labels = small_model.images(40, seed=1)
  calibration, _ = small_model.images(16, seed=2)
  fmt = tflite_export.TfliteFormat(model, SIZE, int8_io=True)
  report = deploy.export(fmt, directory, 'float32', deploy.Measuring(
      images, labels, ['float16', 'dynamic_int8', 'int8'], calibration, min_agreement=0.0))
  rows = report.measured
  assert report.path == os.path.join(directory, 'model.tflite') and report.ops > 0 and report.max_difference <= 1e-4
  assert [r.kind for r in rows] == ['saved_model', 'float32', 'float16', 'dynamic_int8', 'int8']
  assert all(r.runtime == 'LiteRT (ai-edge-litert)' for r in rows[1:])   # not TensorFlow's interpreter
  by_kind = {r.kind: r for r in rows}
  assert by_kind['float32'].agreement == 1.0 and by_kind['float16'].agreement >= 0.95
  assert all(0.0 <= r.agreement <= 1.0 and r.latency_ms > 0 for r in rows)
  for kind in ('float16', 'dynamic_int8', 'int8'):
    assert os.path.getsize(os.path.join(directory, fmt.file_name(kind))) == by_kind[kind].bytes
  assert by_kind['int8'].bytes < by_kind['float32'].bytes
  int8 = litert_runtime.Model(os.path.join(directory, 'model_int8.tflite'))
  assert int8.input_type == 'int8'   # int8 input and output, as the Edge TPU compiler needs
  probabilities = int8.probabilities(images[:4])
  assert probabilities.shape == (4, 4) and np.allclose(probabilities.sum(axis=1), 1.0, atol=0.05)
  written = json.loads((tmp_path / 'export' / 'tflite_report.json').read_text())
  assert written['num_images'] == 40 and len(written['rows']) == 5
  assert '| model_int8.tflite |' in (tmp_path / 'export' / 'tflite_report.txt').read_text() == report.table
  assert '| top-1 | top-1 agreement with the SavedModel | worst class: its Jaccard index |' in report.table


def test_multi_label_files_serve_sigmoids_and_are_measured_per_label(tmp_path):
  model = small_model.model()
  directory = small_model.saved_model(model, str(tmp_path / 'export'), multi_label=True)
  images, _ = small_model.images(40, seed=1)
  labels = (np.random.default_rng(3).uniform(size=(40, 4)) < 0.4).astype(np.int64)
  outputs = answers.Thresholded((0.4, 0.5, 0.6, 0.5))
  measuring = deploy.Measuring(images, labels, ['dynamic_int8'], min_agreement=0.0)
  report = tflite_export.export_tflite(directory, model, small_model.model, SIZE, 'float32', measuring=measuring,
                                       answers=outputs)
  sigmoids = tf.sigmoid(model(images, training=False)).numpy()
  with open(os.path.join(directory, 'model.tflite'), 'rb') as f:
    np.testing.assert_allclose(litert_runtime.Model(f.read()).probabilities(images), sigmoids, atol=1e-4)
  saved, float32, int8 = report.measured
  assert [r.metric for r in report.measured] == ['micro F1'] * 3 and float32.agreement == 1.0
  decided = sigmoids >= np.array(outputs.thresholds)
  hits = np.sum(decided & (labels > 0))
  assert saved.top_1 == pytest.approx(2 * hits / (decided.sum() + labels.sum()), abs=1e-6)
  with open(os.path.join(directory, 'model_dynamic_int8.tflite'), 'rb') as f:
    int8_decided = litert_runtime.Model(f.read()).probabilities(images) >= np.array(outputs.thresholds)
  # Of the positive decisions either makes, the share both make: not diluted by the easy negatives.
  assert int8.agreement == pytest.approx(np.sum(int8_decided & decided) / np.sum(int8_decided | decided))
  assert answers.Thresholded((0.5,) * 4).agreement(np.zeros((40, 4)), decided.astype(int)) == 0.0
  assert '| micro F1 | Jaccard index of positive labels with the SavedModel |' in report.table


def test_a_file_below_the_agreement_threshold_is_not_written_and_the_rest_stays(tmp_path, monkeypatch):
  model = small_model.model()
  directory = small_model.saved_model(model, str(tmp_path / 'export'))
  images, labels = small_model.images(20, seed=1)
  measure = deploy.Reference.measure

  def disagreeing(self, name, kind, data, runner):
    row = measure(self, name, kind, data, runner)
    return row if kind != 'dynamic_int8' else deploy_report.Row(**{**row.__dict__, 'agreement': 0.5})
  monkeypatch.setattr(deploy.Reference, 'measure', disagreeing)
  with pytest.raises(deploy.QuantizationError, match=r"model_dynamic_int8.tflite agrees with the SavedModel's top-1 on "
                     r'50.0% of 20 validation images, below deploy_min_agreement=0.9 \(top-1 .*\): it was not written\. '
                     r'To keep it: export float32 or float16 instead .* Complete: the SavedModel, model.tflite, '
                     r'model_float16.tflite; the table is in .*tflite_report.txt'):
    deploy.export(tflite_export.TfliteFormat(model, SIZE), directory, 'float32', deploy.Measuring(
        images, labels, ['float16', 'dynamic_int8'], min_agreement=0.9))
  written = sorted(os.path.basename(p) for p in glob.glob(str(tmp_path / 'export' / '*.tflite')))
  assert written == ['model.tflite', 'model_float16.tflite']   # the refused file is not there, the others stay
  assert (tmp_path / 'export' / 'saved_model.pb').exists()
  assert 'not written: below deploy_min_agreement)' in (tmp_path / 'export' / 'tflite_report.txt').read_text()


def test_a_model_that_cannot_be_quantized_is_named_and_nothing_is_written(tmp_path):
  keras.utils.set_random_seed(0)
  inputs = keras.Input((SIZE, SIZE, 3))
  x = keras.layers.Lambda(tf.math.erf)(keras.layers.Conv2D(4, 3)(inputs))   # no TFLite kernel at all
  model = keras.Model(inputs, keras.layers.Dense(4)(keras.layers.GlobalAveragePooling2D()(x)))
  calibration, _ = small_model.images(4, seed=2)
  with pytest.raises(deploy.QuantizationError, match=r'no TFLite kernel in int8 or float \(.*Erf'):
    tflite_export.convert(model, SIZE, tflite_export.Quantization('int8', calibration))


def _run(args, tmp_path, name):
  """The CLI's main in this process; the result with ``returncode``, ``stdout`` and ``stderr`` (the log)."""
  result = cli.run_in_process(*args, base=())
  (tmp_path / f'{name}.log').write_text(result.out + result.log)
  return types.SimpleNamespace(returncode=result.code, stdout=result.out, stderr=result.log)


@pytest.mark.slow
def test_train_export_quantized_then_predict_with_the_int8_file_and_reexport_without_params(tmp_path):
  data_dir = cli.make_tiny_dataset(str(tmp_path / 'data'), num_train=24, num_validation=16)
  model_dir, export_dir = tmp_path / 'run', tmp_path / 'export'
  trained = _run(list(cli.TINY) + [
      '--mode=train', f'--data_dir={data_dir}', f'--model_dir={model_dir}', '--train_steps=2',
      f'--export_dir={export_dir}', '--tflite_quantizations=int8', '--tflite_calibration_images=8',
      '--tflite_eval_images=16', '--tflite_min_agreement=0', '--deploy_min_class_agreement=0'], tmp_path, 'train')
  assert trained.returncode == 0, trained.stderr[-3000:]
  (version,) = glob.glob(str(export_dir / '*'))
  assert sorted(os.path.basename(p) for p in glob.glob(os.path.join(version, '*.tflite'))) == [
      'model.tflite', 'model_int8.tflite']   # float16 and dynamic_int8 files: the tests above and the re-export
  assert '| model_int8.tflite |' in trained.stdout and 'LiteRT (ai-edge-litert)' in trained.stdout

  # Predict with the int8 file: the same CSV and per-class report, computed by LiteRT.
  output = tmp_path / 'int8.csv'
  predicted = _run(['--mode=predict', f'--model_dir={model_dir}', f'--predict_tflite={version}/model_int8.tflite',
                    f'--predict_output={output}', '--use_tpu=false'], tmp_path, 'predict')
  assert predicted.returncode == 0, predicted.stderr[-3000:]
  lines = output.read_text().splitlines()
  assert lines[0].startswith('image,true_label') and len(lines) == 1 + 16   # the validation split, labelled
  assert (tmp_path / 'int8_report.json').exists()

  # Export the finished run with nothing restated: depth, classes, image size and data come from its params.yaml.
  # (The run above gave the shared params their former tflite_* names, still accepted.)
  again = _run(['--mode=export', f'--model_dir={model_dir}', f'--export_dir={tmp_path / "again"}',
                '--tflite_quantizations=dynamic_int8', '--deploy_eval_images=8', '--deploy_min_agreement=0',
                '--deploy_min_class_agreement=0',
                '--use_tpu=false'], tmp_path, 'export')
  assert again.returncode == 0, again.stderr[-3000:]
  assert 'From the run in' in again.stderr and 'resnet_depth=10' in again.stderr
  assert glob.glob(str(tmp_path / 'again' / '*' / 'model_dynamic_int8.tflite'))
  contradicting = _run(['--mode=export', f'--model_dir={model_dir}', f'--export_dir={tmp_path / "bad"}',
                        '--resnet_depth=50', '--use_tpu=false'], tmp_path, 'contradicting')
  assert contradicting.returncode != 0 and 'resnet_depth' in contradicting.stderr


@pytest.mark.slow
def test_quantized_exports_need_the_runs_records(tmp_path):
  result = _run(list(cli.TINY) + ['--mode=train', f'--model_dir={tmp_path / "run"}', '--train_steps=1',
                                  f'--export_dir={tmp_path / "export"}', '--tflite_quantizations=int8'],
                tmp_path, 'synthetic')
  assert result.returncode != 0 and 'tflite_quantizations' in result.stderr and '--data_dir' in result.stderr
  assert not glob.glob(str(tmp_path / 'run' / 'model.ckpt-*'))   # refused before training


def test_int8_input_and_output_tensors_compute_what_float_io_does(tmp_path):
  """The runtime quantizes 0..255 images into the int8 input and dequantizes the int8 output: the same model with
  float input and output answers the same within the int8 steps."""
  model = small_model.model()
  calibration, _ = small_model.images(16, seed=2)
  images, _ = small_model.images(12, seed=3)
  float_io = litert_runtime.Model(tflite_export.convert(model, SIZE, tflite_export.Quantization('int8', calibration)))
  int8_io = litert_runtime.Model(tflite_export.convert(
      model, SIZE, tflite_export.Quantization('int8', calibration, int8_io=True)))
  assert (float_io.input_type, int8_io.input_type) == ('float32', 'int8')
  np.testing.assert_allclose(int8_io.probabilities(images), float_io.probabilities(images), atol=0.02)


def test_without_ai_edge_litert_the_check_falls_back_to_tensorflow_and_says_so(monkeypatch, caplog):
  model = small_model.model()
  flatbuffer = tflite_export.convert(model, SIZE)
  images, _ = small_model.images(3, seed=4)
  expected = litert_runtime.Model(flatbuffer).probabilities(images)
  monkeypatch.setitem(sys.modules, 'ai_edge_litert.interpreter', None)   # the import fails
  monkeypatch.setattr(litert_runtime, '_WARNED', [])
  fallback = litert_runtime.Model(flatbuffer)
  assert fallback.runtime == 'TensorFlow tf.lite'
  assert any('ai-edge-litert is not installed' in r.getMessage() for r in caplog.records)
  np.testing.assert_allclose(fallback.probabilities(images), expected, atol=1e-6)


@pytest.mark.slow
def test_the_measured_images_are_spread_over_the_split(tmp_path):
  from resnet.run_setup import run_params  # pylint: disable=import-outside-toplevel
  from resnet.export import host_images  # pylint: disable=import-outside-toplevel
  data_dir = cli.make_tiny_dataset(str(tmp_path / 'data'), num_train=8, num_validation=16)
  (tmp_path / 'data' / 'summary.json').write_text(json.dumps({'splits': {'validation': {'images': 16}}}))
  params = run_params.make_params({'data_dir': data_dir, 'image_size': 32, 'model_dir': str(tmp_path / 'm')})
  every, labels = host_images.host_images(params, 'validation', 16)
  spread, spread_labels = host_images.host_images(params, 'validation', 4)
  np.testing.assert_array_equal(spread_labels, labels[::4])
  np.testing.assert_array_equal(spread, every[::4])
  # A run that evaluates its first 8 records: the 4 images are spread over those 8 (the stride came from the whole
  # split: 2 images came back).
  first = run_params.make_params({'data_dir': data_dir, 'image_size': 32, 'model_dir': str(tmp_path / 'm8'),
                                  'num_eval_images': 8})
  first_images, first_labels = host_images.host_images(first, 'validation', 4)
  np.testing.assert_array_equal(first_labels, labels[:8][::2])
  np.testing.assert_array_equal(first_images, every[:8][::2])
  with pytest.raises(host_images.NoImagesError, match='test'):
    host_images.host_images(params, 'test', 4)
  # Multi-crop TTA reads larger eval images (37 px at 32); the exported file is measured on the usual view.
  ten_crop = run_params.make_params({'data_dir': data_dir, 'image_size': 32, 'model_dir': str(tmp_path / 'mt'),
                                     'tta': 'ten_crop'})
  np.testing.assert_array_equal(host_images.host_images(ten_crop, 'validation', 16)[0], every)
