"""No silent divergence, and no false alarm: a finite loss that explodes, or a model that collapses to a constant
output, stops the run (or warns) naming the step, the history and the fixes, checkpoints stay; a healthy noisy run
trains on; and the best checkpoint says when it is the first evaluation of a run that got worse."""
import math
import os

import pytest
import tensorflow as tf

from resnet.estimator import hooks as hooks_lib
from resnet.training import divergence
from tests.helpers import cli
from tests.helpers import procs

CHANCE = math.log(4)
FIXTURES = os.path.join(procs.ROOT, 'tests', 'fixtures')


def test_the_guard_takes_the_tasks_chance_and_the_loss_of_logits_0_as_its_ceiling(tmp_path):
  from tests.helpers import tiny  # pylint: disable=import-outside-toplevel
  bce = divergence.guard(tiny.resnet_params(tmp_path, num_label_classes=1000, loss='binary_cross_entropy'))
  assert bce.chance == pytest.approx((1 + math.log(1000)) / 1000, rel=1e-3)
  assert bce.ceiling == pytest.approx(math.log(2))   # every sigmoid at 0.5
  softmax = divergence.guard(tiny.resnet_params(tmp_path, num_label_classes=4))
  assert softmax.chance == softmax.ceiling == pytest.approx(math.log(4))   # logits 0: the uniform guess


@pytest.mark.slow
def test_a_diverging_cli_run_exits_with_the_message_keeps_checkpoints_and_exports_nothing(tmp_path):
  from tools import imagenet_to_gcs, make_demo_dataset  # pylint: disable=import-outside-toplevel
  make_demo_dataset.make_demo_dataset(str(tmp_path / 'images'), num_classes=4, images_per_class=8,
                                      image_size=(40, 56), seed=0)
  data = str(tmp_path / 'records')
  imagenet_to_gcs.convert_dataset(str(tmp_path / 'images'), data, num_workers=1, seed=0)
  model_dir, export_dir = str(tmp_path / 'run'), str(tmp_path / 'export')
  # Class weights of 50 on a tiny ResNet at a learning rate of 400: the cross-entropy explodes, finite.
  base = [f for f in cli.TINY if not f.startswith('--num_train_images')]  # the data's summary.json counts them
  result = cli.run_in_process(
      f'--data_dir={data}', f'--model_dir={model_dir}', f'--export_dir={export_dir}', '--mode=train',
      '--train_steps=40', '--iterations_per_loop=2', '--save_checkpoints_steps=2', '--lr_warmup_epochs=0',
      '--base_learning_rate=400', '--param_overrides=class_weights=[50,50,50,50]', base=base)
  assert result.code == 1, result.log[-3000:]
  assert 'error: Training diverged at step' in result.log, result.log[-3000:]
  assert 'a lower base_learning_rate (now 400)' in result.log and 'milder class_weights' in result.log
  assert 'a uniform guess scores cross_entropy 69.31 (ln 4 x the mean class weight 50' in result.log
  assert tf.train.latest_checkpoint(model_dir) is not None and not os.path.exists(export_dir)


@pytest.mark.slow
def test_a_model_that_answers_every_image_alike_is_stopped_as_collapsed(tmp_path):
  """A ResNet whose weights are all zero computes logits = bias for every image (ReLU's zero gradient keeps it
  there): the loss alone would never tell; its output spread does."""
  from resnet.training import resnet_model_fn  # pylint: disable=import-outside-toplevel
  from tests.helpers import tiny  # pylint: disable=import-outside-toplevel
  params = tiny.resnet_params(tmp_path, num_label_classes=4, train_batch_size=4, num_train_images=64,
                              lr_warmup_epochs=0.0, train_steps=80, iterations_per_loop=10)
  estimator = tiny.resnet_estimator(params)
  estimator.build('train')
  model = estimator.scope.get(resnet_model_fn.MODEL)
  for variable in model.weights:
    variable.assign(tf.zeros_like(variable))
  estimator.checkpoints.holds = 'zeroed'  # keep these weights: no restore of initial values
  images = tf.random.stateless_uniform([64, 32, 32, 3], [1, 2], maxval=255.0)
  labels = tf.range(64) % 4

  def input_fn(p):
    return tf.data.Dataset.from_tensor_slices((images, labels)).repeat().batch(p['batch_size'])

  with pytest.raises(hooks_lib.LossExplodedError, match='collapsed to a constant output'):
    estimator.train(input_fn, max_steps=80, hooks=[divergence.guard(params)])
