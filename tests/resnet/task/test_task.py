"""resnet/task/task.py: a new task is one Task subclass, registered; the model_fn trains, evaluates and predicts
through it without another change (a toy regression of a score), and the registry names the tasks it has."""
import numpy as np
import pytest
import tensorflow as tf

from resnet.task import task
from resnet.task import tasks
from tests.helpers import tiny


class ScoreRegression(task.Task):
  """A score in [0, 1] per image (the label), regressed by the head's one output: squared error, MAE."""
  name = 'toy_score'

  def targets(self, labels, training=False):
    return tf.cast(tf.reshape(labels, [-1, 1]), tf.float32)

  def per_example_loss(self, logits, targets, training=False):
    return tf.square(tf.cast(logits[:, 0], tf.float32) - targets[:, 0])

  def chance_loss(self, counts, num_images):
    return 1.0 / 12, 'the variance of a uniform score'

  def eval_parts(self, logits, labels, per_example_loss):
    count = tf.cast(tf.size(labels), tf.float32)
    error = tf.abs(tf.cast(logits[:, 0], tf.float32) - tf.cast(labels, tf.float32))
    return {'loss': (tf.reduce_sum(per_example_loss), count), 'mae': (tf.reduce_sum(error), count)}, {}, {}

  def predictions(self, logits, scope):
    return {'score': tf.cast(logits[:, 0], tf.float32)}


@pytest.fixture
def toy_task():
  task.register(ScoreRegression)
  yield ScoreRegression
  task._TASKS.pop(ScoreRegression.name)  # pylint: disable=protected-access


def test_the_registry_chooses_by_the_task_param_and_names_the_tasks_it_has(toy_task):
  assert isinstance(tasks.for_params({'task': 'toy_score'}), toy_task)
  assert tasks.for_params({'task': None}).name == 'single_label'
  with pytest.raises(ValueError, match="task='score' is not a task of this program; the tasks are multi_label, "
                                       'single_label, toy_score'):
    tasks.for_params({'task': 'score'})
  with pytest.raises(ValueError, match='has no name'):
    task.register(type('Nameless', (task.Task,), {}))


@pytest.mark.slow   # 40 training steps of a ResNet-10: an end-to-end run (make test-fast leaves those out)
def test_a_toy_regression_task_trains_evaluates_and_predicts_through_the_model_fn(tmp_path, toy_task):
  params = dict(tiny.resnet_params(tmp_path, num_label_classes=1, weight_decay=0.0, label_smoothing=0.0,
                                   optimizer='adamw', base_learning_rate=0.01, lr_warmup_epochs=0,
                                   train_batch_size=8, eval_batch_size=8, predict_batch_size=8).as_dict(),
                task='toy_score')
  images = tiny.varied_images(32, seed=3)
  scores = (images.mean(axis=(1, 2, 3)) / 255.0).astype(np.float32)   # brightness: learnable from pixels
  data = lambda p: tf.data.Dataset.from_tensor_slices((images, scores)).batch(p['batch_size'], drop_remainder=True)
  estimator = tiny.resnet_estimator(params)
  estimator.build('eval')
  estimator.save()   # the untrained model, evaluated first
  before = estimator.evaluate(data)
  estimator.train(lambda p: data(p).repeat(), max_steps=40)
  after = estimator.evaluate(data)
  assert set(before) >= {'loss', 'mae'} and 'top_1_accuracy' not in after
  assert after['loss'] < before['loss'] / 2, (before, after)
  predicted = list(estimator.predict(lambda p: tf.data.Dataset.from_tensor_slices(images).batch(p['batch_size'])))
  assert len(predicted) == 32 and set(predicted[0]) == {'score'}
  np.testing.assert_allclose(np.mean(np.abs([p['score'] for p in predicted] - scores)), after['mae'], rtol=1e-4)
