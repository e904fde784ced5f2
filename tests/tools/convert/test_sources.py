"""tools/convert/sources.py: the layouts found (class folders, split folders, ImageNet), what is refused with what
was expected, seeded splits, and links followed once per real folder and file."""
import os

import pytest

from tests.tools.convert import drawn_images as drawn
from tools.convert.conversion import convert_dataset
from tools.convert.sources import plan_conversion
from tools.convert.splits import SPLITS


def test_split_is_deterministic_for_a_seed(tmp_path):
  for c in ('a', 'b', 'c'):
    for i in range(20):
      os.makedirs(tmp_path / c, exist_ok=True)
      (tmp_path / c / f'{i}.jpg').write_bytes(b'x')  # Planning never opens the files.
  plan = lambda seed: {s: [i.path for i in items] for s, items in plan_conversion(str(tmp_path), seed=seed)
                       .splits.items()}
  assert plan(0) == plan(0)
  assert plan(0)['validation'] != plan(1)['validation']
  assert [len(plan(0)[s]) for s in SPLITS] == [48, 6, 6]  # Stratified: 16/2/2 of each class.
  assert plan(0)['validation'] == sorted(plan(0)['validation'])


def test_split_folders_layout_with_val_keeps_the_split(tmp_path):
  root = tmp_path / 'data'
  drawn.rgb_jpegs(str(root / 'train' / 'b'), 3)
  drawn.rgb_jpegs(str(root / 'train' / 'a'), 2)
  drawn.rgb_jpegs(str(root / 'train' / 'c'), 1)  # Only in train: still labelled over the union.
  drawn.rgb_jpegs(str(root / 'val' / 'a'), 2)
  drawn.rgb_jpegs(str(root / 'val' / 'b'), 1)
  drawn.rgb_jpegs(str(root / 'test' / 'b'), 2)
  (root / 'val' / 'notes.txt').write_text('outside any class folder')
  summary = convert_dataset(str(root), str(tmp_path / 'out'), num_workers=1)
  assert [os.path.basename(s['path']) for s in summary['skipped']] == ['notes.txt']
  assert summary['layout'] == 'split_folders'
  assert summary['labels'] == {'a': 1, 'b': 2, 'c': 3}
  assert [summary['splits'][s]['images'] for s in SPLITS] == [6, 3, 2]
  assert summary['splits']['validation']['shards'] == ['validation-00000-of-00001']
  validation = drawn.records(str(tmp_path / 'out'), 'validation')
  assert [(r['image/class/text'], r['image/class/label']) for r in validation] == [(b'a', 1), (b'a', 1), (b'b', 2)]


def test_imagenet_layout_pairs_sorted_validation_files_with_synset_labels(tmp_path):
  root = tmp_path / 'imagenet'
  drawn.rgb_jpegs(str(root / 'train' / 'n02'), 2, ext='.JPEG')
  drawn.rgb_jpegs(str(root / 'train' / 'n01'), 2, ext='.JPEG')
  for i in (3, 1, 2):
    drawn.save(drawn.noise(8, 8, i), str(root / 'validation' / f'ILSVRC2012_val_{i:08d}.JPEG'), 'JPEG')
  (root / 'synset_labels.txt').write_text('n02\nn01\nn02\n')
  summary = convert_dataset(str(root), str(tmp_path / 'out'), num_workers=1)
  assert summary['layout'] == 'imagenet'
  validation = drawn.records(str(tmp_path / 'out'), 'validation')
  assert [r['image/filename'] for r in validation] == [b'ILSVRC2012_val_%08d.JPEG' % i for i in (1, 2, 3)]
  assert [r['image/class/label'] for r in validation] == [2, 1, 2]
  assert {r['image/class/label'] for r in drawn.records(str(tmp_path / 'out'), 'train')} == {1, 2}
  (root / 'synset_labels.txt').write_text('n02\nn01\n')
  with pytest.raises(ValueError, match='has 2 labels but'):
    plan_conversion(str(root))
  (root / 'synset_labels.txt').unlink()
  with pytest.raises(ValueError, match='synset_labels.txt is missing'):
    plan_conversion(str(root))


@pytest.mark.parametrize('dirs, message', [
    ((), 'no subfolders'),
    (('cats', 'train/x'), 'ambiguous'),
    (('train/x', 'val/x', 'validation/x'), 'has val/ and validation/, both validation folders'),
    (('train/x', 'Training/x'), 'has Training/ and train/, both train folders'),
    (('cats', 'dogs'), 'no files'),
])
def test_ambiguous_or_empty_input_says_what_was_expected(tmp_path, dirs, message):
  for d in dirs:
    os.makedirs(tmp_path / 'raw' / d)
  if dirs and dirs[0].startswith('train/'):
    drawn.rgb_jpegs(str(tmp_path / 'raw' / 'train' / 'x'), 1)
  os.makedirs(tmp_path / 'raw', exist_ok=True)
  with pytest.raises(ValueError, match=message):
    plan_conversion(str(tmp_path / 'raw'))


def test_links_are_followed_once_per_real_folder_and_file_and_loops_are_named(tmp_path):
  root = tmp_path / 'raw'
  drawn.rgb_jpegs(str(root / 'cat'), 5)
  drawn.rgb_jpegs(str(root / 'dog'), 5, seed=50)
  os.symlink('..', root / 'cat' / 'all')                                  # back to the dataset: a loop
  os.symlink(root / 'dog' / 'dog_00.jpg', root / 'cat' / 'also_dog.jpg')  # one file under two classes
  summary = convert_dataset(str(root), str(tmp_path / 'out'), num_workers=1)
  assert summary['num_images'] == 10
  skipped = {os.path.relpath(e['path'], root): e['reason'] for e in summary['skipped']}
  assert skipped[os.path.join('cat', 'all')].startswith('a link to a folder read already')
  assert skipped[os.path.join('cat', 'also_dog.jpg')] == f'a second way to one file (a link): {root}/dog/dog_00.jpg'
  assert summary['skipped_counts'] == {'a link to a folder read already': 1, 'a second way to one file': 1}


def test_kaggles_training_and_testing_folders_are_split_folders_in_any_case(tmp_path):
  """Kaggle's image sets often come as Training/ and Testing/ of class folders: the split words are one list
  (tools/convert/splits.SPLIT_WORDS), read in any case, here as in file names and split columns."""
  for split in ('Training', 'Testing'):
    for c in ('cat', 'dog'):
      drawn.rgb_jpegs(str(tmp_path / 'raw' / split / c), 2, seed=len(split) + len(c))
  plan = plan_conversion(str(tmp_path / 'raw'))
  assert plan.layout == 'split_folders' and plan.class_names == ['cat', 'dog']
  assert {s: len(items) for s, items in plan.splits.items()} == {'train': 4, 'validation': 0, 'test': 4}


def test_a_class_named_for_a_split_stays_a_class_and_split_names_without_classes_are_refused(tmp_path):
  """Split folders hold class folders; a vehicle data set's train/ beside bus/ and car/ holds images: a class.
  Only split-named folders, each holding images directly, are refused: their labels are missing."""
  for i, c in enumerate(('bus', 'car', 'train')):
    drawn.rgb_jpegs(str(tmp_path / 'vehicles' / c), 5, seed=10 * i)
  plan = plan_conversion(str(tmp_path / 'vehicles'))
  assert plan.layout == 'class_folders' and plan.class_names == ['bus', 'car', 'train']
  assert sum(map(len, plan.splits.values())) == 15
  for i, d in enumerate(('Train', 'Test')):
    drawn.rgb_jpegs(str(tmp_path / 'flat' / d), 2, seed=10 * i)
  with pytest.raises(ValueError, match=r'only folders named for splits \(Test/, Train/\).*labels are missing'):
    plan_conversion(str(tmp_path / 'flat'))


def test_roboflows_folder_export_with_valid_keeps_the_split(tmp_path):
  """Roboflow's classification export as folders: train/, valid/ and test/, each of class folders."""
  for split in ('train', 'valid', 'test'):
    for c in ('cat', 'dog'):
      os.makedirs(tmp_path / split / c)
      (tmp_path / split / c / f'{split}.jpg').write_bytes(b'x')
  plan = plan_conversion(str(tmp_path))
  assert plan.layout == 'split_folders' and {s: len(plan.splits[s]) for s in SPLITS} == {
      'train': 2, 'validation': 2, 'test': 2}
  assert plan.splits['validation'][0].path.endswith('valid/cat/valid.jpg')


def test_roboflows_csv_export_is_refused_with_the_fix(tmp_path):
  for split in ('train', 'valid'):
    os.makedirs(tmp_path / split)
    (tmp_path / split / 'a.jpg').write_bytes(b'x')
    (tmp_path / split / '_classes.csv').write_text('filename, cat, dog\na.jpg, 1, 0\n')
  with pytest.raises(ValueError, match="Roboflow's CSV export.*'Folder Structure'.*--labels_csv=.*_classes.csv"):
    plan_conversion(str(tmp_path))
