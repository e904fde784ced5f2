"""Copying the converter's outputs to a bucket (gs://, or any tf.io.gfile path), each file under a ``.tmp-`` name
renamed when complete, summary.json (the completion marker) last.

Its own module because it is the one part that talks to a remote store: it checks the destination before anything
is converted, and replaces an older run's outputs only when asked (a stale shard would still match ``train-*``).
"""
import os
from typing import List

from absl import logging

from tools.convert.shards import TMP_PREFIX, is_output, output_files


def _stale_outputs(dest: str) -> List[str]:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  if not tf.io.gfile.isdir(dest):
    return []
  return [n.rstrip('/') for n in tf.io.gfile.listdir(dest) if is_output(n.rstrip('/'))]


def check_upload_destination(dest: str, overwrite: bool) -> None:
  """Fails before converting when dest already holds converter outputs and overwrite is off."""
  existing = _stale_outputs(dest)
  if existing and not overwrite:
    raise FileExistsError(f'{dest} already holds {len(existing)} converter outputs (e.g. {existing[0]}): pass '
                          '--overwrite to replace them.')


def upload_outputs(local_dir: str, dest: str, overwrite: bool = False) -> List[str]:
  """Copies the outputs to dest (gs:// or any tf.io.gfile path): each to a .tmp- name, then renamed.

  With overwrite, converter outputs already at dest that this run did not produce (e.g. shards of an older run
  with another shard count, which train-* would still match) are deleted first.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  names = output_files(local_dir)
  tf.io.gfile.makedirs(dest)
  stale = [n for n in _stale_outputs(dest) if n not in names]
  if stale:
    if not overwrite:
      raise FileExistsError(f'{dest} holds outputs of another run (e.g. {stale[0]}): pass --overwrite.')
    for n in stale:
      tf.io.gfile.remove(f'{dest.rstrip("/")}/{n}')
  for i, name in enumerate(names):
    tmp, final = f'{dest.rstrip("/")}/{TMP_PREFIX}{name}', f'{dest.rstrip("/")}/{name}'
    tf.io.gfile.copy(os.path.join(local_dir, name), tmp, overwrite=True)
    tf.io.gfile.rename(tmp, final, overwrite=True)
    if (i + 1) % 20 == 0 or i + 1 == len(names):
      logging.info('Uploaded %d/%d files to %s.', i + 1, len(names), dest)
  return names
