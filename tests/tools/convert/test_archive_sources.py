"""The same images three ways: split folders, WebDataset tar shards (a brace range of train shards and a val shard)
and Hugging Face Parquet files (the Hub's data/<split>-0000N-of-0000M.parquet, ClassLabel names in the metadata):
the converter writes the same records (the same JPEG bytes, so the same decoded pixels, labels, class names, sizes
and file names) and reports the same checks (an undecodable file, one too small to crop, a validation copy of a
training image). Then a tiny run trains on the WebDataset and the Parquet records and predicts, as the README's
commands do (slow)."""
import csv
import io
import os

import pytest
from PIL import Image

from tests.tools.convert import archive_files
from tests.tools.convert import drawn_images as drawn
from tools.convert.conversion import convert_dataset
from tools.convert.splits import SPLITS

CLASSES = ('cat', 'dog')


def _jpeg(img: Image.Image, fmt: str = 'JPEG') -> bytes:
  out = io.BytesIO()
  img.save(out, fmt)
  return out.getvalue()


def _images():
  """{split: [(class, file name, bytes)]}: RGB JPEGs, a PNG and a transparent PNG (re-encoded), an undecodable
  file, a 1x1 image (too small) and, in validation, a byte copy of a training image (a leak)."""
  made = {'train': [], 'validation': []}
  for c, name in enumerate(CLASSES):
    for i in range(5):
      made['train'].append((name, f'{name}_{i:02d}.jpg', _jpeg(drawn.noise(20 + i, 24, 10 * c + i))))
    for i in range(2):
      made['validation'].append((name, f'{name}_v{i}.jpg', _jpeg(drawn.noise(22, 26 + i, 100 + 10 * c + i))))
  made['train'].append(('cat', 'plain.png', _jpeg(drawn.noise(18, 21, 7), 'PNG')))
  made['train'].append(('dog', 'logo.png', _jpeg(Image.new('RGBA', (19, 17), (0, 0, 255, 0)), 'PNG')))
  made['train'].append(('dog', 'broken.jpg', made['train'][0][2][:200]))
  made['train'].append(('cat', 'pixel.gif', _jpeg(Image.new('RGB', (1, 1)), 'GIF')))
  made['validation'].append(('dog', 'copy.jpg', made['train'][3][2]))
  return made


@pytest.fixture(scope='module')
def three_ways(tmp_path_factory):
  """The images as split folders, WebDataset shards and Parquet files, each converted (1 worker: planning and
  cleaning run in this process as in the workers)."""
  root = tmp_path_factory.mktemp('three_ways')
  made = _images()
  for split, images in made.items():
    for name, file_name, data in images:
      path = root / 'folders' / split / name / file_name
      path.parent.mkdir(parents=True, exist_ok=True)
      path.write_bytes(data)
  shard = {'train': lambda i: f'train-{i % 2:06d}.tar', 'validation': lambda i: 'val-000000.tar'}
  for split, images in made.items():
    by_shard = {}
    for i, (name, file_name, data) in enumerate(images):
      stem, ext = file_name.rsplit('.', 1)
      by_shard.setdefault(shard[split](i), []).extend(
          archive_files.sample(f'{name}/{stem}', data, ext, txt=name))
    for shard_name, members in by_shard.items():
      archive_files.write_tar(str(root / 'wds' / shard_name), members)
  feature_json = archive_files.features(CLASSES)
  for split, images in made.items():
    parts = [images[0::2], images[1::2]] if split == 'train' else [images]
    for i, part in enumerate(parts):
      table = archive_files.hf_table([(data, file_name) for _, file_name, data in part],
                                     {'label': [CLASSES.index(name) for name, _, _ in part]}, feature_json)
      archive_files.write_parquet(str(root / 'hub' / 'data' / f'{split}-{i:05d}-of-{len(parts):05d}.parquet'), table,
                                  row_group_size=2)
  sources = {'folders': dict(raw_data_dir=str(root / 'folders')),
             'webdataset': dict(raw_data_dir=None, webdataset=f'{root}/wds/train-{{000000..000001}}.tar,'
                                                             f'{root}/wds/val-*.tar'),
             'parquet': dict(raw_data_dir=None, parquet=str(root / 'hub'))}
  out = {}
  for kind, source in sources.items():
    out_dir = str(root / f'out_{kind}')
    out[kind] = (out_dir, convert_dataset(output_dir=out_dir, num_workers=1, **source))
  return out


def _records(out_dir: str, split: str):
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  rows = []
  for r in drawn.records(out_dir, split):
    pixels = tf.io.decode_jpeg(r['image/encoded'], channels=3).numpy()
    rows.append((r['image/filename'], int(r['image/class/label']), r['image/class/text'], r['image/height'],
                 r['image/width'], r['image/encoded'], pixels.tobytes()))
  return sorted(rows)


def test_the_three_sources_write_the_same_records(three_ways):
  folders = three_ways['folders'][0]
  for split in SPLITS:
    expected = _records(folders, split)
    assert len(expected) == {'train': 12, 'validation': 5, 'test': 0}[split]
    for kind in ('webdataset', 'parquet'):
      got = _records(three_ways[kind][0], split)
      assert [r[:5] for r in got] == [r[:5] for r in expected], (kind, split)
      assert [r[5] for r in got] == [r[5] for r in expected], (kind, split)   # the same JPEG bytes
      assert [r[6] for r in got] == [r[6] for r in expected], (kind, split)   # so the same decoded pixels
    with open(os.path.join(three_ways['webdataset'][0], 'labels.txt')) as f:
      assert f.read() == 'cat\ndog\n'


def test_the_three_sources_report_the_same_checks(three_ways):
  summaries = {kind: summary for kind, (_, summary) in three_ways.items()}
  assert {k: s['layout'] for k, s in summaries.items()} == {
      'folders': 'split_folders', 'webdataset': 'webdataset_splits', 'parquet': 'parquet_splits'}
  for kind, summary in summaries.items():
    assert {s: summary['splits'][s]['per_class'] for s in SPLITS} == {
        'train': {'cat': 6, 'dog': 6}, 'validation': {'cat': 2, 'dog': 3}, 'test': {'cat': 0, 'dog': 0}}, kind
    reasons = sorted((os.path.basename(s['path']), s['split'], s['reason']) for s in summary['skipped'])
    assert [r[:2] for r in reasons] == [('broken.jpg', 'train'), ('pixel.gif', 'train')], kind
    assert reasons == sorted((os.path.basename(s['path']), s['split'], s['reason'])
                             for s in summaries['folders']['skipped']), kind
    assert summary['skipped_counts'] == summaries['folders']['skipped_counts'], kind
    assert summary['converted'].keys() == summaries['folders']['converted'].keys(), kind
    leaked = summary['leaked']
    assert leaked['count'] == 1 and os.path.basename(leaked['examples'][0]['path']) == 'copy.jpg', kind
    assert os.path.basename(leaked['examples'][0]['same_as']) == 'cat_03.jpg', kind
  wds_paths = [s['path'] for s in summaries['webdataset']['skipped']]
  assert any(p.endswith('wds/train-000000.tar/dog/broken.jpg') or p.endswith('wds/train-000001.tar/dog/broken.jpg')
             for p in wds_paths)  # a sample is named by its shard and member


@pytest.mark.slow
def test_webdataset_and_parquet_records_train_and_predict(three_ways, tmp_path):
  """README's commands on each source's records: train_and_eval a few steps, then predict the validation split."""
  from tests.helpers import cli  # pylint: disable=import-outside-toplevel
  base = ('--resnet_depth=10', '--image_size=32', '--precision=float32', '--train_batch_size=4',
          '--eval_batch_size=4', '--predict_batch_size=4', '--use_tpu=false', '--skip_train_summaries=true')
  for kind in ('webdataset', 'parquet'):
    data_dir, model_dir = three_ways[kind][0], str(tmp_path / kind)
    result = cli.run_in_process('--config_file=small_data', '--mode=train_and_eval', f'--data_dir={data_dir}',
                                f'--model_dir={model_dir}', '--train_steps=2', '--steps_per_eval=2', base=base)
    assert result.code == 0, result.log
    output = str(tmp_path / f'{kind}.csv')
    result = cli.run_in_process('--mode=predict', f'--model_dir={model_dir}', f'--predict_output={output}', base=())
    assert result.code == 0, result.log
    with open(output) as f:
      rows = list(csv.DictReader(f))
    assert len(rows) == 5 and {r['true_class'] for r in rows} <= set(CLASSES), rows[:1]
