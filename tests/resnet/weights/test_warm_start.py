"""Warm start (resnet/weights/warm_start.py) from this application's checkpoints and from TF1 reference-named ones.

One tiny ResNet-18 (32 px, 3 classes, batch 2) is trained by the real Estimator + resnet_model_fn once per module; the
TF1 checkpoints are written (by tf.compat.v1's Saver, or its SaveV2 op) under the reference's TF1 names, so no
downloads are needed.
"""
import logging as std_logging
import os
import re
import shutil
from typing import Any, Mapping, Optional

import numpy as np
import pytest
import tensorflow as tf

from resnet.run_setup import run_params
from resnet.weights import ema as ema_lib
from resnet.model import plan
from resnet.model import tf1_names
from resnet.training import resnet_model_fn
from resnet.weights import warm_start as ws
from resnet.estimator.estimator import Estimator
from resnet.estimator.run_config import RunConfig
from resnet.estimator.spec import ModeKeys
from tests.helpers import tiny

IMAGE_SIZE = 32
BN_STATS = ('/moving_mean', '/moving_variance')


def make_params(model_dir: str, num_classes: int = 3, **overrides) -> Mapping[str, Any]:
  return run_params.make_params(dict(dict(
      resnet_depth=18, num_label_classes=num_classes, image_size=IMAGE_SIZE, precision='float32',
      train_batch_size=2, eval_batch_size=2, predict_batch_size=2, train_steps=2, iterations_per_loop=1,
      save_checkpoints_steps=1, num_train_images=8, lr_warmup_epochs=0.0, model_dir=model_dir, skip_train_summaries=True),
      **overrides))


def make_runner(params: Mapping[str, Any], strategy=None) -> Estimator:
  return Estimator(resnet_model_fn.resnet_model_fn, RunConfig.from_params(params), params, strategy)


def synthetic_input(params):
  images = tf.random.stateless_uniform([8, IMAGE_SIZE, IMAGE_SIZE, 3], seed=[1, 2], maxval=255.0)
  labels = tf.constant([0, 1, 2, 0, 1, 2, 0, 1], tf.int32)
  return tf.data.Dataset.from_tensor_slices((images, labels)).repeat().batch(params['batch_size'],
                                                                             drop_remainder=True)


@pytest.fixture(scope='module')
def trained(module_tmp):
  """An Estimator trained 2 steps with moving averages: checkpoints model.ckpt-1 and model.ckpt-2 in its model_dir."""
  model_dir = str(module_tmp.mktemp('source'))
  runner = make_runner(make_params(model_dir, moving_average_decay=0.9))
  runner.train(synthetic_input, max_steps=2)
  return runner


def fresh_train_runner(tmp_path, num_classes: int) -> Estimator:
  runner = make_runner(make_params(str(tmp_path / 'fresh'), num_classes))
  runner.build(ModeKeys.TRAIN)
  return runner


def values(model) -> dict:
  return {name: v.numpy() for name, v in tf1_names.tf1_variable_map(model).items()}


# ------------------------------------------------------------------------------------------------ tf2 (own)
@pytest.mark.slow
def test_own_checkpoint_into_a_new_head(trained, tmp_path, caplog):
  source = values(trained.scope.get('model'))
  # Training moved the BN statistics off their initial values, so equality below really tests a copy.
  assert not np.allclose(source['batch_normalization/moving_mean'], 0.0)
  runner = fresh_train_runner(tmp_path, num_classes=5)
  model, optimizer = runner.scope.get('model'), runner.scope.get('optimizer')
  with caplog.at_level(std_logging.INFO), caplog.at_level(std_logging.INFO, logger='absl'):
    summary = ws.warm_start(model, trained.model_dir)
  target = values(model)

  assert summary.source_format == 'tf2'
  assert summary.checkpoint.endswith('model.ckpt-2')
  assert summary.skipped == [('dense/kernel', (512, 3), (512, 5)), ('dense/bias', (3,), (5,))]
  assert summary.missing == []
  assert len(summary.restored) == len(target) - 2
  for name in summary.restored:
    np.testing.assert_array_equal(target[name], source[name], err_msg=name)
  assert sum(name.endswith(BN_STATS) for name in summary.restored) == 2 * 21
  assert target['dense/kernel'].shape == (512, 5)
  assert int(runner.global_step.numpy()) == 0
  assert int(optimizer.iterations.numpy()) == 0
  assert all(not np.any(slot.numpy()) for slot in optimizer.accumulators)
  lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith('Warm start from')]
  assert len(lines) == 1
  assert lines[0].startswith(f'Warm start from {summary.checkpoint}: restored 105 of 107 variables; skipped 2: '
                            'dense/kernel [512,3] vs [512,5], dense/bias [3] vs [5]')


def test_warm_start_into_a_mirrored_model_sets_every_replica(trained, tmp_path):
  devices = tf.config.list_logical_devices('CPU')
  if len(devices) < 2:
    pytest.skip('needs two logical CPU devices (set up in conftest before TF initialises)')
  strategy = tf.distribute.MirroredStrategy([d.name for d in devices[:2]])
  params = make_params(str(tmp_path / 'mirrored'), 5)
  runner = make_runner(params, strategy)
  runner.build(ModeKeys.TRAIN)
  summary = ws.warm_start(runner.scope.get('model'), trained.model_dir)
  assert len(summary.restored) == 105
  source = values(trained.scope.get('model'))
  target = tf1_names.tf1_variable_map(runner.scope.get('model'))
  for name in ('conv2d_20/kernel', 'batch_normalization_3/moving_variance'):
    replicas = strategy.experimental_local_results(target[name].value)
    assert len(replicas) == 2
    for value in replicas:
      np.testing.assert_array_equal(value.numpy(), source[name], err_msg=name)


def test_tf2_keys_pair_trainable_weights_through_the_optimizer_path(trained):
  """Trainable weights are stored under optimizer/..., BN statistics under model/...: the walk finds both."""
  model = trained.scope.get('model')
  path = trained.latest_checkpoint()
  reader = tf.train.load_checkpoint(path)
  graph = ws._object_graph(reader)  # pylint: disable=protected-access
  keys = ws.tf2_keys(graph, ws._model_node(graph), model)  # pylint: disable=protected-access
  tf1 = tf1_names.tf1_variable_map(model)
  kernel_key = keys[id(tf1['conv2d/kernel'])]
  stat_key = keys[id(tf1['batch_normalization/moving_mean'])]
  assert kernel_key.startswith('optimizer/')
  assert stat_key.startswith('model/')
  np.testing.assert_array_equal(reader.get_tensor(kernel_key), tf1['conv2d/kernel'].numpy())
  assert not any(k.startswith(('global_step', 'save_counter')) for k in keys.values())


def test_directory_resolves_to_the_latest_checkpoint(trained, tmp_path):
  assert ws.resolve_checkpoint(trained.model_dir).endswith('model.ckpt-2')
  assert ws.resolve_checkpoint(trained.latest_checkpoint() + '.index') == trained.latest_checkpoint()
  assert ws.resolve_checkpoint(os.path.join(trained.model_dir, 'checkpoint')) == trained.latest_checkpoint()
  # Copied without the 'checkpoint' state file: the highest step among the *.index files.
  copy = tmp_path / 'copy'
  copy.mkdir()
  for name in os.listdir(trained.model_dir):
    if name.startswith('model.ckpt-'):
      shutil.copy(os.path.join(trained.model_dir, name), copy / name)
  assert ws.resolve_checkpoint(str(copy)) == str(copy / 'model.ckpt-2')
  empty = tmp_path / 'empty'
  empty.mkdir()
  with pytest.raises(FileNotFoundError, match=str(empty)):
    ws.warm_start(trained.scope.get('model'), str(empty))
  with pytest.raises(FileNotFoundError, match='not found'):
    ws.warm_start(trained.scope.get('model'), str(tmp_path / 'nope' / 'model.ckpt-7'))


# ------------------------------------------------------------------------------------------------ tf1 (reference)
def tf1_name(base: str, index: int) -> str:
  return base if index == 0 else f'{base}_{index}'


# The reference's ResNet-18, written out independently of resnet_model: the stem, then per group a 1x1
# projection, two 3x3 convs, and a second block of two 3x3 convs; every conv i is followed by batch_normalization_i.
def reference_resnet18_convs() -> list:
  convs = [(7, 3, 64)]
  cin = 64
  for filters in (64, 128, 256, 512):
    convs += [(1, cin, filters), (3, cin, filters), (3, filters, filters), (3, filters, filters),
              (3, filters, filters)]
    cin = filters
  return convs


def tf1_values(depth: int, num_classes: int, seed: int = 0) -> dict:
  """Random values for every reference variable of a ResNet, with the reference's TF1 names and shapes."""
  rng = np.random.default_rng(seed)
  if depth == 18:
    convs = reference_resnet18_convs()
  else:
    convs = [(c.kernel, c.cin, c.cout) for c in plan.conv_shapes(tiny.config(depth))]
  out = {}
  for i, (kernel, cin, cout) in enumerate(convs):
    out[f'{tf1_name("conv2d", i)}/kernel'] = rng.normal(0, 0.1, (kernel, kernel, cin, cout))
    for leaf in ('gamma', 'beta', 'moving_mean', 'moving_variance'):
      out[f'{tf1_name("batch_normalization", i)}/{leaf}'] = rng.uniform(0.5, 1.5, (cout,))
  out['dense/kernel'] = rng.normal(0, 0.01, (convs[-1][-1], num_classes))
  out['dense/bias'] = rng.normal(0, 0.01, (num_classes,))
  return {k: v.astype(np.float32) for k, v in out.items()}


def write_tf1_checkpoint(prefix: str, model_values: dict, scope: str = '',
                         slots: tuple = ('conv2d/kernel', 'batch_normalization/gamma', 'dense/kernel'),
                         averages: Optional[dict] = None, real_saver: bool = False) -> str:
  """A reference-style checkpoint ``<prefix>-1234``: model variables, global_step, for ``slots`` a Momentum slot
  (7s) and an EMA shadow (9s), which warm start must ignore, and ``averages`` as ``<name>/ExponentialMovingAverage``.
  (A slot for every variable would triple the bytes written for nothing.)

  ``real_saver`` writes through a tf.compat.v1 graph and Saver; otherwise the same tensor bundle is written with
  the SaveV2 op the Saver runs, ~9x faster than building a graph of a few hundred variables.
  """
  tensors = {}
  for name, value in model_values.items():
    full = scope + name
    tensors[full] = value
    if name in slots:
      tensors[f'{full}/Momentum'] = np.full(value.shape, 7.0, np.float32)
      tensors[f'{full}/ExponentialMovingAverage'] = np.full(value.shape, 9.0, np.float32)
  for name, value in (averages or {}).items():
    tensors[f'{scope}{name}/ExponentialMovingAverage'] = value
  if real_saver:
    graph = tf.compat.v1.Graph()
    with graph.as_default():
      for name, value in tensors.items():
        tf.compat.v1.get_variable(name, initializer=tf.constant(value))
      global_step = tf.compat.v1.train.get_or_create_global_step()
      saver = tf.compat.v1.train.Saver()
      with tf.compat.v1.Session(graph=graph) as session:
        session.run(tf.compat.v1.global_variables_initializer())
        session.run(global_step.assign(1234))
        return saver.save(session, prefix, global_step=global_step)
  path = f'{prefix}-1234'
  names = sorted(tensors)
  tf.raw_ops.SaveV2(prefix=path, tensor_names=names + ['global_step'], shape_and_slices=[''] * (len(names) + 1),
                    tensors=[tf.constant(tensors[n]) for n in names] + [tf.constant(1234, tf.int64)])
  tf.compat.v1.train.update_checkpoint_state(os.path.dirname(path), path)
  return path


@pytest.mark.slow
def test_tf1_checkpoint_restores_every_variable(tmp_path):
  source = tf1_values(18, 4)
  path = write_tf1_checkpoint(str(tmp_path / 'tf1' / 'model.ckpt'), source, scope='resnet_model/', real_saver=True)
  names = [n for n, _ in tf.train.list_variables(path)]
  assert {'resnet_model/conv2d/kernel/Momentum', 'resnet_model/dense/kernel/ExponentialMovingAverage',
          'global_step'} <= set(names)
  runner = fresh_train_runner(tmp_path, num_classes=4)
  model = runner.scope.get('model')
  summary = ws.warm_start(model, path)
  target = values(model)
  assert summary.source_format == 'tf1'
  assert (summary.skipped, summary.missing) == ([], [])
  assert sorted(summary.restored) == sorted(source) == sorted(target)
  for name, value in source.items():
    np.testing.assert_array_equal(target[name], value, err_msg=name)  # not 7 (Momentum) nor 9 (EMA)
  assert int(runner.global_step.numpy()) == 0
  assert all(not np.any(slot.numpy()) for slot in runner.scope.get('optimizer').accumulators)


def test_tf1_head_of_another_width_is_skipped_with_the_background_note(tmp_path, caplog):
  source = tf1_values(18, 1001)
  write_tf1_checkpoint(str(tmp_path / 'tf1' / 'model.ckpt'), source)
  model = tiny.model(18, 1000)
  with caplog.at_level(std_logging.INFO), caplog.at_level(std_logging.INFO, logger='absl'):
    summary = ws.warm_start(model, str(tmp_path / 'tf1'))
  assert summary.skipped == [('dense/kernel', (512, 1001), (512, 1000)), ('dense/bias', (1001,), (1000,))]
  assert len(summary.restored) == len(source) - 2
  np.testing.assert_array_equal(values(model)['batch_normalization_20/moving_variance'],
                                source['batch_normalization_20/moving_variance'])
  line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith('Warm start from'))
  assert 'dense/bias [1001] vs [1000]' in line and 'background' in line


def test_tf1_names_strip_the_shared_scope_and_ignore_slots():
  names = ['resnet50/conv2d/kernel', 'resnet50/conv2d/kernel/Momentum', 'resnet50/dense/bias', 'global_step',
           'resnet50/batch_normalization_3/moving_mean/ExponentialMovingAverage',
           'resnet50/batch_normalization_3/moving_mean']
  assert ws.reference_names(names) == {'conv2d/kernel': 'resnet50/conv2d/kernel', 'dense/bias': 'resnet50/dense/bias',
                                 'batch_normalization_3/moving_mean': 'resnet50/batch_normalization_3/moving_mean'}


# ------------------------------------------------------------------------------------------------ errors
def test_nothing_matching_is_an_error(tmp_path):
  graph = tf.compat.v1.Graph()
  with graph.as_default():
    tf.compat.v1.get_variable('encoder/layer_0/weights', shape=[3, 3])
    saver = tf.compat.v1.train.Saver()
    with tf.compat.v1.Session(graph=graph) as session:
      session.run(tf.compat.v1.global_variables_initializer())
      path = saver.save(session, str(tmp_path / 'other' / 'model.ckpt'))
  with pytest.raises(ws.WarmStartMismatchError,
                     match=r'no checkpoint variable matches.*encoder/layer_0/weights.*conv2d/kernel'):
    ws.warm_start(tiny.model(18, 3), path)


def _index(name: str) -> int:
  layer = name.split('/')[0]
  return int(layer.rsplit('_', 1)[1]) if layer[-1].isdigit() else 0


def resnet50_group1(num_classes: int = 3) -> dict:
  """Group 1 of a ResNet-50 (a full one takes ~20 s to write on two cores): bottleneck shapes under R18 names."""
  return {k: v for k, v in tf1_values(50, num_classes).items() if k.startswith('dense') or _index(k) <= 10}


def test_a_different_depth_raises_naming_variables_and_shapes_and_copies_nothing(tmp_path):
  path = write_tf1_checkpoint(str(tmp_path / 'r50' / 'model.ckpt'), resnet50_group1())
  model = tiny.model(18, 3)
  before = values(model)
  with pytest.raises(ws.WarmStartMismatchError) as raised:
    ws.warm_start(model, path)
  message = str(raised.value)
  assert isinstance(raised.value, ValueError)
  # R18's conv2d_1 is the 1x1 projection 64->64; R50's is 64->256. R18 has 21 convs, the file only 0..10.
  assert 'conv2d_1/kernel model [1,1,64,64] checkpoint [1,1,64,256]' in message
  assert 'conv2d_2/kernel model [3,3,64,64] checkpoint [1,1,64,64]' in message
  assert '--resnet_depth' in message and '--pre_activation' in message
  assert 'allow_partial_warm_start=true' in message and 'Nothing was copied' in message
  assert re.search(r': (\d+) of 107 model variables outside the classifier head', message)
  after = values(model)
  assert all(np.array_equal(before[name], after[name]) for name in before)


def test_a_checkpoint_missing_backbone_variables_raises_naming_them(tmp_path):
  source = {k: v for k, v in tf1_values(18, 3).items() if not k.startswith(('conv2d_20/', 'batch_normalization_20/'))}
  path = write_tf1_checkpoint(str(tmp_path / 'cut' / 'model.ckpt'), source, slots=())
  with pytest.raises(ws.WarmStartMismatchError,
                     match=r'5 of 107 .* conv2d_20/kernel model \[3,3,512,512\] checkpoint missing; '
                           r'batch_normalization_20/gamma model \[512\] checkpoint missing'):
    ws.warm_start(tiny.model(18, 3), path)


@pytest.mark.slow
def test_allow_partial_restores_equal_shapes_and_warns(tmp_path, caplog):
  source = resnet50_group1()
  path = write_tf1_checkpoint(str(tmp_path / 'r50' / 'model.ckpt'), source)
  model = tiny.model(18, 3)
  shapes = {name: tuple(v.shape) for name, v in tf1_names.tf1_variable_map(model).items()}
  with caplog.at_level(std_logging.INFO), caplog.at_level(std_logging.INFO, logger='absl'):
    summary = ws.warm_start(model, path, allow_partial=True)
  # ResNet-50 and -18 share names and a few shapes (the stem, some BNs): only those are copied.
  assert summary.restored == [n for n in shapes if n in source and source[n].shape == shapes[n]]
  assert 'conv2d/kernel' in summary.restored and ('conv2d_1/kernel', (1, 1, 64, 256), (1, 1, 64, 64)) in summary.skipped
  np.testing.assert_array_equal(values(model)['conv2d/kernel'], source['conv2d/kernel'])
  assert any(r.levelname == 'WARNING' and 'same resnet_depth' in r.getMessage() for r in caplog.records)


def test_a_checkpoint_without_a_head_restores_the_backbone(tmp_path):
  source = {k: v for k, v in tf1_values(18, 3).items() if not k.startswith('dense/')}
  path = write_tf1_checkpoint(str(tmp_path / 'backbone' / 'model.ckpt'), source, slots=())
  model = tiny.model(18, 3)
  head = values(model)['dense/kernel']
  summary = ws.warm_start(model, path)
  assert summary.missing == ['dense/kernel', 'dense/bias'] and summary.skipped == []
  assert sorted(summary.restored) == sorted(source)
  np.testing.assert_array_equal(values(model)['dense/kernel'], head)


# ------------------------------------------------------------------------------------------------ moving averages
def test_moving_averages_of_a_trained_run_are_read_when_asked(trained):
  model = trained.scope.get('model')
  shadows = {path: shadow.numpy() for path, shadow in trained.scope.get(ema_lib.CHECKPOINT_NAME).shadows.items()}
  raw = values(model)
  # Two updates at decay 2/11 and 3/12 left the averages short of the trained weights.
  assert not np.allclose(shadows['conv2d/kernel'], raw['conv2d/kernel'])

  averaged_model = tiny.model(18, 3)
  summary = ws.warm_start(averaged_model, trained.model_dir, use_moving_average=True)
  assert summary.moving_average and len(summary.restored) == 107
  for name, value in values(averaged_model).items():
    np.testing.assert_array_equal(value, shadows[name], err_msg=name)  # TF1 name == Keras path for this ResNet

  raw_model = tiny.model(18, 3)
  ws.warm_start(raw_model, trained.model_dir)
  for name, value in values(raw_model).items():
    np.testing.assert_array_equal(value, raw[name], err_msg=name)


def test_moving_averages_asked_of_a_checkpoint_without_them_is_an_error(tmp_path):
  path = tf.train.Checkpoint(model=tiny.model(18, 3)).save(str(tmp_path / 'plain' / 'ckpt'))
  with pytest.raises(ws.WarmStartMismatchError, match=r"moving averages were requested .* no 'ema' object"):
    ws.warm_start(tiny.model(18, 3), path, use_moving_average=True)


def test_reference_exponential_moving_average_names_are_read_when_asked(tmp_path):
  source = tf1_values(18, 3)
  averages = {name: value + 2 for name, value in source.items()}
  path = write_tf1_checkpoint(str(tmp_path / 'tf1ema' / 'model.ckpt'), source, scope='resnet_model/', slots=(),
                              averages=averages)
  model = tiny.model(18, 3)
  summary = ws.warm_start(model, path, use_moving_average=True)
  assert summary.source_format == 'tf1' and len(summary.restored) == len(source)
  for name, value in values(model).items():
    np.testing.assert_array_equal(value, source[name] + 2, err_msg=name)
  assert ws.tf1_ema_names(['s/conv2d/kernel', 's/conv2d/kernel/ExponentialMovingAverage', 'global_step']) == {
      'conv2d/kernel': 's/conv2d/kernel/ExponentialMovingAverage'}


# ------------------------------------------------------------------------------------------------ resnet_main
@pytest.mark.slow
def test_warm_start_if_new_leaves_a_resumed_run_alone(trained, tmp_path, monkeypatch):
  """resnet_main's path: a model_dir with a checkpoint resumes; a fresh one warm-starts, then trains from step 0."""
  from resnet import wiring  # pylint: disable=import-outside-toplevel
  calls = []
  real_warm_start = ws.warm_start
  monkeypatch.setattr(ws, 'warm_start',
                      lambda model, checkpoint, **kwargs: calls.append(real_warm_start(model, checkpoint, **kwargs)))

  class P:  # the attributes warm_start_if_new reads
    resnet_checkpoint = trained.model_dir
    allow_partial_warm_start = False

  resumed = make_runner(make_params(trained.model_dir))
  wiring.warm_start_if_new(resumed, P)
  assert calls == []
  fresh = make_runner(make_params(str(tmp_path / 'new'), num_classes=5, train_steps=1))
  wiring.warm_start_if_new(fresh, P)
  assert [len(summary.restored) for summary in calls] == [105]
  fresh.train(synthetic_input, max_steps=1)  # restore() finds no checkpoint in the new model_dir: weights stay
  assert int(fresh.global_step.numpy()) == 1
  assert fresh.latest_checkpoint().endswith('model.ckpt-1')


def test_a_reference_evonorm_checkpoint_restores_every_variable(tmp_path):
  """EvoNorm models keep ``evonorm[_i]/{beta,gamma,v,moving_variance}``: the reference's names must match too."""
  overrides = dict(norm_act_layer='evonorm_b0', pre_activation=True)
  source_runner = make_runner(make_params(str(tmp_path / 'source'), 4, **overrides))
  source_runner.build(ModeKeys.TRAIN)
  rng = np.random.default_rng(5)
  source = {name: rng.uniform(0.5, 1.5, value.shape).astype(np.float32)
            for name, value in values(source_runner.scope.get('model')).items()}
  assert any(name.startswith('evonorm') and name.endswith('/v') for name in source)
  path = write_tf1_checkpoint(str(tmp_path / 'tf1' / 'model.ckpt'), source, scope='resnet_model/')
  runner = make_runner(make_params(str(tmp_path / 'fresh'), 4, **overrides))
  runner.build(ModeKeys.TRAIN)
  summary = ws.warm_start(runner.scope.get('model'), path)
  assert (summary.skipped, summary.missing) == ([], []) and sorted(summary.restored) == sorted(source)
  for name, value in values(runner.scope.get('model')).items():
    np.testing.assert_array_equal(value, source[name], err_msg=name)
