"""tools/compare_keras_fit.py: both rows of the table from a tiny end-to-end run, and the Keras side's settings."""
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from official_input import example_schema
from tools import compare_keras_fit as cmp
from tests.helpers import procs

ROOT = procs.ROOT
_ROW = re.compile(r'^(ours \(resnet_main\)|Keras fit)\s+([\d.]+)\s+(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)$')


def test_keras_epochs_round_the_images_of_our_steps_to_whole_epochs():
  assert cmp.keras_epochs(600, 32, 1024) == 19      # 18.75 epochs
  assert cmp.keras_epochs(500, 32, 1024) == 16      # 15.6
  assert cmp.keras_epochs(3, 4, 100) == 1           # 0.12: at least one
  assert cmp.steps_per_epoch(32, 1024) == 32 and cmp.steps_per_epoch(4, 26) == 7  # last batch partial


def test_data_dir_without_summary_is_refused_with_the_fix(tmp_path):
  with pytest.raises(FileNotFoundError, match='imagenet_to_gcs'):
    cmp.read_summary(str(tmp_path))
  (tmp_path / 'summary.json').write_text(json.dumps({'num_classes': 3, 'splits': {'train': {'images': 9}}}))
  with pytest.raises(ValueError, match='num_eval_images'):
    cmp.read_summary(str(tmp_path))


def test_keras_pipeline_resizes_flips_and_shifts_labels_to_zero_based(tmp_path):
  # One image, left half black and right half white, stored label 3: every batch is that image (maybe mirrored).
  image = np.zeros((20, 30, 3), np.uint8)
  image[:, 15:] = 255
  example = example_schema.make_example(tf.io.encode_png(image).numpy(), 'PNG', 3, 'c', 20, 30, 'a.png')
  with tf.io.TFRecordWriter(str(tmp_path / 'train-00000-of-00001')) as w:
    for _ in range(16):
      w.write(example.SerializeToString())
  images, labels = next(iter(cmp.keras_dataset(str(tmp_path), 'train', 32, 16, training=True, seed=0)))
  assert images.shape == (16, 32, 32, 3) and labels.numpy().tolist() == [2] * 16
  left_dark = images[:, :, 0, 0].numpy().mean(axis=1) < 10
  assert 0 < left_dark.sum() < 16  # some flipped, some not (16 fair coins: all equal has p = 2^-15)
  images, _ = next(iter(cmp.keras_dataset(str(tmp_path), 'train', 32, 16, training=False, seed=0)))
  assert (images[:, :, 0, 0].numpy() < 10).all()  # eval: never flipped


@pytest.mark.slow
def test_tiny_run_prints_both_rows_with_numbers(tmp_path):
  # 2 classes x 16 drawn images split 13/2/1 per class: 26 train images. Ours: 6 steps of 4 = 24 images.
  # Keras: round(24 / 26) = 1 epoch = ceil(26 / 4) = 7 batches, 26 images.
  proc = subprocess.run(
      [sys.executable, '-m', 'tools.compare_keras_fit', f'--work_dir={tmp_path}', '--num_classes=2',
       '--images_per_class=16', '--image_size=32', '--train_steps=6', '--batch_size=4', '--seed=3',
       '--param_overrides=iterations_per_loop=3,steps_per_eval=6,eval_batch_size=4'],
      cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  rows = {m.group(1): m.groups()[1:] for m in map(_ROW.match, proc.stdout.splitlines()) if m}
  assert set(rows) == {'ours (resnet_main)', 'Keras fit'}, proc.stdout
  expected = {'ours (resnet_main)': (6, 24), 'Keras fit': (7, 26)}
  for name, (top_1, steps, images, wall, per_sec) in rows.items():
    assert 0.0 <= float(top_1) <= 1.0
    assert (int(steps), int(images)) == expected[name]
    assert float(wall) > 1.0
    assert float(per_sec) == pytest.approx(int(images) / float(wall), abs=0.1)
  assert '--config_file=demo --mode=train_and_eval' in proc.stdout  # the exact command is shown
  assert 'SGD(momentum=0.9), lr 0.1 cosine' in proc.stdout
  assert os.path.exists(tmp_path / 'ours' / 'eval_results.json') and os.path.exists(tmp_path / 'keras.log')
