"""End-to-end CLI tests: resnet_main in subprocesses on a tiny converted dataset, as a user runs it."""
import csv
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from tests.helpers import cli
from tests.helpers import tiny
from resnet.run_dir import params_files
from resnet.run_setup import run_params
from tests.helpers import procs

pytestmark = pytest.mark.slow  # end to end: whole runs, processes or their shared fixtures

ROOT = procs.ROOT
TINY = ['--resnet_depth=10', '--image_size=32', '--num_label_classes=4', '--precision=float32',
        '--train_batch_size=8', '--eval_batch_size=8', '--predict_batch_size=8', '--iterations_per_loop=3',
        '--param_overrides=lr_schedule=cosine,base_learning_rate=0.2']


def run_main(*args, **kwargs):
  """A subprocess: for what the process shows (the script form, its console, a seeded run, the profiler)."""
  return cli.run_cli(*args, **kwargs)


def run_here(*args):
  """In this process: for what the program computes and writes."""
  return cli.run_in_process(*args, base=())


@pytest.fixture(scope='module')
def trained(records, module_tmp):
  """One train_and_eval run shared by the tests below: 6 steps in chunks of 3, with an export of the best
  checkpoint, balanced class weights, and the ImageNet schedule on small data (which draws the advice)."""
  model_dir = str(module_tmp.mktemp('run'))
  result = run_here('--mode=train_and_eval', f'--data_dir={records}', f'--model_dir={model_dir}',
                    '--train_steps=6', '--steps_per_eval=3', '--num_eval_images=4',
                    f'--export_dir={model_dir}/export', *TINY, '--lr_schedule=stepwise', '--class_weights=balanced',
                    '--export_best=true', '--best_metric=loss')
  assert result.code == 0, result.log[-3000:]
  return model_dir, result.log + result.out


def test_help_lists_the_reference_and_seed_flags():
  proc = run_main('--help', module=False)    # the script's own help (in a test process, pytest is the main module)
  assert proc.returncode in (0, 1), proc.stderr[-2000:]  # absl exits 1 after --help
  for flag in ('--tpu', '--use_tpu', '--data_dir', '--model_dir', '--mode', '--train_steps', '--iterations_per_loop',
               '--param_overrides', '--params_override', '--config_file', '--resnet_checkpoint',
               '--profile_every_n_steps', '--tpu_profile_duration', '--export_dir', '--predict_batch_size',
               '--num_test_images', '--steps_per_eval', '--eval_timeout', '--strategy', '--dump_params'):
    assert flag in proc.stdout or flag.replace('--', '--[no]') in proc.stdout, flag


def test_train_and_eval_alternates_and_writes_eval_results(trained):
  model_dir, log = trained
  assert 'Eval at step 3 over' in log and 'Eval at step 6 over' in log
  assert log.index('Eval at step 3') < log.index('step 6/6')  # evaluation between the two chunks
  with open(os.path.join(model_dir, 'eval_results.json')) as f:
    results = json.load(f)
  assert results['global_step'] == 6
  assert results['num_examples'] == 4  # the whole validation split (4 classes x 1 image), exactly once
  assert set(results) >= {'top_1_accuracy', 'top_5_accuracy', 'loss'}
  assert log.count('Built ResNet-10') == 1  # the model is built once, not per chunk
  saved = params_files.read_params(os.path.join(model_dir, 'params.yaml'))
  assert saved.train_steps == 6 and saved.lr_schedule == 'stepwise' and saved.image_size == 32
  assert os.listdir(os.path.join(model_dir, 'export'))


def test_eval_reports_per_class_metrics_confusion_image_misclassified_and_keeps_the_best(trained, records):
  model_dir, log = trained
  results = json.load(open(os.path.join(model_dir, 'eval_results.json')))
  names = open(os.path.join(records, 'labels.txt')).read().split()
  assert list(results['per_class']) == names and results['class_names'] == names
  matrix = np.array(results['confusion_matrix'])
  assert matrix.shape == (4, 4) and matrix.sum() == results['num_examples'] == 4
  assert results['top_1_accuracy'] == pytest.approx(np.trace(matrix) / 4)
  assert [results['per_class'][n]['support'] for n in names] == list(matrix.sum(axis=1))
  rows = list(csv.DictReader(open(os.path.join(model_dir, 'eval_misclassified.csv'))))
  assert len(rows) == 4 - np.trace(matrix) == results['misclassified_examples']
  assert all(r['image'].endswith(('.jpg', '.png')) and r['true_class'] != r['predicted_class'] for r in rows)
  # TensorBoard's eval run: macro scalars and the confusion matrix as a PNG image.
  tags = {}
  for event_file in tf.io.gfile.glob(os.path.join(model_dir, 'eval', 'events.*')):
    for event in tf.compat.v1.train.summary_iterator(event_file):
      for value in event.summary.value:
        tags[value.tag] = value
  assert {'macro_f1', 'macro_precision', 'macro_recall', 'top_1_accuracy'} <= set(tags)
  image = tf.make_ndarray(tags['confusion_matrix'].tensor)    # [width, height, png]
  decoded = tf.io.decode_png(image[2]).numpy()
  assert decoded.shape[2] == 3 and decoded.shape[0] > 100
  # Class weights resolved from summary.json (balanced data: all 1) and recorded; the advice once.
  assert params_files.read_params(os.path.join(model_dir, 'params.yaml')).class_weights == [1.0] * 4
  assert log.count('does much worse on small data') == 1 and 'small_data' in log
  # The best checkpoint by loss, kept in best/ and exported.
  best = json.load(open(os.path.join(model_dir, 'best', 'eval_results.json')))
  assert best['best_metric'] == 'loss' and best['global_step'] in (3, 6)
  assert best['loss'] <= results['loss']
  assert f"Exporting the best checkpoint {model_dir}/best/model.ckpt-{best['global_step']}" in log
  assert tf.train.latest_checkpoint(os.path.join(model_dir, 'best')).endswith(f"ckpt-{best['global_step']}")


def test_predict_writes_one_csv_row_per_requested_image(trained, records):
  model_dir, _ = trained
  output = os.path.join(model_dir, 'pred.csv')
  result = run_here('--mode=predict', f'--data_dir={records}', f'--model_dir={model_dir}', *TINY,
                    '--num_test_images=3', f'--predict_output={output}')
  assert result.code == 0, result.log[-3000:]
  with open(output) as f:
    rows = list(csv.DictReader(f))
  assert len(rows) == 3
  names = open(os.path.join(records, 'labels.txt')).read().split()
  for row in rows:
    assert row['image'].endswith(('.jpg', '.png'))
    assert row['true_class'] == names[int(row['true_label'])]
    assert row['top1_class'] == names[int(row['top1_label'])]
    probs = [float(row[f'top{i}_probability']) for i in range(1, 5)]
    assert probs == sorted(probs, reverse=True) and sum(probs) == pytest.approx(1.0, abs=1e-4)
  # Labelled data: the per-class report of the predictions, equal to a count of the CSV's rows.
  report = json.load(open(os.path.join(model_dir, 'pred_report.json')))
  matrix = np.zeros((4, 4), int)
  for row in rows:
    matrix[int(row['true_label']), int(row['top1_label'])] += 1
  assert report['confusion_matrix'] == matrix.tolist() and report['num_examples'] == 3
  assert report['top_1_accuracy'] == pytest.approx(np.trace(matrix) / 3)
  assert list(report['per_class']) == names
  wrong = list(csv.DictReader(open(os.path.join(model_dir, 'pred_misclassified.csv'))))
  assert len(wrong) == 3 - np.trace(matrix)


def test_predict_over_raw_image_files(trained, records, tmp_path):
  model_dir, _ = trained
  image_dir = os.path.join(os.path.dirname(records), 'images', 'circles')
  output = str(tmp_path / 'files.csv')
  result = run_here('--mode=predict', f'--predict_input={image_dir}/*', f'--model_dir={model_dir}', *TINY,
                    f'--labels_file={records}/labels.txt', f'--predict_output={output}')
  assert result.code == 0, result.log[-3000:]
  with open(output) as f:
    rows = list(csv.DictReader(f))
  assert len(rows) == len(os.listdir(image_dir))
  assert all(row['true_label'] == '' for row in rows)


def test_predict_with_a_labels_file_one_name_short_is_refused_naming_both(trained, records, tmp_path):
  """One name short of a model trained without a background class would make class 0 'background' and shift
  every name by one."""
  model_dir, _ = trained
  names = open(os.path.join(records, 'labels.txt')).read().split()
  short = tmp_path / 'labels.txt'
  short.write_text('\n'.join(names[1:]) + '\n')
  image_dir = os.path.join(os.path.dirname(records), 'images', 'circles')
  result = run_here('--mode=predict', f'--predict_input={image_dir}/*', f'--model_dir={model_dir}', *TINY,
                    f'--labels_file={short}', f'--predict_output={tmp_path / "p.csv"}')
  assert result.code != 0 and not (tmp_path / 'p.csv').exists()
  # The run's data_dir comes with the run (the labels file is given on its own): its summary.json refuses them.
  assert (f'labels_file={short} lists 3 classes but the data in {records} has 4') in result.log, result.log[-3000:]
  assert f'give the labels file of this data ({records}/labels.txt' in result.log


def test_export_best_with_a_damaged_best_record_exports_the_latest_with_a_warning(trained, records, tmp_path):
  import shutil  # pylint: disable=import-outside-toplevel
  model_dir = str(tmp_path / 'run')
  shutil.copytree(trained[0], model_dir, ignore=shutil.ignore_patterns('export'))
  with open(os.path.join(model_dir, 'best', 'eval_results.json'), 'w') as f:
    f.write('{"loss": 1.2, "glo')                                 # cut short
  result = run_here('--mode=export', f'--model_dir={model_dir}', f'--export_dir={tmp_path / "export"}', *TINY,
                    f'--data_dir={records}', '--export_best=true', '--best_metric=loss')
  assert result.code == 0, result.log[-3000:]
  assert 'best/eval_results.json is not a valid JSON record' in result.log
  assert 'best/ is damaged or its checkpoint  is gone' not in result.log   # no empty name in the message
  assert 'exporting the latest checkpoint of' in result.log and os.listdir(tmp_path / 'export')
  assert 'training goes on' not in result.log                              # an export, not a training run


def test_one_shot_eval_of_a_given_checkpoint(trained, records):
  model_dir, _ = trained
  proc = run_main('--mode=eval', f'--data_dir={records}', f'--model_dir={model_dir}', *TINY,
                  f'--eval_checkpoint={model_dir}/model.ckpt-3', user_env=True)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert 'Eval at step 3 over 4 examples' in proc.stderr
  # What a user reads: no TensorFlow internals they cannot act on, no false "read 0 records" warning.
  for noise in ('Skipping loop optimization', 'GeneratorDatasetOp', 'finished the data'):
    assert noise not in proc.stderr, noise


def test_continuous_eval_stops_after_the_final_step(trained, records):
  model_dir, _ = trained
  result = run_here('--mode=eval', f'--data_dir={records}', f'--model_dir={model_dir}', *TINY, '--eval_timeout=60')
  assert result.code == 0, result.log[-3000:]
  assert 'Evaluated the final step 6' in result.log   # the run's train_steps, not the default


def test_dump_params_shows_precedence_without_running(tmp_path):
  config = tmp_path / 'c.yaml'
  config.write_text('train_steps: 100\niterations_per_loop: 10\nbase_learning_rate: 1e-3\n')
  result = run_here(f'--config_file={config}', '--param_overrides=iterations_per_loop=5,train_steps=50',
                    '--train_steps=7', '--dump_params')
  assert result.code == 0, result.log[-2000:]
  dumped = run_params.make_params(result.out)  # the dump is valid params input
  assert dumped.train_steps == 7 and dumped.iterations_per_loop == 5 and dumped.base_learning_rate == 1e-3


def test_training_a_tiny_resnet_lowers_the_loss(tmp_path):
  """resnet_model_fn through the runner on a learnable synthetic task (class = mean brightness)."""
  params = tiny.resnet_params(tmp_path, train_batch_size=16, train_steps=60, lr_schedule='cosine',
                              base_learning_rate=0.5, weight_decay=1e-4, num_train_images=1024,
                              iterations_per_loop=10)

  def input_fn(p):
    def make(i):
      label = tf.cast(i % 2, tf.int32)
      image = tf.random.stateless_uniform([32, 32, 3], [i, 0], 0, 128) + 127.0 * tf.cast(label, tf.float32)
      return image, label
    return tf.data.Dataset.range(1 << 20).map(make).batch(p['batch_size'], drop_remainder=True)

  runner = tiny.resnet_estimator(params)
  first = runner.train(input_fn, max_steps=10)['loss']
  last = runner.train(input_fn, max_steps=60)['loss']
  assert last < 0.6 * first, (first, last)


def test_train_with_periodic_profiling_writes_captures_and_prints_the_verdict(records, tmp_path):
  """The real runner and CLI: --profile_every_n_steps=2 over 6 steps gives captures under plugins/profile."""
  model_dir = str(tmp_path / 'prof')
  proc = run_main('--mode=train', f'--data_dir={records}', f'--model_dir={model_dir}', '--train_steps=6',
                  '--profile_every_n_steps=2', '--tpu_profile_duration=1', *TINY)
  assert proc.returncode == 0, proc.stderr[-3000:]
  runs = tf.io.gfile.glob(os.path.join(model_dir, 'plugins', 'profile', '*', '*.xplane.pb'))
  assert runs, 'no capture under plugins/profile'  # every 2 steps after the compile loop, never overlapping
  assert 'Verdict:' in proc.stdout, proc.stdout[-2000:]


def test_dropblock_keep_prob_follows_its_schedule_during_training(tmp_path):
  """model_fn assigns kp(t) = 1 - (t / train_steps) * (1 - keep_prob) to the model's DropBlock variable."""
  params = tiny.resnet_params(tmp_path, resnet_depth=50, train_steps=4, dropblock_groups='4',
                              dropblock_keep_prob=0.6, dropblock_size=1)

  def input_fn(p):
    return tf.data.Dataset.from_tensors((tf.zeros([p['batch_size'], 32, 32, 3]),
                                         tf.zeros([p['batch_size']], tf.int32))).repeat()

  runner = tiny.resnet_estimator(params)
  runner.train(input_fn, max_steps=3)  # the step that reached global step 3 ran at t = 2
  kp = float(runner.scope.get('model').dropblock_keep_prob.numpy())
  assert kp == pytest.approx(1.0 - 2 / 4 * (1.0 - 0.6))


def test_recipe_options_through_the_cli(records, trained, tmp_path):
  """Accumulation, mixup + CutMix, TrivialAugment-Wide, thresholded BCE, distillation from a finished run, a larger
  eval size with five-crop TTA (the export still serves one 48 px view) and the TFLite export in one train_and_eval
  run."""
  model_dir, teacher = str(tmp_path / 'model'), trained[0]
  proc = run_main('--mode=train_and_eval', f'--data_dir={records}', f'--model_dir={model_dir}', '--train_steps=4',
                  '--steps_per_eval=4', '--num_eval_images=4', '--gradient_accumulation_steps=2',
                  '--mixup_alpha=0.2', '--cutmix_alpha=1.0', '--eval_image_size=48', '--export_tflite=true',
                  '--augment_name=trivialaugment_wide', '--loss=binary_cross_entropy', '--bce_target_threshold=0.2',
                  f'--teacher_checkpoint={teacher}', '--distill_temperature=2', '--tta=five_crop',
                  f'--export_dir={model_dir}/export', '--random_seed=1', *TINY, module=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  recorded = params_files.read_params(os.path.join(model_dir, 'params.yaml'))
  assert (recorded.gradient_accumulation_steps, recorded.mixup_alpha, recorded.cutmix_alpha,
          recorded.eval_image_size, recorded.image_size) == (2, 0.2, 1.0, 48, 32)
  assert (recorded.augment_name, recorded.loss, recorded.bce_target_threshold) == (
      'trivialaugment_wide', 'binary_cross_entropy', 0.2)
  log = proc.stderr + proc.stdout
  assert 'a uniform guess scores cross_entropy 0.5623 (binary cross-entropy of sigmoids at 1/4' in log
  assert 'Distillation teacher: ResNet-10, 4 classes' in log and f'from the run of {teacher}' in log
  assert recorded.teacher_checkpoint == teacher and recorded.distill_temperature == 2.0
  results = json.load(open(os.path.join(model_dir, 'eval_results.json')))
  assert results['global_step'] == 4 and results['num_examples'] == 4  # 4 updates of 2 micro-batches each
  (version,) = tf.io.gfile.listdir(os.path.join(model_dir, 'export'))
  export = os.path.join(model_dir, 'export', version.rstrip('/'))
  served = tf.saved_model.load(export).signatures['serving_images']
  assert served.structured_input_signature[1]['images'].shape[1:3] == (48, 48)
  assert os.path.getsize(os.path.join(export, 'model.tflite')) > 1e6
  assert 'Exported TFLite' in proc.stdout and 'vs the SavedModel' in proc.stdout
