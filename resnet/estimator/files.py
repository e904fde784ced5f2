"""Atomic writes: every file this program writes appears complete under its final name, or not at all.

A run killed mid-write (preemption, kill -9, a full disk) leaves the previous complete file in place and at most a
temporary file beside it. Local paths are fsynced before the rename; gs:// and other URLs go through tf.io.gfile,
whose rename is a copy-then-delete on object stores but never exposes a partial object under the final name.
Also the one rule for what a URL is, removing a file without caring whether it is there, and reading back a record
the program wrote whatever state it is in (``read_record``). TensorFlow is imported
when a file is written, not with this module: the program reads its flags and params files before it.
"""
import contextlib
import dataclasses
import errno
import json
import os
import uuid
from typing import Any, Callable, Iterator, Optional, Union


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


def is_temp(name: str) -> bool:
  """Whether a file name is one of temp_path's."""
  return name.startswith('.') and '.tmp-' in name


def set_aside(path: str) -> str:
  """Renames ``path`` (a damaged record, a directory where a file belongs) to a sibling that says so; returns it."""
  import datetime  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  stamp = datetime.datetime.now(datetime.timezone.utc).strftime('%Y%m%dT%H%M%S')
  target = f'{path}.damaged-{stamp}'
  tf.io.gfile.rename(path, target, overwrite=False)
  return target


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


@dataclasses.dataclass(frozen=True)
class Record:
  """A file the program wrote and reads back: its parsed ``value`` (None when missing or unreadable) and, when it is
  there but cannot be read, the ``problem`` in words that name the file."""
  path: str
  value: Any = None
  problem: Optional[str] = None

  @property
  def damaged(self) -> bool:
    return self.problem is not None


def read_record(path: str, parse: Callable[[str], Any], what: str = 'record') -> Record:
  """Reads ``path`` with ``parse`` whatever its state: missing (no value, no problem); a directory in its place,
  bytes that are not UTF-8 text, or text ``parse`` refuses (truncated, bad JSON or YAML) give no value and a problem.
  One rule for every record (best/, progress, params.yaml, summary.json, eval results): the caller decides what a
  damaged one means, and nothing is deleted here."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  try:
    if is_url(path):
      if not tf.io.gfile.exists(path):
        return Record(path)
      if tf.io.gfile.isdir(path):
        return Record(path, problem=f'{path} is a directory, not a {what} file')
      with tf.io.gfile.GFile(path, 'rb') as f:
        data = f.read()
    else:
      if not os.path.lexists(path):
        return Record(path)
      if os.path.isdir(path):
        return Record(path, problem=f'{path} is a directory, not a {what} file')
      with open(path, 'rb') as f:
        data = f.read()
  except (OSError, tf.errors.OpError) as e:
    return Record(path, problem=f'{path} cannot be read ({getattr(e, "message", None) or e})')
  try:
    text = data.decode('utf-8')
  except UnicodeDecodeError:
    return Record(path, problem=f'{path} is not a {what}: it holds binary data ({len(data)} bytes), not text')
  try:
    return Record(path, parse(text))
  except (ValueError, TypeError) as e:
    return Record(path, problem=f'{path} is not a valid {what} ({str(e).splitlines()[0] if str(e) else type(e).__name__})')


def read_json_record(path: str, what: str = 'JSON record') -> Record:
  return read_record(path, json.loads, what)
