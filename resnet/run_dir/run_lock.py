"""One training run per model_dir at a time.

Two trainers on one model_dir interleave their checkpoints (the second resumes the first's step and both write
on), with no error. The chief of a training run (the one process of a single-process run; worker 0 of a
multi-worker run, whose other workers are the same run) holds an exclusive ``flock`` on ``model_dir/LOCK_FILE``
while it trains. The operating system releases it when the process exits, however it exits (kill -9 included),
so a crashed run never leaves the model_dir stuck. Eval and predict jobs never take it: they only read.

Where flock cannot work (gs:// and other remote file systems, NFS without a lock daemon) there is no lock: a
warning says so, and that only one training job may write to that model_dir.
"""
import contextlib
import datetime
import fcntl
import json
import os
import socket
import sys
from typing import Iterator

from absl import logging

from resnet.estimator import files

LOCK_FILE = '.training.lock'


class ModelDirLocked(RuntimeError):
  """Another training run holds model_dir."""


def _holder(fd: int) -> str:
  try:
    os.lseek(fd, 0, os.SEEK_SET)
    info = json.loads(os.read(fd, 65536).decode('utf-8') or '{}')
  except (OSError, ValueError):
    info = {}
  if not info:
    return 'a process that has not written its details yet'
  return (f'pid {info.get("pid")} on {info.get("host")}, started {info.get("started")}: '
          f'{info.get("command", "")}')


@contextlib.contextmanager
def training_lock(model_dir: str) -> Iterator[None]:
  """Holds model_dir for this training run; ModelDirLocked (naming the other run) if another run holds it."""
  if files.is_url(model_dir):
    logging.warning('model_dir %s is not on a local or mounted file system: it cannot be locked. Make sure only '
                    'one training job writes to it (a second one would interleave its checkpoints).', model_dir)
    yield
    return
  os.makedirs(model_dir, exist_ok=True)
  path = os.path.join(model_dir, LOCK_FILE)
  fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
  try:
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      raise ModelDirLocked(
          f'{model_dir} is being trained by another run ({_holder(fd)}). Wait for it to finish or stop it, or '
          f'use another --model_dir. (The lock in {path} ends with that process, however it ends.)') from None
    except OSError as e:  # a file system without flock (some NFS and FUSE mounts)
      logging.warning('model_dir %s cannot be locked (%s). Make sure only one training job writes to it.',
                      model_dir, e)
      yield
      return
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, json.dumps({'pid': os.getpid(), 'host': socket.gethostname(),
                             'started': datetime.datetime.now().isoformat(timespec='seconds'),
                             'command': ' '.join(sys.argv)}).encode('utf-8'))
    yield
  finally:
    os.close(fd)  # closing the descriptor releases the lock
