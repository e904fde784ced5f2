"""A labels CSV as the converter's input (tools/convert/labels_csv.py, imagenet_to_gcs --labels_csv): the rows'
files, labels and splits, every bad row named before anything is written, and the same records as class folders."""
import csv
import json
import os

import numpy as np
import pytest
from PIL import Image

from tools.convert import labels_csv
from tools.convert import summary as summary_lib
from tools.convert.conversion import convert_dataset


def _image(path: str, seed: int) -> str:
  os.makedirs(os.path.dirname(path), exist_ok=True)
  Image.fromarray(np.random.default_rng(seed).integers(0, 256, (12, 16, 3), dtype=np.uint8)).save(path, 'JPEG')
  return path


def _csv(path, rows, header=('image_name', 'tags')) -> str:
  with open(path, 'w', newline='') as f:
    writer = csv.writer(f)
    writer.writerow(header)
    writer.writerows(rows)
  return str(path)


def _flat(root, n: int = 12, classes=('cat', 'dog', 'owl')):
  """n JPEGs train_<i>.jpg in one folder, and rows (name without extension, class) as Kaggle writes them."""
  rows = []
  for i in range(n):
    _image(os.path.join(root, f'train_{i}.jpg'), i)
    rows.append((f'train_{i}', classes[i % len(classes)]))
  return str(root), rows


def _convert(raw, out, csv_path, **kw):
  return convert_dataset(raw, str(out), num_workers=1, labels_csv_path=csv_path, **kw)


def test_a_csv_of_names_without_extension_converts_with_its_labels_split_per_class(tmp_path):
  raw, rows = _flat(tmp_path / 'images')
  summary = _convert(raw, tmp_path / 'out', _csv(tmp_path / 'train.csv', rows), train_ratio=0.5,
                     validation_ratio=0.25, test_ratio=0.25)
  assert summary['layout'] == 'labels_csv' and summary['task'] == 'single_label'
  assert summary['labels'] == {'cat': 1, 'dog': 2, 'owl': 3}
  assert (tmp_path / 'out' / 'labels.txt').read_text() == 'cat\ndog\nowl\n'
  for split, per_class in (('train', 2), ('validation', 1), ('test', 1)):  # 4 a class: stratified by the ratios
    assert summary['splits'][split]['per_class'] == {'cat': per_class, 'dog': per_class, 'owl': per_class}
  assert summary['num_images'] == 12 and summary['skipped'] == []


def test_a_split_column_keeps_its_split_and_unnamed_files_are_skipped_and_reported(tmp_path):
  raw, rows = _flat(tmp_path / 'images', n=6)
  _image(os.path.join(raw, 'extra', 'unlabelled.jpg'), 99)
  splits = ['train', 'train', 'train', 'val', 'validation', 'TEST']
  path = _csv(tmp_path / 'labels.csv', [(f'./{name}.jpg', label, split) for (name, label), split in zip(rows, splits)],
              header=('file', 'label', 'Split'))
  summary = _convert(raw, tmp_path / 'out', path)
  assert summary['layout'] == 'labels_csv_splits' and summary['split_ratios'] is None
  assert [summary['splits'][s]['images'] for s in ('train', 'validation', 'test')] == [3, 2, 1]
  assert summary['skipped'] == [{'path': os.path.join(raw, 'extra', 'unlabelled.jpg'), 'split': None,
                                 'reason': 'not named in the labels CSV'}]


def test_named_columns_and_class_numbers_in_numeric_order(tmp_path):
  raw, rows = _flat(tmp_path / 'images', n=4)
  path = _csv(tmp_path / 'labels.csv', [('x', label, name) for (name, _), label in zip(rows, ['2', '10', '2', '10'])],
              header=('note', 'Target', 'Id'))
  summary = _convert(raw, tmp_path / 'out', path, csv_columns=labels_csv.Columns(path='Id', label='Target'),
                     train_ratio=0.5, validation_ratio=0.5, test_ratio=0.0)
  assert summary['labels'] == {'2': 1, '10': 2}


def test_a_csv_naming_class_folder_files_makes_the_same_records_as_the_folders(tmp_path):
  """The CSV route and the class-folder route share the split and the writer: the same images, labels and seed
  give byte-identical shards, so training on either gives the same model."""
  raw = tmp_path / 'folders'
  rows = []
  for c, name in enumerate(('ant', 'bee')):
    for i in range(5):
      _image(os.path.join(raw, name, f'{name}_{i}.jpg'), 10 * c + i)
      rows.append((f'{name}/{name}_{i}.jpg', name))
  by_folder = convert_dataset(str(raw), str(tmp_path / 'a'), num_workers=1, seed=3)
  by_csv = _convert(str(raw), tmp_path / 'b', _csv(tmp_path / 'labels.csv', rows), seed=3)
  assert by_folder['shards'] and by_folder['shards'] == by_csv['shards']  # names, record counts, bytes, SHA-256
  assert by_folder['labels'] == by_csv['labels']


@pytest.mark.parametrize('rows,message', [
    ([('train_0', 'cat'), ('nope', 'dog')],
     r"1 rows name no file under .*images \(as written, nor with an image extension: .*\): line 3 'nope'"),
    ([('train_0', 'cat'), ('train_0.jpg', 'dog')], r'1 files are named twice .*train_0.jpg on lines 2 and 3'),
    ([('train_0', 'cat'), ('train_1', '')], r"1 rows have an empty 'tags' cell \(in single-label data .*"
                                             r"--csv_multi_label\): line 3 \(train_1\)"),
    ([('train_0', 'cat'), ('train_1', 'dog cat dog')], r'1 rows name a label twice: line 3 \(train_1: dog cat dog\)'),
    ([('train_0',)], r'1 rows with fewer cells than the header \(2\): line 2 has 1 cells'),
])
def test_bad_rows_are_named_and_nothing_is_written(tmp_path, rows, message):
  raw, _ = _flat(tmp_path / 'images', n=2)
  out = tmp_path / 'out'
  with pytest.raises(ValueError, match=message + r'.*Nothing was written'):
    _convert(raw, out, _csv(tmp_path / 'labels.csv', rows))
  assert not out.exists()


def test_a_name_matching_two_files_asks_for_the_extension(tmp_path):
  raw = str(tmp_path / 'images')
  _image(os.path.join(raw, 'a.jpg'), 1)
  _image(os.path.join(raw, 'a.jpeg'), 2)
  with pytest.raises(ValueError, match=r"1 rows name several files \(give the extension\): line 2 'a' "
                                       r"\(a.jpeg, a.jpg\)"):
    _convert(raw, tmp_path / 'out', _csv(tmp_path / 'labels.csv', [('a', 'x')]))


def test_unknown_columns_and_splits_name_what_is_there(tmp_path):
  raw, rows = _flat(tmp_path / 'images', n=2)
  path = _csv(tmp_path / 'labels.csv', rows)
  with pytest.raises(ValueError, match=r"no column 'label' \(--csv_label_column\); its columns are "
                                       r"\['image_name', 'tags'\]"):
    _convert(raw, tmp_path / 'out', path, csv_columns=labels_csv.Columns(label='label'))
  bad = _csv(tmp_path / 'split.csv', [(n, l, 'holdout') for n, l in rows], header=('image', 'label', 'split'))
  with pytest.raises(ValueError, match=r"2 rows have an unknown 'split' value \(use train, training, val, valid, "
                                       r"validation, dev, test, testing\): line 2 'holdout'"):
    _convert(raw, tmp_path / 'out', bad)


def test_a_label_column_of_unique_values_is_refused_unless_allowed(tmp_path):
  raw, rows = _flat(tmp_path / 'images', n=20)
  path = _csv(tmp_path / 'labels.csv', [(name, f'caption {i}'.replace(' ', '_')) for i, (name, _) in enumerate(rows)])
  with pytest.raises(ValueError, match=r"column 'tags' has 20 different labels over 20 rows, more than half the rows: "
                                       r'is it the label column\?.*--max_classes=20'):
    _convert(raw, tmp_path / 'out', path)
  with pytest.raises(ValueError, match=r'more than --max_classes=5'):
    _convert(raw, tmp_path / 'out', path, max_classes=5)
  summary = _convert(raw, tmp_path / 'out', path, max_classes=20)
  assert summary['num_classes'] == 20


def test_a_split_column_between_path_and_label_is_not_taken_for_the_labels(tmp_path):
  raw, rows = _flat(tmp_path / 'images', n=6)
  splits = ['train', 'train', 'train', 'train', 'validation', 'test']
  path = _csv(tmp_path / 'labels.csv', [(n, s, l) for (n, l), s in zip(rows, splits)],
              header=('image', 'split', 'label'))
  summary = _convert(raw, tmp_path / 'out', path)
  assert summary['labels'] == {'cat': 1, 'dog': 2, 'owl': 3} and summary['layout'] == 'labels_csv_splits'
  label_first = _csv(tmp_path / 'first.csv', [(l, n) for n, l in rows], header=('label', 'image'))
  summary = _convert(raw, tmp_path / 'out2', label_first, csv_columns=labels_csv.Columns(label='label'))
  assert summary['labels'] == {'cat': 1, 'dog': 2, 'owl': 3}  # the path is the other column, not 'label' again
  with pytest.raises(ValueError, match=r"one column \('image'\) is named for two roles"):
    _convert(raw, tmp_path / 'out3', path, csv_columns=labels_csv.Columns(path='image', label='image'))


def test_names_without_extension_match_images_only_and_windows_paths_are_read(tmp_path):
  raw = str(tmp_path / 'images')
  _image(os.path.join(raw, 'sub', 'a0.jpg'), 1)
  _image(os.path.join(raw, 'sub', 'b0.JPEG'), 2)
  with open(os.path.join(raw, 'sub', 'a0.json'), 'w') as f:  # a sidecar beside its image
    f.write('{}')
  rows, unnamed = labels_csv.read(_csv(tmp_path / 'labels.csv', [('sub\\a0', 'x'), ('sub/b0', 'y')]), raw,
                                  [os.path.join(raw, 'sub', n) for n in ('a0.jpg', 'a0.json', 'b0.JPEG')])
  assert [(os.path.basename(r.path), r.label) for r in rows] == [('a0.jpg', 'x'), ('b0.JPEG', 'y')]
  assert unnamed == [os.path.join(raw, 'sub', 'a0.json')]


def test_a_csv_that_is_not_utf8_is_named_with_the_fix(tmp_path):
  raw, _ = _flat(tmp_path / 'images', n=2)
  path = tmp_path / 'labels.csv'
  path.write_bytes('image,label\ntrain_0,caf\xe9\n'.encode('cp1252'))
  with pytest.raises(ValueError, match=r'labels.csv is not UTF-8 text .*save it as UTF-8'):
    _convert(raw, tmp_path / 'out', str(path))


def test_class_numbers_sort_as_numbers_and_ties_keep_one_order():
  assert labels_csv.sorted_class_names(['10', '2', '01', '1']) == ['01', '1', '2', '10']
  assert labels_csv.sorted_class_names(['b', '10', '2']) == ['10', '2', 'b']
  assert labels_csv.sorted_class_names(['\u00b2', '1']) == ['1', '\u00b2']  # a superscript digit is not a number


def _planet(root, n: int = 60):
  """A Planet-shaped folder and CSV: names without extension, space-separated tags; 'haze' on 10 images only (a
  rare label), 'clear' on most, 'water' on some, and every 12th image with no tags (a negative)."""
  rows = []
  for i in range(n):
    _image(os.path.join(root, f'train_{i}.jpg'), i)
    tags = [] if i % 12 == 11 else ['clear'] + (['water'] if i % 3 == 0 else []) + (['haze'] if i < 10 else [])
    rows.append((f'train_{i}', ' '.join(tags)))
  return str(root), rows


def _record_labels(path):
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  return [tuple(tf.train.Example.FromString(r).features.feature['image/class/label'].int64_list.value)
          for r in tf.data.TFRecordDataset(path).as_numpy_iterator()]


def test_a_multi_label_csv_converts_with_label_lists_negatives_and_stratified_splits(tmp_path):
  raw, rows = _planet(tmp_path / 'images')
  summary = _convert(raw, tmp_path / 'out', _csv(tmp_path / 'train.csv', rows))
  assert summary['task'] == 'multi_label' and summary['labels'] == {'clear': 1, 'haze': 2, 'water': 3}
  splits = summary['splits']
  assert [splits[s]['images'] for s in ('train', 'validation', 'test')] == [48, 6, 6]
  # The rare label reaches validation and test: 10 images at 0.8/0.1/0.1 are 8/1/1 (iterative stratification).
  assert [splits[s]['per_class']['haze'] for s in ('train', 'validation', 'test')] == [8, 1, 1]
  assert sum(splits[s]['per_class']['water'] for s in splits) == 20
  assert sum(splits[s]['negatives'] for s in splits) == 5 and summary['num_images'] == 60
  written = [labels for s in ('train', 'validation', 'test')
             for shard in splits[s]['shards'] for labels in _record_labels(str(tmp_path / 'out' / shard))]
  expected = sorted(tuple(sorted(summary['labels'][t] for t in tags.split())) for _, tags in rows)
  assert sorted(tuple(sorted(labels)) for labels in written) == expected   # every image's labels, negatives empty
  table = summary_lib.format_summary(summary)
  assert 'multi-label: an image counts under each of its labels' in table
  assert [line.split() for line in table.splitlines() if line.strip().startswith(('no label', 'images'))] == [
      ['no', 'label', str(splits['train']['negatives']), str(splits['validation']['negatives']),
       str(splits['test']['negatives']), '5'], ['images', '48', '6', '6', '60']]
  from official_input import dataset_info  # pylint: disable=import-outside-toplevel
  info = dataset_info.read_dataset_info(str(tmp_path / 'out'))   # what the trainer reads: the task, the positives
  assert info.task == 'multi_label' and info.num_train_images == 48
  assert dict(zip(info.class_names, info.train_class_counts)) == splits['train']['per_class']


def test_json_lines_of_the_same_rows_write_the_same_shards_as_the_csv(tmp_path):
  raw, rows = _planet(tmp_path / 'images')
  with open(tmp_path / 'train.jsonl', 'w') as f:
    for i, (name, tags) in enumerate(rows):   # label lists ([] a negative), keys in any order, a blank line
      f.write(json.dumps({'tags': tags.split(), 'image_name': name} if i % 2 else
                         {'image_name': name, 'tags': tags.split()}) + ('\n\n' if i == 7 else '\n'))
  from_csv = _convert(raw, tmp_path / 'a', _csv(tmp_path / 'train.csv', rows))
  from_json = _convert(raw, tmp_path / 'b', str(tmp_path / 'train.jsonl'))
  assert from_json['task'] == 'multi_label' and from_json['splits'] == from_csv['splits']
  for shard in (s for split in from_csv['splits'].values() for s in split['shards']):
    assert (tmp_path / 'a' / shard).read_bytes() == (tmp_path / 'b' / shard).read_bytes()
  (tmp_path / 'bad.jsonl').write_text('{"image_name": "train_0", "tags": []}\n["train_1"]\n{"image_name": \n')
  with pytest.raises(ValueError, match=r'2 lines are not JSON objects .*line 2 \(a list, not an object\); line 3'):
    _convert(raw, tmp_path / 'c', str(tmp_path / 'bad.jsonl'))
  assert not (tmp_path / 'c').exists() or not os.listdir(tmp_path / 'c')


def test_csv_multi_label_keeps_negatives_where_no_row_has_several_labels(tmp_path):
  raw, _ = _flat(tmp_path / 'images', n=4)
  rows = [('train_0', 'cat'), ('train_1', ''), ('train_2', 'dog'), ('train_3', 'cat')]
  summary = _convert(raw, tmp_path / 'out', _csv(tmp_path / 'labels.csv', rows), multi_label=True,
                     train_ratio=0.5, validation_ratio=0.5, test_ratio=0.0)
  assert summary['task'] == 'multi_label' and sum(summary['splits'][s]['negatives'] for s in summary['splits']) == 1


def _read_text(tmp_path, text: str, newline: str = '\n', encoding: str = 'utf-8', n: int = 4):
  """labels_csv.read of a CSV written as given, against train_0..train_{n-1}.jpg."""
  raw, _ = _flat(tmp_path / 'images', n)
  path = tmp_path / 'labels.csv'
  path.write_bytes(text.replace('\n', newline).encode(encoding))
  files = sorted(os.path.join(raw, f) for f in os.listdir(raw))
  rows, _ = labels_csv.read(str(path), raw, files)
  return {os.path.basename(r.path): (r.labels, r.split) for r in rows}


def test_excel_csvs_with_a_bom_semicolons_or_tabs_and_crlf(tmp_path):
  want = {'train_0.jpg': (('cat',), None), 'train_1.jpg': (('dog',), None)}
  for separator in (';', '\t', ','):
    text = f'image{separator}label\ntrain_0{separator}cat\ntrain_1{separator}dog\n'
    assert _read_text(tmp_path, text, '\r\n', 'utf-8-sig') == want, separator


def test_one_hot_columns_as_kaggle_and_roboflow_export_them(tmp_path):
  got = _read_text(tmp_path, 'image_id,healthy,rust,scab\ntrain_0,1,0,0\ntrain_1,0,0,1\ntrain_2,0,1,0\n')
  assert got == {'train_0.jpg': (('healthy',), None), 'train_1.jpg': (('scab',), None),
                 'train_2.jpg': (('rust',), None)}
  got = _read_text(tmp_path, 'filename, cat, dog, owl\ntrain_0.jpg, 1, 1, 0\ntrain_1.jpg, 0, 0, 0\n'
                             'train_2.jpg, 0, 0, 1\n')   # Roboflow's _classes.csv: multi-label, a negative
  assert got == {'train_0.jpg': (('cat', 'dog'), None), 'train_1.jpg': ((), None), 'train_2.jpg': (('owl',), None)}
  with pytest.raises(ValueError, match=r"empty 'healthy' cell.*\(no column is 1\)"):
    _read_text(tmp_path, 'image_id,healthy,rust\ntrain_0,1,0\ntrain_1,0,0\n')


def test_fastais_is_valid_column_is_the_split(tmp_path):
  got = _read_text(tmp_path, 'fname,labels,is_valid\ntrain_0.jpg,cat,False\ntrain_1.jpg,dog owl,True\n')
  assert got == {'train_0.jpg': (('cat',), 'train'), 'train_1.jpg': (('dog', 'owl'), 'validation')}
  with pytest.raises(ValueError, match=r"unknown 'is_valid' value \(use True or False\)"):
    _read_text(tmp_path, 'fname,labels,is_valid\ntrain_0.jpg,cat,maybe\n')
