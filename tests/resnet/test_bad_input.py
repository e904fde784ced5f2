"""Numerical faults and bad input: each is a clear error (naming what to fix) or a counted, logged skip.

The CLI cases run ``resnet_main``'s main in this process, as the command line runs it (params errors, data errors
and their 'error:' lines and exit codes need no process of their own), once each in one module fixture; the
input-pipeline cases run on tiny TFRecords.

- NaN/Inf loss: ``--weight_decay=1e38`` overflows the loss to Inf at the first step (a reliable CLI trigger): the
  run stops with an error naming the step, exits non-zero and writes no checkpoint, so the last good one stays the
  latest, byte for byte. (A huge learning rate is NOT a clean trigger: the loss of step k is computed before update
  k, so a checkpoint written at a loop end can hold diverged weights before any loss shows it.)
- Missing data: the error names the file pattern. Eval/predict without a checkpoint: NoCheckpointError's message.
- Corrupt or wrong-schema records: skipped, counted and logged by name; in eval every good record is seen once.
- Labels >= num_label_classes: a config mismatch, not a bad record: the input pipeline stops the run with an error
  naming the record and the fix; labels that reach the model some other way fail resnet_model_fn's assertion.
- An existing export dir: a new version subdirectory; the old export is untouched.
- Unknown params: the closest keys are listed. YAML with Python tags: refused, nothing executed.
"""
import hashlib
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from official_input import example_schema
from official_input import imagenet_input
from resnet.run_setup import run_params
from tests.helpers import cli

pytestmark = pytest.mark.slow  # end to end: whole runs, processes or their shared fixtures


def _tree_digest(path: str) -> dict:
  digests = {}
  for rel in cli.files_under(path):
    with open(os.path.join(path, rel), 'rb') as f:
      digests[rel] = hashlib.sha256(f.read()).hexdigest()
  return digests


@pytest.fixture(scope='module')
def runs(module_tmp):
  """Every CLI case of this module, run once; returns {name: (Proc, details)}."""
  root = module_tmp.mktemp('bad_input')
  model_dir, data_dir, _ = cli.shared_trained_run()
  details = {}

  nan_dir = str(root / 'nan_model')
  shutil.copytree(model_dir, nan_dir, ignore=shutil.ignore_patterns('export'))
  details['nan'] = {'model_dir': nan_dir, 'before': _tree_digest(nan_dir)}

  export_dir = str(root / 'export_model')
  shutil.copytree(model_dir, export_dir)
  exports = os.path.join(export_dir, 'export')
  details['export'] = {'exports': exports, 'before': {v: _tree_digest(os.path.join(exports, v))
                                                      for v in os.listdir(exports)}}

  empty = root / 'empty'
  empty.mkdir()
  unsafe = root / 'unsafe.yaml'
  marker = root / 'pwned'
  unsafe.write_text(f'train_steps: 5\nx: !!python/object/apply:os.system ["touch {marker}"]\n')
  details['unsafe_yaml'] = {'marker': str(marker)}
  typo = root / 'typo.yaml'
  typo.write_text('train_steps: 5\nbase_learnig_rate: 0.2\n')

  gzip_dir = root / 'gzip_data'
  gzip_dir.mkdir()
  with tf.io.TFRecordWriter(str(gzip_dir / 'train-00000-of-00001'), options='GZIP') as writer:
    writer.write(cli.jpeg_example(np.random.default_rng(0), 1, 'a.JPEG').SerializeToString())

  specs = {
      'gzip': ('--mode=train', f'--model_dir={root / "gzip_model"}', f'--data_dir={gzip_dir}', '--train_steps=2'),
      'nan': ('--mode=train', f'--model_dir={nan_dir}', f'--data_dir={data_dir}', '--train_steps=8',
              '--iterations_per_loop=2', '--save_checkpoints_steps=2', '--weight_decay=1e38'),
      'export': ('--mode=train', f'--model_dir={export_dir}', f'--data_dir={data_dir}', '--train_steps=4',
                 f'--export_dir={exports}'),
      'labels': ('--mode=train', f'--model_dir={root / "labels_model"}', f'--data_dir={data_dir}',
                 '--train_steps=4', '--iterations_per_loop=2', '--num_label_classes=3',
                 '--shuffle_buffer_size=1'),  # unshuffled: stored label 4 comes within 4 records
      'missing_data': ('--mode=train', f'--model_dir={root / "m1"}', f'--data_dir={root / "no_such_dir"}',
                       '--train_steps=2'),
      'eval_no_checkpoint': ('--mode=eval', f'--model_dir={root / "m2"}', f'--data_dir={data_dir}',
                             f'--eval_checkpoint={empty}'),
      'eval_wait_timeout': ('--mode=eval', f'--model_dir={root / "m3"}', f'--data_dir={data_dir}',
                            '--eval_timeout=1'),
      'predict_no_checkpoint': ('--mode=predict', f'--model_dir={root / "m4"}', f'--data_dir={data_dir}'),
      'unknown_override': ('--mode=train', f'--model_dir={root / "m5"}', '--param_overrides=train_step=5'),
      'unknown_in_config': ('--mode=train', f'--model_dir={root / "m6"}', f'--config_file={typo}'),
      'unsafe_yaml': ('--mode=train', f'--model_dir={root / "m7"}', f'--config_file={unsafe}'),
  }
  return {name: (cli.run_in_process(*flags), details.get(name, {})) for name, flags in specs.items()}


def _result(runs, name):
  result, details = runs[name]
  return result.code, result.log + result.out, details


# ------------------------------------------------------------------------------------------------ NaN / Inf
def test_inf_loss_stops_with_the_step_exits_nonzero_and_keeps_the_last_good_checkpoint(runs):
  code, log, details = _result(runs, 'nan')
  assert code not in (0, None), log[-3000:]
  assert 'error: Loss is inf in the loop ending at step 6' in log, log[-3000:]
  assert 'Restored' in log and 'Saved checkpoint' not in log
  assert cli.checkpoint_steps(details['model_dir']) == [5]
  after = _tree_digest(details['model_dir'])
  for name, digest in details['before'].items():
    if name.startswith('model.ckpt-') or name == 'checkpoint':
      assert after[name] == digest, f'{name} changed'


# ------------------------------------------------------------------------------------------------ missing things
def test_missing_data_dir_fails_naming_the_file_pattern(runs, tmp_path):
  code, log, _ = _result(runs, 'missing_data')
  assert code not in (0, None)
  assert "No input files match '" in log and "no_such_dir/train-*'" in log, log[-3000:]
  # An existing but empty data_dir says the same, in-process.
  params = run_params.make_params(dict(data_dir=str(tmp_path), image_size=32, num_label_classes=4))
  with pytest.raises(FileNotFoundError, match=r"No input files match '.*/validation-\*'.*make_fake_imagenet"):
    imagenet_input.ImageNetInput.from_params(params, 'validation').input_fn({'batch_size': 4})


def test_eval_and_predict_without_a_checkpoint_fail_with_a_clear_message(runs):
  code, log, _ = _result(runs, 'eval_no_checkpoint')
  assert code == 1 and 'error: No checkpoint found in directory' in log, log[-3000:]
  code, log, _ = _result(runs, 'predict_no_checkpoint')
  assert code == 1 and 'error: No checkpoint in' in log and 'train first' in log, log[-3000:]


def test_continuous_eval_without_any_checkpoint_stops_at_eval_timeout(runs):
  code, log, _ = _result(runs, 'eval_wait_timeout')
  assert code == 1
  assert 'error: No checkpoint appeared in' in log and 'within the timeout of 1 s' in log, log[-3000:]
  assert 'Raise --eval_timeout to wait longer' in log
  assert 'Eval at step' not in log


# ------------------------------------------------------------------------------------------------ bad records
def test_training_skips_and_counts_corrupt_and_schemaless_records():
  _, _, log = cli.shared_trained_run()  # its train split holds 3 bad records among 32 good ones
  assert "skipping record 'bad_truncated.JPEG': undecodable image" in log
  assert "skipping record 'bad_not_an_image.JPEG': not an image" in log
  assert "skipping record 'bad_no_encoded.JPEG': not an image" in log  # no image/encoded at all
  assert 'corrupt_records_skipped=' in log and 'Saved checkpoint' in log


def _string_label_example() -> tf.train.Example:
  feature = {example_schema.ENCODED: tf.train.Feature(bytes_list=tf.train.BytesList(value=[b'\xff\xd8\xff' * 40])),
             example_schema.LABEL: tf.train.Feature(bytes_list=tf.train.BytesList(value=[b'three'])),
             example_schema.FILENAME: tf.train.Feature(bytes_list=tf.train.BytesList(value=[b'bad_label.JPEG']))}
  return tf.train.Example(features=tf.train.Features(feature=feature))


def test_eval_sees_every_good_record_once_and_counts_every_bad_one(tmp_path):
  rng = np.random.default_rng(3)
  good = [cli.jpeg_example(rng, 1 + i % 4, f'good_{i}.JPEG') for i in range(10)]
  bad = cli.bad_train_examples() + [_string_label_example()]
  cli.write_records(str(tmp_path / 'validation-00000-of-00001'), good[:5] + bad[:2] + good[5:] + bad[2:])
  params = run_params.make_params(dict(data_dir=str(tmp_path), image_size=32, num_label_classes=4))
  source = imagenet_input.ImageNetInput.from_params(params, 'validation', include_filename=True)
  names = []
  for features, labels in source.input_fn({'batch_size': 4}):
    assert features['image'].shape == (4, 32, 32, 3)
    names += [n.decode() for n, l in zip(features['filename'].numpy(), labels.numpy()) if l >= 0]
  assert sorted(names) == sorted(f'good_{i}.JPEG' for i in range(10))
  assert source.skipped_records == 4
  assert {k: v for k, v in source.skipped_by_reason.items() if v} == {
      'not an image': 2, 'undecodable image': 1, 'unparseable record': 1}


def test_training_batches_stay_full_and_valid_around_bad_records(tmp_path):
  rng = np.random.default_rng(4)
  good = [cli.jpeg_example(rng, 1 + i % 4, f'good_{i}.JPEG') for i in range(8)]
  cli.write_records(str(tmp_path / 'train-00000-of-00001'), good + cli.bad_train_examples() +
                    [_string_label_example()])
  params = run_params.make_params(dict(data_dir=str(tmp_path), image_size=32, num_label_classes=4,
                                              shuffle_buffer_size=16))
  source = imagenet_input.ImageNetInput.from_params(params, 'train')
  for images, labels in source.input_fn({'batch_size': 4}).take(6):
    assert images.shape == (4, 32, 32, 3) and np.isfinite(images.numpy()).all()
    assert ((labels.numpy() >= 0) & (labels.numpy() < 4)).all()
  assert source.skipped_records >= 4  # each bad record at least once in 24 examples of a 12-record epoch


# ------------------------------------------------------------------------------------------------ labels
def test_labels_beyond_num_label_classes_stop_the_run_with_the_fix(runs):
  code, log, _ = _result(runs, 'labels')  # stored label 4 -> class 3 >= num_label_classes=3
  assert code == 1, log[-3000:]
  assert 'error:' in log and 'has a label >= num_label_classes' in log, log[-3000:]
  assert 'Set num_label_classes to the number of classes in labels.txt' in log


def test_model_fn_rejects_labels_beyond_num_label_classes(tmp_path):
  from resnet.training import resnet_model_fn  # pylint: disable=g-import-not-at-top
  from resnet.estimator import estimator as estimator_lib  # pylint: disable=g-import-not-at-top
  from resnet.estimator.run_config import RunConfig  # pylint: disable=g-import-not-at-top
  params = run_params.make_params(dict(resnet_depth=18, image_size=32, num_label_classes=4, num_train_images=8,
                                          precision='float32', train_batch_size=4, train_steps=1))
  config = RunConfig(model_dir=str(tmp_path), train_batch_size=4, eval_batch_size=4, predict_batch_size=4,
                     iterations_per_loop=1, skip_train_summaries=True)
  runner = estimator_lib.Estimator(resnet_model_fn.resnet_model_fn, config, params,
                                   tf.distribute.OneDeviceStrategy('/cpu:0'))

  def input_fn(p):
    images = tf.zeros([p['batch_size'], 32, 32, 3])
    return tf.data.Dataset.from_tensors((images, tf.constant([0, 1, 5, 2], tf.int32))).repeat()

  with pytest.raises(tf.errors.InvalidArgumentError, match=r'a label >= num_label_classes=4'):
    runner.train(input_fn, max_steps=1)
  assert tf.train.latest_checkpoint(str(tmp_path)) is None


# ------------------------------------------------------------------------------------------------ export
def test_export_into_an_existing_export_dir_adds_a_new_version_and_keeps_the_old(runs):
  code, log, details = _result(runs, 'export')
  assert code == 0, log[-3000:]
  assert 'nothing to train' in log
  exports = details['exports']
  old = details['before']
  versions = sorted(os.listdir(exports))
  assert len(old) == 1 and len(versions) == 2 and set(old) < set(versions), versions
  new = (set(versions) - set(old)).pop()
  assert int(new) > int(next(iter(old)))
  for version, digest in old.items():
    assert _tree_digest(os.path.join(exports, version)) == digest  # untouched
  assert os.path.exists(os.path.join(exports, new, 'saved_model.pb'))
  assert f'Exported SavedModel: {os.path.join(exports, new)}' in log


# ------------------------------------------------------------------------------------------------ params
def test_unknown_params_fail_listing_the_closest_keys(runs):
  code, log, _ = _result(runs, 'unknown_override')
  assert code not in (0, None)
  assert "Unknown param 'train_step'. Did you mean: train_steps" in log, log[-3000:]
  code, log, _ = _result(runs, 'unknown_in_config')
  assert code not in (0, None)
  assert "Unknown param 'base_learnig_rate'. Did you mean: base_learning_rate" in log, log[-3000:]
  assert 'model.ckpt' not in log


def test_yaml_with_python_tags_is_refused_and_nothing_runs(runs):
  code, log, details = _result(runs, 'unsafe_yaml')
  assert code not in (0, None)
  assert 'Refusing to read' in log and 'unsafe.yaml' in log, log[-3000:]
  assert not os.path.exists(details['marker'])


def test_gzip_compressed_shards_are_named_with_the_fix_not_reported_as_damaged(runs):
  code, log, _ = _result(runs, 'gzip')
  assert code == 1, log[-3000:]
  assert 'train-00000-of-00001 is GZIP-compressed; this pipeline reads uncompressed TFRecords' in log, log[-3000:]
  assert 'damaged shard' not in log and 'Traceback' not in log
