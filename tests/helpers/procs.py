"""Subprocess utilities for tests that run real training processes: free ports, bounded waits, sure kills.

Why: these tests start TensorFlow processes that can hang (a collective waiting for a dead peer, a gRPC
connect). Every wait here is bounded, and every process started through :class:`Proc` is killed in ``finally``
(by its own pid, SIGKILL after a grace period) so a failing test never leaves a process behind on a 2-core CI box.
"""
import atexit
import contextlib
import itertools
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Callable, Dict, Iterator, List, Optional, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYTHON = sys.executable


def free_ports(n: int) -> List[int]:
  """``n`` distinct ports free on 127.0.0.1 right now (held open together, so they differ)."""
  socks = []
  try:
    for _ in range(n):
      s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
      s.bind(('127.0.0.1', 0))
      socks.append(s)
    return [s.getsockname()[1] for s in socks]
  finally:
    for s in socks:
      s.close()


def closed_port() -> int:
  """A port on 127.0.0.1 with nothing listening (bound then released: connects get 'connection refused')."""
  return free_ports(1)[0]


def base_env(**extra: str) -> Dict[str, str]:
  """The test process's environment: quiet TF logs, no inherited TF_CONFIG, CPU only, repo root importable.

  CPU only: these tests check semantics (equal weights, resumable checkpoints), which CPU makes deterministic and
  which several processes sharing one GPU would not reproduce.
  """
  env = dict(os.environ)
  env.pop('TF_CONFIG', None)
  env.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  env.setdefault('CUDA_VISIBLE_DEVICES', '')
  env['PYTHONPATH'] = ROOT + (os.pathsep + env['PYTHONPATH'] if env.get('PYTHONPATH') else '')
  env['PYTHONUNBUFFERED'] = '1'
  env.update(extra)
  return env


# What the fork server runs (tests.helpers.forkserver), as `python -m MODULE`.
FORKED_MODULES = ('resnet.resnet_main', 'tests.helpers.main_dump', 'tests.helpers.fork_probe')
# Variables the programs read at run time, in which a forked child may differ from the server. Any other difference
# (what TensorFlow, Keras or Python read at import or start-up) starts a new interpreter instead.
_READ_AT_RUN_TIME = frozenset((
    'TMPDIR', 'TF_CONFIG', 'PYTEST_CURRENT_TEST', 'PROBE_VALUE', 'DUMP_PATH', 'DUMP_SEED', 'DESIGNED_DATA',
    'LOGICAL_CPUS', 'OVERFLOW_STEP', 'STALE_LISTING', 'BEST_COPY_VANISHES_AT', 'FAIL_WRITE',
    'RESTORE_VANISHES_ON_NON_CHIEF', 'STOP_AT'))  # the last ones: tests/helpers/main_dump.py
NO_FORKSERVER = 'RESNET_TEST_NO_FORKSERVER'  # '1' in a Proc's environment (or the tests'): a new interpreter


class _Forked:
  """Popen's waiting side for a child of the fork server (tests.helpers.forkserver): its pid and return code."""

  def __init__(self, args: List[str], pid: int, status_path: str, server: 'subprocess.Popen'):
    self.args, self.pid, self._status, self._server = args, pid, status_path, server
    self.returncode: Optional[int] = None

  def poll(self) -> Optional[int]:
    if self.returncode is None and os.path.exists(self._status):
      with open(self._status) as f:
        self.returncode = int(f.read())
    if self.returncode is None and self._server.poll() is not None:  # no status will come: is it still running?
      try:
        os.kill(self.pid, 0)
      except ProcessLookupError:
        self.returncode = 255  # ended after its server, with an exit status no one recorded
    return self.returncode

  def wait(self, timeout: Optional[float] = None) -> int:
    deadline = None if timeout is None else time.time() + timeout
    while self.poll() is None:
      if deadline is not None and time.time() > deadline:
        raise subprocess.TimeoutExpired(self.args, timeout)
      time.sleep(0.02)
    return self.returncode


class _ForkServer:
  """This test process's fork server, started on first use with base_env() and stopped at exit."""

  def __init__(self):
    self._lock = threading.Lock()
    self._server: Optional[subprocess.Popen] = None
    self._env: Dict[str, str] = {}
    self._dir = ''
    self._count = itertools.count()
    self.refusal = ''  # why the last command with the environment as its only obstacle was not forked
    atexit.register(self.stop)

  def accepts(self, args: Sequence[str], env: Dict[str, str], cwd: str) -> bool:
    if '1' in (os.environ.get(NO_FORKSERVER), env.get(NO_FORKSERVER)):
      return False
    if len(args) < 3 or list(args[:2]) != [PYTHON, '-m'] or args[2] not in FORKED_MODULES or cwd != ROOT:
      return False
    server_env = self._env or base_env()
    differ = sorted(k for k in set(env) | set(server_env)
                    if k not in _READ_AT_RUN_TIME and env.get(k) != server_env.get(k))
    self.refusal = f"the environment differs from the server's in {differ}" if differ else ''
    return not differ

  def _fail(self, why: str) -> None:
    self._server.kill()
    self._server.wait()
    with open(os.path.join(self._dir, 'server.log'), 'rb') as f:
      log = f.read().decode('utf-8', 'replace')[-3000:]
    raise RuntimeError(f'the fork server {why}; its log:\n{log}')

  def start(self, args: Sequence[str], env: Dict[str, str], log_path: str) -> _Forked:
    with self._lock:
      if self._server is None or self._server.poll() is not None:
        self.stop()
        self._dir = tempfile.mkdtemp(prefix='resnet-forkserver-')
        self._env = base_env()
        with open(os.path.join(self._dir, 'server.log'), 'wb') as log:
          self._server = subprocess.Popen([PYTHON, '-m', 'tests.helpers.forkserver'], stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=log, cwd=ROOT, env=self._env)
      status = os.path.join(self._dir, f'{next(self._count)}.exit')
      request = {'module': args[2], 'argv': list(args[3:]), 'env': dict(env), 'cwd': ROOT,
                 'log': os.path.abspath(log_path), 'status': status}
      try:
        self._server.stdin.write((json.dumps(request) + '\n').encode())
        self._server.stdin.flush()
      except BrokenPipeError:
        self._fail('ended')
      # The first reply comes after the server's imports; a server that never answers must not hang the suite.
      ready, _, _ = select.select([self._server.stdout], [], [], 300)
      reply = self._server.stdout.readline() if ready else b''
      if not reply.startswith(b'{"pid"'):
        self._fail(f'did not answer within 300 s, or ended (it said {reply[:200]!r})')
      return _Forked(list(args), json.loads(reply)['pid'], status, self._server)

  def stop(self) -> None:
    if self._server is not None:
      with contextlib.suppress(OSError):
        self._server.stdin.close()
      try:
        self._server.wait(timeout=10)
      except subprocess.TimeoutExpired:
        self._server.kill()
        self._server.wait()
      self._server = None
    if self._dir:
      shutil.rmtree(self._dir, ignore_errors=True)
      self._dir = ''


_FORK_SERVER = _ForkServer()


class Proc:
  """One child process with its combined stdout/stderr in a log file (no pipe to fill up and block on).

  ``python -m`` of a FORKED_MODULES module (resnet_main, main_dump, fork_probe) is forked from a process that has
  imported TensorFlow already (tests.helpers.forkserver: still a process of its own, ~3 s less to start); any other
  command, a working directory other than the repo's, or an environment that differs in more than what the programs
  read at run time starts a new interpreter, and so does RESNET_TEST_NO_FORKSERVER=1 in ``env`` (for tests that
  compare processes: forked children share the server's hash seed) or in the tests' environment.
  """

  def __init__(self, args: Sequence[str], log_path: str, env: Optional[Dict[str, str]] = None,
               cwd: str = ROOT):
    self.args = list(args)
    self.log_path = log_path
    self._log = open(log_path, 'wb')  # pylint: disable=consider-using-with
    env = env or base_env()
    if _FORK_SERVER.accepts(self.args, env, cwd):
      self.popen = _FORK_SERVER.start(self.args, env, log_path)
    else:
      self.popen = subprocess.Popen(self.args, stdout=self._log, stderr=subprocess.STDOUT, cwd=cwd, env=env)

  @property
  def pid(self) -> int:
    return self.popen.pid

  def log(self) -> str:
    if not self._log.closed:
      self._log.flush()
    with open(self.log_path, 'rb') as f:
      return f.read().decode('utf-8', 'replace')

  def poll(self) -> Optional[int]:
    return self.popen.poll()

  def wait(self, timeout: float) -> int:
    """The exit code; on timeout the process is killed and the test fails with the log tail."""
    try:
      return self.popen.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
      self.kill()
      raise AssertionError(f'{self.args} did not finish within {timeout} s; log tail:\n{self.tail()}') from None

  def send(self, sig: int) -> None:
    if self.popen.poll() is None:
      os.kill(self.popen.pid, sig)

  def kill(self, grace: float = 0.0) -> None:
    """Ends the process (and only it): SIGTERM with ``grace`` seconds to go, else SIGKILL at once."""
    if self.popen.poll() is None:
      if grace > 0:
        with contextlib.suppress(ProcessLookupError):
          os.kill(self.popen.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
          self.popen.wait(timeout=grace)
      if self.popen.poll() is None:
        with contextlib.suppress(ProcessLookupError):
          os.kill(self.popen.pid, signal.SIGKILL)
      with contextlib.suppress(subprocess.TimeoutExpired):
        self.popen.wait(timeout=30)
    self._log.close()

  def tail(self, n: int = 4000) -> str:
    return self.log()[-n:]


@contextlib.contextmanager
def processes() -> Iterator[List[Proc]]:
  """A list to append :class:`Proc` objects to; all of them are killed on exit, whatever happened."""
  procs: List[Proc] = []
  try:
    yield procs
  finally:
    for p in procs:
      p.kill()


def wait_for(predicate: Callable[[], bool], timeout: float, what: str, poll: float = 0.05,
             alive: Optional[Proc] = None) -> None:
  """Polls ``predicate`` until true; fails after ``timeout`` s (or at once if ``alive`` exits first)."""
  deadline = time.time() + timeout
  while time.time() < deadline:
    if predicate():
      return
    if alive is not None and alive.poll() is not None:
      raise AssertionError(f'process exited ({alive.poll()}) before {what}; log tail:\n{alive.tail()}')
    time.sleep(poll)
  raise AssertionError(f'timed out after {timeout} s waiting for {what}'
                       + (f'; log tail:\n{alive.tail()}' if alive is not None else ''))


def run(args: Sequence[str], log_path: str, timeout: float, env: Optional[Dict[str, str]] = None) -> Proc:
  """Runs to completion (bounded) and returns the finished Proc; its exit code is ``proc.popen.returncode``."""
  proc = Proc(args, log_path, env)
  try:
    proc.wait(timeout)
  finally:
    proc.kill()
  return proc


def run_many(specs: Dict[str, Sequence[str]], log_dir: str, timeout: float, max_parallel: int = 4,
             env: Optional[Dict[str, str]] = None) -> Dict[str, Proc]:
  """Runs named commands to completion, at most ``max_parallel`` at a time (TF processes need ~1 GB each).

  Each gets ``timeout`` seconds from its own start; all are killed on the way out, whatever happens.
  """
  pending = list(specs.items())
  running: Dict[str, Proc] = {}
  started_at: Dict[str, float] = {}
  done: Dict[str, Proc] = {}
  try:
    while pending or running:
      while pending and len(running) < max_parallel:
        name, args = pending.pop(0)
        running[name] = Proc(args, os.path.join(log_dir, f'{name}.log'), env)
        started_at[name] = time.time()
      for name, proc in list(running.items()):
        if proc.poll() is not None:
          proc.kill()
          done[name] = running.pop(name)
        elif time.time() - started_at[name] > timeout:
          proc.kill()
          raise AssertionError(f'{name}: {proc.args} did not finish within {timeout} s; log tail:\n{proc.tail()}')
      time.sleep(0.1)
  finally:
    for proc in running.values():
      proc.kill()
  return done
