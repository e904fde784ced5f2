"""tools/convert/parquet_source.py on files written as Hugging Face datasets writes them (archive_files.py): the
Image column, ClassLabel names from the schema's metadata, multi-label lists, save_to_disk folders, rows passed over
with why, and the message when pyarrow is missing."""
import builtins
import io
import json
import os

import pytest

from tests.tools.convert import archive_files as af
from tests.tools.convert import drawn_images as drawn
from tools.convert import labels_csv
from tools.convert import parquet_source as ps
from tools.convert.conversion import convert_dataset

ALL_TRAIN = (1.0, 0.0, 0.0)


def _jpeg(seed: int) -> bytes:
  out = io.BytesIO()
  drawn.noise(20, 23, seed).save(out, 'JPEG')
  return out.getvalue()


def _labels(plan):
  return {os.path.basename(i.path): i.label_names for items in plan.splits.values() for i in items}


def test_classlabel_names_in_the_datasets_order_and_unlabelled_rows(tmp_path):
  labels = [0, 1, 1, -1, 0, 1]
  table = af.hf_table([(_jpeg(i), f'img{i}.jpg') for i in range(6)], {'label': labels}, af.features(['dog', 'cat']))
  path = af.write_parquet(str(tmp_path / 'data' / 'train-00000-of-00001.parquet'), table, row_group_size=2)
  plan = ps.plan(str(tmp_path), ALL_TRAIN, 0)
  assert plan.layout == 'parquet_splits' and plan.class_names == ['dog', 'cat']  # class i of the ClassLabel: i + 1
  assert _labels(plan) == {'img0.jpg': ('dog',), 'img1.jpg': ('cat',), 'img2.jpg': ('cat',), 'img4.jpg': ('dog',),
                           'img5.jpg': ('cat',)}
  assert plan.link_skips == [(f'{path}/000003/img3.jpg', 'no label (-1: an unlabelled row)')]
  for item in plan.splits['train']:   # each read from its row group (3 groups of 2 rows)
    index = int(os.path.basename(item.path)[3])
    assert item.member.group == index // 2 and item.member.read() == _jpeg(index)


def test_a_list_of_classlabels_is_multi_label_data_with_negatives(tmp_path):
  tags = [[0], [1, 2], [], [2], [0, 1]]
  table = af.hf_table([(_jpeg(i), None) for i in range(5)], {'tags': tags}, af.features(tag_names=['a', 'b', 'c']))
  plan = ps.plan(af.write_parquet(str(tmp_path / 'x.parquet'), table), ALL_TRAIN, 0)
  assert plan.task == labels_csv.MULTI_LABEL and plan.class_names == ['a', 'b', 'c'] and plan.link_skips == []
  assert _labels(plan) == {'000000': ('a',), '000001': ('b', 'c'), '000002': (), '000003': ('c',),
                           '000004': ('a', 'b')}
  old_form = {'image': {'_type': 'Image'}, 'tags': [{'names': ['a', 'b', 'c'], '_type': 'ClassLabel'}]}
  table = af.hf_table([(_jpeg(i), None) for i in range(5)], {'tags': tags}, old_form)
  assert _labels(ps.plan(af.write_parquet(str(tmp_path / 'y.parquet'), table), ALL_TRAIN, 0))['000001'] == ('b', 'c')


def test_save_to_disk_folders_of_a_dataset_and_of_a_datasetdict(tmp_path):
  feature_json = af.features(['cat', 'dog'])
  table = af.hf_table([(_jpeg(i), f'{i}.jpg') for i in range(8)], {'label': [i % 2 for i in range(8)]}, feature_json)
  folder = af.save_to_disk(str(tmp_path / 'saved'), table)
  (tmp_path / 'saved' / 'cache-1234.arrow').write_bytes(b'not data')   # datasets' map cache: not listed
  plan = ps.plan(folder, (0.5, 0.25, 0.25), 0)
  assert plan.layout == 'parquet' and {s: len(v) for s, v in plan.splits.items()} == {
      'train': 4, 'validation': 2, 'test': 2}
  assert plan.splits['train'][0].member.read() == _jpeg(int(os.path.basename(plan.splits['train'][0].path)[0]))
  for split in ('train', 'test'):
    af.save_to_disk(str(tmp_path / 'dict' / split), table, split)
  with open(tmp_path / 'dict' / 'dataset_dict.json', 'w') as f:
    json.dump({'splits': ['train', 'test']}, f)
  plan = ps.plan(str(tmp_path / 'dict'), ALL_TRAIN, 0)
  assert plan.layout == 'parquet_splits' and {s: len(v) for s, v in plan.splits.items()} == {
      'train': 8, 'validation': 0, 'test': 8}


def test_label_columns_without_a_classlabel_and_the_label_field(tmp_path):
  images = [(_jpeg(i), None) for i in range(4)]
  table = af.hf_table(images, {'label': ['cat', 'dog', 'cat', 'dog'], 'fine': [3, 1, 0, 3]}, None)
  path = af.write_parquet(str(tmp_path / 'plain.parquet'), table)
  assert ps.plan(path, ALL_TRAIN, 0).class_names == ['cat', 'dog']
  assert ps.plan(path, ALL_TRAIN, 0, label_field='fine').class_names == ['0', '1', '2', '3']  # ids kept
  with pytest.raises(ValueError, match=r"--label_field=coarse: .* no such column; its columns are \['image'"):
    ps.plan(path, ALL_TRAIN, 0, label_field='coarse')
  table = af.hf_table(images, {'caption': ['a', 'b', 'c', 'd']}, None)
  with pytest.raises(ValueError, match='no label column .* --label_field=COLUMN'):
    ps.plan(af.write_parquet(str(tmp_path / 'captions.parquet'), table), ALL_TRAIN, 0)


def test_files_with_other_classlabel_names_are_refused(tmp_path):
  for name, names in (('train-0.parquet', ['cat', 'dog']), ('val-0.parquet', ['dog', 'cat'])):
    af.write_parquet(str(tmp_path / name), af.hf_table([(_jpeg(1), None)], {'label': [0]}, af.features(names)))
  with pytest.raises(ValueError, match='names its classes .* one ClassLabel together'):
    ps.plan(str(tmp_path), ALL_TRAIN, 0)


def test_without_pyarrow_the_error_names_the_extra(tmp_path, monkeypatch):
  real_import = builtins.__import__

  def no_pyarrow(name, *args, **kwargs):
    if name.startswith('pyarrow'):
      raise ImportError(f'No module named {name!r}')
    return real_import(name, *args, **kwargs)

  monkeypatch.setattr(builtins, '__import__', no_pyarrow)
  with pytest.raises(ValueError, match=r"pyarrow, which is not installed: pip install -e '\.\[parquet\]'"):
    ps.plan(str(tmp_path / 'x.parquet'), ALL_TRAIN, 0)


def test_a_conversion_in_two_workers_and_rows_without_their_image(tmp_path):
  images = [(_jpeg(i), f'p{i}.jpg') for i in range(40)] + [(None, 'elsewhere/missing.jpg')]
  table = af.hf_table(images, {'label': [i % 2 for i in range(41)]}, af.features(['cat', 'dog']))
  path = af.write_parquet(str(tmp_path / 'in' / 'train-00000-of-00001.parquet'), table, row_group_size=7)
  out = str(tmp_path / 'out')
  summary = convert_dataset(None, out, parquet=path, num_workers=2)
  assert summary['splits']['train']['images'] == 40 and summary['labels'] == {'cat': 1, 'dog': 2}
  (skipped,) = summary['skipped']
  assert skipped['path'] == f'{path}/000040/missing.jpg'
  assert "no image bytes, only its path 'elsewhere/missing.jpg'" in skipped['reason']
  records = drawn.by_filename(out)
  assert records[b'p7.jpg']['image/encoded'] == _jpeg(7) and records[b'p7.jpg']['image/class/label'] == 2


def test_a_shuffled_train_split_reads_each_row_group_about_once(tmp_path, monkeypatch):
  """Train is shuffled before cleaning and a worker keeps one row group, so the rows are cleaned grouped by row group
  (clean_images) and put back in order: without that, 2000 rows in groups of 100 read a row group ~1900 times."""
  import pyarrow.parquet as pq  # pylint: disable=import-outside-toplevel
  image = _jpeg(0)
  table = af.hf_table([(image, f'p{i}.jpg') for i in range(2000)], {'label': [i % 2 for i in range(2000)]},
                      af.features(['cat', 'dog']))
  path = af.write_parquet(str(tmp_path / 'in' / 'train-00000-of-00001.parquet'), table, row_group_size=100)
  reads = []
  real = pq.ParquetFile.read_row_group

  def counted(self, i, *args, **kwargs):
    reads.append(i)
    return real(self, i, *args, **kwargs)

  monkeypatch.setattr(pq.ParquetFile, 'read_row_group', counted)
  ps._cache.clear()  # pylint: disable=protected-access
  out = str(tmp_path / 'out')
  summary = convert_dataset(None, out, parquet=path, num_workers=1, train_ratio=1.0, validation_ratio=0.0,
                            test_ratio=0.0)
  assert summary['splits']['train']['images'] == 2000
  assert len(set(reads)) == 20 and len(reads) <= 2 * 20, len(reads)  # 1906 reads in plan order
  order = [int(r['image/filename'][1:-4]) for r in drawn.records(out, 'train')]
  assert sorted(order) == list(range(2000)) and order != sorted(order)  # every row, still in the shuffled order
