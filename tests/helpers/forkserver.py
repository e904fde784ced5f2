"""A process that has imported TensorFlow once and forks the tests' resnet_main processes from there.

Why: a tiny resnet_main process spends most of its life importing TensorFlow (~3 s of ~6 s on 2 cores; ~7 of
~11 s on a busy machine), and the suite starts ~45 of them. A child forked from here is still a process of its own
(its own pid, TensorFlow runtime, gRPC server, exit code, environment, working directory and log), started from
the state ``python -m MODULE`` has after its imports: TensorFlow imported, nothing run (the server checks that
TensorFlow's runtime has not started, so its threads and devices are made in the child). The module runs as
``__main__`` the way ``-m`` runs it (runpy's ``_run_module_as_main``), and the interpreter exits as it always does
(atexit handlers, flushes, SystemExit's code, 1 with a traceback, death by SIGINT after a KeyboardInterrupt).
Signal dispositions are the server's, i.e. what its parent gave it, as a fresh interpreter would have.

What a fork cannot give: the children share the server's string-hash seed and address layout, so set and dict
orders of strings and ids repeat from child to child. Tests that look for process-to-process differences (seeded
runs compared across processes, workers that must agree) start new interpreters (RESNET_TEST_NO_FORKSERVER=1 in
their environment; tests/helpers/procs.py).

Protocol, one JSON line each way on the server's stdin and its reply pipe (the stdout it was started with):
  {"module", "argv", "env", "cwd", "log", "status"} -> {"pid"}; when that child ends, the server writes its return
  code (as Popen gives it: negative for a signal) to the "status" file, and only then reaps it, so its pid cannot
  be reused while the status file is missing.
"""
import os
import sys

_REPLIES_FD = os.dup(1)
os.dup2(2, 1)  # anything the imports print goes to the server's log, never into the replies

# pylint: disable=g-import-not-at-top,wrong-import-position,unused-import,g-bad-import-order
import json
import runpy
import select
import signal
import tempfile
import types

# What `python -m resnet.resnet_main` sets before TensorFlow's import.
from resnet import process_env

# Everything resnet_main imports, not resnet_main itself (the child runs it as a new __main__, as `-m` does).
import numpy as np
import tensorflow as tf
from absl import app
from official_input import imagenet_input
from resnet import wiring
from resnet.estimator import estimator
from resnet.export import exporting
from resnet.training import resnet_model_fn
from tensorflow.python.eager import context  # pylint: disable=g-direct-tensorflow-import
from tests.helpers.procs import FORKED_MODULES
# pylint: enable=g-import-not-at-top,wrong-import-position,unused-import,g-bad-import-order


def _reap_one() -> bool:
  """Writes the status of one ended child, then reaps it; False when none has ended."""
  try:
    info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
  except ChildProcessError:
    return False
  if info is None or info.si_pid == 0:
    return False
  code = info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
  path = _children.pop(info.si_pid, None)
  if path:
    with open(path + '.tmp', 'w') as f:
      f.write(str(code))
    os.replace(path + '.tmp', path)
  os.waitpid(info.si_pid, 0)
  return True


def _become(request) -> None:
  """In the child: the process `python -m MODULE ARGV` would be after its imports, with the request's environment."""
  log = os.open(request['log'], os.O_WRONLY | os.O_CREAT | os.O_APPEND)
  devnull = os.open(os.devnull, os.O_RDONLY)
  os.close(_REPLIES_FD)
  os.dup2(devnull, 0)  # the requests were stdin
  os.dup2(log, 1)
  os.dup2(log, 2)
  os.close(log)
  os.close(devnull)
  os.chdir(request['cwd'])
  os.environ.clear()
  os.environ.update(request['env'])
  tempfile.tempdir = None  # the server's (cached below) must not stand in for this TMPDIR
  np.random.seed()  # fresh entropy, as a new process has (Python's random reseeds itself after a fork)
  # Signals as a program started from a shell has them: Ctrl-C raises KeyboardInterrupt, SIGTERM kills. The server
  # inherits its dispositions from whichever test process started it, and Python leaves SIGINT ignored at start-up
  # when its parent ignored it (the full suite's SIGINT case then waited forever; alone it passed).
  signal.signal(signal.SIGINT, signal.default_int_handler)
  signal.signal(signal.SIGTERM, signal.SIG_DFL)
  sys.argv = [request['module']] + list(request['argv'])


def serve() -> dict:
  """Answers requests until stdin closes (then exits); returns only in a forked child, with its request."""
  if context.context()._initialized:  # pylint: disable=protected-access
    raise RuntimeError('TensorFlow started its runtime at import; children must not share it')
  tempfile.gettempdir()  # cached here as in any process that has used tempfile: each child must read its own
  buffer = b''
  while True:
    ready, _, _ = select.select([0], [], [], 0.05)
    while _reap_one():
      pass
    if not ready:
      continue
    chunk = os.read(0, 65536)
    if not chunk:
      return {}
    buffer += chunk
    while b'\n' in buffer:
      line, buffer = buffer.split(b'\n', 1)
      request = json.loads(line)
      if request['module'] not in FORKED_MODULES:
        raise ValueError(f'the fork server runs {FORKED_MODULES}, not {request["module"]}')
      sys.stdout.flush()
      sys.stderr.flush()
      pid = os.fork()
      if pid == 0:
        _become(request)
        return request
      _children[pid] = request['status']
      os.write(_REPLIES_FD, (json.dumps({'pid': pid}) + '\n').encode())


_children = {}

if __name__ == '__main__':
  _request = serve()
  if not _request:
    sys.exit(0)
  # As `python -m MODULE` runs it: a new __main__ module, sys.argv[0] the module's file, for good.
  sys.modules['__main__'] = types.ModuleType('__main__')
  runpy._run_module_as_main(_request['module'])  # pylint: disable=protected-access
