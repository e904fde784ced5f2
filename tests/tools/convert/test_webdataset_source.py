"""tools/convert/webdataset_source.py on shards the tests write as WebDataset's TarWriter does: labels from .cls,
.txt and .json members, samples passed over with why, shards refused with the fix, and images read in place."""
import gzip
import io
import json
import os

import pytest

from tests.tools.convert import archive_files as af
from tests.tools.convert import drawn_images as drawn
from tools.convert import labels_csv
from tools.convert import webdataset_source as wds
from tools.convert.conversion import convert_dataset

RATIOS = (0.5, 0.25, 0.25)


def _jpeg(seed: int, side: int = 20) -> bytes:
  out = io.BytesIO()
  drawn.noise(side, side + 3, seed).save(out, 'JPEG')
  return out.getvalue()


def _labels(plan):
  return {os.path.basename(i.path): i.label_names for items in plan.splits.values() for i in items}


def test_class_ids_in_cls_members_keep_their_ids(tmp_path):
  members = [m for i, cls in enumerate((0, 2, 2, 0, 2, 0, 0, 2)) for m in af.sample(f's{i}', _jpeg(i), cls=cls)]
  shard = af.write_tar(str(tmp_path / 'shard-000.tar'), members)
  plan = wds.plan(shard, RATIOS, 0)
  assert plan.layout == 'webdataset' and plan.class_names == ['0', '1', '2']  # class i is label i + 1
  assert _labels(plan)['s1.jpg'] == ('2',) and sum(len(v) for v in plan.splits.values()) == 8
  item = plan.splits['train'][0]
  assert item.member.read() == _jpeg(int(os.path.basename(item.path)[1:-4]))   # read at its offset in the shard


def test_txt_and_json_labels_and_the_label_field(tmp_path):
  members = (af.sample('a', _jpeg(1), txt='cat', json={'label': 'kitten', 'id': 7})
             + af.sample('b', _jpeg(2), txt='dog', json={'category': 'puppy'})
             + af.sample('c', _jpeg(3), 'png', txt='golden retriever\n', json='puppy'))
  shard = af.write_tar(str(tmp_path / 'train-0.tar'), members)
  assert _labels(wds.plan(shard, RATIOS, 0)) == {'a.jpg': ('cat',), 'b.jpg': ('dog',), 'c.png': ('golden retriever',)}
  assert _labels(wds.plan(shard, RATIOS, 0, label_field='json')) == {
      'a.jpg': ('kitten',), 'b.jpg': ('puppy',), 'c.png': ('puppy',)}
  with pytest.raises(ValueError, match=r'--label_field=cls: no sample has a .cls member; the shards have .*json'):
    wds.plan(shard, RATIOS, 0, label_field='cls')


def test_json_lists_make_multi_label_data_with_negatives(tmp_path):
  members = [m for i, tags in enumerate((['a'], ['a', 'b'], [], ['b'], ['a'], [])) for m in
             af.sample(f'k{i}', _jpeg(i), json={'labels': tags})]
  plan = wds.plan(af.write_tar(str(tmp_path / 's.tar'), members), (1.0, 0.0, 0.0), 0)
  assert plan.task == labels_csv.MULTI_LABEL and plan.class_names == ['a', 'b']
  assert _labels(plan) == {'k0.jpg': ('a',), 'k1.jpg': ('a', 'b'), 'k2.jpg': (), 'k3.jpg': ('b',), 'k4.jpg': ('a',),
                           'k5.jpg': ()}


def test_samples_without_an_image_or_a_label_are_passed_over_with_why(tmp_path):
  first = af.write_tar(str(tmp_path / 'shard-0.tar'), (
      af.sample('dir/ok', _jpeg(1), txt='cat') + af.sample('dir/other', _jpeg(2), txt='dog')
      + [('meta.json', b'{}'), ('two.jpg', _jpeg(3)), ('two.png', _jpeg(4)), ('two.txt', b'cat'),
         ('nolabel.jpg', _jpeg(5)), ('blank.jpg', _jpeg(6)), ('blank.txt', b' \n'), ('._ok.jpg', b'\0\0'),
         ('__index__', b'')]))
  second = af.write_tar(str(tmp_path / 'shard-1.tar'), af.sample('dir/ok', _jpeg(7), txt='cat'))
  plan = wds.plan(f'{tmp_path}/shard-{{0..1}}.tar', (1.0, 0.0, 0.0), 0)
  assert sorted(_labels(plan)) == ['ok.jpg', 'other.jpg']
  ok = next(i for i in plan.splits['train'] if i.path.endswith('ok.jpg'))
  assert ok.label_names == ('cat',) and ok.member.path == first and ok.member.read() == _jpeg(1)
  why = {os.path.relpath(path, str(tmp_path)): reason for path, reason in plan.link_skips}
  assert why == {'shard-0.tar/meta': 'no image member (it has json)',
                 'shard-0.tar/two': 'several images (jpg, png): one image per sample',
                 'shard-0.tar/nolabel.jpg': 'no .txt label',
                 'shard-0.tar/blank.jpg': 'empty label (.txt members)',
                 'shard-1.tar/dir/ok.jpg': f'key dir/ok repeated: the first is in {first}'}


def test_shards_it_cannot_read_in_place_are_refused_with_the_fix(tmp_path):
  plain = af.write_tar(str(tmp_path / 'a.tar'), af.sample('x', _jpeg(1), cls=0))
  with open(plain, 'rb') as f, gzip.open(str(tmp_path / 'b.tar.gz'), 'wb') as g:
    g.write(f.read())
  with pytest.raises(ValueError, match=r'b.tar.gz is gzip-compressed: .* \(gunzip -k b.tar.gz'):
    wds.plan(str(tmp_path / 'b.tar.gz'), RATIOS, 0)
  (tmp_path / 'c.tar').write_bytes(b'not a tar at all' * 64)
  with pytest.raises(ValueError, match='c.tar is not a tar file'):
    wds.plan(str(tmp_path / 'c.tar'), RATIOS, 0)
  with pytest.raises(ValueError, match='no sample has a label member .* --label_field=EXT'):
    wds.plan(af.write_tar(str(tmp_path / 'd.tar'), [('x.jpg', _jpeg(1)), ('x.caption', b'hi')]), RATIOS, 0)


def test_a_converted_set_with_splits_by_name_and_nothing_unpacked(tmp_path):
  shards = tmp_path / 'shards'
  for split, seeds in (('train', range(36)), ('val', range(40, 42))):  # 3 chunks: the members go to 2 workers
    af.write_tar(str(shards / f'{split}-000000.tar'),
                 [m for i in seeds for m in af.sample(f'{split}{i}', _jpeg(i), cls=i % 2)])
  before = sorted(os.listdir(shards))
  out = str(tmp_path / 'out')
  summary = convert_dataset(None, out, webdataset=str(shards), num_workers=2)
  assert sorted(os.listdir(shards)) == before                  # read where they lie
  assert summary['layout'] == 'webdataset_splits' and summary['raw_data_dir'] == str(shards)
  assert {s: summary['splits'][s]['images'] for s in ('train', 'validation')} == {'train': 36, 'validation': 2}
  records = drawn.by_filename(out)
  assert records[b'train3.jpg']['image/class/label'] == 2 and records[b'train3.jpg']['image/encoded'] == _jpeg(3)
  with open(os.path.join(out, 'summary.json')) as f:
    assert json.load(f)['labels'] == {'0': 1, '1': 2}


def test_more_shards_than_open_files_allowed(tmp_path):
  """Each shard is closed before the next is read: ImageNet's sets have over 1024 train shards, more than the usual
  limit of 1024 open files (the old plan kept every shard open until the end and failed with EMFILE)."""
  resource = pytest.importorskip('resource')  # POSIX only
  image = _jpeg(0)
  shards = [af.write_tar(str(tmp_path / f'shard-{i:04d}.tar'), af.sample(f's{i}', image, cls=i % 2))
            for i in range(300)]
  soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
  resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
  try:
    plan = wds.plan(str(tmp_path / 'shard-*.tar'), (1.0, 0.0, 0.0), 0)
  finally:
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
  assert len(shards) == 300 and len(plan.splits['train']) == 300 and plan.class_names == ['0', '1']
