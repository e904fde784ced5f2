"""The fork server (tests/helpers/forkserver.py) gives each resnet_main process of the suite what a new
``python -m`` process has: its own pid, environment, temporary directory, random state, exit code, signals and exit
handlers, with TensorFlow imported and its runtime not started; and a new interpreter wherever it cannot."""
import json
import signal
import subprocess

from tests.helpers import procs

PROBE = [procs.PYTHON, '-m', 'tests.helpers.fork_probe']


def _run(tmp_path, name, how, **env):
  proc = procs.run(PROBE + [how], str(tmp_path / f'{name}.log'), timeout=120, env=procs.base_env(**env))
  return proc, json.loads(next(line for line in proc.log().splitlines() if line.startswith('{"pid"')))


def test_forked_children_are_processes_of_their_own(tmp_path):
  (tmp_path / 'tmp_a').mkdir()
  a, seen_a = _run(tmp_path, 'a', 'exit:0', PROBE_VALUE='a', TMPDIR=str(tmp_path / 'tmp_a'))
  b, seen_b = _run(tmp_path, 'b', 'exit:3', PROBE_VALUE='b')
  assert isinstance(a.popen, procs._Forked) and isinstance(b.popen, procs._Forked)  # pylint: disable=protected-access
  assert (a.popen.returncode, b.popen.returncode) == (0, 3)
  assert seen_a['pid'] == a.pid and seen_b['pid'] == b.pid and seen_a['ppid'] == seen_b['ppid']  # one server
  assert seen_a['argv'][1:] == ['exit:0'] and seen_a['argv'][0].endswith('fork_probe.py')  # as `python -m` sets it
  assert seen_a['cwd'] == procs.ROOT
  assert (seen_a['value'], seen_b['value']) == ('a', 'b') and seen_a['tmp'] == str(tmp_path / 'tmp_a')
  assert seen_b['tmp'] != seen_a['tmp']
  assert not seen_a['runtime_started'] and not seen_b['runtime_started']
  assert seen_a['np_draw'] != seen_b['np_draw'] and seen_a['py_draw'] != seen_b['py_draw']  # not the server's
  assert a.log().rstrip().endswith('ATEXIT') and b.log().rstrip().endswith('ATEXIT')


def test_an_uncaught_exception_and_a_signal_end_a_child_as_they_end_a_process(tmp_path):
  raised, _ = _run(tmp_path, 'raised', 'raise')
  assert raised.popen.returncode == 1 and 'RuntimeError: probe raised' in raised.log()
  with procs.processes() as started:
    for sig, name in ((signal.SIGTERM, 'term'), (signal.SIGKILL, 'kill'), (signal.SIGINT, 'int')):
      proc = procs.Proc(PROBE + ['wait'], str(tmp_path / f'{name}.log'))
      started.append(proc)
      procs.wait_for(lambda p=proc: 'WAITING' in p.log(), 60, 'the probe to wait', alive=proc)
      proc.send(sig)
      code = proc.wait(30)
      assert code == -sig, (name, proc.log())
      # SIGINT: Python's own handler (KeyboardInterrupt), the atexit handlers, then death by SIGINT, as in a shell.
      assert ('KeyboardInterrupt' in proc.log() and 'ATEXIT' in proc.log()) == (sig == signal.SIGINT)


def test_other_commands_and_environments_start_a_new_interpreter(tmp_path, monkeypatch):
  other_env, _ = _run(tmp_path, 'loud', 'exit:0', TF_CPP_MIN_LOG_LEVEL='0')  # read when TensorFlow is imported
  assert isinstance(other_env.popen, subprocess.Popen)
  other = procs.run([procs.PYTHON, '-c', 'print(1)'], str(tmp_path / 'c.log'), timeout=60)
  assert isinstance(other.popen, subprocess.Popen) and other.log().strip() == '1'
  monkeypatch.setenv('RESNET_TEST_NO_FORKSERVER', '1')
  fresh, seen = _run(tmp_path, 'fresh', 'exit:0')
  assert isinstance(fresh.popen, subprocess.Popen) and seen['ppid'] != fresh.pid
