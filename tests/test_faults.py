"""Faults and mistakes never lose data silently: a model_dir is one run, writes are all-or-nothing, waits are logged.

Real processes where the behaviour is the CLI's (a rerun with another model); injected write failures where a full
disk cannot be mounted here (the sandbox has no tmpfs mounts). kill -9 and SIGTERM are in test_preemption.py.
"""
import os
import shutil

from absl import logging
import pytest
import tensorflow as tf

from resnet import model_dir as model_dir_lib
from resnet.estimator import best_checkpoint
from resnet.estimator import checkpoints
from resnet.estimator import files
from resnet.estimator.checkpoints import checkpoint_step
from tests.helpers import cli
from tests.helpers import procs
from tests.helpers import tiny
from tests.helpers.toy import eval_input, make_runner, train_input


# ------------------------------------------------------------------------------------------------ model_dir
@pytest.fixture(scope='module')
def trained_copy(tmp_path_factory):
  """A copy of the shared trained run (ResNet-18, 4 classes), so that tests may try to damage it."""
  source, _, _ = cli.shared_trained_run()
  target = str(tmp_path_factory.mktemp('copy') / 'run')
  shutil.copytree(source, target)
  return target


def test_rerun_with_another_depth_fails_before_writing_and_names_both_values(trained_copy, tmp_path):
  params_file = os.path.join(trained_copy, 'params.yaml')
  before = open(params_file, 'rb').read()
  checkpoints = sorted(os.listdir(trained_copy))
  proc = procs.run(cli.main_args('--mode=train', f'--model_dir={trained_copy}', '--train_steps=7',
                                 '--resnet_depth=34'), str(tmp_path / 'log'), timeout=120)
  assert proc.popen.returncode not in (0, None)
  message = proc.log()
  assert 'resnet_depth: 18 in' in message and '34 now' in message, message[-2000:]
  assert '--resnet_checkpoint=' in message and 'new --model_dir' in message
  assert open(params_file, 'rb').read() == before  # the run's record is untouched
  assert sorted(os.listdir(trained_copy)) == checkpoints


def _params(model_dir, **overrides):
  return tiny.resnet_params(model_dir, **overrides)


def test_a_resume_change_keeps_the_earlier_params_as_history(tmp_path):
  model_dir = str(tmp_path)
  model_dir_lib.check_and_record(_params(model_dir, train_steps=10), record=True)
  first = open(os.path.join(model_dir, 'params.yaml')).read()
  model_dir_lib.check_and_record(_params(model_dir, train_steps=10), record=True)  # unchanged: nothing kept
  assert not os.path.exists(os.path.join(model_dir, model_dir_lib.HISTORY_DIR))
  model_dir_lib.check_and_record(_params(model_dir, train_steps=20), record=True)
  history = os.listdir(os.path.join(model_dir, model_dir_lib.HISTORY_DIR))
  assert len(history) == 1
  assert open(os.path.join(model_dir, model_dir_lib.HISTORY_DIR, history[0])).read() == first
  assert 'train_steps: 20' in open(os.path.join(model_dir, 'params.yaml')).read()


def test_a_run_recorded_under_the_reference_names_resumes_without_a_change(tmp_path):
  """params.yaml written before skip_host_call / tpu_profile_duration were renamed compares under the new names."""
  model_dir = str(tmp_path)
  model_dir_lib.check_and_record(_params(model_dir), record=True)
  path = os.path.join(model_dir, 'params.yaml')
  old = open(path).read().replace('skip_train_summaries:', 'skip_host_call:').replace('profile_duration_ms:',
                                                                                      'tpu_profile_duration:')
  assert 'skip_host_call: true' in old
  open(path, 'w').write(old)
  model_dir_lib.check_and_record(_params(model_dir), record=True)
  assert not os.path.exists(os.path.join(model_dir, model_dir_lib.HISTORY_DIR))


def test_a_run_recorded_before_the_architecture_params_resumes_and_keeps_its_architecture(tmp_path):
  """params.yaml written before stride_in_1x1, stem_pool_padding, ... existed: that run computed the v1.5 defaults."""
  model_dir = str(tmp_path)
  model_dir_lib.check_and_record(_params(model_dir), record=True)
  path = os.path.join(model_dir, 'params.yaml')
  old = ''.join(line for line in open(path) if not line.startswith(
      ('stride_in_1x1:', 'stem_pool_padding:', 'input_normalization:', 'projection_shortcut:')))
  open(path, 'w').write(old)
  (tmp_path / 'checkpoint').write_text('model_checkpoint_path: "model.ckpt-1"\n')
  (tmp_path / 'model.ckpt-1.index').write_text('')
  resumed = _params(model_dir)
  assert (resumed.stride_in_1x1, resumed.stem_pool_padding, resumed.input_normalization) == (False, 'same',
                                                                                              'imagenet')
  model_dir_lib.check_and_record(resumed, record=True)   # no ModelDirMismatch


def test_a_model_change_without_checkpoints_is_allowed_and_kept(tmp_path):
  model_dir = str(tmp_path)
  model_dir_lib.check_and_record(_params(model_dir, resnet_depth=18), record=True)
  model_dir_lib.check_and_record(_params(model_dir, resnet_depth=34), record=True)  # no checkpoint yet
  assert len(os.listdir(os.path.join(model_dir, model_dir_lib.HISTORY_DIR))) == 1


def test_eval_mode_checks_without_recording(tmp_path):
  model_dir = str(tmp_path)
  model_dir_lib.check_and_record(_params(model_dir, num_label_classes=4), record=False)
  assert not os.path.exists(os.path.join(model_dir, 'params.yaml'))


# ------------------------------------------------------------------------------------------------ waiting
def test_continuous_eval_logs_where_and_how_long_it_waits(tmp_path, monkeypatch):
  lines = []
  monkeypatch.setattr(logging, 'info', lambda fmt, *args: lines.append(fmt % args))
  runner = make_runner(tmp_path)
  with pytest.raises(FileNotFoundError, match='No checkpoint appeared'):
    runner.evaluate_continuously(eval_input, timeout=0.6, poll_seconds=0.05, log_every_seconds=0.2)
  waits = [line for line in lines if line.startswith('Waiting for a checkpoint in')]
  assert len(waits) >= 2, lines
  assert str(tmp_path) in waits[0] and 'up to 0.6 s' in waits[0]


# ------------------------------------------------------------------------------------------------ failed writes
def test_a_failed_write_keeps_the_previous_file_and_names_the_path(tmp_path, monkeypatch):
  path = str(tmp_path / 'results.json')
  files.atomic_write(path, 'old complete content')

  def full_disk(*args, **kwargs):
    raise OSError(28, 'No space left on device')

  monkeypatch.setattr(os, 'fsync', full_disk)  # the write fails at its end, as a full disk does
  with pytest.raises(files.WriteError, match=r'Could not write .*results\.json: .*No space left'):
    files.atomic_write(path, 'new content')
  assert open(path).read() == 'old complete content'
  assert os.listdir(tmp_path) == ['results.json']  # no temporary left behind


def test_a_failed_checkpoint_keeps_the_last_complete_one(tmp_path, monkeypatch):
  runner = make_runner(tmp_path, save_checkpoints_steps=10, iterations_per_loop=10)
  runner.train(train_input, max_steps=10)
  latest = tf.train.latest_checkpoint(str(tmp_path))

  def full_disk(*args, **kwargs):
    raise tf.errors.ResourceExhaustedError(None, None, 'No space left on device')

  monkeypatch.setattr(tf.train.CheckpointManager, 'save', full_disk)
  with pytest.raises(files.WriteError, match=r'Could not write .*model\.ckpt'):
    runner.train(train_input, max_steps=20)
  assert tf.train.latest_checkpoint(str(tmp_path)) == latest


def test_a_failed_export_leaves_no_version_directory(tmp_path, monkeypatch):
  from resnet.estimator.spec import ServingInput  # pylint: disable=g-import-not-at-top
  runner = make_runner(tmp_path)
  runner.train(train_input, max_steps=10)

  def full_disk(*args, **kwargs):
    raise OSError(28, 'No space left on device')

  monkeypatch.setattr(tf.saved_model, 'save', full_disk)
  serving = {'serving_default': ServingInput({'x': tf.TensorSpec([None, 4], tf.float32)}, lambda x: x)}
  with pytest.raises(files.WriteError, match='No space left'):
    runner.export_saved_model(str(tmp_path / 'export'), serving)
  assert os.listdir(tmp_path / 'export') == []


def _train_to(model_dir, steps, **config):
  runner = make_runner(model_dir, iterations_per_loop=2, save_checkpoints_steps=2, keep_checkpoint_max=5, **config)
  runner.train(train_input, max_steps=steps)
  return runner


def test_a_deleted_newest_checkpoint_resumes_from_the_newest_complete_one_and_says_so(tmp_path, caplog):
  """The 'checkpoint' file still names model.ckpt-6, whose files were deleted by hand: TensorFlow's lookup then
  finds nothing and the run started again from step 0, writing its new checkpoints over the kept ones."""
  _train_to(tmp_path, 6)
  kept = {name: (tmp_path / name).read_bytes() for name in ('model.ckpt-2.index', 'model.ckpt-4.index')}
  for path in tmp_path.glob('model.ckpt-6.*'):
    path.unlink()
  resumed = make_runner(tmp_path, iterations_per_loop=2, save_checkpoints_steps=2, keep_checkpoint_max=5)
  assert resumed.latest_checkpoint() == str(tmp_path / 'model.ckpt-4')
  resumed.train(train_input, max_steps=8)
  warnings = [r.getMessage() for r in caplog.records if r.levelname == 'WARNING']
  assert any('model.ckpt-6 (no model.ckpt-6.index) is missing or incomplete' in w and 'using model.ckpt-4' in w
             for w in warnings), warnings
  assert {name: (tmp_path / name).read_bytes() for name in kept} == kept   # the earlier training is kept
  state = tf.train.get_checkpoint_state(str(tmp_path))
  assert state.model_checkpoint_path.endswith('model.ckpt-8')
  assert [checkpoint_step(p) for p in state.all_model_checkpoint_paths] == [2, 4, 6, 8]


def test_checkpoint_files_without_a_complete_checkpoint_stop_the_run_naming_them(tmp_path):
  _train_to(tmp_path, 4)
  for path in tmp_path.glob('model.ckpt-*.index'):
    path.unlink()
  before = sorted(p.name for p in tmp_path.iterdir())
  resumed = make_runner(tmp_path, iterations_per_loop=2, save_checkpoints_steps=2)
  with pytest.raises(checkpoints.IncompleteCheckpoints) as error:
    resumed.train(train_input, max_steps=6)
  assert 'model.ckpt-4 (no model.ckpt-4.index), model.ckpt-2 (no model.ckpt-2.index)' in str(error.value)
  assert 'Nothing was started over them' in str(error.value)
  assert sorted(p.name for p in tmp_path.iterdir()) == before   # nothing written over them


def test_a_best_checkpoint_from_a_history_that_is_gone_is_named(tmp_path):
  best = best_checkpoint.BestCheckpoint(str(tmp_path), 'top_1_accuracy')
  best.best = {'global_step': 6, 'top_1_accuracy': 0.9, 'best_metric': 'top_1_accuracy', 'best_checkpoint': 'x'}
  assert best.ahead_of(6) is None
  message = best.ahead_of(4)
  assert 'holds the best checkpoint of step 6 (top_1_accuracy=0.9), but training goes on from step 4' in message
  assert 'move' in message and 'away' in message
