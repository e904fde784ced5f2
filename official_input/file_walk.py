"""The visible files under folders, for everything that reads a user's folders: the converter (tools/convert/) and
predict's ``--predict_input`` (image_files.py). One home for what a folder holds: hidden names (``.*``, macOS
``._*`` resource forks) are never images; links to folders are followed once per real folder (a link back up,
``all -> ..``, would loop until the OS refuses), and each real file is kept once (a file reachable twice would be
converted twice, under two classes or in two splits, or predicted twice). Pure Python: the converter's planning
imports no TensorFlow (object-store paths import it when walked).
"""
import os
from typing import Callable, Dict, List, Optional, Sequence, Tuple, TypeVar

T = TypeVar('T')


def visible(name: str) -> bool:
  """Hidden files and macOS '._*' resource forks are never images."""
  return not os.path.basename(name.rstrip('/')).startswith('.')


class Walker:
  """Lists the visible files under folders, following a link to a folder at most once per real folder, and keeps
  each real file once (``unique``). Each link passed over is noted in ``skips`` with why."""

  def __init__(self, root: Optional[str] = None):
    self.seen_dirs = {os.path.realpath(root)} if root else set()
    self.skips: List[Tuple[str, str]] = []

  def files(self, path: str) -> List[str]:
    """All visible files under ``path``, recursively, in a stable sorted order (``gs://...``: through tf.io.gfile;
    object stores have no links)."""
    if '://' in path:
      import tensorflow as tf  # pylint: disable=g-import-not-at-top
      found = []
      for directory, subdirs, names in tf.io.gfile.walk(path):
        subdirs[:] = sorted(d for d in subdirs if visible(d))
        found.extend(os.path.join(directory, n.rstrip('/')) for n in sorted(names) if visible(n))
      return found
    found = []
    self.seen_dirs.add(os.path.realpath(path))
    for dirpath, dirnames, filenames in os.walk(path, followlinks=True):
      keep = []
      for d in sorted(d for d in dirnames if visible(d)):
        real = os.path.realpath(os.path.join(dirpath, d))
        if real in self.seen_dirs:
          self.skips.append((os.path.join(dirpath, d), f'a link to a folder read already ({real}): a loop or a '
                                                       'second way to the same images'))
        else:
          self.seen_dirs.add(real)
          keep.append(d)
      dirnames[:] = keep
      found.extend(os.path.join(dirpath, f) for f in sorted(filenames) if visible(f))
    return found

  def unique(self, items: Sequence[T], path_of: Callable[[T], str] = lambda item: item) -> List[T]:
    """``items`` with each real file once: under its own path where it is listed there, else its first."""
    by_file: Dict[str, List[T]] = {}
    for item in items:
      by_file.setdefault(real_path(path_of(item)), []).append(item)
    dropped = set()
    for real, listed in by_file.items():
      if len(listed) > 1:
        kept = next((i for i in listed if os.path.abspath(path_of(i)) == real), listed[0])
        for item in listed:
          if item is not kept:
            dropped.add(id(item))
            self.skips.append((path_of(item), f'a second way to one file (a link): {path_of(kept)}'))
    return [item for item in items if id(item) not in dropped]


def real_path(path: str) -> str:
  """The file a path reaches (object-store paths as they are)."""
  return path if '://' in path else os.path.realpath(path)
