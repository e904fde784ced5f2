"""Checkpoint averaging: every floating-point tensor is the mean of the K checkpoints (weights, batch-norm
statistics, optimizer slots), counters the newest's; the output is a finished run eval restores; bad requests
write nothing."""
import json
import os
import subprocess

import numpy as np
import pytest
import tensorflow as tf

from tests.helpers import cli
from tests.helpers import procs
from tools import average_checkpoints


@pytest.fixture(scope='module')
def run_copy(module_tmp):
  """A tiny run with checkpoints at steps 1, 2 and 3 (in this process: seconds)."""
  root = module_tmp.mktemp('averaging')
  data_dir = cli.make_tiny_dataset(str(root / 'data'), num_train=16, num_validation=8)
  run = root / 'model'
  trained = cli.run_in_process('--mode=train', f'--data_dir={data_dir}', f'--model_dir={run}', '--train_steps=3',
                               '--iterations_per_loop=1', '--save_checkpoints_steps=1')
  assert trained.code == 0, trained.log[-3000:]
  return run, data_dir


@pytest.mark.slow
def test_the_tool_writes_the_mean_of_every_float_tensor_and_eval_restores_it(run_copy):
  run, data_dir = run_copy
  (run / 'training_ended.json').unlink(missing_ok=True)   # as after a preempted run: eval must still end
  paths = average_checkpoints.complete_checkpoints(str(run))
  assert [os.path.basename(p) for p in paths] == ['model.ckpt-1', 'model.ckpt-2', 'model.ckpt-3']
  proc = subprocess.run([procs.PYTHON, '-m', 'tools.average_checkpoints', f'--model_dir={run}', '--last=3'],
                        cwd=procs.ROOT, env=procs.base_env(), capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  averaged = run / 'averaged'
  assert f'--model_dir={averaged}' in proc.stdout
  readers = [tf.train.load_checkpoint(p) for p in paths]
  result = tf.train.load_checkpoint(str(averaged / 'model.ckpt-3'))
  floats = 0
  for key, dtype in readers[-1].get_variable_to_dtype_map().items():
    if dtype.is_floating:
      floats += 1
      mean = np.mean([np.asarray(r.get_tensor(key), np.float64) for r in readers], axis=0)
      np.testing.assert_allclose(result.get_tensor(key), mean, rtol=1e-6, atol=1e-7, err_msg=key)
    elif key != '_CHECKPOINTABLE_OBJECT_GRAPH':
      np.testing.assert_array_equal(result.get_tensor(key), readers[-1].get_tensor(key), err_msg=key)
  assert floats > 100   # every weight, statistic and slot
  moving = next(k for k in result.get_variable_to_shape_map() if 'moving_mean' in k)
  assert not np.allclose(result.get_tensor(moving), readers[-1].get_tensor(moving))   # averaged, not the newest
  assert json.loads((averaged / 'averaged_from.json').read_text())['steps'] == [1, 2, 3]
  assert (averaged / 'params.yaml').read_text() == (run / 'params.yaml').read_text()
  assert json.loads((averaged / 'training_ended.json').read_text())['global_step'] == 3

  evaluated = cli.run_in_process('--mode=eval', f'--model_dir={averaged}', f'--data_dir={data_dir}',
                                 '--eval_timeout=30', base=())
  assert evaluated.code == 0, evaluated.log[-3000:]
  results = json.loads((averaged / 'eval_results.json').read_text())
  assert results['global_step'] == 3 and np.isfinite(results['loss'])


def test_bad_requests_name_the_fix_and_write_nothing(run_copy, tmp_path):
  run, _ = run_copy
  with pytest.raises(ValueError, match=r'holds 3 complete checkpoints \(steps 1, 2, 3\), fewer than --last=4: '
                     r'.*--keep_checkpoint_max'):
    average_checkpoints.average_checkpoints(str(run), 4, str(tmp_path / 'out'))
  with pytest.raises(ValueError, match='at least 2'):
    average_checkpoints.average_checkpoints(str(run), 1, str(tmp_path / 'out'))
  (tmp_path / 'taken').mkdir()
  (tmp_path / 'taken' / 'mine.txt').write_text('kept')
  with pytest.raises(FileExistsError, match='left as it is'):
    average_checkpoints.average_checkpoints(str(run), 2, str(tmp_path / 'taken'))
  assert os.listdir(tmp_path / 'taken') == ['mine.txt']
  assert sorted(os.listdir(tmp_path)) == ['taken']   # no output, no staging folder


def test_checkpoints_of_another_model_are_refused(tmp_path):
  for step, width in ((1, 3), (2, 4)):
    checkpoint = tf.train.Checkpoint(w=tf.Variable(tf.zeros([width])))
    checkpoint.write(str(tmp_path / f'model.ckpt-{step}'))
  with pytest.raises(ValueError, match=r'holds other variables or shapes .* \(1 differ, e.g. w/'):
    average_checkpoints.average_checkpoints(str(tmp_path), 2, str(tmp_path / 'out'))
  assert not (tmp_path / 'out').exists()
