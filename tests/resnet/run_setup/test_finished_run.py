"""A finished run gives back what it trained: eval, predict and export of ``--model_dir=RUN`` take the run's model,
precision, data, class names and final step from its records, each on its own, unless given; synthetic data never
stands in for the run's; a checkpoint of another model is refused naming what differs."""
import logging
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from params import resnet_config
from resnet.run_setup import finished_run
from resnet.run_setup import run_params
from tests.helpers import cli
from tests.helpers import tiny

# Every value a finished run must supply, with a value no default has (the test's own list: a key dropped from
# finished_run.SUPPLIED fails here).
RECORDED = dict(
    resnet_depth=34, num_label_classes=7, data_format='channels_first', pre_activation=True,
    norm_act_layer='evonorm_s0', se_ratio=0.25, resnetd_shortcut=True, use_resnetd_stem=True,
    replace_stem_max_pool=True, stride_in_1x1=False, stem_pool_padding='symmetric', input_normalization='caffe_bgr',
    projection_shortcut='shape_change', bn_epsilon=1.001e-5, precision='float32', image_size=96, eval_image_size=128,
    data_dir='/data/of/the/run', labels_file='/data/of/the/run/names.txt', num_eval_images=77, train_steps=4321,
    moving_average_decay=0.999, export_moving_average=True, label_smoothing=0.1, weight_decay=5e-5,
    weight_decay_biases=False, loss='binary_cross_entropy', bce_target_threshold=0.3,
    enable_lars=True, best_metric='macro_f1', best_metric_goal='max')


def _run_dir(tmp_path, values):
  run = tmp_path / 'run'
  run.mkdir()
  (run / 'params.yaml').write_text(''.join(f'{k}: {v!r}\n' if isinstance(v, str) else f'{k}: {v}\n'
                                           for k, v in values.items()).replace("'", '').replace('True', 'true')
                                   .replace('False', 'false'))
  return run


def test_every_value_a_finished_run_supplies_is_taken_and_logged(tmp_path, caplog):
  caplog.set_level(logging.INFO, logger='absl')  # its level, which flag parsing elsewhere may have raised
  assert set(RECORDED) <= set(finished_run.SUPPLIED_KEYS)
  assert set(resnet_config.MODEL_PARAMS) <= set(RECORDED)
  run = _run_dir(tmp_path, RECORDED)
  params = run_params.make_params({'model_dir': str(run)}, fill_from_data=False, from_run=['model_dir'])
  for key, value in RECORDED.items():
    assert params[key] == value, key
  logged = ' '.join(r.getMessage() for r in caplog.records if 'From the run in' in r.getMessage())
  for key in RECORDED:
    assert f'{key}=' in logged, key
  # How that run ran is not taken.
  assert params.train_batch_size == resnet_config.RESNET_CFG['train_batch_size']


def test_eval_of_an_adamw_run_takes_its_optimizer(tmp_path):
  """The optimizer decides whether the eval loss has an L2 term (AdamW's has none). RECORDED holds
  enable_lars=true, which excludes optimizer=adamw: the optimizer is taken on its own here."""
  run = _run_dir(tmp_path, dict(resnet_depth=18, optimizer='adamw', weight_decay=0.05))
  params = run_params.make_params({'model_dir': str(run)}, fill_from_data=False, from_run=['model_dir'])
  assert (params.optimizer, params.weight_decay) == ('adamw', 0.05)


def test_a_value_the_user_gives_wins_and_is_logged_as_given(tmp_path, caplog):
  caplog.set_level(logging.INFO, logger='absl')  # its level, which flag parsing elsewhere may have raised
  run = _run_dir(tmp_path, dict(resnet_depth=18, precision='float32', image_size=96))
  params = run_params.make_params({'model_dir': str(run), 'precision': 'bfloat16', 'image_size': 64},
                                  fill_from_data=False, from_run=['model_dir', 'precision', 'image_size'])
  assert (params.precision, params.image_size, params.resnet_depth) == ('bfloat16', 64, 18)
  assert any("Given, instead of the run's value" in r.getMessage() and "precision='bfloat16' (the run: 'float32')"
             in r.getMessage() for r in caplog.records)
  from_config = run_params.make_params({'model_dir': str(run)}, config_files=['small_data'], fill_from_data=False,
                                       from_run=['model_dir'])
  assert from_config.image_size == 64   # a config file the user names counts as given
  training = run_params.make_params({'model_dir': str(run)}, fill_from_data=False)   # train: nothing taken
  assert training.resnet_depth == 50


def test_data_dir_and_labels_file_are_taken_each_on_its_own(tmp_path):
  """Giving the labels file once dropped the run's data_dir too: eval then ran on synthetic images."""
  run = _run_dir(tmp_path, dict(resnet_depth=18, data_dir='/data/run', labels_file='/data/run/labels.txt',
                                num_eval_images=40))
  labels = run_params.make_params({'model_dir': str(run), 'labels_file': '/elsewhere/labels.txt'},
                                  fill_from_data=False, from_run=['model_dir', 'labels_file'])
  assert (labels.data_dir, labels.labels_file, labels.num_eval_images) == ('/data/run', '/elsewhere/labels.txt', 40)
  moved = run_params.make_params({'model_dir': str(run), 'data_dir': '/data/moved'}, fill_from_data=False,
                                 from_run=['model_dir', 'data_dir'])
  # Another data_dir: the run's labels file still names its classes; the run's count of its data is not taken.
  assert (moved.data_dir, moved.labels_file, moved.num_eval_images) == ('/data/moved', '/data/run/labels.txt', None)


@pytest.fixture(scope='module')
def finished(module_tmp):
  """A copy of the session's tiny finished run (trained on 4 classes of records, float32), its data beside it."""
  model_dir, data_dir, _ = cli.shared_trained_run()
  root = module_tmp.mktemp('finished')
  shutil.copytree(model_dir, root / 'run', ignore=shutil.ignore_patterns('export'))
  return root / 'run', data_dir


def _eval(run, *flags):
  return cli.run_in_process(f'--model_dir={run}', '--mode=eval', '--eval_timeout=90', *flags, base=())


@pytest.mark.slow
def test_eval_of_a_finished_run_evaluates_its_final_step_and_returns(finished):
  run, _ = finished
  result = _eval(run)
  assert result.code == 0, result.log[-3000:]
  assert 'Evaluated the final step 5: done.' in result.log, result.log[-3000:]   # not the 90 s timeout
  assert 'train_steps=5' in result.log and 'over 16 examples' in result.log


@pytest.mark.slow
def test_eval_with_a_labels_file_still_reads_the_runs_validation_records(finished, tmp_path):
  run, data_dir = finished
  labels = tmp_path / 'labels.txt'
  shutil.copy(os.path.join(data_dir, 'labels.txt'), labels)
  result = _eval(run, f'--labels_file={labels}', '--eval_checkpoint=' + str(run / 'model.ckpt-5'))
  assert result.code == 0, result.log[-3000:]
  assert 'over 16 examples' in result.log and 'on synthetic data' not in result.log


@pytest.mark.slow
def test_synthetic_data_never_stands_in_for_the_runs_records(finished):
  run, _ = finished
  before = (run / 'eval_results.json').read_bytes() if (run / 'eval_results.json').exists() else None
  for mode in ('eval', 'predict'):
    result = cli.run_in_process(f'--model_dir={run}', f'--mode={mode}', '--data_dir=', base=())
    assert result.code == 1
    assert f'--mode={mode}: the run in {run} trained on the records in' in result.log
    assert 'Give --data_dir' in result.log
  after = (run / 'eval_results.json').read_bytes() if (run / 'eval_results.json').exists() else None
  assert after == before and not (run / 'predictions.csv').exists()


@pytest.mark.slow
def test_export_of_a_float32_run_is_a_float32_saved_model(finished, tmp_path):
  run, _ = finished
  result = cli.run_in_process(f'--model_dir={run}', '--mode=export', f'--export_dir={tmp_path / "export"}', base=())
  assert result.code == 0, result.log[-3000:]
  assert 'precision=' in result.log and '(float32)' in result.out
  (version,) = os.listdir(tmp_path / 'export')
  graph = tf.saved_model.load(str(tmp_path / 'export' / version)).signatures['serving_images'].graph.as_graph_def()
  nodes = list(graph.node) + [n for function in graph.library.function for n in function.node_def]  # the model's too
  bfloat16 = [n.name for n in nodes if any(a.type == tf.bfloat16.as_datatype_enum for a in n.attr.values())]
  assert len(nodes) > 100 and bfloat16 == []   # the default precision built ~100 bfloat16 ops (tried)


@pytest.mark.slow
def test_predict_names_the_classes_after_the_data_moved(finished, tmp_path):
  run, data_dir = finished
  assert (run / 'labels.txt').read_text() == open(os.path.join(data_dir, 'labels.txt')).read()  # the run's record
  copy = tmp_path / 'run'
  shutil.copytree(run, copy)
  params_file = copy / 'params.yaml'
  params_file.write_text(params_file.read_text().replace(data_dir, str(tmp_path / 'moved')))
  photos = tmp_path / 'photos'
  photos.mkdir()
  for i in range(3):
    tf.io.write_file(str(photos / f'p{i}.jpg'), tf.io.encode_jpeg(
        tf.constant(np.random.default_rng(i).integers(0, 255, (40, 40, 3)), tf.uint8)))
  result = cli.run_in_process(f'--model_dir={copy}', '--mode=predict', f'--predict_input={photos}/*.jpg', base=())
  assert result.code == 0, result.log[-3000:]
  assert "class names from the run's record" in result.log
  rows = (copy / 'predictions.csv').read_text().splitlines()[1:]
  assert len(rows) == 3 and all(row.split(',')[4].startswith('class_') for row in rows)


@pytest.mark.slow
def test_a_run_copied_without_params_yaml_is_refused_naming_its_architecture(finished, tmp_path):
  run, data_dir = finished
  copy = tmp_path / 'run'
  shutil.copytree(run, copy)
  os.remove(copy / 'params.yaml')
  result = cli.run_in_process(f'--model_dir={copy}', '--mode=eval', f'--data_dir={data_dir}', '--eval_timeout=30',
                              base=())
  assert result.code == 1
  error = result.log.splitlines()[-1]
  assert error.startswith(f'error: Checkpoint {copy}/model.ckpt-5 holds another model than these params build'), error
  assert 'resnet_depth=10, num_label_classes=4' in error and 'has no readable params.yaml' in error
  assert 'Received incompatible tensor' not in result.log and 'could not be found' not in result.log


@pytest.mark.slow
def test_a_checkpoint_of_another_architecture_is_refused_naming_both(finished, tmp_path):
  other = tmp_path / 'resnet34'
  other.mkdir()
  (other / 'params.yaml').write_text('resnet_depth: 34\nnum_label_classes: 4\n')
  path = tf.train.Checkpoint(model=tiny.model(34, 4)).save(str(other / 'model.ckpt'))
  run, _ = finished
  result = _eval(run, f'--eval_checkpoint={path}')
  assert result.code == 1
  error = result.log.splitlines()[-1]
  assert 'holds another model than these params build' in error
  assert f"{other}/params.yaml says resnet_depth=34 (these params: 10)" in error
  assert f'--model_dir={other}' in error and '--resnet_depth=34' in error


def test_a_run_without_its_params_yaml_is_not_evaluated_on_synthetic_data(tmp_path):
  """Which data such a run trained on is unknown: synthetic images would stand in for its records unnoticed."""
  for suffix in ('.index', '.data-00000-of-00001'):
    (tmp_path / f'model.ckpt-5{suffix}').write_text('')
  params = dict(model_dir=str(tmp_path), data_dir=None, predict_input=None)
  for mode in ('eval', 'predict'):
    with pytest.raises(ValueError, match=f'--mode={mode}: the run in .* has no readable params.yaml'):
      finished_run.check_data(params, mode)
  (tmp_path / 'params.yaml').write_text('data_dir: null\n')  # a run that trained on synthetic data says so
  finished_run.check_data(params, 'eval')
