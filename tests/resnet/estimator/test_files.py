"""Atomic writes and damaged-safe reads (estimator/files.py): a failed write keeps the previous file and names the
path; a record read back in any state gives its value or the damage in words."""
import os

import pytest

from resnet.estimator import files


def test_a_failed_write_keeps_the_previous_file_and_names_the_path(tmp_path, monkeypatch):
  path = str(tmp_path / 'results.json')
  files.atomic_write(path, 'old complete content')

  def full_disk(*args, **kwargs):
    raise OSError(28, 'No space left on device')

  monkeypatch.setattr(os, 'fsync', full_disk)  # the write fails at its end, as a full disk does
  with pytest.raises(files.WriteError, match=r'Could not write .*results\.json: .*No space left'):
    files.atomic_write(path, 'new content')
  assert open(path).read() == 'old complete content'
  assert os.listdir(tmp_path) == ['results.json']  # no temporary left behind


@pytest.mark.parametrize('damage,problem', [
    ('missing', None), ('bad json', 'is not a valid JSON record'), ('binary', 'holds binary data'),
    ('empty', 'is not a valid JSON record'), ('a directory', 'is a directory, not a JSON record file')])
def test_a_record_is_read_back_whatever_its_state(tmp_path, damage, problem):
  path = tmp_path / 'record.json'
  if damage == 'bad json':
    path.write_text('{"a": 1, "b"')
  elif damage == 'binary':
    path.write_bytes(bytes(range(256)))
  elif damage == 'empty':
    path.write_bytes(b'')
  elif damage == 'a directory':
    path.mkdir()
  record = files.read_json_record(str(path), 'JSON record')
  assert record.value is None and (record.problem is None) == (problem is None)
  if problem:
    assert str(path) in record.problem and problem in record.problem
  path2 = tmp_path / 'good.json'
  path2.write_text('{"a": 1}')
  assert files.read_json_record(str(path2)).value == {'a': 1}
