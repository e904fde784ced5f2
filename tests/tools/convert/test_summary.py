"""tools/convert/summary.py: summary.json's counts as the shard writer reports each image, skipped file and shard,
the skipped files counted by kind, and the table the command prints (pure Python: no images, no TensorFlow)."""
import json

from tools.convert import summary as summary_lib
from tools.convert.sources import Item, Plan


def _plan() -> Plan:
  splits = {'train': [Item('r/cat/a.png', 'cat'), Item('r/dog/b.jpg', 'dog'), Item('r/dog/bad.jpg', 'dog')],
            'validation': [Item('r/cat/c.jpg', 'cat')], 'test': []}
  return Plan('class_folders', splits, ['cat', 'dog'], ['r/README.md'])


def test_the_summary_counts_what_the_writer_reports_and_prints_it_as_a_table():
  summary = summary_lib.new_summary(_plan(), 'r', 'out', (0.8, 0.1, 0.1), 0, 512)
  summary_lib.count_image(summary, 'train', ('cat',), 'r/cat/a.png', 'PNG/RGBA')
  summary_lib.count_image(summary, 'train', ('dog',), 'r/dog/b.jpg', None)
  summary_lib.add_skipped(summary, 'r/dog/bad.jpg', 'train', 'not an image Pillow can read')
  summary_lib.add_shard(summary, 'train', 'train-00000-of-00001', 2, 100, 'ab')
  summary_lib.count_image(summary, 'validation', ('cat',), 'r/cat/c.jpg', None)
  summary_lib.add_shard(summary, 'validation', 'validation-00000-of-00001', 1, 50, 'cd')
  assert summary['splits']['train'] == {'images': 2, 'shards': ['train-00000-of-00001'],
                                        'per_class': {'cat': 1, 'dog': 1}}
  assert summary['num_images'] == 3 and summary['labels'] == {'cat': 1, 'dog': 2}
  assert summary['converted'] == {'PNG/RGBA': {'count': 1, 'examples': ['r/cat/a.png']}}
  assert summary['shards']['validation-00000-of-00001'] == {'records': 1, 'bytes': 50, 'sha256': 'cd'}
  assert summary['skipped'] == [{'path': 'r/README.md', 'split': None, 'reason': 'not inside a class folder'},
                                {'path': 'r/dog/bad.jpg', 'split': 'train', 'reason': 'not an image Pillow can read'}]
  assert json.loads(json.dumps(summary)) == summary
  lines = summary_lib.format_summary(summary).splitlines()
  assert lines[0] == "Layout: class_folders, split {'train': 0.8, 'validation': 0.1, 'test': 0.1} seed 0"
  assert [line.split() for line in lines[1:6]] == [  # test wrote no shard: no column
      ['label', 'class', 'train', 'validation', 'total'], ['1', 'cat', '1', '1', '2'], ['2', 'dog', '1', '0', '1'],
      ['images', '2', '1', '3'], ['shards', '1', '1']]
  assert lines[6:] == ['Images longer than 512 px were resized to that longer side.',
                       'Re-encoded to RGB JPEG (quality 95): 1 x PNG/RGBA', 'Skipped 2 files:',
                       '  r/README.md: not inside a class folder', '  r/dog/bad.jpg: not an image Pillow can read']
  leaked = {'count': 0, 'dropped': 0, 'by_split_and_kind': {}, 'examples': []}
  summary_lib.finish(summary, leaked, 1.26)
  assert list(summary)[-4:] == ['max_image_side', 'leaked', 'skipped_counts', 'seconds']
  assert summary['skipped_counts'] == {'not inside a class folder': 1, 'not an image Pillow can read': 1}
  assert summary['seconds'] == 1.3 and summary_lib.format_summary(summary).splitlines() == lines


def test_skipped_files_are_counted_by_the_kind_of_reason():
  reasons = ["too small to crop (1x1 px; the trainer's crop needs at least 2 px a side)",
             'identical to an image of train: r/cat/a.jpg (--drop_leaked_images)', 'not inside a class folder',
             'not inside a class folder', 'OSError: image file is truncated']
  assert summary_lib.skipped_counts([{'path': 'p', 'split': None, 'reason': r} for r in reasons]) == {
      'too small to crop': 1, 'identical to an image of train': 1, 'not inside a class folder': 2, 'OSError': 1}
