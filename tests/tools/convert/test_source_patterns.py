"""tools/convert/source_patterns.py: what --webdataset and --parquet name, as WebDataset users write it."""
import os

import pytest

from tools.convert import source_patterns as sp


def test_brace_ranges_and_lists_expand_as_braceexpand_does():
  assert sp.expand_braces('train-{000000..000002}.tar') == ['train-000000.tar', 'train-000001.tar',
                                                             'train-000002.tar']
  assert sp.expand_braces('s-{8..10}.tar') == ['s-8.tar', 's-9.tar', 's-10.tar']
  assert sp.expand_braces('{train,val}-{0..1}.tar') == ['train-0.tar', 'train-1.tar', 'val-0.tar', 'val-1.tar']
  assert sp.expand_braces('a{b,c{d,e}}') == ['ab', 'acd', 'ace']
  assert sp.expand_braces('plain.tar') == ['plain.tar']
  with pytest.raises(ValueError, match='without its'):
    sp.expand_braces('train-{0..3.tar')


def test_commas_split_items_but_not_brace_lists():
  assert sp.split_commas('a-{0,1}.tar, b.tar,,') == ['a-{0,1}.tar', 'b.tar']


@pytest.mark.parametrize('name,split', [('train-00000-of-00004.parquet', 'train'), ('imagenet-val-000001.tar', 'validation'),
                                        ('test-0.tar', 'test'), ('shard-000.tar', None),
                                        ('train/data-00000-of-00001.arrow', 'train'),
                                        ('my_train_set/data-00000-of-00001.arrow', None),
                                        ('default/validation/0000.parquet', 'validation')])
def test_a_files_split_comes_from_its_name_or_its_folder(name, split):
  assert sp.split_of_name(name) == split


def _touch(path):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  open(path, 'wb').close()
  return path


def test_expand_reads_paths_globs_ranges_folders_and_split_prefixes(tmp_path):
  shards = [_touch(str(tmp_path / 'a' / f'shard-{i:03d}.tar')) for i in range(4)]
  _touch(str(tmp_path / 'a' / 'notes.txt'))
  assert sp.expand(f'{tmp_path}/a/shard-{{000..001}}.tar', '--webdataset', ('.tar',)) == {
      shards[0]: None, shards[1]: None}
  assert list(sp.expand(f'{tmp_path}/a/shard-*.tar', '--webdataset', ('.tar',))) == shards
  assert list(sp.expand(str(tmp_path / 'a'), '--webdataset', ('.tar',))) == shards   # a folder: its .tar files
  got = sp.expand(f'train={tmp_path}/a/shard-00[0-2].tar,val={shards[3]}', '--webdataset', ('.tar',))
  assert got == {shards[0]: 'train', shards[1]: 'train', shards[2]: 'train', shards[3]: 'validation'}


def test_expand_refuses_what_it_cannot_read_with_the_fix(tmp_path):
  train = _touch(str(tmp_path / 'train-000.tar'))
  other = _touch(str(tmp_path / 'shard-000.tar'))
  with pytest.raises(ValueError, match='prefix each pattern with its split'):
    sp.expand(f'{train},{other}', '--webdataset', ('.tar',))
  with pytest.raises(ValueError, match='not a split'):
    sp.expand(f'training_set={other}', '--webdataset', ('.tar',))
  with pytest.raises(ValueError, match='not a local path.*copy them to a local disk'):
    sp.expand('gs://bucket/train-{0..9}.tar', '--webdataset', ('.tar',))
  with pytest.raises(ValueError, match="'.*missing-2.tar' .* is not a file"):
    sp.expand(f'{tmp_path}/missing-{{2..3}}.tar', '--webdataset', ('.tar',))
  with pytest.raises(ValueError, match='matches no .parquet'):
    sp.expand(f'{tmp_path}/*.parquet', '--parquet', ('.parquet',))
