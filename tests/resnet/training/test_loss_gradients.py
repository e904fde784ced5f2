"""The train step's gradients against an independent formulation, for every kind of target the loss sees.

The expected gradient is built from the hand derivative of ``-sum(t * log_softmax(z))`` with respect to the
logits, ``(sum(t) * softmax(z) - t) / denominator``, back-propagated through the same model on each replica's own
batch (``tape.gradient(logits, variables, output_gradients=...)``); the real one is read from one update of the
real step (momentum 0: update = -lr x gradient). TensorFlow's fused softmax cross-entropy kernel returns
``softmax - t``, which is wrong for class-weighted targets (rows summing to w != 1): these tests fail on it.

They run in the suite's default mode (no deterministic ops, as users run) and again with deterministic ops in a
subprocess (tests/test_kernel_modes.py), since the two modes run different kernels.
"""
import keras
import numpy as np
import pytest
import tensorflow as tf

from resnet.training import mixing
from resnet.model import tf1_names
from resnet.task import single_label
from resnet.training import resnet_model_fn
from tests.helpers import tiny

CLASSES = 3
BATCH = 8
# Two replicas hold [0, 1, 2, 0] and [1, 1, 2, 0]: unequal weight sums (5.5 and 7.5), so a denominator summed on one
# replica and scaled by the replica count (11 or 15) is not the global sum (13).
LABELS = np.array([0, 1, 2, 0, 1, 1, 2, 0], np.int32)
IMAGES = np.random.default_rng(9).uniform(0, 255, (BATCH, 32, 32, 3)).astype(np.float32)
WEIGHTS = [1.0, 3.0, 0.5]
# Multi-label rows: none, one, two and all three classes (a negative row too).
MULTI_HOT = np.array([[1, 0, 1], [0, 0, 0], [0, 1, 0], [1, 1, 1], [0, 1, 1], [1, 0, 0], [0, 0, 0], [1, 1, 0]],
                     np.int32)

CASES = {  # name: params overrides
    'one_hot': {},
    'smoothed': dict(label_smoothing=0.2),
    'weighted': dict(class_weights=WEIGHTS),
    'weighted_weight_sum': dict(class_weights=WEIGHTS, class_weight_normalization='weight_sum'),
    'mixup_cutmix': dict(mixup_alpha=1.0, cutmix_alpha=1.0, label_smoothing=0.1),
    'weighted_mixed': dict(class_weights=WEIGHTS, mixup_alpha=1.0, label_smoothing=0.1),
    'weighted_mixed_weight_sum': dict(class_weights=WEIGHTS, mixup_alpha=1.0,
                                      class_weight_normalization='weight_sum'),
    # bfloat16's CPU kernels forced in float32: the strided 1x1 projections' matmul gradient and the XLA add + ReLU
    # inside the distributed step (tests/resnet/model/test_cpu_kernels.py checks them against TensorFlow's own).
    'cpu_kernels': dict(conv1x1_filter_grad='matmul', residual_add_relu='xla', label_smoothing=0.1),
    'bce_smoothed': dict(loss='binary_cross_entropy', label_smoothing=0.2),
    # Smoothed, mixed, then thresholded (timm's order); weighted and mixed: each source's weighted loss.
    'bce_threshold_mixed': dict(loss='binary_cross_entropy', bce_target_threshold=0.2, label_smoothing=0.1,
                                mixup_alpha=1.0, cutmix_alpha=1.0),
    'bce_weighted_mixed': dict(loss='binary_cross_entropy', label_smoothing=0.1, class_weights=WEIGHTS,
                               mixup_alpha=1.0),
    # Multi-hot targets: binary smoothing towards 0.5, class weights on each class's positives (pos_weight), mixed
    # rows; and thresholded after mixing.
    'multi_label_weighted_mixed': dict(task='multi_label', label_smoothing=0.1, class_weights=WEIGHTS,
                                       mixup_alpha=1.0, cutmix_alpha=1.0),
    'multi_label_threshold': dict(task='multi_label', bce_target_threshold=0.3, mixup_alpha=1.0),
}


def test_the_loss_gradient_is_right_for_targets_that_do_not_sum_to_one():
  """The issue's two lines: the fused kernel gives [.23, -2.37, .14]; the right gradient is 3 * softmax - t."""
  logits = tf.Variable([[1.0, 2.0, 0.5]])
  targets = tf.constant([[0.0, 3.0, 0.0]])
  with tf.GradientTape() as tape:
    loss = single_label.softmax_cross_entropy(logits, targets)
  softmax = tf.nn.softmax(logits).numpy()
  np.testing.assert_allclose(tape.gradient(loss, logits).numpy(), 3.0 * softmax - targets.numpy(), atol=1e-6)
  np.testing.assert_allclose(loss.numpy(), -3.0 * np.log(softmax[:, 1]), rtol=1e-6)


def test_binary_cross_entropy_is_timms_per_class_mean_weighted_by_the_row_sum():
  z = np.array([[1.0, -2.0, 0.5], [0.0, 3.0, -1.0]])
  # Row 0: smoothed one-hot of class 1 (sums to 1); row 1: class 2's, weight 3 (sums to 3).
  targets = np.array([[0.05, 0.9, 0.05], [0.15, 0.15, 2.7]])
  bce = lambda z, q: np.mean(np.maximum(z, 0) - z * q + np.log1p(np.exp(-np.abs(z))), axis=1)
  soft = single_label.binary_cross_entropy(tf.constant(z, tf.float32), tf.constant(targets, tf.float32), None)
  np.testing.assert_allclose(soft.numpy(), [1.0, 3.0] * bce(z, targets / [[1.0], [3.0]]), rtol=1e-5)
  hard = single_label.binary_cross_entropy(tf.constant(z, tf.float32), tf.constant(targets, tf.float32), 0.2)
  np.testing.assert_allclose(hard.numpy(), [1.0, 3.0] * bce(z, np.array([[0, 1, 0], [0, 0, 1]])), rtol=1e-5)


def test_a_target_threshold_without_binary_cross_entropy_is_refused(tmp_path):
  with pytest.raises(ValueError, match='bce_target_threshold=0.2 .* loss=softmax_cross_entropy: set '
                                       'loss=binary_cross_entropy'):
    tiny.resnet_params(tmp_path, bce_target_threshold=0.2)
  with pytest.raises(ValueError, match='bce_target_threshold'):
    tiny.resnet_params(tmp_path, loss='binary_cross_entropy', bce_target_threshold=1.0)
  with pytest.raises(ValueError, match='weights would decide which classes pass the threshold'):
    tiny.resnet_params(tmp_path, loss='binary_cross_entropy', bce_target_threshold=0.2, num_label_classes=3,
                       class_weights=WEIGHTS, mixup_alpha=0.2)
  with pytest.raises(ValueError, match="one of \\[None, 'softmax_cross_entropy', 'binary_cross_entropy'\\]"):
    tiny.resnet_params(tmp_path, loss='bce')


def _multi_label(params) -> bool:
  return params['task'] == 'multi_label'


def _labels(params) -> np.ndarray:
  return MULTI_HOT if _multi_label(params) else LABELS


def _input(params):
  return tf.data.Dataset.from_tensor_slices((IMAGES, _labels(params))).repeat().batch(params['batch_size'])


def _replica_targets(params, labels: np.ndarray) -> np.ndarray:
  smoothing = params['label_smoothing']
  if _multi_label(params):  # weights are not in the targets: they weigh positives in the loss
    return labels * (1 - smoothing) + smoothing / 2
  targets = np.eye(CLASSES, dtype=np.float64)[labels] * (1 - smoothing) + smoothing / CLASSES
  if params['class_weights'] is not None:
    targets *= np.asarray(params['class_weights'])[labels][:, None]
  return targets


def _mix_seeds(strategy, replicas: int, random_seed):
  """Each replica's mixing seed for step 0, drawn where the step draws it (the replica id is folded in)."""
  if strategy is None:
    return [mixing.mix_seed(tf.constant(0, tf.int64), random_seed)]
  seeds = strategy.run(lambda: mixing.mix_seed(tf.constant(0, tf.int64), random_seed))
  return list(strategy.experimental_local_results(seeds))[:replicas]


def _expected_gradients(model, params, strategy, replicas: int):
  """Sum over replicas of the hand logit gradient back-propagated through the model on that replica's batch, and
  the hand loss of the step where the loss is softmax cross-entropy (else None)."""
  parts = np.split(np.arange(BATCH), replicas)
  batches = []
  config = mixing.MixConfig.from_params(params)
  seeds = _mix_seeds(strategy, replicas, params['random_seed'])
  for part, seed in zip(parts, seeds):
    images = tf.constant(IMAGES[part])
    targets = tf.constant(_replica_targets(params, _labels(params)[part]), tf.float32)
    if config.enabled:
      images, targets = mixing.mix(images, targets, config, seed)
    batches.append((images, targets.numpy().astype(np.float64)))
  denominator = float(BATCH)
  if params['class_weights'] is not None and params['class_weight_normalization'] == 'weight_sum':
    denominator = sum(t.sum() for _, t in batches)
  total, loss = None, 0.0
  for images, targets in batches:
    with tf.GradientTape() as tape:
      logits = tf.cast(model(images, training=True), tf.float32)
    z = logits.numpy().astype(np.float64)
    weight = targets.sum(axis=1, keepdims=True)
    if _multi_label(params):  # mean_k of (1 + (w_k - 1) y) BCE(z_k, q): (1 + (w_k - 1) y)(s - q) / K
      q = targets
      e = params['label_smoothing'] or 0.0
      if params['bce_target_threshold']:
        q, e = (q > params['bce_target_threshold']).astype(np.float64), 0.0
      y = np.clip((q - e / 2) / (1 - e), 0, 1)   # the target with the smoothing taken off: negatives weigh 1
      w = np.asarray(params['class_weights'] or [1.0] * CLASSES)[None, :]
      d_logits = (1 + (w - 1) * y) * (1.0 / (1.0 + np.exp(-z)) - q) / CLASSES / denominator
    elif params['loss'] == 'binary_cross_entropy':  # w * mean_k BCE(z_k, q_k), q = t / w (thresholded)
      q = targets / weight
      if params['bce_target_threshold']:
        q = (q > params['bce_target_threshold']).astype(np.float64)
      d_logits = weight * (1.0 / (1.0 + np.exp(-z)) - q) / CLASSES / denominator
    else:
      softmax = np.exp(z - z.max(axis=1, keepdims=True))
      softmax /= softmax.sum(axis=1, keepdims=True)
      d_logits = (weight * softmax - targets) / denominator
      loss += float(-np.sum(targets * np.log(softmax))) / denominator
    # Scaled up through float16 activations and back down, as loss scaling does: no gradient underflows.
    scale = 1024.0 if params['precision'] == 'float16' else 1.0
    grads = tape.gradient(logits, model.trainable_variables,
                          output_gradients=tf.constant(d_logits * scale, tf.float32))
    grads = [np.asarray(tf.cast(g, tf.float32)) / scale for g in grads]
    total = grads if total is None else [a + b for a, b in zip(total, grads)]
  softmax_loss = not _multi_label(params) and params['loss'] != 'binary_cross_entropy'
  return total, (loss if softmax_loss else None)


_RUNS = {}  # (case, replicas, precision) -> _real_and_expected's result, for the tests that check two things of one


def _real_and_expected(tmp_path, case: str, replicas: int, precision: str = 'float32', **overrides):
  """(real gradients, expected gradients, the step's logs with the hand loss as 'hand_loss')."""
  key = (case, replicas, precision)
  if not overrides and key in _RUNS:
    return _RUNS[key]
  strategy = tiny.two_replicas() if replicas == 2 else None
  params = tiny.resnet_params(tmp_path, **{
      **dict(num_label_classes=CLASSES, train_batch_size=BATCH, num_train_images=64, weight_decay=0.0, momentum=0.0,
             lr_warmup_epochs=0.0, train_steps=1, base_learning_rate=2.0, precision=precision),
      **CASES[case], **overrides})
  keras.utils.set_random_seed(4)
  estimator = tiny.resnet_estimator(params, strategy)
  estimator.build('train')
  model = estimator.scope.get(resnet_model_fn.MODEL)
  before = [v.numpy().copy() for v in model.trainable_variables]
  expected, hand_loss = _expected_gradients(model, params, strategy, replicas)
  decayed = {id(v) for v in tf1_names.weight_decay_variables(model)}
  logs = dict(estimator.train(_input, max_steps=1), hand_loss=hand_loss, before=before,
              decayed=[id(v) in decayed for v in model.trainable_variables])
  real = [(b - v.numpy()) / logs['learning_rate'] for b, v in zip(before, model.trainable_variables)]
  if not overrides:
    _RUNS[key] = real, expected, logs
  return real, expected, logs


def _assert_close(real, expected, tolerance):
  total = np.sqrt(sum(np.sum(e ** 2) for e in expected))
  assert total > 1e-3  # a gradient there is to compare
  for r, e in zip(real, expected):
    # Relative to the whole gradient's norm: small layers' last bits do not decide; a wrong loss gradient (the fused
    # kernel's on weighted targets) is off by tens of percent.
    assert np.linalg.norm(r - e) <= tolerance * max(np.linalg.norm(e), 1e-3 * total)


# Each kind of target once on each path: these on 2 replicas (the per-replica shares and their cross-replica sum),
# the others on 1 device (the default strategy); every kind shares the per-replica loss code of both paths.
TWO_REPLICA_CASES = ('weighted_mixed', 'weighted_weight_sum', 'smoothed', 'cpu_kernels', 'bce_weighted_mixed',
                     'multi_label_weighted_mixed')


@pytest.mark.slow
@pytest.mark.parametrize('case', sorted(set(CASES) - set(TWO_REPLICA_CASES)))
def test_one_device_step_gradient_equals_the_hand_formulation(tmp_path, case):
  real, expected, _ = _real_and_expected(tmp_path, case, replicas=1)
  _assert_close(real, expected, 2e-3)


@pytest.mark.slow
@pytest.mark.parametrize('case', TWO_REPLICA_CASES)
def test_two_replica_step_gradient_equals_the_hand_formulation(tmp_path, case):
  real, expected, _ = _real_and_expected(tmp_path, case, replicas=2)
  _assert_close(real, expected, 2e-3)


@pytest.mark.slow
@pytest.mark.parametrize('case', ['weighted', 'weighted_mixed_weight_sum', 'multi_label_weighted_mixed'])
def test_float16_loss_scaled_step_gradient_equals_the_hand_formulation(tmp_path, case):
  real, expected, _ = _real_and_expected(tmp_path, case, replicas=2, precision='float16')
  _assert_close(real, expected, 3e-2)  # float16 activations: percent-level rounding, far below a wrong gradient


@pytest.mark.slow
@pytest.mark.parametrize('replicas,precision', [(1, 'float32'), (2, 'float32'), (2, 'float16')])
def test_clip_grad_norm_scales_the_global_gradient_down_to_its_norm(tmp_path, replicas, precision):
  """The update's gradient is the hand one times min(1, c / its global norm): the norm of the sum over replicas
  (clipping each replica's share first gives another gradient), unscaled from float16 loss scaling (clipping the
  scaled gradients gives one loss-scale times too small)."""
  clip = 0.02
  # A learning rate 100 times the other tests': the clipped update stays far above the weights' float32 rounding.
  real, expected, _ = _real_and_expected(tmp_path, 'weighted', replicas=replicas, precision=precision,
                                         clip_grad_norm=clip, base_learning_rate=200.0)
  norm = float(np.sqrt(sum(np.sum(np.square(e, dtype=np.float64)) for e in expected)))
  assert norm > 2 * clip   # the clip acts
  _assert_close(real, [e * (clip / norm) for e in expected], 2e-3 if precision == 'float32' else 3e-2)


@pytest.mark.slow
@pytest.mark.parametrize('replicas,precision', [(1, 'float32'), (2, 'float16')])
def test_clip_grad_norm_clips_the_loss_gradient_and_adds_the_weight_decay_after(tmp_path, replicas, precision):
  """With momentum SGD the L2 term is in the loss, but clipping leaves it out (torchvision and timm clip .grad and
  decay in the optimizer's step): the update's gradient is the hand one times c / its norm, plus weight_decay x w
  on the L2 set. Clipping the sum instead shrank the decay by c / norm whenever the clip acted."""
  clip, decay = 0.02, 2e-3
  real, expected, logs = _real_and_expected(tmp_path, 'weighted', replicas=replicas, precision=precision,
                                            clip_grad_norm=clip, base_learning_rate=200.0, weight_decay=decay)
  norm = float(np.sqrt(sum(np.sum(np.square(e, dtype=np.float64)) for e in expected)))
  assert norm > 2 * clip   # the clip acts
  l2 = [decay * b if d else np.zeros_like(b) for b, d in zip(logs['before'], logs['decayed'])]
  assert np.sqrt(sum(np.sum(np.square(g, dtype=np.float64)) for g in l2)) > clip / 2   # a decay clipping would show
  _assert_close(real, [e * (clip / norm) + g for e, g in zip(expected, l2)], 2e-3 if precision == 'float32' else 3e-2)


@pytest.mark.slow
def test_cross_entropy_scalar_is_the_loss_without_weight_decay(tmp_path):
  strategy = tiny.two_replicas()
  params = tiny.resnet_params(tmp_path, num_label_classes=CLASSES, train_batch_size=BATCH, num_train_images=64,
                              weight_decay=1e-2, train_steps=3, iterations_per_loop=3, **CASES['weighted'])
  keras.utils.set_random_seed(4)
  estimator = tiny.resnet_estimator(params, strategy)
  logs = estimator.train(_input, max_steps=3)  # one loop of 3 steps: both are means over its steps
  decay = logs['loss'] - logs[resnet_model_fn.CROSS_ENTROPY]
  assert 0.01 * logs['loss'] < decay < logs['loss']   # the weight-decay term, which the scalar leaves out
  model = estimator.scope.get(resnet_model_fn.MODEL)
  after = 1e-2 * sum(float(tf.nn.l2_loss(v)) for v in tf1_names.weight_decay_variables(model))
  assert decay == pytest.approx(after, rel=0.05)      # the decay of the loop's weights (they move a little)


@pytest.mark.slow
def test_weight_sum_normalisation_divides_by_the_global_sum_of_weights(tmp_path):
  """sum(w * CE) / sum(w): the loss of a batch is the weighted mean over both replicas' examples (whose weights sum
  to 5.5 and 7.5), by hand from the same model's logits: the run of the two-replica gradient test of this case."""
  _, _, logs = _real_and_expected(tmp_path, 'weighted_weight_sum', replicas=2)
  assert logs['loss'] == pytest.approx(logs['hand_loss'], rel=1e-5)  # 13/8 of it with the batch-mean denominator
