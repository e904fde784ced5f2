"""The multi-label route a user takes, in-process: a Planet-shaped CSV and a folder of images -> the converter ->
train_and_eval -> predict -> export -> eval and predict days later, with no multi-label flag anywhere."""
import csv
import glob
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from tests.helpers import cli
from tools import imagenet_to_gcs
from tools import make_demo_dataset

pytestmark = pytest.mark.slow

BASE = ('--resnet_depth=10', '--image_size=32', '--precision=float32', '--train_batch_size=8', '--eval_batch_size=8',
        '--predict_batch_size=8', '--use_tpu=false', '--skip_train_summaries=true', '--keep_checkpoint_max=3')


@pytest.fixture(scope='module')
def run(module_tmp):
  """(model_dir, data_dir, the train_and_eval result): 8 steps, an eval every 4, the export at the end."""
  root = str(module_tmp.mktemp('multi_label_run'))
  made = make_demo_dataset.make_multi_label_dataset(os.path.join(root, 'raw'), num_images=60, image_size=48)
  data_dir = os.path.join(root, 'data')
  imagenet_to_gcs.convert_dataset(os.path.join(root, 'raw', 'images'), data_dir, labels_csv_path=made['csv'])
  model_dir = os.path.join(root, 'run')
  result = cli.run_in_process('--mode=train_and_eval', f'--data_dir={data_dir}', f'--model_dir={model_dir}',
                              '--train_steps=8', '--steps_per_eval=4', f'--export_dir={model_dir}/export', base=BASE)
  assert result.code == 0, result.log
  return model_dir, data_dir, result


def _eval_results(model_dir: str) -> dict:
  with open(os.path.join(model_dir, 'eval_results.json')) as f:
    return json.load(f)


def test_the_task_loss_and_best_metric_come_from_the_data(run):
  model_dir, data_dir, result = run
  params = open(os.path.join(model_dir, 'params.yaml')).read()
  for line in ('task: multi_label', 'loss: binary_cross_entropy', 'best_metric: mAP'):
    assert line in params
  assert 'task=multi_label' in result.log and 'loss=binary_cross_entropy, best_metric=mAP' in result.log
  results = _eval_results(model_dir)
  assert results['global_step'] == 8
  assert len(results['label_thresholds']) == 4 and set(results['per_class']) == set(make_demo_dataset.CLASSES[:4])
  for key in ('mAP', 'micro_AP', 'micro_f1', 'macro_f1', 'micro_f1_tuned', 'macro_f1_tuned', 'exact_match'):
    assert 0.0 <= results[key] <= 1.0
  with open(os.path.join(model_dir, 'best', 'eval_results.json')) as f:
    assert json.load(f)['best_metric'] == 'mAP'


def test_tensorboard_gets_pr_curves(run):
  model_dir, _, _ = run
  tags = set()
  for path in glob.glob(os.path.join(model_dir, 'eval', 'events.*')):
    for event in tf.compat.v1.train.summary_iterator(path):
      for value in event.summary.value:
        if value.metadata.plugin_data.plugin_name == 'pr_curves':
          tags.add(value.tag)
  assert 'pr_curve/all_classes' in tags and 'pr_curve/circles' in tags


def test_the_export_decides_at_the_thresholds_eval_tuned(run):
  model_dir, _, _ = run
  thresholds = np.array(_eval_results(model_dir)['label_thresholds'], np.float32)
  exported = tf.saved_model.load(glob.glob(os.path.join(model_dir, 'export', '*'))[0])
  images = np.random.default_rng(0).uniform(0, 255, (16, 32, 32, 3)).astype(np.float32)
  out = exported.signatures['serving_images'](images=tf.constant(images))
  probabilities = out['probabilities'].numpy()
  assert probabilities.shape == (16, 4) and not np.allclose(probabilities.sum(axis=1), 1.0)  # sigmoids
  np.testing.assert_array_equal(out['labels'].numpy(), (probabilities >= thresholds).astype(np.int32))


def test_predict_lists_the_labels_above_their_thresholds_and_reports_map(run, tmp_path):
  model_dir, _, _ = run
  output = str(tmp_path / 'predictions.csv')
  result = cli.run_in_process('--mode=predict', f'--model_dir={model_dir}', f'--predict_output={output}', base=())
  assert result.code == 0, result.log
  assert 'tuned on the validation split at step 8' in result.log
  thresholds = dict(zip(sorted(make_demo_dataset.CLASSES[:4]), _eval_results(model_dir)['label_thresholds']))
  with open(output) as f:
    rows = list(csv.DictReader(f))
  assert len(rows) == 6 and rows[0].keys() >= {'image', 'true_labels', 'predicted_labels', 'probabilities'}
  for row in rows:
    chosen = row['predicted_labels'].split()
    probabilities = [float(p) for p in row['probabilities'].split()]
    assert len(chosen) == len(probabilities) and probabilities == sorted(probabilities, reverse=True)
    assert all(p >= thresholds[name] - 1e-6 for name, p in zip(chosen, probabilities))
  with open(str(tmp_path / 'predictions_report.json')) as f:
    report = json.load(f)
  assert report['num_examples'] == 6 and 0 <= report['mAP'] <= 1
  assert report['label_thresholds'] == pytest.approx(list(thresholds.values()), abs=1e-6)


def test_tflite_files_serve_sigmoids_measured_per_label_and_predict_decides_with_the_runs_thresholds(run, tmp_path):
  from resnet.export import litert_runtime  # pylint: disable=import-outside-toplevel
  model_dir, _, _ = run
  # No agreement floors: 6 images of an unseeded 8-step model give ~7 positive labels, one flip under int8 is 86%
  # (the floors' refusals are tested in test_quantized_export, test_onnx_export and test_deployed_decisions).
  result = cli.run_in_process('--mode=export', f'--model_dir={model_dir}', f'--export_dir={tmp_path / "export"}',
                              '--export_tflite=true', '--tflite_quantizations=dynamic_int8', '--deploy_min_agreement=0',
                              '--deploy_min_class_agreement=0',
                              base=())
  assert result.code == 0, result.log
  assert '| file | size MB | micro F1 | Jaccard index of positive labels with the SavedModel |' in result.out
  version = glob.glob(str(tmp_path / 'export' / '*'))[0]
  with open(os.path.join(version, 'tflite_report.json')) as f:
    rows = json.load(f)['rows']
  assert [r['metric'] for r in rows] == ['micro F1'] * 3 and all(0 <= r['agreement'] <= 1 for r in rows)
  images = np.random.default_rng(1).uniform(0, 255, (4, 32, 32, 3)).astype(np.float32)
  with open(os.path.join(version, 'model.tflite'), 'rb') as f:
    lite = litert_runtime.Model(f.read()).probabilities(images)
  served = tf.saved_model.load(version).signatures['serving_images'](images=tf.constant(images))
  np.testing.assert_allclose(lite, served['probabilities'].numpy(), atol=1e-4)   # the sigmoids, not a softmax
  output = str(tmp_path / 'lite.csv')
  result = cli.run_in_process('--mode=predict', f'--model_dir={model_dir}', f'--predict_output={output}',
                              f'--predict_tflite={os.path.join(version, "model.tflite")}', base=())
  assert result.code == 0, result.log
  assert 'the thresholds exported with' in result.log   # label_thresholds.json beside the file
  with open(os.path.join(version, 'label_thresholds.json')) as f:
    assert json.load(f)['thresholds'] == _eval_results(model_dir)['label_thresholds']
  checkpoint_output = str(tmp_path / 'checkpoint.csv')
  assert cli.run_in_process('--mode=predict', f'--model_dir={model_dir}', f'--predict_output={checkpoint_output}',
                            base=()).code == 0
  answers = []
  for path in (output, checkpoint_output):
    with open(path) as f:
      answers.append([(r['image'], r['predicted_labels']) for r in csv.DictReader(f)])
  assert len(answers[0]) == 6 and answers[0] == answers[1]   # the file decides as the checkpoint does


def test_a_warm_start_from_a_run_of_other_classes_starts_the_new_head_at_the_prior(run, tmp_path):
  """The 4-class run's backbone into a 3-class multi-label model (synthetic data): the head starts fresh, its
  biases at the prior -ln(K - 1), and the export without an evaluation decides at 0.5, saying so."""
  model_dir, _, _ = run
  warm = str(tmp_path / 'warm')
  result = cli.run_in_process('--mode=export', f'--model_dir={warm}', f'--resnet_checkpoint={model_dir}',
                              '--task=multi_label', '--num_label_classes=3', f'--export_dir={tmp_path / "export"}',
                              base=BASE)
  assert result.code == 0, result.log
  assert 'model 3' in result.log and 'starts fresh' in result.log
  assert 'decisions at 0.5 for every class' in result.log
  weights = cli.model_weights(tf.train.latest_checkpoint(warm))
  reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(warm))
  (bias,) = [reader.get_tensor(k) for k, shape in reader.get_variable_to_shape_map().items()
             if shape == [3] and 'OPTIMIZER_SLOT' not in k]
  np.testing.assert_allclose(bias, [-np.log(2.0)] * 3, rtol=1e-6)
  backbone = cli.model_weights(tf.train.latest_checkpoint(model_dir))   # the backbone's batch-norm statistics
  shared = [k for k in weights if 'moving_mean' in k and k in backbone]
  assert len(shared) > 5 and all(np.array_equal(weights[k], backbone[k]) for k in shared)


def test_each_evaluated_step_keeps_its_thresholds_and_an_older_eval_does_not_replace_the_latests(run, tmp_path):
  model_dir, _, _ = run
  with open(os.path.join(model_dir, 'label_thresholds.json')) as f:
    recorded = json.load(f)
  assert sorted(recorded['steps']) == ['4', '8']
  assert recorded['steps']['8']['thresholds'] == _eval_results(model_dir)['label_thresholds']
  assert recorded['steps']['8']['tuned_on'] == {'weights': 'trained', 'tta': 'none'}
  result = cli.run_in_process('--mode=eval', f'--model_dir={model_dir}',
                              f'--eval_checkpoint={os.path.join(model_dir, "model.ckpt-4")}', base=())
  assert result.code == 0, result.log
  assert _eval_results(model_dir)['global_step'] == 4   # eval_results.json is the last evaluation's ...
  result = cli.run_in_process('--mode=predict', f'--model_dir={model_dir}',
                              f'--predict_output={tmp_path / "p.csv"}', base=())
  assert result.code == 0, result.log
  assert 'tuned on the validation split at step 8' in result.log   # ... predict still decides with step 8's


def test_days_later_without_any_evaluation_predict_decides_at_one_half_and_eval_tunes_again(run, tmp_path):
  model_dir, _, _ = run
  for name in ('eval_results.json', 'label_thresholds.json'):
    os.remove(os.path.join(model_dir, name))
  result = cli.run_in_process('--mode=predict', f'--model_dir={model_dir}',
                              f'--predict_output={tmp_path / "p.csv"}', base=())
  assert result.code == 0, result.log
  assert 'decisions at 0.5 for every class' in result.log and '--mode=eval' in result.log
  result = cli.run_in_process('--mode=eval', f'--model_dir={model_dir}', base=())
  assert result.code == 0, result.log
  assert len(_eval_results(model_dir)['label_thresholds']) == 4 and 'mAP=' in result.log
  with open(os.path.join(model_dir, 'label_thresholds.json')) as f:
    assert list(json.load(f)['steps']) == ['8']


def test_single_label_readings_of_multi_label_data_are_refused(run, tmp_path):
  model_dir, data_dir, _ = run
  result = cli.run_in_process('--mode=train', f'--data_dir={data_dir}', f'--model_dir={tmp_path / "a"}',
                              '--task=single_label', '--train_steps=1', base=BASE)
  assert result.code == 1 and 'task=single_label, but' in result.log and 'says the data is multi_label' in result.log
  result = cli.run_in_process('--mode=train', f'--model_dir={tmp_path / "b"}', f'--teacher_checkpoint={model_dir}',
                              '--num_label_classes=4', '--train_steps=1', base=BASE)
  assert result.code == 1 and 'is a multi-label model' in result.log, result.log[-2000:]
  from tools import compare_keras_fit  # pylint: disable=import-outside-toplevel
  with pytest.raises(ValueError, match="task='multi_label': this comparison is of single-label classifiers"):
    compare_keras_fit.read_summary(data_dir)
