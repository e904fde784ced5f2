"""tools/convert/upload.py: the outputs copied to a bucket under .tmp- names renamed when complete, summary.json
last, and an older run's outputs there refused, or replaced with --overwrite."""
import os

import pytest

from tools.convert import upload


def _outputs(out) -> str:
  """A converter's output folder: shards, labels.txt and summary.json."""
  out.mkdir()
  for name in ('train-00000-of-00002', 'train-00001-of-00002', 'validation-00000-of-00001', 'test-00000-of-00001'):
    (out / name).write_bytes(name.encode())
  (out / 'labels.txt').write_text('cat\ndog\n')
  (out / 'summary.json').write_text('{}\n')
  return str(out)


def test_upload_copies_atomically_and_replaces_stale_outputs(tmp_path):
  out = _outputs(tmp_path / 'out')
  dest = tmp_path / 'bucket' / 'data'
  dest.mkdir(parents=True)
  (dest / 'train-00000-of-00009').write_bytes(b'old run')
  with pytest.raises(FileExistsError):
    upload.check_upload_destination(str(dest), overwrite=False)
  with pytest.raises(FileExistsError):
    upload.upload_outputs(out, str(dest))
  names = upload.upload_outputs(out, str(dest), overwrite=True)
  assert names[-1] == 'summary.json'
  assert sorted(os.listdir(dest)) == sorted(os.listdir(out))
  assert (dest / 'labels.txt').read_text() == 'cat\ndog\n'
  assert all((dest / n).read_bytes() == (tmp_path / 'out' / n).read_bytes() for n in names)
