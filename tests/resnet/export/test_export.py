"""SavedModel export through the real code path (Estimator + resnet_model_fn), checked from a fresh process.

A tiny ResNet-10 (32 px, 3 classes) is trained 2 steps and exported. A separate Python process, which never imports
this repository, loads the SavedModel and classifies real JPEG and PNG bytes; its outputs must equal the in-process
model on the same images preprocessed as eval at image_size 32 (the reference export always used 224 and JPEG).
"""
import json
import os
import subprocess
import sys
import textwrap
from typing import Any, Mapping

import numpy as np
import pytest
import tensorflow as tf

from official_input import resnet_preprocessing
from resnet.run_setup import run_params
from resnet.training import resnet_model_fn
from resnet.estimator import best_checkpoint
from resnet.estimator.estimator import Estimator
from resnet.export import exporting
from resnet.estimator.run_config import RunConfig

IMAGE_SIZE = 32
NUM_CLASSES = 3
BIN_DIR = os.path.dirname(sys.executable)


def make_params(model_dir: str) -> Mapping[str, Any]:
  return run_params.make_params(dict(
      resnet_depth=10, num_label_classes=NUM_CLASSES, image_size=IMAGE_SIZE, precision='float32',
      train_batch_size=2, eval_batch_size=2, predict_batch_size=2, train_steps=2, iterations_per_loop=2,
      save_checkpoints_steps=2, num_train_images=8, lr_warmup_epochs=0.0, model_dir=model_dir, skip_train_summaries=True))


def synthetic_input(params):
  images = tf.random.stateless_uniform([8, IMAGE_SIZE, IMAGE_SIZE, 3], seed=[3, 4], maxval=255.0)
  labels = tf.constant([0, 1, 2, 0, 1, 2, 0, 1], tf.int32)
  return tf.data.Dataset.from_tensor_slices((images, labels)).repeat().batch(params['batch_size'],
                                                                             drop_remainder=True)


def encoded_images() -> list:
  """A JPEG and a PNG of different, non-square sizes with some structure (so the centre crop matters)."""
  y, x = np.mgrid[0:60, 0:80]
  first = np.stack([x * 3, y * 4, (x + y) * 2], -1) % 256
  y, x = np.mgrid[0:50, 0:40]
  second = np.stack([255 - x * 6, (x * y) % 256, y * 5], -1) % 256
  return [tf.io.encode_jpeg(first.astype(np.uint8), quality=95).numpy(),
          tf.io.encode_png(second.astype(np.uint8)).numpy()]


@pytest.fixture(scope='module')
def exported(module_tmp):
  """(runner, params, export base dir, [first export, second export])."""
  root = module_tmp.mktemp('export')
  params = make_params(str(root / 'model'))
  runner = Estimator(resnet_model_fn.resnet_model_fn, RunConfig.from_params(params), params)
  runner.train(synthetic_input, max_steps=2)
  base = str(root / 'export')
  serving = resnet_model_fn.serving_inputs(params)
  paths = [runner.export_saved_model(base, serving), runner.export_saved_model(base, serving)]
  return runner, params, base, paths


def in_process_predictions(runner, image_bytes: list) -> tuple:
  images = tf.stack([resnet_preprocessing.preprocess_image(tf.constant(b), is_training=False,
                                                           image_size=IMAGE_SIZE) for b in image_bytes])
  logits = runner.scope.get('model')(images, training=False)
  return images.numpy(), tf.argmax(logits, -1).numpy(), tf.nn.softmax(logits).numpy()


# Runs in a fresh interpreter that does not import this repository: only TensorFlow and the SavedModel.
_SERVE = textwrap.dedent('''
    import json, sys
    import numpy as np
    import tensorflow as tf
    path, images, output, *files = sys.argv[1:]
    image_bytes = [open(f, 'rb').read() for f in files]
    loaded = tf.saved_model.load(path)
    by_bytes = loaded.signatures['serving_default'](input=tf.constant(image_bytes))
    by_images = loaded.signatures['serving_images'](images=tf.constant(np.load(images)))
    np.savez(output, **{f'bytes_{k}': v.numpy() for k, v in by_bytes.items()},
             **{f'images_{k}': v.numpy() for k, v in by_images.items()})
    print(json.dumps({k: [v.dtype.name, list(v.shape)] for k, v in by_bytes.items()}))
''')


def _run(args: list, **kwargs) -> str:
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', PYTHONPATH='')
  result = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300, **kwargs)
  assert result.returncode == 0, result.stderr[-3000:]
  return result.stdout


@pytest.mark.slow
def test_fresh_process_classifies_jpeg_and_png_like_eval(exported, tmp_path):
  runner, _, _, paths = exported
  image_bytes = encoded_images()
  assert image_bytes[0][:2] == b'\xff\xd8' and image_bytes[1][:4] == b'\x89PNG'
  images, classes, probabilities = in_process_predictions(runner, image_bytes)
  files = [tmp_path / 'image.jpg', tmp_path / 'image.png']
  for path, data in zip(files, image_bytes):
    path.write_bytes(data)
  inputs, output = str(tmp_path / 'images.npy'), str(tmp_path / 'outputs.npz')
  np.save(inputs, images)
  script = tmp_path / 'serve.py'
  script.write_text(_SERVE)
  stdout = _run([sys.executable, str(script), paths[-1], inputs, output, *map(str, files)], cwd=str(tmp_path))
  specs = json.loads(stdout.strip().splitlines()[-1])
  assert specs == {'classes': ['int64', [2]], 'probabilities': ['float32', [2, NUM_CLASSES]]}
  served = np.load(output)
  np.testing.assert_allclose(served['bytes_probabilities'].sum(-1), 1.0, rtol=1e-5)
  np.testing.assert_array_equal(served['bytes_classes'], classes)
  np.testing.assert_allclose(served['bytes_probabilities'], probabilities, rtol=1e-5, atol=1e-6)
  np.testing.assert_array_equal(served['images_classes'], classes)
  np.testing.assert_allclose(served['images_probabilities'], probabilities, rtol=1e-5, atol=1e-6)


def test_preprocessing_at_224_would_give_other_outputs(exported):
  """Guards the test above: the image size really changes the predictions, so equality proves size 32 was used."""
  runner, _, _, _ = exported
  image = resnet_preprocessing.preprocess_image(tf.constant(encoded_images()[0]), is_training=False,
                                                image_size=224)
  model = runner.scope.get('model')
  at_224 = tf.nn.softmax(model(image[None], training=False)).numpy()
  _, _, at_32 = in_process_predictions(runner, encoded_images()[:1])
  assert not np.allclose(at_224, at_32, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_saved_model_cli_lists_both_signatures(exported):
  _, _, _, paths = exported
  out = _run([os.path.join(BIN_DIR, 'saved_model_cli'), 'show', '--dir', paths[-1], '--all'])
  default = out.split("signature_def['serving_default']")[1].split('signature_def[')[0]
  assert "inputs['input']" in default and 'dtype: DT_STRING' in default and 'shape: (-1)' in default
  assert "outputs['classes']" in default and 'DT_INT64' in default
  assert "outputs['probabilities']" in default and f'shape: (-1, {NUM_CLASSES})' in default
  images = out.split("signature_def['serving_images']")[1].split('signature_def[')[0]
  assert "inputs['images']" in images and f'shape: (-1, {IMAGE_SIZE}, {IMAGE_SIZE}, 3)' in images
  assert 'DT_FLOAT' in images


def test_exports_get_new_versions_and_leave_no_temporaries(exported):
  _, _, base, paths = exported
  assert len(set(paths)) == 2
  assert all(os.path.dirname(p) == base and os.path.basename(p).isdigit() for p in paths)
  assert int(os.path.basename(paths[1])) > int(os.path.basename(paths[0]))
  assert sorted(os.listdir(base)) == sorted(os.path.basename(p) for p in paths)
  for path in paths:
    assert tf.saved_model.contains_saved_model(path)


@pytest.mark.slow
def test_export_from_a_checkpoint_under_a_mirrored_strategy(exported, tmp_path):
  """The export-only path (a new Estimator restores model_dir's checkpoint) under MirroredStrategy gives the same model."""
  devices = tf.config.list_logical_devices('CPU')
  if len(devices) < 2:
    pytest.skip('needs two logical CPU devices (set up in conftest before TF initialises)')
  runner, params, _, _ = exported
  strategy = tf.distribute.MirroredStrategy([d.name for d in devices[:2]])
  mirrored = Estimator(resnet_model_fn.resnet_model_fn, RunConfig.from_params(params), params, strategy)
  path = mirrored.export_saved_model(str(tmp_path / 'export'), resnet_model_fn.serving_inputs(params))
  image_bytes = encoded_images()
  served = tf.saved_model.load(path).signatures['serving_default'](input=tf.constant(image_bytes))
  _, classes, probabilities = in_process_predictions(runner, image_bytes)
  np.testing.assert_array_equal(served['classes'].numpy(), classes)
  np.testing.assert_allclose(served['probabilities'].numpy(), probabilities, rtol=1e-5, atol=1e-6)


def test_export_best_on_a_follower_worker_exports_the_file_the_writer_kept(tmp_path):
  """A follower knows the writer's best step and value, not its file: export_best reads best/ as the chief does
  (it raised 'best/ holds no checkpoint' there, and the chief waited for it forever)."""
  for step in (2, 3):
    for suffix in ('.index', '.data-00000-of-00001'):
      (tmp_path / f'model.ckpt-{step}{suffix}').write_text(f'step {step}')

  def results(step, accuracy):
    return {'top_1_accuracy': accuracy, 'loss': 1.0, 'global_step': step, 'num_examples': 8,
            'checkpoint': str(tmp_path / f'model.ckpt-{step}')}
  writer = best_checkpoint.BestCheckpoint(str(tmp_path), 'top_1_accuracy')
  writer.update(results(2, 0.75))
  opening = [True, 2, 0.75, 0, 2]  # what the writer shares when the follower first decides
  follower = best_checkpoint.BestCheckpoint(str(tmp_path), 'top_1_accuracy', role='follower',
                                            share=lambda values: opening if len(values) == 5 else values)
  assert not follower.update(results(3, 0.5)) and follower.checkpoint_path is None
  params = dict(model_dir=str(tmp_path), best_metric='top_1_accuracy', best_metric_goal='auto')
  assert exporting.best_checkpoint_path(params, follower) == str(tmp_path / 'best' / 'model.ckpt-2')
