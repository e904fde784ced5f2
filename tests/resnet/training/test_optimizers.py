"""LARS (resnet/training/optimizers.py): trust ratio, skip list, weight decay, schedule, and a mirrored update.

Expected numbers are worked out by hand in the comments; the NumPy reference below is written from the update rule,
not from the optimizer's code.
"""
import logging as std_logging

import keras
import numpy as np
import pytest
import tensorflow as tf

from resnet.training import lr_schedules
from resnet.training import optimizers
from tests.helpers import tiny


def dense_layer(kernel, bias, name: str = 'dense') -> keras.layers.Dense:
  kernel = np.asarray(kernel, np.float32)
  layer = keras.layers.Dense(kernel.shape[1], name=name)
  layer.build((None, kernel.shape[0]))
  layer.kernel.assign(kernel)
  layer.bias.assign(np.asarray(bias, np.float32))
  return layer


def apply(optimizer, grads_and_vars):
  optimizer.apply_gradients([(tf.constant(np.asarray(g, np.float32)), v) for g, v in grads_and_vars])


# ------------------------------------------------------------------------------------------------ update rule
def test_trust_ratio_and_weight_decay_on_a_hand_computed_layer():
  # w = [3, 4] (|w| = 5), g = [0.6, 0.8] (|g| = 1), lr 1, weight decay 0.01, eeta 0.001, momentum 0.9:
  # trust = 0.001 * 5 / (1 + 0.01 * 5) = 0.005 / 1.05; g' = g + 0.01 w = [0.63, 0.84] = 1.05 g
  # accum = trust * g' = 0.005 g = [0.003, 0.004]; w = [2.997, 3.996]
  layer = dense_layer([[3.0], [4.0]], [0.0])
  optimizer = optimizers.LARSMomentum(1.0, momentum=0.9, weight_decay=0.01, eeta=0.001)
  optimizer.build([layer.kernel])
  apply(optimizer, [([[0.6], [0.8]], layer.kernel)])
  np.testing.assert_allclose(optimizer.accumulators[0].numpy().ravel(), [0.003, 0.004], rtol=1e-5)
  np.testing.assert_allclose(layer.kernel.numpy().ravel(), [2.997, 3.996], rtol=1e-6)
  # Step 2, same g: |w| = 4.995, trust = 0.004995 / 1.04995, g' = 1.04995 g, so trust * g' = 0.004995 g
  # = [0.002997, 0.003996]; accum = 0.9 * [0.003, 0.004] + that = [0.005697, 0.007596]; w = [2.991303, 3.988404]
  apply(optimizer, [([[0.6], [0.8]], layer.kernel)])
  np.testing.assert_allclose(optimizer.accumulators[0].numpy().ravel(), [0.005697, 0.007596], rtol=1e-5)
  np.testing.assert_allclose(layer.kernel.numpy().ravel(), [2.991303, 3.988404], rtol=1e-6)


def test_nesterov_uses_the_scaled_gradient_plus_momentum_times_accumulator():
  # As above, step 1: accum = [0.003, 0.004]; Nesterov w -= trust*g' + 0.9*accum = [0.003, 0.004] * 1.9
  layer = dense_layer([[3.0], [4.0]], [0.0])
  optimizer = optimizers.LARSMomentum(1.0, momentum=0.9, weight_decay=0.01, nesterov=True)
  optimizer.build([layer.kernel])
  apply(optimizer, [([[0.6], [0.8]], layer.kernel)])
  np.testing.assert_allclose(layer.kernel.numpy().ravel(), [3 - 0.0057, 4 - 0.0076], rtol=1e-6)


def test_batch_norm_and_bias_get_neither_scaling_nor_weight_decay():
  layer = dense_layer([[3.0], [4.0]], [3.0])
  bn = keras.layers.BatchNormalization(name='batch_normalization_3')
  bn.build((None, 2))
  bn.gamma.assign([3.0, 4.0])
  variables = [layer.kernel, layer.bias, bn.gamma, bn.beta]
  optimizer = optimizers.LARSMomentum(0.1, momentum=0.9, weight_decay=0.01)
  optimizer.build(variables)
  assert [optimizer.adapts(v) for v in variables] == [True, False, False, False]
  apply(optimizer, [([[0.6], [0.8]], layer.kernel), ([0.5], layer.bias), ([0.6, 0.8], bn.gamma),
                    ([1.0, -1.0], bn.beta)])
  # Plain momentum at lr 0.1 from a zero accumulator: w -= 0.1 * g (no 0.01 * w added, no trust ratio).
  np.testing.assert_allclose(layer.bias.numpy(), [2.95], rtol=1e-6)
  np.testing.assert_allclose(bn.gamma.numpy(), [2.94, 3.92], rtol=1e-6)
  np.testing.assert_allclose(bn.beta.numpy(), [-0.1, 0.1], rtol=1e-6)
  # The kernel got LARS: 0.1 * [0.003, 0.004] (the first test's step at lr 1).
  np.testing.assert_allclose(layer.kernel.numpy().ravel(), [2.9997, 3.9996], rtol=1e-6)


def test_default_skip_list_on_variable_paths():
  skip = optimizers.default_lars_exclusion
  assert not skip('conv2d_7/kernel') and not skip('dense/kernel')
  assert skip('batch_normalization_3/gamma') and skip('batch_normalization/moving_mean')
  assert skip('dense/bias') and skip('conv1_bn/beta') and skip('bn2/gamma') and skip('evonorm_4/v')
  assert not skip('conv2d_10/kernel') and not skip('block_group1/abnormal/kernel')


def test_resnet_adapts_exactly_its_conv_kernels_and_dense_kernel():
  model = tiny.model(18, 3)
  optimizer = optimizers.LARSMomentum(0.1)
  optimizer.build(model.trainable_variables)
  adapted = [v.path for v in model.trainable_variables if optimizer.adapts(v)]
  assert len(adapted) == 21 + 1
  assert all(p.endswith('/kernel') and p.startswith(('conv2d', 'dense/')) for p in adapted)


def test_a_custom_skip_list_and_predicate():
  layer = dense_layer([[3.0], [4.0]], [0.0])
  by_list = optimizers.LARSMomentum(0.1, exclude_from_layer_adaptation=['dense'])
  by_list.build([layer.kernel, layer.bias])
  assert not by_list.adapts(layer.kernel) and not by_list.adapts(layer.bias)
  everything = optimizers.LARSMomentum(0.1, exclude_from_layer_adaptation=lambda path: False)
  everything.build([layer.kernel, layer.bias])
  assert everything.adapts(layer.kernel) and everything.adapts(layer.bias)
  assert by_list.get_config()['exclude_from_layer_adaptation'] == ['dense']
  with pytest.raises(ValueError, match='callable on variable paths or a list of substrings'):
    optimizers.LARSMomentum(0.1, exclude_from_layer_adaptation='bias')


def test_zero_weights_or_zero_gradient_use_a_trust_ratio_of_one():
  # w = 0: trust 1, g' = g, accum = lr g = 0.5 * [1, 2]. g = 0 on w = [3, 4]: trust 1, g' = 0.01 w, accum = 0.5 g'.
  zero_w = dense_layer([[0.0], [0.0]], [0.0], name='dense_a')
  zero_g = dense_layer([[3.0], [4.0]], [0.0], name='dense_b')
  optimizer = optimizers.LARSMomentum(0.5, weight_decay=0.01)
  optimizer.build([zero_w.kernel, zero_g.kernel])
  apply(optimizer, [([[1.0], [2.0]], zero_w.kernel), ([[0.0], [0.0]], zero_g.kernel)])
  np.testing.assert_allclose(zero_w.kernel.numpy().ravel(), [-0.5, -1.0], rtol=1e-6)
  np.testing.assert_allclose(zero_g.kernel.numpy().ravel(), [3 - 0.015, 4 - 0.02], rtol=1e-6)


def numpy_lars(weights, grads_per_step, lr, momentum, weight_decay, eeta, adapted, nesterov):
  """An independent NumPy implementation of LARS momentum (contrib's LARSOptimizer rule)."""
  weights = [w.astype(np.float64).copy() for w in weights]
  accums = [np.zeros_like(w) for w in weights]
  for grads in grads_per_step:
    for i, g in enumerate(grads):
      w, g = weights[i], g.astype(np.float64)
      local_lr = lr
      if adapted[i]:
        wn, gn = np.linalg.norm(w), np.linalg.norm(g)
        local_lr = lr * (eeta * wn / (gn + weight_decay * wn) if wn > 0 and gn > 0 else 1.0)
        g = g + weight_decay * w
      accums[i] = momentum * accums[i] + local_lr * g
      weights[i] = w - (local_lr * g + momentum * accums[i] if nesterov else accums[i])
  return weights


@pytest.mark.parametrize('nesterov', [False, True])
def test_three_steps_match_a_numpy_implementation(nesterov):
  rng = np.random.default_rng(3)
  layer = dense_layer(rng.normal(size=(4, 3)), rng.normal(size=(3,)))
  variables = [layer.kernel, layer.bias]
  start = [v.numpy() for v in variables]
  steps = [[rng.normal(size=v.shape).astype(np.float32) for v in variables] for _ in range(3)]
  optimizer = optimizers.LARSMomentum(2.0, momentum=0.9, weight_decay=1e-4, eeta=0.001, nesterov=nesterov)
  optimizer.build(variables)
  for grads in steps:
    apply(optimizer, zip(grads, variables))
  expected = numpy_lars(start, steps, 2.0, 0.9, 1e-4, 0.001, [True, False], nesterov)
  for variable, value in zip(variables, expected):
    np.testing.assert_allclose(variable.numpy(), value, rtol=1e-5, atol=1e-6)


def test_bad_hyperparameters_are_rejected():
  with pytest.raises(ValueError, match='momentum'):
    optimizers.LARSMomentum(0.1, momentum=1.0)
  with pytest.raises(ValueError, match='weight_decay'):
    optimizers.LARSMomentum(0.1, weight_decay=-1.0)
  with pytest.raises(ValueError, match='eeta'):
    optimizers.LARSMomentum(0.1, eeta=0.0)


def test_config_round_trip_keeps_the_lars_weight_decay_out_of_keras_decoupled_decay():
  optimizer = optimizers.LARSMomentum(0.2, momentum=0.8, weight_decay=5e-5, eeta=0.002, nesterov=True)
  assert optimizer.weight_decay is None  # Keras' own decoupled decay would decay the weights a second time
  clone = optimizers.LARSMomentum.from_config(optimizer.get_config())
  assert (clone.momentum, clone.lars_weight_decay, clone.eeta, clone.nesterov) == (0.8, 5e-5, 0.002, True)


# ------------------------------------------------------------------------------------------------ distributed
OPTIMIZERS = {
    'lars': lambda: optimizers.LARSMomentum(1.0, momentum=0.9, weight_decay=1e-3),
    'adamw': lambda: optimizers.AdamW(0.1, weight_decay=1e-2, decayed=lambda path: path.endswith('kernel')),
    'lamb': lambda: optimizers.Lamb(0.1, weight_decay=1e-2, decayed=lambda path: path.endswith('kernel')),
}


@pytest.mark.parametrize('name', sorted(OPTIMIZERS))
def test_a_mirrored_step_in_a_tf_function_equals_the_single_device_step(name):
  devices = tf.config.list_logical_devices('CPU')
  if len(devices) < 2:
    pytest.skip('needs two logical CPU devices (set up in conftest before TF initialises)')
  rng = np.random.default_rng(0)
  kernel, bias = rng.normal(size=(3, 2)), rng.normal(size=(2,))
  x = rng.normal(size=(4, 3)).astype(np.float32)
  y = rng.normal(size=(4, 2)).astype(np.float32)

  def run(strategy):
    with strategy.scope():
      layer = dense_layer(kernel, bias)
      optimizer = OPTIMIZERS[name]()
      optimizer.build(layer.trainable_variables)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(4)
    inputs = next(iter(strategy.experimental_distribute_dataset(dataset)))

    def step(features, targets):
      with tf.GradientTape() as tape:
        per_example = tf.reduce_sum(tf.square(layer(features) - targets), axis=-1)
        loss = tf.nn.compute_average_loss(per_example, global_batch_size=4)
      grads = tape.gradient(loss, layer.trainable_variables)
      optimizer.apply_gradients(zip(grads, layer.trainable_variables))

    train = tf.function(lambda batch: strategy.run(step, args=batch))
    for _ in range(2):
      train(inputs)
    return layer, optimizer

  # Reduction through one device, not collectives: collective instance keys are process-global, and another
  # test's aborted collective would break this one.
  mirrored = tf.distribute.MirroredStrategy([d.name for d in devices[:2]],
                                            cross_device_ops=tf.distribute.ReductionToOneDevice())
  layer, optimizer = run(mirrored)
  single, _ = run(tf.distribute.OneDeviceStrategy(devices[0].name))
  for variable, reference in zip(layer.trainable_variables, single.trainable_variables):
    replicas = mirrored.experimental_local_results(variable.value)
    assert len(replicas) == 2
    for value in replicas:
      np.testing.assert_allclose(value.numpy(), reference.numpy(), rtol=1e-5, atol=1e-6)
  assert not np.allclose(layer.kernel.numpy(), kernel)
  slots = optimizer.accumulators if name == 'lars' else optimizer.first_moments
  accum = mirrored.experimental_local_results(slots[0].value)
  np.testing.assert_array_equal(accum[0].numpy(), accum[1].numpy())


# ------------------------------------------------------------------------------------------------ schedule
# B = 16384: peak 25, warm-up 5 epochs. N = 1281167, 7116 steps (the reference's v2-128 config).
# w_steps = 5 * 1281167 // 16384 = 6405835 // 16384 = 390; decay span D = 7116 - 390 + 1 = 6727.
B, N, STEPS = 16384, 1281167, 7116


@pytest.mark.parametrize('step, expected', [
    (0, 0.0),
    (100, 6.394170),      # epoch = 100 * 16384 / 1281167 = 1.278834; 25 * 1.278834 / 5
    (390, 24.937266),     # epoch = 6389760 / 1281167 = 4.987453 <= 5: still warming up
    (391, 24.992566),     # epoch 5.000241 > 5: k = 1; (25 - 1e-4) * (1 - 1/6727)^2 + 1e-4
    (3000, 9.364009),     # k = 2610; (25 - 1e-4) * (4117/6727)^2 + 1e-4 = 24.9999 * 0.374557 + 1e-4
    (7116, 1.005525e-4),  # k = 6726; 24.9999 * (1/6727)^2 + 1e-4 = 5.525e-7 + 1e-4
    (9000, 1e-4),         # past train_steps: the end learning rate
])
def test_lars_schedule_at_hand_computed_steps(step, expected):
  value = float(lr_schedules.lars_learning_rate(step, B, N, STEPS))
  assert value == pytest.approx(expected, rel=2e-5)


def test_poly_rate_replaces_the_peak():
  # 3.0 * 1.278834 / 5 at step 100; and k = 2610 after warm-up: (3 - 1e-4) * 0.3745578 + 1e-4
  assert float(lr_schedules.lars_learning_rate(100, B, N, STEPS, poly_rate=3.0)) == pytest.approx(0.767300, rel=2e-5)
  assert float(lr_schedules.lars_learning_rate(3000, B, N, STEPS, poly_rate=3.0)) == pytest.approx(1.123736, rel=2e-5)


@pytest.mark.parametrize('batch, expected', [
    (2048, (10.0, 5)), (16383, (10.0, 5)), (16384, (25.0, 5)), (32767, (25.0, 5)), (32768, (32.0, 14)),
    (65535, (32.0, 14)), (65536, (35.6, 40)), (131072, (35.6, 40))])
def test_peak_and_warmup_by_batch_size(batch, expected):
  assert lr_schedules.lars_peak_and_warmup(batch) == expected


def test_small_batches_warn_and_short_runs_stay_finite(caplog, monkeypatch):
  monkeypatch.setattr(lr_schedules, '_WARNED_BATCH_SIZES', set())
  with caplog.at_level(std_logging.WARNING, logger='absl'):
    values = [float(lr_schedules.lars_learning_rate(s, 8, 64, 3)) for s in range(5)]
  assert any('below 2000' in r.getMessage() for r in caplog.records)
  # w_steps = 5 * 64 // 8 = 40 > 3 train steps: warm-up only, 10 * (s * 8 / 64) / 5 = 0.25 s.
  np.testing.assert_allclose(values, [0.0, 0.25, 0.5, 0.75, 1.0], rtol=1e-6)
  with pytest.raises(ValueError, match='poly_rate'):
    lr_schedules.lars_learning_rate(0, B, N, STEPS, poly_rate=-1.0)


# ------------------------------------------------------------------------------------------------ in the model_fn
def test_lars_runs_without_nesterov_and_its_eval_loss_has_no_l2_term(tmp_path):
  """The reference's LARS has no Nesterov (use_nesterov defaults to true for momentum), and applies the weight
  decay itself: the eval loss must not add an L2 term the training loss does not have."""
  from resnet.training import resnet_model_fn  # pylint: disable=import-outside-toplevel
  params = tiny.resnet_params(str(tmp_path), enable_lars=True, use_nesterov=True, weight_decay=0.5)
  model = resnet_model_fn.build_model(params)
  optimizer = resnet_model_fn.build_optimizer(params, model)
  assert isinstance(optimizer, optimizers.LARSMomentum) and not optimizer.nesterov
  assert float(resnet_model_fn._weight_decay(model, params)) == 0.0  # pylint: disable=protected-access
  momentum = tiny.resnet_params(str(tmp_path), use_nesterov=True, weight_decay=0.5)
  assert resnet_model_fn.build_optimizer(momentum, model).nesterov
  assert float(resnet_model_fn._weight_decay(model, momentum)) > 0.0  # pylint: disable=protected-access


# ------------------------------------------------------------------------------------------------ AdamW
def numpy_adamw(weights, grads_per_step, lr, beta_1, beta_2, epsilon, weight_decay, decayed):
  """torch.optim.AdamW's update, in float64."""
  weights = [w.astype(np.float64).copy() for w in weights]
  m = [np.zeros_like(w) for w in weights]
  v = [np.zeros_like(w) for w in weights]
  for t, grads in enumerate(grads_per_step, start=1):
    for i, g in enumerate(grads):
      g = g.astype(np.float64)
      if decayed[i]:
        weights[i] = weights[i] * (1 - lr * weight_decay)
      m[i] = beta_1 * m[i] + (1 - beta_1) * g
      v[i] = beta_2 * v[i] + (1 - beta_2) * g * g
      denominator = np.sqrt(v[i]) / np.sqrt(1 - beta_2 ** t) + epsilon
      weights[i] = weights[i] - lr / (1 - beta_1 ** t) * m[i] / denominator
  return weights


def test_adamw_three_steps_match_torchs_update_rule():
  """Decay decoupled and on the kernel only; epsilon added to the bias-corrected root (torch), which a large epsilon
  tells from Keras' Adam (epsilon added to the uncorrected root)."""
  rng = np.random.default_rng(5)
  layer = dense_layer(rng.normal(size=(4, 3)), rng.normal(size=(3,)))
  variables = [layer.kernel, layer.bias]
  start = [v.numpy() for v in variables]
  steps = [[rng.normal(size=v.shape).astype(np.float32) for v in variables] for _ in range(3)]
  optimizer = optimizers.AdamW(0.05, beta_1=0.8, beta_2=0.9, epsilon=0.1, weight_decay=0.3,
                               decayed=lambda path: path.endswith('kernel'))
  optimizer.build(variables)
  assert [optimizer.decays(v) for v in variables] == [True, False]
  for grads in steps:
    apply(optimizer, zip(grads, variables))
  expected = numpy_adamw(start, steps, 0.05, 0.8, 0.9, 0.1, 0.3, [True, False])
  for variable, value in zip(variables, expected):
    np.testing.assert_allclose(variable.numpy(), value, rtol=1e-5, atol=1e-6)
  assert int(optimizer.iterations.numpy()) == 3
  with pytest.raises(ValueError, match='beta_2'):
    optimizers.AdamW(0.1, beta_2=1.0)


def numpy_lamb(weights, grads_per_step, lr, beta_1, beta_2, epsilon, weight_decay, decayed):
  """timm's Lamb (bias correction on, always_adapt off, no built-in clipping), in float64."""
  weights = [w.astype(np.float64).copy() for w in weights]
  m = [np.zeros_like(w) for w in weights]
  v = [np.zeros_like(w) for w in weights]
  for t, grads in enumerate(grads_per_step, start=1):
    for i, g in enumerate(grads):
      g = g.astype(np.float64)
      m[i] = beta_1 * m[i] + (1 - beta_1) * g
      v[i] = beta_2 * v[i] + (1 - beta_2) * g * g
      update = (m[i] / (1 - beta_1 ** t)) / (np.sqrt(v[i] / (1 - beta_2 ** t)) + epsilon)
      trust = 1.0
      if decayed[i]:
        update = update + weight_decay * weights[i]
        w_norm, u_norm = np.linalg.norm(weights[i]), np.linalg.norm(update)
        trust = w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0
      weights[i] = weights[i] - lr * trust * update
  return weights


def test_lamb_three_steps_match_timms_update_rule():
  rng = np.random.default_rng(6)
  layer = dense_layer(rng.normal(size=(4, 3)), rng.normal(size=(3,)))
  variables = [layer.kernel, layer.bias]
  start = [v.numpy() for v in variables]
  steps = [[rng.normal(size=v.shape).astype(np.float32) for v in variables] for _ in range(3)]
  optimizer = optimizers.Lamb(0.05, beta_1=0.8, beta_2=0.9, epsilon=1e-6, weight_decay=0.3,
                              decayed=lambda path: path.endswith('kernel'))
  optimizer.build(variables)
  for grads in steps:
    apply(optimizer, zip(grads, variables))
  expected = numpy_lamb(start, steps, 0.05, 0.8, 0.9, 1e-6, 0.3, [True, False])
  for variable, value in zip(variables, expected):
    np.testing.assert_allclose(variable.numpy(), value, rtol=1e-5, atol=1e-6)
  # The trust ratio acts: AdamW's rule moves the kernel elsewhere.
  adamw = numpy_adamw(start, steps, 0.05, 0.8, 0.9, 1e-6, 0.3, [True, False])
  assert not np.allclose(expected[0], adamw[0], atol=1e-3)
  zero = dense_layer(np.zeros((4, 3)), np.zeros(3))   # |w| = 0: a trust ratio of 1, not NaN
  lamb = optimizers.Lamb(0.05, decayed=lambda path: True)
  lamb.build(zero.trainable_variables)
  apply(lamb, zip([np.ones((4, 3)), np.ones(3)], zero.trainable_variables))
  assert np.all(np.isfinite(zero.kernel.numpy())) and not np.allclose(zero.kernel.numpy(), 0.0)


def test_adamw_in_the_model_fn_decays_the_l2_set_and_its_loss_has_no_l2_term(tmp_path):
  from params import validation  # pylint: disable=import-outside-toplevel
  from resnet.model import tf1_names  # pylint: disable=import-outside-toplevel
  from resnet.training import resnet_model_fn  # pylint: disable=import-outside-toplevel
  params = tiny.resnet_params(str(tmp_path), optimizer='adamw', weight_decay=0.05, weight_decay_biases=False,
                              adam_beta2=0.99)
  model = resnet_model_fn.build_model(params)
  optimizer = resnet_model_fn.build_optimizer(params, model)
  assert isinstance(optimizer, optimizers.AdamW) and optimizer.beta_2 == 0.99
  kernels = {id(v) for v in tf1_names.weight_decay_variables(model, biases=False)}
  assert kernels and all(optimizer.decays(v) == (id(v) in kernels) for v in model.trainable_variables)
  assert float(resnet_model_fn._weight_decay(model, params)) == 0.0  # pylint: disable=protected-access
  for overrides, message in ((dict(layer_decay=0.7), 'layer_decay .* AdamW normalises away'),
                             (dict(train_head_only_steps=5), 'AdamW still applies its weight decay'),
                             (dict(enable_lars=True), 'enable_lars=true is the LARS optimizer')):
    with pytest.raises(ValueError, match=message):
      tiny.resnet_params(str(tmp_path), optimizer='adamw', **overrides)
  with pytest.raises(ValueError, match=r"one of \['momentum', 'adamw', 'lamb', 'muon'\]"):
    tiny.resnet_params(str(tmp_path), optimizer='adam')
  assert validation.lars_is_the_momentum_optimizer(dict(enable_lars=True, optimizer='momentum')) is None
  lamb = tiny.resnet_params(str(tmp_path), optimizer='lamb', weight_decay=0.05)
  assert isinstance(resnet_model_fn.build_optimizer(lamb, model), optimizers.Lamb)
  assert float(resnet_model_fn._weight_decay(model, lamb)) == 0.0  # pylint: disable=protected-access
  with pytest.raises(ValueError, match='layer_decay .* LAMB normalises away'):
    tiny.resnet_params(str(tmp_path), optimizer='lamb', layer_decay=0.7)


@pytest.mark.slow
def test_adamw_resumes_with_its_moments_and_step_count(tmp_path):
  """Two steps in one run equal one step, a new process-like Estimator on the same model_dir, and another: the
  moments and the update count (bias correction) come back from the checkpoint."""
  from resnet.training import resnet_model_fn  # pylint: disable=import-outside-toplevel
  images = np.random.default_rng(2).uniform(0, 255, (2, 32, 32, 3)).astype(np.float32)

  def input_fn(params):
    return tf.data.Dataset.from_tensor_slices((images, np.array([0, 1], np.int32))).repeat().batch(
        params['batch_size'])

  def weights_after(model_dir, stops):
    for stop in stops:
      keras.utils.set_random_seed(7)   # the same initial weights; a resumed run restores them anyway
      params = tiny.resnet_params(model_dir, optimizer='adamw', weight_decay=0.05, base_learning_rate=0.05,
                                  lr_warmup_epochs=0.0, train_steps=2, num_train_images=64)
      estimator = tiny.resnet_estimator(params)
      estimator.train(input_fn, max_steps=stop)
    return [v.numpy() for v in estimator.scope.get(resnet_model_fn.MODEL).trainable_variables]

  together = weights_after(str(tmp_path / 'together'), [2])
  resumed = weights_after(str(tmp_path / 'resumed'), [1, 2])
  for a, b in zip(together, resumed):
    np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
  reader = tf.train.load_checkpoint(str(tmp_path / 'resumed' / 'model.ckpt-2'))
  names = reader.get_variable_to_shape_map()
  counts = [n for n in names if n.startswith('optimizer/') and 'iteration' in n]
  assert counts and int(reader.get_tensor(counts[0])) == 2, sorted(n for n in names if n.startswith('optimizer/'))[:8]
  assert len([n for n in names if n.startswith('optimizer/')]) > 2 * len(together)   # m and v of every variable


def test_adamw_under_float16_loss_scaling_skips_an_overflowing_step_without_counting_it():
  """float16 runs wrap the optimizer in Keras' LossScaleOptimizer: a non-finite step changes nothing and does not
  advance t (bias correction), and the next step is AdamW's first, on the unscaled gradients."""
  rng = np.random.default_rng(7)
  layer = dense_layer(rng.normal(size=(4, 3)), rng.normal(size=(3,)))
  variables = [layer.kernel, layer.bias]
  start = [v.numpy() for v in variables]
  inner = optimizers.AdamW(0.05, weight_decay=0.3, decayed=lambda path: path.endswith('kernel'),
                           gradients_summed=True)
  optimizer = keras.optimizers.LossScaleOptimizer(inner, initial_scale=1024.0)
  optimizer.build(variables)
  apply(optimizer, zip([np.full((4, 3), np.inf), np.zeros(3)], variables))
  for variable, value in zip(variables, start):
    np.testing.assert_array_equal(variable.numpy(), value)
  assert int(inner.iterations.numpy()) == 0
  grads = [rng.normal(size=v.shape).astype(np.float32) for v in variables]
  scale = float(optimizer.dynamic_scale.numpy())   # halved by the skipped step
  apply(optimizer, zip([g * scale for g in grads], variables))
  expected = numpy_adamw(start, [grads], 0.05, 0.9, 0.999, 1e-8, 0.3, [True, False])
  for variable, value in zip(variables, expected):
    np.testing.assert_allclose(variable.numpy(), value, rtol=1e-5, atol=1e-6)
  assert int(inner.iterations.numpy()) == 1


# ------------------------------------------------------------------------------------------------ Muon
def numpy_newton_schulz(g, steps):
  """The reference's zeropower_via_newtonschulz5 (Keller Jordan's muon.py), in float64."""
  a, b, c = 3.4445, -4.7750, 2.0315
  x = g.T if g.shape[0] > g.shape[1] else g
  x = x / (np.linalg.norm(x) + 1e-7)
  for _ in range(steps):
    gram = x @ x.T
    x = a * x + (b * gram + c * gram @ gram) @ x
  return x.T if g.shape[0] > g.shape[1] else x


def numpy_muon(weights, grads_per_step, lr, momentum, ns_steps, adamw_lr, betas, epsilon, weight_decay, decayed):
  """The reference's SingleDeviceMuonWithAuxAdam step, in float64, on Keras-layout weights: conv kernels
  [kh, kw, in, out] go through torch's layout [out, in, kh, kw] viewed as [out, in kh kw] (muon_update with
  Nesterov), the rest take the AdamW step (adam_update; decay p *= 1 - lr wd first, as the reference)."""
  weights = [w.astype(np.float64).copy() for w in weights]
  m = [np.zeros_like(w) for w in weights]
  v = [np.zeros_like(w) for w in weights]
  for t, grads in enumerate(grads_per_step, start=1):
    for i, g in enumerate(grads):
      g = g.astype(np.float64)
      if weights[i].ndim == 4:
        torch_g = g.transpose(3, 2, 0, 1)                 # [out, in, kh, kw]
        torch_m = m[i].transpose(3, 2, 0, 1)
        torch_m = momentum * torch_m + (1 - momentum) * torch_g          # momentum.lerp_(grad, 1 - beta)
        update = (1 - momentum) * torch_g + momentum * torch_m          # grad.lerp_(momentum, beta)
        matrix = update.reshape(len(update), -1)                        # update.view(len(update), -1)
        # muon.py's muon_update: `update *= max(1, grad.size(-2) / grad.size(-1))**0.5` on the 4-D gradient, not
        # on the matrix: kh / kw, so no scale on a square kernel.
        update = numpy_newton_schulz(matrix, ns_steps) * max(1, torch_g.shape[-2] / torch_g.shape[-1]) ** 0.5
        m[i] = torch_m.transpose(2, 3, 1, 0)
        if decayed[i]:
          weights[i] = weights[i] * (1 - lr * weight_decay)
        weights[i] = weights[i] - lr * update.reshape(torch_g.shape).transpose(2, 3, 1, 0)
      else:
        if decayed[i]:
          weights[i] = weights[i] * (1 - adamw_lr * weight_decay)
        m[i] = betas[0] * m[i] + (1 - betas[0]) * g
        v[i] = betas[1] * v[i] + (1 - betas[1]) * g * g
        step = (m[i] / (1 - betas[0] ** t)) / (np.sqrt(v[i] / (1 - betas[1] ** t)) + epsilon)
        weights[i] = weights[i] - adamw_lr * step
  return weights


def _muon_layers(rng):
  """A 3x3 conv (a wide matrix [6, 36]), an expanding 1x1 conv (a bottleneck's 64 -> 256 scaled down: a tall matrix
  [16, 4], which the iteration transposes and the reference does not scale: its kh / kw is 1) and a dense head: Muon,
  Muon, AdamW."""
  wide = keras.layers.Conv2D(6, 3, name='conv_wide')
  wide.build((None, 5, 5, 4))
  tall = keras.layers.Conv2D(16, 1, name='conv_tall')
  tall.build((None, 5, 5, 4))
  head = dense_layer(rng.normal(size=(6, 3)), rng.normal(size=(3,)))
  for layer in (wide, tall):
    for variable in layer.trainable_variables:
      variable.assign(rng.normal(size=variable.shape).astype(np.float32))
  return [wide.kernel, wide.bias, tall.kernel, tall.bias, head.kernel, head.bias]


def test_muon_three_steps_match_the_reference_update():
  """Conv kernels: the reference's Muon through torch's layout (the columns in another order than ours, which the
  iteration does not mind); the rest: AdamW at lr x adamw_lr_ratio; decay on the kernels only."""
  rng = np.random.default_rng(11)
  variables = _muon_layers(rng)
  start = [v.numpy() for v in variables]
  steps = [[rng.normal(size=v.shape).astype(np.float32) for v in variables] for _ in range(3)]
  decayed = [v.path.endswith('kernel') for v in variables]
  optimizer = optimizers.Muon(0.05, momentum=0.9, ns_steps=5, adamw_lr_ratio=0.2, beta_1=0.8, beta_2=0.9,
                              epsilon=1e-3, weight_decay=0.3, decayed=lambda path: path.endswith('kernel'))
  optimizer.build(variables)
  assert [optimizer.muon_updates(v) for v in variables] == [True, False, True, False, False, False]
  for grads in steps:
    apply(optimizer, zip(grads, variables))
  expected = numpy_muon(start, steps, 0.05, 0.9, 5, 0.05 * 0.2, (0.8, 0.9), 1e-3, 0.3, decayed)
  for variable, value in zip(variables, expected):
    np.testing.assert_allclose(variable.numpy(), value, rtol=1e-4, atol=1e-5, err_msg=variable.path)
  # The orthogonalisation acts: the kernels' steps are not momentum SGD's.
  plain = [s - 0.05 * sum(g[i] for g in steps) for i, s in enumerate(start)]
  assert not np.allclose(expected[0], plain[0], atol=1e-2)
  # The scale is the reference's, of torch's last two dims: kh / kw for a kernel, out / in for a matrix.
  assert optimizers.muon_scale((1, 1, 4, 16)) == 1.0 and optimizers.muon_scale((3, 1, 4, 16)) == pytest.approx(3 ** 0.5)
  assert optimizers.muon_scale((6, 3)) == 1.0 and optimizers.muon_scale((3, 6)) == pytest.approx(2 ** 0.5)
  # Keras' own Muon gives every conv kernel (4-D) to its AdamW: not the reference's update for a ResNet.
  assert keras.optimizers.Muon()._should_use_adamw(variables[0])  # pylint: disable=protected-access


def test_muon_with_other_settings_moves_elsewhere():
  """Each setting reaches the update: without Nesterov, with fewer Newton-Schulz steps, with another momentum."""
  rng = np.random.default_rng(12)
  variables = _muon_layers(rng)
  start = [v.numpy() for v in variables]
  steps = [[rng.normal(size=v.shape).astype(np.float32) for v in variables] for _ in range(2)]
  results = {}
  for name, options in {'reference': {}, 'no_nesterov': dict(nesterov=False), 'ns_2': dict(ns_steps=2),
                        'momentum_0.5': dict(momentum=0.5)}.items():
    for variable, value in zip(variables, start):
      variable.assign(value)
    optimizer = optimizers.Muon(0.05, weight_decay=0.0, **options)
    optimizer.build(variables)
    for grads in steps:
      apply(optimizer, zip(grads, variables))
    results[name] = variables[0].numpy().copy()
  for name in ('no_nesterov', 'ns_2', 'momentum_0.5'):
    assert not np.allclose(results[name], results['reference'], atol=1e-4), name
  with pytest.raises(ValueError, match='ns_steps'):
    optimizers.Muon(0.1, ns_steps=0)


def test_muon_in_the_model_fn_orthogonalises_the_conv_kernels_and_refuses_what_adamw_refuses(tmp_path):
  from resnet.training import resnet_model_fn  # pylint: disable=import-outside-toplevel
  params = tiny.resnet_params(str(tmp_path), optimizer='muon', weight_decay=0.05, muon_momentum=0.9,
                              muon_ns_steps=4, muon_adamw_lr_ratio=0.1)
  model = resnet_model_fn.build_model(params)
  optimizer = resnet_model_fn.build_optimizer(params, model)
  assert isinstance(optimizer, optimizers.Muon)
  assert (optimizer.momentum, optimizer.ns_steps, optimizer.adamw_lr_ratio) == (0.9, 4, 0.1)
  muon = [v.path for v in model.trainable_variables if optimizer.muon_updates(v)]
  assert muon and all(len(v.shape) == 4 for v in model.trainable_variables if v.path in muon)
  assert not any('dense' in path for path in muon)   # the head: AdamW's
  assert float(resnet_model_fn._weight_decay(model, params)) == 0.0  # pylint: disable=protected-access
  for overrides, message in ((dict(layer_decay=0.7), 'layer_decay .* Muon normalises away'),
                             (dict(train_head_only_steps=5), 'Muon still applies its weight decay'),
                             (dict(muon_ns_steps=0), 'muon_ns_steps must be >= 1'),
                             (dict(muon_adamw_lr_ratio=0.0), 'muon_adamw_lr_ratio must be > 0'),
                             (dict(muon_momentum=1.0), 'muon_momentum must be >= 0 and < 1')):
    with pytest.raises(ValueError, match=message):
      tiny.resnet_params(str(tmp_path), optimizer='muon', **overrides)


@pytest.mark.slow
def test_muon_resumes_with_its_momentum_and_adamw_moments(tmp_path):
  """Two steps in one run equal one step and a resumed one: Muon's momentum, AdamW's moments and the update count
  come back from the checkpoint."""
  from resnet.training import resnet_model_fn  # pylint: disable=import-outside-toplevel
  images = np.random.default_rng(3).uniform(0, 255, (2, 32, 32, 3)).astype(np.float32)

  def input_fn(params):
    return tf.data.Dataset.from_tensor_slices((images, np.array([0, 1], np.int32))).repeat().batch(
        params['batch_size'])

  def weights_after(model_dir, stops):
    for stop in stops:
      keras.utils.set_random_seed(7)
      params = tiny.resnet_params(model_dir, optimizer='muon', weight_decay=0.05, base_learning_rate=0.2,
                                  muon_adamw_lr_ratio=0.5, lr_warmup_epochs=0.0, train_steps=2, num_train_images=64)
      estimator = tiny.resnet_estimator(params)
      estimator.train(input_fn, max_steps=stop)
    return [v.numpy() for v in estimator.scope.get(resnet_model_fn.MODEL).trainable_variables]

  together = weights_after(str(tmp_path / 'together'), [2])
  resumed = weights_after(str(tmp_path / 'resumed'), [1, 2])
  for a, b in zip(together, resumed):
    np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
  names = tf.train.load_checkpoint(str(tmp_path / 'resumed' / 'model.ckpt-2')).get_variable_to_shape_map()
  slots = [n for n in names if n.startswith('optimizer/_variables/')]
  kernels = [v for v in together if v.ndim == 4]
  # One momentum per conv kernel, two moments per other variable.
  assert len(slots) == len(kernels) + 2 * (len(together) - len(kernels))
