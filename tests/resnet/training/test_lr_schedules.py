"""LR schedules at their boundaries, and the TF1 momentum update rule."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from resnet.run_setup import run_params
from resnet.training import lr_schedules
from resnet.training import optimizers


def params(**overrides):
  return run_params.make_params(overrides)  # no data_dir: ImageNet's counts


def lr(step, p):
  return float(lr_schedules.learning_rate(tf.constant(step), p))


def test_stepwise_matches_the_reference_for_its_90_epoch_run():
  p = params(lr_schedule='stepwise')  # batch 1024, 112590 steps = 90 epochs of 1251 steps
  assert lr_schedules.peak_learning_rate(p) == pytest.approx(0.4)
  warmup_end = 5 * 1281167 / 1024  # lr_warmup_epochs=5 real epochs
  assert lr(0, p) == 0.0
  assert lr(3000, p) == pytest.approx(0.4 * 3000 / warmup_end, rel=1e-5)
  assert lr(6256, p) == pytest.approx(0.4)
  assert lr(30 * 1251 - 1, p) == pytest.approx(0.4)
  assert lr(30 * 1251, p) == pytest.approx(0.04)
  assert lr(60 * 1251, p) == pytest.approx(0.004)
  assert lr(80 * 1251 - 1, p) == pytest.approx(0.004)
  assert lr(80 * 1251, p) == pytest.approx(0.0004)


def test_stepwise_scales_boundaries_to_train_steps():
  p = params(lr_schedule='stepwise', train_steps=900, train_batch_size=256, base_learning_rate=0.1,
             num_train_images=2560)  # 10 steps per epoch: the 5-epoch warm-up is 50 steps
  assert lr(49, p) == pytest.approx(0.1 * 49 / 50)
  assert lr(299, p) == pytest.approx(0.1)
  assert lr(300, p) == pytest.approx(0.01)
  assert lr(800, p) == pytest.approx(0.0001)


def test_cosine_warms_up_then_decays_to_zero():
  p = params(lr_schedule='cosine', train_steps=1000, train_batch_size=256, base_learning_rate=0.1,
             lr_warmup_epochs=2.0, num_train_images=12800)  # 50 steps per epoch: warm-up = 100 steps
  assert lr(50, p) == pytest.approx(0.05)
  assert lr(100, p) == pytest.approx(0.1)
  assert lr(550, p) == pytest.approx(0.05, rel=1e-4)
  assert lr(1000, p) == pytest.approx(0.0, abs=1e-7)


def seed_lrfn(epoch, start_lr, min_lr, max_lr, rampup_epochs, sustain_epochs, exp_decay):
  """The seeds' Keras LearningRateScheduler function, verbatim in behaviour."""
  if epoch < rampup_epochs:
    return (max_lr - start_lr) / rampup_epochs * epoch + start_lr
  if epoch < rampup_epochs + sustain_epochs:
    return max_lr
  return (max_lr - min_lr) * exp_decay ** (epoch - rampup_epochs - sustain_epochs) + min_lr


@pytest.mark.parametrize('sustain', [0.0, 2.0])
def test_exponential_matches_the_seed_schedule_per_epoch(sustain):
  p = params(lr_schedule='exponential', num_train_images=1000, train_batch_size=100, base_learning_rate=0.0512,
             lr_start=1e-5, lr_min=1e-5, lr_rampup_epochs=5.0, lr_sustain_epochs=sustain, lr_exp_decay=0.8)
  peak = lr_schedules.peak_learning_rate(p)  # 0.0512 * 100 / 256 = 0.02
  for epoch in range(15):
    expected = seed_lrfn(epoch, 1e-5, 1e-5, peak, 5, sustain, 0.8)
    assert lr(epoch * 10, p) == pytest.approx(expected, rel=1e-5)
    assert lr(epoch * 10 + 9, p) == pytest.approx(expected, rel=1e-5)  # constant within an epoch


def test_tf1_momentum_keeps_the_learning_rate_out_of_the_accumulator():
  var = keras.Variable(np.array([1.0, -2.0], np.float32))
  lrs = iter([0.1, 0.5, 0.05])
  opt = optimizers.TF1Momentum(learning_rate=0.1, momentum=0.9, nesterov=True)
  opt.build([var])
  expected, accum = np.array([1.0, -2.0]), np.zeros(2)
  for grad, rate in zip([np.array([0.3, 0.1]), np.array([-0.2, 0.4]), np.array([0.5, 0.5])], lrs):
    opt.learning_rate = rate
    opt.apply_gradients([(tf.constant(grad, tf.float32), var)])
    accum = 0.9 * accum + grad
    expected = expected - rate * (grad + 0.9 * accum)
  np.testing.assert_allclose(var.numpy(), expected, rtol=1e-6)
  # Keras SGD folds lr into its velocity, which differs once the rate changes: the rule above must not.
  sgd_var = keras.Variable(np.array([1.0, -2.0], np.float32))
  sgd = keras.optimizers.SGD(0.1, momentum=0.9, nesterov=True)
  for grad, rate in zip([np.array([0.3, 0.1]), np.array([-0.2, 0.4]), np.array([0.5, 0.5])], [0.1, 0.5, 0.05]):
    sgd.learning_rate = rate
    sgd.apply_gradients([(tf.constant(grad, tf.float32), sgd_var)])
  assert not np.allclose(sgd_var.numpy(), expected, rtol=1e-4)
