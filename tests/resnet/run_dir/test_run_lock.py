"""One training run per model_dir: a second trainer is refused naming the first; a killed run frees it."""
import os
import signal
import subprocess
import sys

import pytest

from resnet.run_dir import run_lock
from tests.helpers import cli
from tests.helpers import procs

HOLD = ('import sys, time\n'
        'from resnet.run_dir import run_lock\n'
        'with run_lock.training_lock(sys.argv[1]):\n'
        '  print("HELD", flush=True)\n'
        '  time.sleep(600)\n')


def _hold(model_dir: str) -> subprocess.Popen:
  proc = subprocess.Popen([sys.executable, '-c', HOLD, model_dir], stdout=subprocess.PIPE, env=procs.base_env(),
                          cwd=procs.ROOT)
  assert proc.stdout.readline().strip() == b'HELD'
  return proc


@pytest.mark.slow
def test_a_second_trainer_is_refused_naming_the_first_and_a_killed_run_frees_the_model_dir(tmp_path):
  model_dir = str(tmp_path / 'run')
  holder = _hold(model_dir)
  try:
    with pytest.raises(run_lock.ModelDirLocked, match=rf'being trained by another run \(pid {holder.pid} on '):
      with run_lock.training_lock(model_dir):
        pass
    # Through the CLI: refused before anything is written.
    result = subprocess.run(cli.main_args('--mode=train', f'--model_dir={model_dir}', '--train_steps=1'),
                            capture_output=True, text=True, env=procs.base_env(), cwd=procs.ROOT, timeout=300)
    assert result.returncode == 1, result.stderr[-2000:]
    assert f'error: {model_dir} is being trained by another run (pid {holder.pid}' in result.stderr
    assert not os.path.exists(os.path.join(model_dir, 'params.yaml'))
  finally:
    holder.send_signal(signal.SIGKILL)
    holder.wait()
  with run_lock.training_lock(model_dir):  # kill -9 released it: not stuck
    pass


def test_a_remote_model_dir_is_not_locked_and_says_so(caplog):
  with run_lock.training_lock('gs://bucket/run'):
    pass
  assert 'cannot be locked' in caplog.text
