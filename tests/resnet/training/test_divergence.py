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


def test_a_uniform_guess_scores_ln_k_times_the_frequency_weighted_class_weight():
  """Binary, 1% positives, weights [1, 100]: ln 2 x (0.99 + 1.00) = 1.38 (the old guard assumed 35, so a weighted
  run could explode unnoticed); 'balanced' on a 100-class long tail: ln 100 = 4.6 (the old guard assumed 22)."""
  base = dict(num_label_classes=2, class_weights=[1.0, 100.0], class_weight_normalization='batch_size')
  chance, how = divergence.uniform_guess_loss(base, [0.99, 0.01])
  assert chance == pytest.approx(math.log(2) * 1.99) and 'mean class weight 1.99' in how
  assert divergence.uniform_guess_loss({**base, 'class_weight_normalization': 'weight_sum'}, [0.99, 0.01])[0] == \
      pytest.approx(math.log(2))
  counts = [1000 // (c + 1) for c in range(100)]
  balanced = [sum(counts) / (100 * n) for n in counts]
  frequencies = [n / sum(counts) for n in counts]
  params = dict(num_label_classes=100, class_weights=balanced, class_weight_normalization='batch_size')
  assert divergence.uniform_guess_loss(params, frequencies)[0] == pytest.approx(math.log(100))
  assert divergence.uniform_guess_loss(dict(params, class_weights=None), None)[0] == pytest.approx(math.log(100))
  # Without training counts (synthetic labels are uniform): the plain mean.
  assert divergence.uniform_guess_loss(base, None)[0] == pytest.approx(math.log(2) * 50.5)


def test_under_binary_cross_entropy_a_uniform_guess_is_every_sigmoid_at_1_over_k_where_the_head_starts(tmp_path):
  """Not ln 2 (every sigmoid at 0.5): that is ~90 times a healthy 1000-class BCE loss, and the guard would miss
  an explosion; nor ln K, the softmax loss's."""
  from resnet.model import tf1_names  # pylint: disable=import-outside-toplevel
  from resnet.training import resnet_model_fn  # pylint: disable=import-outside-toplevel
  from tests.helpers import tiny  # pylint: disable=import-outside-toplevel
  bce = dict(num_label_classes=1000, class_weights=None, class_weight_normalization='batch_size',
             loss='binary_cross_entropy', bce_target_threshold=None)
  chance, how = divergence.uniform_guess_loss(bce, None)
  assert chance == pytest.approx((1 + math.log(1000)) / 1000, rel=1e-3) and 'sigmoids at 1/1000' in how
  # An untrained head's logits are the prior's, and score it on a one-hot target.
  params = tiny.resnet_params(tmp_path, num_label_classes=4, loss='binary_cross_entropy')
  bias = tf1_names.tf1_variable_map(resnet_model_fn.build_model(params))['dense/bias'].numpy()
  assert bias == pytest.approx([-math.log(3)] * 4)
  loss = resnet_model_fn.per_example_loss(tf.constant([bias]), tf.constant([[0.0, 1.0, 0.0, 0.0]]), params)
  assert float(loss[0]) == pytest.approx(divergence.uniform_guess_loss(dict(bce, num_label_classes=4), None)[0])
  softmax = tiny.resnet_params(tmp_path, num_label_classes=4)
  assert not tf1_names.tf1_variable_map(resnet_model_fn.build_model(softmax))['dense/bias'].numpy().any()
  weighted = dict(bce, num_label_classes=2, class_weights=[1.0, 100.0])
  assert divergence.uniform_guess_loss(weighted, [0.99, 0.01])[0] == pytest.approx(math.log(2) * 1.99)


def test_multi_label_chance_is_a_guess_of_each_classs_rate_positives_weighted():
  """A 17-class Planet-like rate of 0.17: ~0.46 per class (not ln 2 = 0.69, nor the one-label 1/K prior's 0.23);
  with positive weights negatives / positives the positives weigh as much as the negatives."""
  rates = [0.17] * 17
  params = dict(task='multi_label', num_label_classes=17, class_weights=None, class_weight_normalization='batch_size')
  entropy = -(0.17 * math.log(0.17) + 0.83 * math.log(0.83))
  chance, how = divergence.uniform_guess_loss(params, rates)
  assert chance == pytest.approx(entropy) and "each class's rate" in how
  weighted = dict(params, class_weights=[0.83 / 0.17] * 17)
  assert divergence.uniform_guess_loss(weighted, rates)[0] == pytest.approx(-0.83 * math.log(0.17 * 0.83))
  # Without per-class counts: the one-label prior 1/K, the binary cross-entropy chance above.
  bce = dict(num_label_classes=17, class_weights=None, class_weight_normalization='batch_size',
             loss='binary_cross_entropy')
  assert divergence.uniform_guess_loss(params, None)[0] == pytest.approx(divergence.uniform_guess_loss(bce, None)[0])


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
