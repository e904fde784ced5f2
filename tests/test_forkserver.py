"""The fork server (tests/helpers/forkserver.py) gives each resnet_main process of the suite what a new
``python -m`` process has: its own pid, environment, temporary directory, random state, exit code, signals and exit
handlers, with TensorFlow imported and its runtime not started; and a new interpreter wherever it cannot."""
import json
import os
import re
import signal
import subprocess

import pytest

from tests.helpers import procs

pytestmark = pytest.mark.slow  # processes: the fork server and new interpreters

PROBE = [procs.PYTHON, '-m', 'tests.helpers.fork_probe']
# A test of this process that changed os.environ for good (as tf2onnx's import did) turns forking off from then on.
REFUSAL = lambda: procs._FORK_SERVER.refusal  # pylint: disable=protected-access


def _run(tmp_path, name, how, **env):
  proc = procs.run(PROBE + [how], str(tmp_path / f'{name}.log'), timeout=120, env=procs.base_env(**env))
  return proc, json.loads(next(line for line in proc.log().splitlines() if line.startswith('{"pid"')))


def test_forked_children_are_processes_of_their_own(tmp_path):
  (tmp_path / 'tmp_a').mkdir()
  a, seen_a = _run(tmp_path, 'a', 'exit:0', PROBE_VALUE='a', TMPDIR=str(tmp_path / 'tmp_a'))
  b, seen_b = _run(tmp_path, 'b', 'exit:3', PROBE_VALUE='b')
  forked = procs._Forked  # pylint: disable=protected-access
  assert isinstance(a.popen, forked) and isinstance(b.popen, forked), REFUSAL()
  assert (a.popen.returncode, b.popen.returncode) == (0, 3)
  assert seen_a['pid'] == a.pid and seen_b['pid'] == b.pid and seen_a['ppid'] == seen_b['ppid'] != os.getpid()
  # As `python -m` sets them: argv[0] and a __main__ module of the module's file, to the end (atexit included).
  probe_file = os.path.join(procs.ROOT, 'tests', 'helpers', 'fork_probe.py')
  assert seen_a['argv'] == [probe_file, 'exit:0'] and seen_a['main'] == probe_file
  assert a.log().rstrip().endswith(f'ATEXIT {probe_file}') and b.log().rstrip().endswith(f'ATEXIT {probe_file}')
  assert seen_a['cwd'] == procs.ROOT
  assert (seen_a['value'], seen_b['value']) == ('a', 'b')
  # The server has used tempfile (its TMPDIR is cached there): each child reads its own.
  assert seen_a['tmp'] == str(tmp_path / 'tmp_a') and seen_b['tmp'] != seen_a['tmp']
  assert not seen_a['runtime_started'] and not seen_b['runtime_started']
  assert seen_a['np_draw'] != seen_b['np_draw'] and seen_a['py_draw'] != seen_b['py_draw']  # not the server's
  assert seen_a['hash'] == seen_b['hash']  # what a fork cannot renew: tests that compare processes start anew


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
  forked, seen_forked = _run(tmp_path, 'forked', 'exit:0')
  other_env, _ = _run(tmp_path, 'loud', 'exit:0', TF_CPP_MIN_LOG_LEVEL='0')  # read when TensorFlow is imported
  asked, seen_asked = _run(tmp_path, 'asked', 'exit:0', **{procs.NO_FORKSERVER: '1'})
  other = procs.run([procs.PYTHON, '-c', 'print(1)'], str(tmp_path / 'c.log'), timeout=60)
  assert isinstance(forked.popen, procs._Forked), REFUSAL()
  for proc in (other_env, asked, other):
    assert isinstance(proc.popen, subprocess.Popen)
  assert other.log().strip() == '1' and seen_asked['ppid'] == os.getpid()
  if os.environ.get('PYTHONHASHSEED', 'random') == 'random':  # a fixed seed is every interpreter's
    assert seen_asked['hash'] != seen_forked['hash']  # a new interpreter draws its own hash seed
  monkeypatch.setenv(procs.NO_FORKSERVER, '1')
  fresh, seen = _run(tmp_path, 'fresh', 'exit:0')
  assert isinstance(fresh.popen, subprocess.Popen) and seen['ppid'] == os.getpid()


def test_every_variable_main_dump_reads_may_differ_from_the_servers():
  """Else the worker tests that set one would silently start new interpreters (slower, nothing else)."""
  with open(os.path.join(procs.ROOT, 'tests', 'helpers', 'main_dump.py')) as f:
    read = set(re.findall(r"os\.environ(?:\.get\(|\[)'([A-Z_]+)'", f.read()))
  allowed = procs._READ_AT_RUN_TIME  # pylint: disable=protected-access
  assert len(read) >= 8 and read <= allowed, read - allowed
