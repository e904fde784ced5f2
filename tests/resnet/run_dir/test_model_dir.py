"""A model_dir holds one run (resnet/run_dir/model_dir.py): another model is refused before anything is written, a change of\nother params keeps the earlier params as history, a damaged params.yaml is kept and warned about."""
import os
import shutil

import pytest

from resnet.run_dir import model_dir as model_dir_lib
from tests.helpers import cli
from tests.helpers import procs
from tests.helpers import tiny


@pytest.fixture(scope='module')
def trained_copy(module_tmp):
  """A copy of the shared trained run (ResNet-10, 4 classes), so that tests may try to damage it."""
  source, _, _ = cli.shared_trained_run()
  target = str(module_tmp.mktemp('copy') / 'run')
  shutil.copytree(source, target)
  return target


@pytest.mark.slow
def test_rerun_with_another_depth_fails_before_writing_and_names_both_values(trained_copy, tmp_path):
  params_file = os.path.join(trained_copy, 'params.yaml')
  before = open(params_file, 'rb').read()
  checkpoints = sorted(os.listdir(trained_copy))
  proc = procs.run(cli.main_args('--mode=train', f'--model_dir={trained_copy}', '--train_steps=7',
                                 '--resnet_depth=34'), str(tmp_path / 'log'), timeout=120)
  assert proc.popen.returncode not in (0, None)
  message = proc.log()
  assert 'resnet_depth: 10 in' in message and '34 now' in message, message[-2000:]
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


def test_training_resumes_only_with_the_optimizer_whose_state_the_checkpoints_hold(tmp_path):
  """A momentum run's slots read as AdamW's moments (and its step count as AdamW's) would make steps hundreds of
  times torch's: refused, naming both values and the warm-start route; eval of it is fine."""
  model_dir = str(tmp_path)
  model_dir_lib.check_and_record(_params(model_dir), record=True)
  (tmp_path / 'checkpoint').write_text('model_checkpoint_path: "model.ckpt-1"\n')
  (tmp_path / 'model.ckpt-1.index').write_text('')
  for change in (dict(optimizer='adamw'), dict(enable_lars=True)):
    with pytest.raises(model_dir_lib.ModelDirMismatch, match=r'trained with another optimizer \(.*in .*params.yaml, '
                       r'.* now\).* --resnet_checkpoint='):
      model_dir_lib.check_and_record(_params(model_dir, **change), record=True)
  model_dir_lib.check_and_record(_params(model_dir, optimizer='adamw'), record=False)   # eval, predict, export
  model_dir_lib.check_and_record(_params(model_dir, train_steps=99), record=True)      # other changes resume


def test_eval_mode_checks_without_recording(tmp_path):
  model_dir = str(tmp_path)
  model_dir_lib.check_and_record(_params(model_dir, num_label_classes=4), record=False)
  assert not os.path.exists(os.path.join(model_dir, 'params.yaml'))


def test_a_damaged_params_yaml_is_set_aside_once_whichever_worker_comes_first(tmp_path, monkeypatch):
  """Every worker records params.yaml; the one that finds the damaged file already moved by another goes on."""
  model_dir = str(tmp_path)
  (tmp_path / 'params.yaml').write_bytes(b'\xf7\x00 not yaml')
  rename = model_dir_lib.tf.io.gfile.rename

  def another_worker_first(src, dst, overwrite=False):
    if src.endswith('/params.yaml'):
      rename(src, dst, overwrite)                      # the other worker's rename ...
    rename(src, dst + ('.again' if src.endswith('/params.yaml') else ''), overwrite)  # ... then this one's
  monkeypatch.setattr(model_dir_lib.tf.io.gfile, 'rename', another_worker_first)
  model_dir_lib.check_and_record(_params(model_dir, train_steps=10), record=True)
  assert 'train_steps: 10' in (tmp_path / 'params.yaml').read_text()
  (kept,) = os.listdir(tmp_path / model_dir_lib.HISTORY_DIR)
  assert (tmp_path / model_dir_lib.HISTORY_DIR / kept).read_bytes() == b'\xf7\x00 not yaml'
