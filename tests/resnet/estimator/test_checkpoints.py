"""Checkpoints in model_dir (estimator/checkpoints.py): resume from the newest complete one, saying so, never over
existing ones from step 0; a failed save keeps the last complete one."""

import ast
import glob
import os
import re
from typing import List

import pytest
import tensorflow as tf

from resnet.estimator import checkpoints
from resnet.estimator import files
from resnet.estimator.checkpoints import checkpoint_step
from tests.helpers.toy import make_runner, train_input


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
  assert 'or use a new model_dir.' in str(error.value) and '--' not in str(error.value)  # no application flag
  assert sorted(p.name for p in tmp_path.iterdir()) == before   # nothing written over them


def test_a_checkpoint_whose_data_file_is_gone_is_not_the_newest_complete_one(tmp_path):
  """The index alone parses (the reader opens data files only when a value is read): the data file is checked too."""
  _train_to(tmp_path, 4)
  (tmp_path / 'model.ckpt-4.data-00000-of-00001').unlink()
  resumed = make_runner(tmp_path, iterations_per_loop=2, save_checkpoints_steps=2, keep_checkpoint_max=5)
  assert resumed.latest_checkpoint() == str(tmp_path / 'model.ckpt-2')


# The runner is model-agnostic: it knows no application flag, so no message of resnet/estimator names one (an
# application that wants its flag named re-raises with its own words, as resnet_main does for the TPU's flags).
# Another program's command line is no application flag: TensorBoard's, which profiler_hook's log line gives.
_FLAG = re.compile(r'(?<![\w-])--[A-Za-z][\w-]*')
_OTHER_PROGRAMS = ('tensorboard --logdir',)
_RUNNER = os.path.dirname(checkpoints.__file__)


def flags_named_in(source: str) -> List[str]:
  """The ``--flag`` names in the string literals (f-strings' literal parts and docstrings included) of source."""
  found = []
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
      text = node.value
      for command in _OTHER_PROGRAMS:
        text = text.replace(command, '')
      found += _FLAG.findall(text)
  return found


def test_flag_check_sees_a_flag_in_a_message_and_passes_other_programs_and_code():
  source = ('''raise ValueError(f'{d} is taken; or use a new --model_dir.')\n'''
            '''logging.info('view: tensorboard --logdir %s', d)\n'''
            '''x = y -- z  # --not_a_literal\n'''
            '''def f():\n  """Set --param_overrides=a=1."""\n''')
  assert sorted(flags_named_in(source)) == ['--model_dir', '--param_overrides']
  with open(os.path.join(_RUNNER, 'checkpoints.py'), encoding='utf-8') as f:
    runner_source = f.read()
  assert 'or use a new model_dir.' in runner_source
  assert flags_named_in(runner_source.replace('or use a new model_dir.', 'or use a new --model_dir.')) == [
      '--model_dir']  # the message as it was


def test_runner_messages_name_no_application_flag():
  sources = sorted(glob.glob(os.path.join(_RUNNER, '*.py')))
  assert os.path.join(_RUNNER, 'checkpoints.py') in sources and len(sources) > 5
  named = {}
  for path in sources:
    with open(path, encoding='utf-8') as f:
      flags = flags_named_in(f.read())
    if flags:
      named[os.path.basename(path)] = flags
  assert not named, f'resnet/estimator names application flags (say the RunConfig/params field instead): {named}'


def test_a_resume_with_another_batch_goes_on_at_the_records_taken_and_warns(tmp_path, caplog):
  """The input's place was step x the CURRENT batch: batch 8 -> 16 at step 6 jumped to record 96 (48 never
  trained). The layout saved with the checkpoint gives the records taken (48): the place of step 3 of batch 16,
  with a warning naming both layouts; batch 16 -> 12 at step 8 (48 + 2 x 16 = 80 records) is not exact."""
  from official_input import contract  # pylint: disable=import-outside-toplevel
  starts = []

  def recording_input(params):
    starts.append(contract.start_step(params))
    return train_input(params)

  _train_to(tmp_path, 6)
  caplog.set_level('WARNING', logger='absl')
  _train_to(tmp_path, 8, train_batch_size=16).train(recording_input, max_steps=10)
  assert starts == [5]   # the same process keeps its input: records 48 + 2 x 16 = 80, step 5 of batch 16
  assert 'a global batch of 8 on 1 input pipeline(s) then, 16 on 1 now. The run\'s input gave 48 records, so it ' \
         'goes on at the place of step 3 of the new batch (the same place: an exact resume)' in caplog.text
  starts.clear()
  runner = make_runner(tmp_path, iterations_per_loop=2, save_checkpoints_steps=2, keep_checkpoint_max=5,
                       train_batch_size=12)
  runner.train(recording_input, max_steps=12)
  assert starts == [9]   # 48 + 4 x 16 = 112 records at step 10: 9 batches of 12, 4 left over
  assert 'NOT an exact resume' in caplog.text and '4 records of the count do not fill a batch' in caplog.text
  starts.clear()
  make_runner(tmp_path, iterations_per_loop=2, save_checkpoints_steps=2, keep_checkpoint_max=5,
              train_batch_size=12).train(recording_input, max_steps=14)
  assert starts == [11]  # the same layout again: its place goes on from where the last one began (9 + 2)
