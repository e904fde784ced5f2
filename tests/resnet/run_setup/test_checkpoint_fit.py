"""resnet/run_setup/checkpoint_fit.py: a checkpoint is checked against the model these params build before the restore."""
import pytest
import tensorflow as tf

from resnet.run_setup import checkpoint_fit
from tests.helpers import tiny


def test_a_checkpoint_of_the_same_model_fits_and_another_head_is_named(tmp_path):
  path = tf.train.Checkpoint(model=tiny.model(18, 4)).save(str(tmp_path / 'model.ckpt'))
  params = tiny.resnet_params(tmp_path, num_label_classes=3)
  assert checkpoint_fit.mismatch(path, tiny.model(18, 4), params) is None
  message = checkpoint_fit.mismatch(path, tiny.model(18, 3), params)
  assert '1 layers differ' in message and '[4], [512, 4] in the checkpoint, [3], [512, 3] here' in message


def test_a_checkpoint_whose_files_vanish_is_not_called_another_model(tmp_path):
  """keep_checkpoint_max may delete a checkpoint between continuous eval's check and the restore: NotFoundError,
  which every worker skips together; a 'holds another model' error would stop one worker alone."""
  path = tf.train.Checkpoint(model=tiny.model(18, 4)).save(str(tmp_path / 'model.ckpt'))
  for data in tf.io.gfile.glob(path + '.data-*'):
    tf.io.gfile.remove(data)
  with pytest.raises(tf.errors.NotFoundError):
    checkpoint_fit.mismatch(path, tiny.model(18, 4), tiny.resnet_params(tmp_path, num_label_classes=4))


def _images(params):
  images = tf.random.stateless_uniform([4, 32, 32, 3], seed=[3, 4], maxval=255.0)
  return tf.data.Dataset.from_tensor_slices((images, tf.constant([0, 1, 0, 1]))).repeat().batch(params['batch_size'])


def _estimator(model_dir, precision):
  from resnet.estimator.estimator import Estimator  # pylint: disable=import-outside-toplevel
  from resnet.estimator.run_config import RunConfig  # pylint: disable=import-outside-toplevel
  from resnet.training import resnet_model_fn  # pylint: disable=import-outside-toplevel
  params = tiny.resnet_params(model_dir, precision=precision, train_steps=4, num_train_images=64,
                              lr_warmup_epochs=0.0)
  return Estimator(resnet_model_fn.resnet_model_fn, RunConfig.from_params(params), params,
                   restore_check=checkpoint_fit.restore_check(params))


def _slots(optimizer):
  """The plain optimizer's step count and slots (a LossScaleOptimizer's inner one's)."""
  import keras  # pylint: disable=import-outside-toplevel
  if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
    optimizer = optimizer.inner_optimizer
  return [int(optimizer.iterations.numpy())] + [a.numpy() for a in optimizer.accumulators]


@pytest.mark.slow
@pytest.mark.parametrize('before,after', [('float16', 'bfloat16'), ('float32', 'float16'), ('float16', 'float32')])
def test_a_run_resumes_in_another_precision_with_its_optimizer_state(tmp_path, before, after):
  """float16 (GPUs) <-> bfloat16 / float32 (TPUs, CPUs): the optimizer's slots and step count are restored across
  the loss-scale wrapper (TensorFlow's restore failed with 'expected dtype int64 does not equal original dtype
  float'), and training goes on. float16 runs on CPU here as in the loss-gradient tests."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  first = _estimator(str(tmp_path), before)
  first.train(_images, max_steps=2)
  saved = _slots(first.scope.get('optimizer'))
  # float16's first steps may overflow at the initial loss scale and be skipped (not counted)
  assert saved[0] >= 1 and any(np.abs(s).sum() > 0 for s in saved[1:])
  resumed = _estimator(str(tmp_path), after)
  resumed.build('train')
  assert resumed.restore() and int(resumed.global_step.numpy()) == 2
  optimizer = resumed.scope.get('optimizer')
  assert isinstance(optimizer, __import__('keras').optimizers.LossScaleOptimizer) == (after == 'float16')
  restored = _slots(optimizer)
  assert restored[0] == saved[0]
  for a, b in zip(restored[1:], saved[1:]):
    np.testing.assert_array_equal(a, b)
  resumed.train(_images, max_steps=3)   # and it trains on, saving in its own layout
  assert int(resumed.global_step.numpy()) == 3 and _slots(optimizer)[0] in (saved[0], saved[0] + 1)
  assert checkpoint_fit.optimizer_stand_in(resumed.latest_checkpoint(), optimizer, {'precision': after}) is None
