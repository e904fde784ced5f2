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
