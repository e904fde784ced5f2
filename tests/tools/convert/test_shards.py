"""tools/convert/shards.py: shard counts sized to the data, the output folder refused or cleaned, and no
complete-looking shard after a failure."""
import os

import pytest

from tests.tools.convert import drawn_images as drawn
from tools.convert import shards
from tools.convert.conversion import convert_dataset


def test_default_shard_counts_scale_with_data():
  assert shards.default_num_shards('train', 1_281_167, 140 * 10**9) == 1024
  assert shards.default_num_shards('validation', 50_000, 64 * 10**9) == 128
  assert shards.default_num_shards('train', 800, 5 * 10**6) == 1
  assert shards.default_num_shards('train', 3, 10**10) == 3
  assert shards.default_num_shards('test', 0, 0) == 0


def test_refuses_non_empty_output_dir_without_overwrite(tmp_path):
  raw, out = drawn.small_dataset(tmp_path / 'raw'), tmp_path / 'out'
  out.mkdir()
  (out / 'train-00000-of-00007').write_bytes(b'stale')
  (out / 'notes.md').write_text('mine')
  with pytest.raises(FileExistsError, match='--overwrite'):
    convert_dataset(raw, str(out), num_workers=1)
  convert_dataset(raw, str(out), num_workers=1, overwrite=True)
  assert not (out / 'train-00000-of-00007').exists()  # Stale shards would still match train-*.
  assert (out / 'notes.md').read_text() == 'mine'
  with pytest.raises(ValueError, match='inside raw_data_dir'):
    convert_dataset(raw, os.path.join(raw, 'records'), num_workers=1)


def test_leftover_tmp_files_are_cleaned(tmp_path):
  raw, out = drawn.small_dataset(tmp_path / 'raw'), tmp_path / 'out'
  out.mkdir()
  (out / '.tmp-train-00000-of-00001').write_bytes(b'half')
  convert_dataset(raw, str(out), num_workers=1)
  assert not [n for n in os.listdir(out) if n.startswith('.tmp-')]


def test_failure_mid_shard_leaves_no_complete_looking_file(tmp_path, monkeypatch):
  from official_input import example_schema
  raw, out = drawn.small_dataset(tmp_path / 'raw'), tmp_path / 'out'
  calls = []
  real = example_schema.make_example

  def flaky(*args, **kwargs):
    calls.append(1)
    if len(calls) == 3:
      raise RuntimeError('disk full')
    return real(*args, **kwargs)

  monkeypatch.setattr(example_schema, 'make_example', flaky)
  with pytest.raises(RuntimeError, match='disk full'):
    convert_dataset(raw, str(out), num_workers=1)
  assert os.listdir(out) == []
