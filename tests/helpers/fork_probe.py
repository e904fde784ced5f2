"""What a process shows of itself, for tests/test_forkserver.py: run as ``python -m tests.helpers.fork_probe``.

Prints one JSON line (pid, parent, cwd, argv, the __main__ module's file, the PROBE_VALUE and TMPDIR it sees,
whether TensorFlow's runtime had started before this module ran, a NumPy and a Python random draw, a string's
hash), then ends as ``argv[1]`` says: ``exit:N``, ``raise`` (an uncaught exception), or ``wait`` (until a signal).
An atexit handler prints 'ATEXIT' and sys.argv[0] as it is then.
"""
import atexit
import json
import os
import random
import sys
import tempfile
import time

import numpy as np
from tensorflow.python.eager import context  # pylint: disable=g-direct-tensorflow-import

if __name__ == '__main__':
  atexit.register(lambda: print('ATEXIT', sys.argv[0], flush=True))
  print(json.dumps({'pid': os.getpid(), 'ppid': os.getppid(), 'cwd': os.getcwd(), 'argv': sys.argv,
                    'main': sys.modules['__main__'].__file__, 'hash': hash('fork_probe'),
                    'value': os.environ.get('PROBE_VALUE'), 'tmp': tempfile.gettempdir(),
                    'runtime_started': bool(context.context()._initialized),  # pylint: disable=protected-access
                    'np_draw': float(np.random.random()), 'py_draw': random.random()}), flush=True)
  how = sys.argv[1]
  if how.startswith('exit:'):
    sys.exit(int(how[5:]))
  if how == 'raise':
    raise RuntimeError('probe raised')
  print('WAITING', flush=True)
  time.sleep(120)
