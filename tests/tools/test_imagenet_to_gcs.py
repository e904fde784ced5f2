"""The converter's command, tools/imagenet_to_gcs.py, end to end: its flags (class folders, a labels CSV), the
table it prints, what it refuses, and a module that loads neither TensorFlow nor Pillow at import (the workers
import it again). The conversion's parts are tested in tests/tools/convert/."""
import json
import os
import subprocess
import sys

import pytest
from absl import flags

from tests.helpers import procs
from tests.tools.convert import drawn_images as drawn
from tools import imagenet_to_gcs as conv

REPO = procs.ROOT


def test_cli_converts_and_prints_a_table(tmp_path, capsys):
  raw = drawn.small_dataset(tmp_path / 'raw')
  fv = flags.FlagValues()
  conv.define_flags(fv)
  fv(['convert', f'--raw_data_dir={raw}', f'--local_scratch_dir={tmp_path / "out"}', '--num_workers=1',
      '--train_ratio=0.5', '--validation_ratio=0.5', '--test_ratio=0', '--project=ignored', '--max_image_side=14'])
  conv.main(['convert'], fv)
  printed = capsys.readouterr().out
  with open(tmp_path / 'out' / 'summary.json') as f:
    assert json.load(f)['max_image_side'] == 14
  assert 'JPEG/RGB resized to max side 14' in printed  # drawn.rgb_jpegs draws them 16 px wide.
  assert 'label' in printed and 'validation' in printed and 'Skipped 0 files.' in printed
  assert sorted(os.listdir(tmp_path / 'out')) == ['labels.txt', 'summary.json', 'train-00000-of-00001',
                                                  'validation-00000-of-00001']
  fv.unparse_flags()
  fv(['convert', f'--raw_data_dir={raw}', f'--local_scratch_dir={tmp_path / "out2"}', '--gcs_upload'])
  with pytest.raises(Exception, match='gs://'):
    conv.main(['convert'], fv)
  fv.unparse_flags()
  fv(['convert', f'--raw_data_dir={raw}', f'--local_scratch_dir={tmp_path / "out"}'])
  with pytest.raises(SystemExit, match='error: Output dir .* is not empty'):
    conv.main(['convert'], fv)


def test_the_cli_reads_the_csv_flags_and_refuses_them_without_a_csv(tmp_path):
  raw, classes = str(tmp_path / 'images'), ('cat', 'dog', 'owl')
  for i in range(6):
    drawn.save(drawn.noise(12, 16, i), os.path.join(raw, f'train_{i}.jpg'), 'JPEG')
  path = tmp_path / 'labels.csv'
  path.write_text('tags,image_name\n' + ''.join(f'{classes[i % 3]},train_{i}\n' for i in range(6)))
  fv = flags.FlagValues()
  conv.define_flags(fv)
  fv(['convert', f'--raw_data_dir={raw}', f'--local_scratch_dir={tmp_path / "out"}', '--num_workers=1',
      f'--labels_csv={path}', '--csv_path_column=image_name', '--csv_label_column=tags'])
  conv.main(['convert'], fv)
  with open(tmp_path / 'out' / 'summary.json') as f:
    assert json.load(f)['labels'] == {'cat': 1, 'dog': 2, 'owl': 3}
  fv.unparse_flags()
  fv(['convert', f'--raw_data_dir={raw}', f'--local_scratch_dir={tmp_path / "out2"}', '--csv_label_column=tags'])
  with pytest.raises(Exception, match='--csv_label_column describe a labels CSV: give it with --labels_csv=FILE'):
    conv.main(['convert'], fv)


def test_importing_the_converter_does_not_import_tensorflow():
  code = 'import sys, tools.imagenet_to_gcs; assert "tensorflow" not in sys.modules; assert "PIL" not in sys.modules'
  subprocess.run([sys.executable, '-c', code], cwd=REPO, check=True, timeout=60)


def test_the_script_form_prints_its_usage_and_flags():
  """`python tools/imagenet_to_gcs.py`, as the README runs it: the repository's packages found from the script."""
  done = subprocess.run([sys.executable, os.path.join('tools', 'imagenet_to_gcs.py'), '--help'], cwd=REPO,
                        capture_output=True, text=True, timeout=60, check=False)  # absl exits 1 after --help
  assert 'Traceback' not in done.stderr and 'Input layouts, detected automatically' in done.stdout
  assert '--raw_data_dir' in done.stdout and '--labels_csv' in done.stdout and '--max_image_side' in done.stdout


def test_the_cli_converts_webdataset_shards_and_refuses_two_inputs(tmp_path, capsys):
  from tests.tools.convert import archive_files  # pylint: disable=import-outside-toplevel
  import io  # pylint: disable=import-outside-toplevel
  members = []
  for i in range(4):
    data = io.BytesIO()
    drawn.noise(12, 16, i).save(data, 'JPEG')
    members += archive_files.sample(f'k{i}', data.getvalue(), txt=('cat', 'dog')[i % 2])
  archive_files.write_tar(str(tmp_path / 'train-000000.tar'), members)
  archive_files.write_tar(str(tmp_path / 'val-000000.tar'), members[:4])
  fv = flags.FlagValues()
  conv.define_flags(fv)
  fv(['convert', f'--webdataset={tmp_path}/train-{{000000..000000}}.tar,{tmp_path}/val-*.tar', '--label_field=txt',
      f'--local_scratch_dir={tmp_path / "out"}', '--num_workers=1'])
  conv.main(['convert'], fv)
  assert 'Layout: webdataset_splits' in capsys.readouterr().out
  for argv, message in (([f'--webdataset={tmp_path}', f'--parquet={tmp_path}'], '--webdataset and --parquet'),
                        ([f'--webdataset={tmp_path}', f'--raw_data_dir={tmp_path}'], '--webdataset and --raw_data_dir'),
                        ([f'--raw_data_dir={tmp_path}', '--label_field=cls'], '--label_field names the label of')):
    fv.unparse_flags()
    fv(['convert', *argv, f'--local_scratch_dir={tmp_path / "out2"}'])
    with pytest.raises(Exception, match=message):
      conv.main(['convert'], fv)
