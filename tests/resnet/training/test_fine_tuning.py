"""Fine-tuning controls: frozen batch-norm statistics, the head alone for the first steps, layer-wise learning-rate
decay per stage. One update each, in-process, against the same update without the control; then all three
through the CLI, fine-tuning torchvision weights."""
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from safetensors import numpy as safetensors_numpy

from resnet.run_dir import params_files
from resnet.training import fine_tuning
from resnet.training import resnet_model_fn
from tests.fixtures.torchvision_parity import weights as tv
from tests.helpers import cli
from tests.helpers import tiny

SIZE = 32


def _input(params):
  images = tf.random.stateless_uniform([8, SIZE, SIZE, 3], seed=[1, 2], maxval=255.0)
  labels = tf.constant([0, 1] * 4, tf.int32)
  return tf.data.Dataset.from_tensor_slices((images, labels)).repeat().batch(params['batch_size'])


def _one_update(model_dir, max_steps=1, strategy=None, **overrides):
  """(model, trainable weights before, after ``max_steps`` updates, moving statistics before, after), from seeded
  weights."""
  settings = dict(train_batch_size=8, train_steps=1, lr_warmup_epochs=0.0, num_train_images=64,
                  base_learning_rate=1.0)
  params = tiny.resnet_params(model_dir, **{**settings, **overrides})
  keras.utils.set_random_seed(11)
  estimator = tiny.resnet_estimator(params, strategy)
  estimator.build('train')
  model = estimator.scope.get(resnet_model_fn.MODEL)
  moving = [v for v in model.non_trainable_weights if 'moving' in v.path]
  before = [w.numpy().copy() for w in model.trainable_weights], [v.numpy().copy() for v in moving]
  estimator.train(_input, max_steps=max_steps)
  after = [w.numpy().copy() for w in model.trainable_weights], [v.numpy().copy() for v in moving]
  return model, before, after


def test_every_trainable_variable_has_its_stage():
  model = tiny.model(18, 3, image_size=SIZE)
  stages = fine_tuning.variable_stages(model)
  names = [v.path for v in model.trainable_variables]
  assert stages[names.index('conv2d/kernel')] == 0 and stages[names.index('dense/kernel')] == 5
  # stem: conv + BN (gamma, beta); a group: 2 blocks of 2 convs + 2 BNs, and a projection conv + BN; dense.
  assert [stages.count(s) for s in range(6)] == [3, 15, 15, 15, 15, 2]


@pytest.mark.slow
def test_head_only_steps_leave_the_backbone_untouched(tmp_path):
  model, (before, _), (after, _) = _one_update(tmp_path, train_head_only_steps=1)
  for variable, b, a in zip(model.trainable_variables, before, after):
    if variable.path.startswith('dense/'):
      assert np.abs(a - b).max() > 1e-6, variable.path
    else:
      np.testing.assert_array_equal(a, b, err_msg=variable.path)


@pytest.mark.slow
@pytest.mark.parametrize('replicas', [1, 2])
def test_head_only_steps_run_the_backbone_in_inference_mode(tmp_path, replicas):
  """A linear probe: batch-norm statistics stay the checkpoint's during the head-only steps (as Keras'
  trainable=False), and move again once everything trains."""
  strategy = tiny.two_replicas() if replicas == 2 else None
  _, (_, moving_before), (_, moving_after) = _one_update(tmp_path / 'probe', strategy=strategy,
                                                         train_head_only_steps=1)
  for b, a in zip(moving_before, moving_after):
    np.testing.assert_array_equal(a, b)
  _, (_, moving_before), (_, moving_after) = _one_update(tmp_path / 'after', train_head_only_steps=1,
                                                         train_steps=2, max_steps=2, strategy=strategy)
  assert any(np.abs(a - b).max() > 1e-6 for a, b in zip(moving_after, moving_before))  # step 2 trains them


def test_head_only_steps_with_lars_are_refused_naming_why(tmp_path):
  """LARS applies its weight decay (trust ratio 1 on a zero gradient) to every kernel: the backbone would move."""
  with pytest.raises(ValueError, match='train_head_only_steps.*LARS still applies its weight decay'):
    tiny.resnet_params(tmp_path, enable_lars=True, train_head_only_steps=5)


@pytest.mark.slow
def test_layer_decay_scales_each_stage_update(tmp_path):
  model, (start, _), (plain, _) = _one_update(tmp_path / 'plain')
  _, (same_start, _), (decayed, _) = _one_update(tmp_path / 'decayed', layer_decay=0.5)
  stages = fine_tuning.variable_stages(model)
  for stage, s, b, p, d in zip(stages, start, same_start, plain, decayed):
    np.testing.assert_array_equal(s, b)
    if np.abs(p - s).max() > 1e-5:  # the first momentum step: the update is lr x gradient (x scale)
      np.testing.assert_allclose(d - s, (p - s) * 0.5 ** (5 - stage), rtol=1e-3, atol=1e-6)


@pytest.mark.slow
def test_frozen_batch_norm_keeps_its_statistics_but_learns_gamma(tmp_path):
  model, (before, moving_before), (after, moving_after) = _one_update(tmp_path, freeze_batch_norm=True)
  for b, a in zip(moving_before, moving_after):
    np.testing.assert_array_equal(a, b)
  gammas = [i for i, v in enumerate(model.trainable_variables) if v.path.endswith('gamma')]
  assert any(np.abs(after[i] - before[i]).max() > 1e-6 for i in gammas)
  _, _, (_, moving_trained) = _one_update(tmp_path / 'plain')
  assert any(np.abs(a - b).max() > 1e-6 for a, b in zip(moving_trained, moving_before))  # would move without it


@pytest.mark.slow
def test_fine_tuning_torchvision_weights_with_every_control_through_the_cli(tmp_path):
  weights = str(tmp_path / 'resnet18.safetensors')
  safetensors_numpy.save_file(tv.state_dict(18), weights)
  data_dir = cli.make_tiny_dataset(str(tmp_path / 'data'))
  model_dir = str(tmp_path / 'run')
  result = cli.run_in_process('--mode=train', f'--data_dir={data_dir}', f'--model_dir={model_dir}',
                              '--train_steps=2', '--iterations_per_loop=1', f'--resnet_checkpoint={weights}',
                              '--resnet_depth=18', '--freeze_batch_norm=true', '--train_head_only_steps=1', '--layer_decay=0.7')
  assert result.code == 0, result.log[-3000:]
  log = result.log
  assert 'freeze_batch_norm: 20 batch-norm layers' in log and 'only the classifier head learns before step 1' in log
  assert 'layer_decay=0.7: learning-rate factor per stage: stem 0.168, ' in log and 'head 1.' in log
  saved = params_files.read_params(os.path.join(model_dir, 'params.yaml'))
  assert (saved.freeze_batch_norm, saved.train_head_only_steps, saved.layer_decay) == (True, 1, 0.7)
  # After 2 steps of training, the stem's batch-norm statistics are still torchvision's.
  reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(model_dir))
  stem_mean = [k for k in reader.get_variable_to_shape_map() if k.startswith('model/')
               and 'moving_mean' in k and reader.get_tensor(k).shape == (64,)]
  assert any(np.array_equal(reader.get_tensor(k), tv.state_dict(18)['bn1.running_mean']) for k in stem_mean)
