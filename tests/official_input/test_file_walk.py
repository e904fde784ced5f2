"""official_input/file_walk.py: the one walk of a user's folders that the converter and predict share."""
import os

from official_input import file_walk


def test_hidden_names_are_left_out_links_to_folders_are_followed_once_and_each_real_file_kept_once(tmp_path):
  (tmp_path / 'a' / 'sub').mkdir(parents=True)
  for name in ('a/1.jpg', 'a/sub/2.png', 'a/.hidden.jpg', 'a/._1.jpg'):
    (tmp_path / name).write_bytes(b'x')
  os.symlink(tmp_path / 'a', tmp_path / 'a' / 'sub' / 'loop')        # a link back up
  os.symlink(tmp_path / 'a' / '1.jpg', tmp_path / 'a' / 'again.jpg')  # a second way to one file
  walker = file_walk.Walker(str(tmp_path))
  found = walker.files(str(tmp_path / 'a'))
  assert [os.path.relpath(p, tmp_path) for p in found] == ['a/1.jpg', 'a/again.jpg', 'a/sub/2.png']
  assert [os.path.relpath(p, tmp_path) for p, _ in walker.skips] == ['a/sub/loop']
  kept = walker.unique(found)
  assert [os.path.relpath(p, tmp_path) for p in kept] == ['a/1.jpg', 'a/sub/2.png']   # the file under its own path
  assert 'a second way to one file' in walker.skips[-1][1]
  assert not file_walk.visible('photos/.DS_Store') and file_walk.visible('photos/')
