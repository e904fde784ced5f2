"""Atomic writes: every file this program writes appears complete under its final name, or not at all.

A run killed mid-write (preemption, kill -9, a full disk) leaves the previous complete file in place and at most a
temporary file beside it. Local paths are fsynced before the rename; gs:// and other URLs go through tf.io.gfile,
whose rename is a copy-then-delete on object stores but never exposes a partial object under the final name.
Also the one rule for what a URL is, and removing a file without caring whether it is there. TensorFlow is imported
when a file is written, not with this module: the program reads its flags and params files before it.
"""
import contextlib
import errno
import os
import uuid
from typing import Iterator, Union


class WriteError(OSError):
  """A file could not be written (no space, no permission); the previous file at ``path`` is untouched."""

  def __init__(self, path: str, cause: BaseException):
    super().__init__(f'Could not write {path}: {cause}. The previous version, if any, is intact. Free space or fix '
                     f'permissions on {os.path.dirname(path) or "."}, then run again.')
    self.path = path


def is_url(path: str) -> bool:
  """gs:// and the other schemes tf.io.gfile reads; anything else is a local path."""
  return '://' in path


def temp_path(path: str) -> str:
  """A hidden sibling of ``path``: same directory (so the rename is atomic), unique per writer."""
  directory, name = os.path.split(path)
  return os.path.join(directory, f'.{name}.tmp-{uuid.uuid4().hex[:12]}')


# errno values that mean "the storage refused the write", as opposed to errors of the code producing the content.
_STORAGE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS, errno.EIO, errno.EFBIG}


def _is_storage_error(e: BaseException) -> bool:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return isinstance(e, tf.errors.OpError) or (isinstance(e, OSError) and e.errno in _STORAGE_ERRNOS)


@contextlib.contextmanager
def atomic_output(path: str, mode: str = 'w') -> Iterator:
  """Yields a file object for a temp sibling of ``path``; renames it over ``path`` only if the block succeeds.

  A storage failure (no space, no permission) becomes a WriteError naming ``path``; other errors of the block
  propagate unchanged. Either way the temp file is removed and ``path`` keeps its previous content.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  directory = os.path.dirname(path)
  tmp = temp_path(path)
  try:
    if directory:
      tf.io.gfile.makedirs(directory)
    if is_url(path):
      with tf.io.gfile.GFile(tmp, mode) as f:
        yield f
    else:
      with open(tmp, mode, **({} if 'b' in mode else {'encoding': 'utf-8'})) as f:
        yield f
        f.flush()
        os.fsync(f.fileno())
      os.chmod(tmp, 0o644)
    tf.io.gfile.rename(tmp, path, overwrite=True)
  except BaseException as e:
    remove_quietly(tmp)
    if _is_storage_error(e):
      raise WriteError(path, e) from e
    raise


def atomic_write(path: str, content: Union[str, bytes]) -> None:
  with atomic_output(path, 'wb' if isinstance(content, bytes) else 'w') as f:
    f.write(content)


def remove_quietly(path: str) -> None:
  """Removes ``path`` if it is there; a failure to remove it is not an error (a temp file left behind is)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  try:
    if tf.io.gfile.exists(path):
      tf.io.gfile.remove(path)
  except (OSError, tf.errors.OpError):
    pass
