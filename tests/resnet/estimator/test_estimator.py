"""The model-agnostic Estimator, driven by a toy model_fn: loop, checkpoints, resume, eval, predict, export, hooks."""
import glob
import json
import os
import subprocess
import sys
import time

from absl import logging
import numpy as np
import pytest
import tensorflow as tf

from resnet.estimator import estimator as E
from resnet.estimator import files
from resnet.estimator import hooks as hooks_lib
from resnet.estimator.checkpoints import checkpoint_step
from resnet.estimator.spec import ModeKeys, ServingInput
from tests.helpers import procs
from tests.helpers import toy

from tests.helpers.toy import X, Y, eval_input, make_runner, train_input, two_device_strategy


def test_training_lowers_the_loss_and_checkpoints_on_schedule(tmp_path):
  runner = make_runner(tmp_path, keep_checkpoint_max=2)
  first = runner.train(train_input, max_steps=10)['loss']
  last = runner.train(train_input, max_steps=60)['loss']
  assert last < first * 0.8
  steps = sorted(checkpoint_step(p) for p in tf.train.get_checkpoint_state(str(tmp_path)).all_model_checkpoint_paths)
  assert steps == [40, 60]  # saved at 10 (end), 20, 40, 60; only the last 2 kept
  assert os.path.exists(tmp_path / 'model.ckpt-60.index')


def test_the_train_step_is_traced_once_for_one_step_loops_and_for_longer_ones(tmp_path):
  """Tracing the model and its gradient costs seconds at every start: the loop learns its outputs' names from the
  single step's own trace (a separate probe traced the step once more) and calls that trace (the step traced
  inside the loop traced it a second time)."""
  traces = []

  def counting_model_fn(features, labels, mode, params):
    if mode == ModeKeys.TRAIN and features is not None:
      traces.append(mode)  # Python runs once per trace
    return toy.toy_model_fn(features, labels, mode, params)
  runner = E.Estimator(counting_model_fn, toy.RunConfig(model_dir=str(tmp_path), train_batch_size=8,
                                                         iterations_per_loop=1), {})
  runner.train(train_input, max_steps=3)
  assert len(traces) == 1
  runner = E.Estimator(counting_model_fn, toy.RunConfig(model_dir=str(tmp_path / 'loops'), train_batch_size=8,
                                                         iterations_per_loop=4), {})
  traces.clear()
  runner.train(train_input, max_steps=5)  # a loop of 4, then one step
  assert len(traces) == 1


@pytest.mark.parametrize('replicas', [1, 2])
def test_the_eval_step_is_traced_once_a_replica_for_every_evaluation(tmp_path, replicas):
  """The eval step learns its outputs' shapes (for the zeros of an empty batch) from the replica function's own
  trace, which the step then calls (the step traced the forward pass once more, for each eval input)."""
  traces = []

  def counting_model_fn(features, labels, mode, params):
    if mode == ModeKeys.EVAL and features is not None:
      traces.append(mode)  # Python runs once per trace
    return toy.toy_model_fn(features, labels, mode, params)
  runner = E.Estimator(counting_model_fn, toy.RunConfig(model_dir=str(tmp_path), train_batch_size=8,
                                                         eval_batch_size=8), {},
                       two_device_strategy() if replicas == 2 else None)
  runner.train(train_input, max_steps=1)
  first = runner.evaluate(eval_input)
  second = runner.evaluate(eval_input)
  assert len(traces) == replicas and first['num_examples'] == second['num_examples'] == len(X)


def test_a_model_fn_with_python_control_flow_on_tensors_still_trains(tmp_path):
  """The runner keeps AutoGraph for the model_fns it is given (resnet_model_fn opts out itself)."""
  def branching_model_fn(features, labels, mode, params):
    spec = toy.toy_model_fn(features, labels, mode, params)
    if mode == ModeKeys.TRAIN and features is not None:
      if tf.reduce_sum(features) > 1e9:  # a tensor condition: needs AutoGraph in the traced step
        tf.print('never')
    return spec
  runner = E.Estimator(branching_model_fn, toy.RunConfig(model_dir=str(tmp_path), train_batch_size=8,
                                                          iterations_per_loop=2), {})
  runner.train(train_input, max_steps=3)  # a loop of 2, then one step
  assert checkpoint_step(tf.train.latest_checkpoint(str(tmp_path))) == 3


def test_resume_continues_at_saved_step_with_same_weights_and_optimizer_state(tmp_path):
  runner = make_runner(tmp_path)
  runner.train(train_input, max_steps=30)
  model, opt = runner.scope.get('model'), runner.scope.get('optimizer')
  saved = [v.numpy().copy() for v in model.weights + opt.variables]

  resumed = make_runner(tmp_path)
  resumed.build(ModeKeys.TRAIN)
  resumed.restore()
  assert int(resumed.global_step.numpy()) == 30
  restored = [v.numpy() for v in resumed.scope.get('model').weights + resumed.scope.get('optimizer').variables]
  assert len(saved) == len(restored) and len(saved) > len(model.weights)  # momentum slots included
  for a, b in zip(saved, restored):
    np.testing.assert_array_equal(a, b)
  logs = resumed.train(train_input, max_steps=40)
  assert int(resumed.global_step.numpy()) == 40 and logs


def test_evaluate_counts_every_example_once_and_writes_results_json(tmp_path):
  runner = make_runner(tmp_path, eval_batch_size=16)  # 100 = 6 full batches + a partial one
  runner.train(train_input, max_steps=20)
  results = runner.evaluate(eval_input)
  assert results['num_examples'] == 100 and results['global_step'] == 20
  with open(tmp_path / 'eval_results.json') as f:
    saved = json.load(f)
  assert saved['accuracy'] == pytest.approx(results['accuracy'])
  assert saved['checkpoint'].endswith('model.ckpt-20')
  model = runner.scope.get('model')
  expected = np.mean(np.argmax(model(X, training=False).numpy(), -1) == Y)
  assert results['accuracy'] == pytest.approx(expected)


def test_eval_and_predict_without_a_checkpoint_fail_clearly(tmp_path):
  runner = make_runner(tmp_path)
  with pytest.raises(E.NoCheckpointError, match='No checkpoint'):
    runner.evaluate(eval_input)
  with pytest.raises(E.NoCheckpointError, match='No checkpoint'):
    list(runner.predict(lambda p: tf.data.Dataset.from_tensor_slices(X).batch(p['batch_size'])))


def test_predict_yields_one_prediction_per_example(tmp_path):
  runner = make_runner(tmp_path)
  runner.train(train_input, max_steps=10)
  preds = list(runner.predict(lambda p: tf.data.Dataset.from_tensor_slices(X[:13]).batch(p['batch_size'])))
  assert len(preds) == 13
  model = runner.scope.get('model')
  np.testing.assert_array_equal([p['classes'] for p in preds], np.argmax(model(X[:13]).numpy(), -1))


def test_scalars_are_written_to_tensorboard_each_loop(tmp_path):
  runner = make_runner(tmp_path)
  runner.train(train_input, max_steps=30, hooks=[hooks_lib.ExamplesPerSecond(8, name='images_per_sec', unit='img/s')])  # a hook may add scalars
  events = glob.glob(str(tmp_path / 'events.out.tfevents.*'))
  assert events
  seen = {}
  for event in tf.compat.v1.train.summary_iterator(events[0]):
    for value in event.summary.value:
      seen.setdefault(value.tag, []).append(event.step)
  for tag in ('loss', 'images_per_sec', 'steps_per_sec', 'replica_id'):
    assert seen[tag] == [10, 20, 30], tag


class _Recorder(hooks_lib.LoopHook):
  def __init__(self, boundary=None):
    self.calls = []
    self.boundary = boundary

  def next_boundary(self, step):
    return self.boundary(step) if self.boundary else None

  def before_loop(self, step, num_steps):
    self.calls.append((step, num_steps))


def test_hooks_can_shorten_loops(tmp_path):
  runner = make_runner(tmp_path, iterations_per_loop=10, save_checkpoints_steps=100)
  recorder = _Recorder(boundary=lambda step: step + 1 if 10 <= step < 13 else None)
  runner.train(train_input, max_steps=25, hooks=[recorder])
  assert recorder.calls == [(0, 10), (10, 1), (11, 1), (12, 1), (13, 7), (20, 5)]
  recorder = _Recorder(boundary=lambda step: 33 if step < 33 else None)
  runner.train(train_input, max_steps=40, hooks=[recorder])
  assert recorder.calls == [(25, 5), (30, 3), (33, 7)]


def test_nan_loss_stops_training_without_overwriting_the_last_good_checkpoint(tmp_path):
  make_runner(tmp_path).train(train_input, max_steps=20)
  runner = make_runner(tmp_path, params={'loss_offset': float('nan')})
  with pytest.raises(hooks_lib.NonFiniteLossError, match='step 30'):
    runner.train(train_input, max_steps=40, hooks=[hooks_lib.NanGuard()])
  assert tf.train.latest_checkpoint(str(tmp_path)).endswith('model.ckpt-20')


def test_export_writes_a_new_version_directory_each_time(tmp_path):
  runner = make_runner(tmp_path)
  runner.train(train_input, max_steps=10)
  serving = {'serving_default': ServingInput({'x': tf.TensorSpec([None, 4], tf.float32)}, lambda x: x)}
  first = runner.export_saved_model(str(tmp_path / 'export'), serving)
  second = runner.export_saved_model(str(tmp_path / 'export'), serving)
  assert first != second and os.path.isdir(first) and os.path.isdir(second)
  assert not glob.glob(str(tmp_path / 'export' / '.tmp-*'))
  loaded = tf.saved_model.load(first)
  out = loaded.signatures['serving_default'](x=tf.constant(X[:3]))
  np.testing.assert_array_equal(out['classes'].numpy(), np.argmax(runner.scope.get('model')(X[:3]).numpy(), -1))


def test_export_traces_the_model_once_a_signature(tmp_path):
  """The save itself traces nothing again: a serving tf.function kept on the saved module was traced a second time
  by tf.saved_model.save (its cache key holds the save context), a build of the model per signature."""
  traced = []

  def counting_model_fn(features, labels, mode, params):
    if mode == ModeKeys.PREDICT and features is not None:
      traced.append(mode)
    return toy.toy_model_fn(features, labels, mode, params)
  runner = E.Estimator(counting_model_fn, make_runner(tmp_path).config, {})
  runner.train(train_input, max_steps=1)
  spec = {'x': tf.TensorSpec([None, 4], tf.float32)}
  serving = {'serving_default': ServingInput(spec, lambda x: x), 'doubled': ServingInput(spec, lambda x: 2 * x)}
  del traced[:]
  path = runner.export_saved_model(str(tmp_path / 'export'), serving)
  assert len(traced) == 2
  assert set(tf.saved_model.load(path).signatures) == {'serving_default', 'doubled'}


def test_mirrored_strategy_sums_loss_over_replicas_and_averages_scalars(tmp_path):
  strategy = two_device_strategy()
  single = make_runner(tmp_path / 'one', params={'lr': 0.0})
  mirrored = make_runner(tmp_path / 'two', strategy=strategy, params={'lr': 0.0})
  mirrored.build(ModeKeys.TRAIN)
  single.build(ModeKeys.TRAIN)
  for a, b in zip(single.scope.get('model').weights, mirrored.scope.get('model').weights):
    b.assign(a)
  one = single.train(train_input, max_steps=1)
  two = mirrored.train(train_input, max_steps=1)
  # Same global batch of 8 (two replicas of 4): the replica losses sum to the single-device batch loss.
  assert two['loss'] == pytest.approx(one['loss'], rel=1e-5)
  assert two['replica_id'] == pytest.approx(0.5)  # the mean of replicas 0 and 1, not replica 0 only
  results = mirrored.evaluate(eval_input)
  assert results['num_examples'] == 100


def test_batch_size_must_divide_by_replicas_only_in_the_modes_a_run_uses(tmp_path):
  strategy = two_device_strategy()
  # 6 GPUs at batch 768 with the default predict batch of 256: training must start.
  runner = make_runner(tmp_path, strategy=strategy, train_batch_size=8, eval_batch_size=7, predict_batch_size=5)
  runner.train(train_input, max_steps=1)
  assert int(runner.global_step.numpy()) == 1
  serving = {'serving_default': ServingInput({'x': tf.TensorSpec([None, 4], tf.float32)}, lambda x: x)}
  assert runner.export_saved_model(str(tmp_path / 'export'), serving)  # export has no batch to divide
  with pytest.raises(ValueError, match='eval_batch_size=7 is not divisible by the 2 replicas'):
    runner.evaluate(eval_input)
  with pytest.raises(ValueError, match='eval_batch_size=7'):  # before any training, not after the first chunk
    runner.train_and_evaluate(train_input, eval_input, max_steps=3, steps_per_eval=1)
  assert int(runner.global_step.numpy()) == 1
  with pytest.raises(ValueError, match='predict_batch_size=5 is not divisible'):
    next(runner.predict(eval_input))
  with pytest.raises(ValueError, match='train_batch_size=7 is not divisible'):
    make_runner(tmp_path / 'odd', strategy=strategy, train_batch_size=7).train(train_input, max_steps=1)


def test_request_stop_ends_training_mid_loop_with_a_checkpoint_at_that_step(tmp_path):
  runner = make_runner(tmp_path, iterations_per_loop=50, save_checkpoints_steps=1000)

  class StopAt(hooks_lib.LoopHook):
    def after_loop(self, step, logs):
      if step == 50:
        runner.request_stop('test')

  with pytest.raises(E.TrainingInterrupted, match='step 50'):
    runner.train(train_input, max_steps=200, hooks=[StopAt()])
  assert tf.train.latest_checkpoint(str(tmp_path)).endswith('model.ckpt-50')
  # The flag is read inside the compiled loop: a stop requested before the loop runs no step at all.
  runner.stop.flag.assign(True)
  runner._train_loop.run(runner._train_input[1], 10)  # pylint: disable=protected-access
  assert int(runner.global_step.numpy()) == 50


def test_a_stop_requested_while_the_last_checkpoint_is_saved_still_ends_training(tmp_path, monkeypatch):
  """A SIGTERM that lands during the save of a train() call's last loop (train_and_eval's chunk end) came after
  the loop's stop check: train() must still raise, or the next chunk clears the request and trains on."""
  runner = make_runner(tmp_path, iterations_per_loop=5, save_checkpoints_steps=5)
  save = runner.save
  signal_at = 10

  def save_then_signal(*args, **kwargs):
    result = save(*args, **kwargs)
    if int(runner.global_step.numpy()) == signal_at:
      runner.request_stop('SIGTERM')
    return result

  monkeypatch.setattr(runner, 'save', save_then_signal)
  with pytest.raises(E.TrainingInterrupted, match='step 10'):
    runner.train(train_input, max_steps=10, total_steps=20)   # a chunk: more follow
  assert tf.train.latest_checkpoint(str(tmp_path)).endswith('model.ckpt-10')
  # The last chunk: training is done, so the run goes on to its evaluation or export.
  signal_at = 20
  runner.train(train_input, max_steps=20, total_steps=20)
  assert tf.train.latest_checkpoint(str(tmp_path)).endswith('model.ckpt-20')


@pytest.mark.slow
def test_constructing_an_estimator_leaves_op_determinism_to_the_program(tmp_path):
  """Deterministic ops are process-wide and cannot be undone, so constructing an Estimator must not turn them on;
  the program does, with resnet.determinism. In a fresh process: earlier tests must not decide the answer."""
  code = ('import sys; from resnet import determinism; from tests.helpers import toy as t; '
          't.make_runner(sys.argv[1]); before = determinism.op_determinism_enabled(); '
          'determinism.make_deterministic(3); print(before, determinism.op_determinism_enabled())')
  out = subprocess.run([sys.executable, '-c', code, str(tmp_path)], cwd=procs.ROOT, env=procs.base_env(),
                       capture_output=True, text=True, timeout=120, check=True).stdout
  assert out.strip().splitlines()[-1] == 'False True'


def test_continuous_eval_logs_where_and_how_long_it_waits(tmp_path, monkeypatch):
  lines = []
  monkeypatch.setattr(logging, 'info', lambda fmt, *args: lines.append(fmt % args))
  runner = make_runner(tmp_path)
  with pytest.raises(FileNotFoundError, match='No checkpoint appeared'):
    runner.evaluate_continuously(eval_input, timeout=0.6, poll_seconds=0.05, log_every_seconds=0.2)
  waits = [line for line in lines if line.startswith('Waiting for a checkpoint in')]
  assert len(waits) >= 2, lines
  assert str(tmp_path) in waits[0] and 'up to 0.6 s' in waits[0]


def test_continuous_eval_ends_when_the_run_ends_early_while_it_waits(tmp_path):
  """The run's end is asked again while waiting: a train_and_eval that stops early after the step evaluated last
  writes no further checkpoint, and eval would wait for one forever."""
  make_runner(tmp_path).train(train_input, max_steps=10)
  ends = iter([20] + [10] * 1000)  # train_steps at first; then the run records that it ended at step 10
  start = time.time()
  results = make_runner(tmp_path).evaluate_continuously(eval_input, timeout=60, poll_seconds=0.05,
                                                         stop_at_step=lambda: next(ends))
  assert results['global_step'] == 10 and time.time() - start < 30


def test_a_failed_export_leaves_no_version_directory(tmp_path, monkeypatch):
  from resnet.estimator.spec import ServingInput  # pylint: disable=g-import-not-at-top
  runner = make_runner(tmp_path)
  runner.train(train_input, max_steps=10)

  def full_disk(*args, **kwargs):
    raise OSError(28, 'No space left on device')

  monkeypatch.setattr(tf.saved_model, 'save', full_disk)
  serving = {'serving_default': ServingInput({'x': tf.TensorSpec([None, 4], tf.float32)}, lambda x: x)}
  with pytest.raises(files.WriteError, match='No space left'):
    runner.export_saved_model(str(tmp_path / 'export'), serving)
  assert os.listdir(tmp_path / 'export') == []
