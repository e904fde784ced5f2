"""Annotation tools' labels files as --labels_csv (tools/convert/label_exports.py via labels_csv.read): Label
Studio's CSV, JSON-MIN and JSON exports and CVAT's ImageNet txt give the same rows as a plain CSV, and an image
that matches no file, or several, is named with the fix. The files are written here in each tool's shape."""
import json
import os

import numpy as np
import pytest
from PIL import Image

from tools.convert import labels_csv
from tools.convert.conversion import convert_dataset

# Label Studio's metadata columns, as its CSV export writes them after the data and control-tag columns.
META = 'annotator,annotation_id,created_at,updated_at,lead_time'
META_ROW = '1,{n},2024-05-01T10:00:00Z,2024-05-01T10:00:00Z,3.2'


def _images(root, names):
  os.makedirs(root, exist_ok=True)
  for i, name in enumerate(names):
    path = os.path.join(root, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Image.fromarray(np.random.default_rng(i).integers(0, 256, (12, 16, 3), dtype=np.uint8)).save(path, 'JPEG')
  return str(root)


def _read(tmp_path, file_name: str, text: str, names=('cat1.jpg', 'dog1.jpg', 'owl1.jpg')):
  raw = _images(tmp_path / 'images', names)
  path = tmp_path / file_name
  path.write_text(text)
  files = sorted(os.path.join(d, f) for d, _, fs in os.walk(raw) for f in fs)
  rows, unnamed = labels_csv.read(str(path), raw, files)
  return {os.path.relpath(r.path, raw): (r.labels, r.split) for r in rows}, [os.path.basename(p) for p in unnamed]


def test_label_studio_csv_single_choice_uploads_urls_and_local_files(tmp_path):
  text = (f'image,id,choice,{META}\n'
          f'/data/upload/1/3f2a9b1c-cat1.jpg,1,Cat,{META_ROW.format(n=1)}\n'
          f'https://bucket.example.com/photos/dog1.jpg?X-Amz-Signature=ab,2,Dog,{META_ROW.format(n=2)}\n'
          f'/data/local-files/?d=owl1.jpg,3,Owl,{META_ROW.format(n=3)}\n')
  got, unnamed = _read(tmp_path, 'project-1-at-2024.csv', text)
  assert got == {'cat1.jpg': (('Cat',), None), 'dog1.jpg': (('Dog',), None), 'owl1.jpg': (('Owl',), None)}
  assert unnamed == []


def test_label_studio_csv_several_choices_as_quoted_json_make_multi_label_data(tmp_path):
  text = (f'image,id,choices,{META}\n'
          f'/data/upload/1/3f2a9b1c-cat1.jpg,1,"{{""choices"": [""cat"", ""indoor""]}}",{META_ROW.format(n=1)}\n'
          f'/data/upload/1/0badf00d-dog1.jpg,2,dog,{META_ROW.format(n=2)}\n')
  got, unnamed = _read(tmp_path, 'export.csv', text)
  assert got == {'cat1.jpg': (('cat', 'indoor'), None), 'dog1.jpg': (('dog',), None)} and unnamed == ['owl1.jpg']


def test_label_studio_csv_cut_at_the_commas_of_its_choices_asks_for_json_min(tmp_path):
  text = (f'image,id,choices,{META}\n'   # the unquoted JSON some versions write
          f'/data/upload/1/3f2a9b1c-cat1.jpg,1,{{"choices": ["cat", "indoor"]}},{META_ROW.format(n=1)}\n')
  with pytest.raises(ValueError, match=r'line 2 .*not whole JSON.*export JSON-MIN instead'):
    _read(tmp_path, 'export.csv', text)


def test_label_studio_json_min_reads_choice_and_choices(tmp_path):
  records = [{'image': '/data/upload/4/3f2a9b1c-cat1.jpg', 'id': 1, 'choice': 'Cat', 'annotator': 1,
              'annotation_id': 7, 'created_at': 'x', 'updated_at': 'x', 'lead_time': 1.5},
             {'image': '/data/upload/4/0badf00d-dog1.jpg', 'id': 2, 'choice': {'choices': ['Dog', 'Owl']},
              'annotator': 1, 'annotation_id': 8, 'created_at': 'x', 'updated_at': 'x', 'lead_time': 2.0}]
  got, _ = _read(tmp_path, 'project-4.json', json.dumps(records, indent=2))
  assert got == {'cat1.jpg': (('Cat',), None), 'dog1.jpg': (('Dog', 'Owl'), None)}


def _task(task_id, image, *annotations):
  return {'id': task_id, 'data': {'image': image}, 'predictions': [],
          'annotations': [{'id': 100 + task_id, 'was_cancelled': cancelled,
                           'result': [{'from_name': 'choice', 'to_name': 'image', 'type': 'choices',
                                       'value': {'choices': list(choices)}}]}
                          for choices, cancelled in annotations]}


def test_label_studio_json_tasks_read_their_annotations_and_skip_unlabelled_ones(tmp_path):
  tasks = [_task(1, '/data/upload/2/3f2a9b1c-cat1.jpg', (['Cat'], False), (['Cat'], False)),
           _task(2, '/data/upload/2/0badf00d-dog1.jpg', (['Owl'], True), (['Dog'], False)),   # one cancelled
           _task(3, '/data/upload/2/12345678-owl1.jpg')]                                      # not labelled
  got, unnamed = _read(tmp_path, 'project-2.json', json.dumps(tasks))
  assert got == {'cat1.jpg': (('Cat',), None), 'dog1.jpg': (('Dog',), None)} and unnamed == ['owl1.jpg']
  tasks[0] = _task(1, '/data/upload/2/3f2a9b1c-cat1.jpg', (['Cat'], False), (['Dog'], False))
  with pytest.raises(ValueError, match=r"1 tasks have annotations that disagree: item 1 \(task 1.*Settle them"):
    _read(tmp_path, 'project-2.json', json.dumps(tasks))


def test_a_label_studio_image_matching_no_file_or_several_is_named_with_the_fix(tmp_path):
  text = f'image,id,choice,{META}\n/data/upload/1/3f2a9b1c-cat1.jpg,1,Cat,{META_ROW.format(n=1)}\n'
  with pytest.raises(ValueError, match=r"match several files.*keep one file of each name.*"
                                       r"line 2 '/data/upload/1/3f2a9b1c-cat1.jpg' \(a/cat1.jpg, b/cat1.jpg\)"):
    _read(tmp_path, 'export.csv', text, names=('a/cat1.jpg', 'b/cat1.jpg'))
  with pytest.raises(ValueError, match=r"name no file .*Label Studio upload.*<8 hex>- upload prefix"):
    _read(tmp_path / 'other', 'export.csv', text, names=('dog1.jpg',))


def test_cvat_imagenet_txt_with_its_synsets_is_read_and_its_subset_is_the_split(tmp_path):
  (tmp_path / 'synsets.txt').write_text('cat\ndog\nowl\n')
  got, _ = _read(tmp_path, 'train.txt', 'cat1.jpg 0\ndog1 1\n"owl 1.jpg" 2 0\n',
                 names=('cat1.jpg', 'dog1.jpg', 'owl 1.jpg'))
  assert got == {'cat1.jpg': (('cat',), 'train'), 'dog1.jpg': (('dog',), 'train'),
                 'owl 1.jpg': (('owl', 'cat'), 'train')}
  with pytest.raises(ValueError, match=r"indices into .*synsets.txt \(3 classes\): line 1 'cat1.jpg 7'"):
    _read(tmp_path, 'default.txt', 'cat1.jpg 7\n')


def test_a_label_studio_json_export_converts_like_the_plain_csv(tmp_path):
  names = [f'{c}{i}.jpg' for i in range(4) for c in ('cat', 'dog')]
  raw = _images(tmp_path / 'images', names)
  tasks = [_task(i, f'/data/upload/1/{i:08x}-{n}', ([n[:3]], False)) for i, n in enumerate(names)]
  (tmp_path / 'export.json').write_text(json.dumps(tasks))
  (tmp_path / 'plain.csv').write_text('image,label\n' + ''.join(f'{n},{n[:3]}\n' for n in names))
  kw = dict(num_workers=1, train_ratio=0.5, validation_ratio=0.5, test_ratio=0.0)
  a = convert_dataset(raw, str(tmp_path / 'a'), labels_csv_path=str(tmp_path / 'export.json'), **kw)
  b = convert_dataset(raw, str(tmp_path / 'b'), labels_csv_path=str(tmp_path / 'plain.csv'), **kw)
  assert a['splits'] == b['splits'] and a['task'] == 'single_label'
  for name in sorted(os.listdir(tmp_path / 'b')):
    if name.startswith(('train', 'validation')):
      assert (tmp_path / 'a' / name).read_bytes() == (tmp_path / 'b' / name).read_bytes(), name
