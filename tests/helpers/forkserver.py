"""A process that has imported TensorFlow once and forks the tests' resnet_main processes from there.

Why: a tiny resnet_main process spends most of its life importing TensorFlow (~3 s of ~6 s on 2 cores; ~7 of
~11 s on a busy machine), and the suite starts ~45 of them for what only whole processes show (several workers,
signals, seeded runs, a crash's exit code). A child forked from here is still a process of its own (its own pid,
TensorFlow runtime, gRPC server, signal handlers, exit code, environment, working directory and log), started
from the state ``python -m MODULE`` has after its imports: TensorFlow imported, nothing run (the server checks
that TensorFlow's runtime has not started, so its threads and devices are made in the child). The module itself
runs as ``__main__`` through runpy, as ``-m`` does, and the interpreter exits the way it always does (atexit
handlers, flushes, the exit code of SystemExit or 1 with a traceback).

Protocol, one JSON line each way on the server's stdin/stdout:
  {"module", "argv", "env", "cwd", "log", "status"} -> {"pid"}; when that child ends, the server writes its return
  code (as Popen gives it: negative for a signal) to the "status" file.
"""
import json
import os
import select
import signal
import sys

# What `python -m resnet.resnet_main` sets before TensorFlow's import.
from resnet import process_env  # pylint: disable=unused-import

# Everything resnet_main imports, not resnet_main itself: runpy runs it as __main__, as `python -m` does, and
# would warn about a module already in sys.modules.
import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-order
import tensorflow as tf  # pylint: disable=g-import-not-at-top,unused-import
from absl import app  # pylint: disable=g-import-not-at-top,unused-import
from official_input import imagenet_input  # pylint: disable=g-import-not-at-top,unused-import
from resnet import wiring  # pylint: disable=g-import-not-at-top,unused-import
from resnet.estimator import estimator  # pylint: disable=g-import-not-at-top,unused-import
from resnet.export import exporting  # pylint: disable=g-import-not-at-top,unused-import
from resnet.training import resnet_model_fn  # pylint: disable=g-import-not-at-top,unused-import
from tensorflow.python.eager import context  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
from tests.helpers.procs import FORKED_MODULES  # pylint: disable=g-import-not-at-top


def _write_status(path: str, code: int) -> None:
  with open(path + '.tmp', 'w') as f:
    f.write(str(code))
  os.replace(path + '.tmp', path)


def _reap(children) -> None:
  while children:
    try:
      pid, status = os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
      return
    if pid == 0:
      return
    path = children.pop(pid, None)
    if path:
      _write_status(path, -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))


def _become(request, requests_fd: int, replies_fd: int) -> None:
  """In the child: the process `python -m MODULE ARGV` would be at this point, with the request's environment."""
  log = os.open(request['log'], os.O_WRONLY | os.O_CREAT | os.O_APPEND)
  devnull = os.open(os.devnull, os.O_RDONLY)
  for fd in (requests_fd, replies_fd):
    if fd > 2:
      os.close(fd)
  os.dup2(devnull, 0)  # the requests were stdin
  os.dup2(log, 1)
  os.dup2(log, 2)
  os.close(log)
  os.close(devnull)
  os.chdir(request['cwd'])
  os.environ.clear()
  os.environ.update(request['env'])
  for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD):
    signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
  import tempfile  # pylint: disable=import-outside-toplevel
  tempfile.tempdir = None  # TMPDIR is read again
  np.random.seed()  # fresh entropy, as a new process has (Python's random reseeds itself after a fork)
  sys.argv = [request['module']] + list(request['argv'])


def serve() -> dict:
  """Answers requests until stdin closes (then exits); returns only in a forked child, with its request."""
  if context.context()._initialized:  # pylint: disable=protected-access
    raise RuntimeError('TensorFlow started its runtime at import; children must not share it')
  replies = os.fdopen(os.dup(1), 'w')
  os.dup2(2, 1)  # a stray print must not mix into the replies
  requests_fd = sys.stdin.fileno()
  children = {}
  buffer = b''
  while True:
    ready, _, _ = select.select([requests_fd], [], [], 0.05)
    _reap(children)
    if not ready:
      continue
    chunk = os.read(requests_fd, 65536)
    if not chunk:
      return {}
    buffer += chunk
    while b'\n' in buffer:
      line, buffer = buffer.split(b'\n', 1)
      request = json.loads(line)
      if request['module'] not in FORKED_MODULES:
        raise ValueError(f'forkserver runs {FORKED_MODULES}, not {request["module"]}')
      sys.stdout.flush()
      sys.stderr.flush()
      pid = os.fork()
      if pid == 0:
        _become(request, requests_fd, replies.fileno())
        return request
      children[pid] = request['status']
      replies.write(json.dumps({'pid': pid}) + '\n')
      replies.flush()


if __name__ == '__main__':
  _request = serve()
  if not _request:
    sys.exit(0)
  import runpy  # pylint: disable=g-import-not-at-top
  del _request
  runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)
