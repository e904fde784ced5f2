"""StagedInput (progressive resizing's mechanism, model-agnostic): loops end at each stage's first step, the next
loop reads the new input through a new compiled loop (traced there, as at a run's start), on 1 device and 2
mirrored replicas; a resumed run starts in its step's stage, and train_and_evaluate's chunks keep the stages."""
import pytest
import tensorflow as tf

from resnet.estimator import hooks as hooks_lib
from resnet.estimator.estimator import Estimator
from resnet.estimator.run_config import RunConfig
from resnet.estimator.spec import ModeKeys, StagedInput
from tests.helpers import toy

TRACED = []   # the feature width of each train-step trace


def _recording_model_fn(features, labels, mode, params):
  """The toy model on the first 4 features; a train step reports its input's width, and each trace is recorded."""
  if features is None or mode != ModeKeys.TRAIN:
    return toy.toy_model_fn(features if features is None else features[:, :4], labels, mode, params)
  TRACED.append(int(features.shape[-1]))
  spec = toy.toy_model_fn(features[:, :4], labels, mode, params)
  return spec._replace(scalars={**spec.scalars, 'width': tf.constant(float(features.shape[-1]))})


def _input(width):
  def input_fn(params):
    x = tf.concat([toy.X, tf.zeros([len(toy.X), width - 4])], axis=1)
    return tf.data.Dataset.from_tensor_slices((x, toy.Y)).repeat().batch(params['batch_size'], drop_remainder=True)
  return input_fn


class _Widths(hooks_lib.LoopHook):
  def __init__(self):
    self.loops = []

  def after_loop(self, step, logs):
    self.loops.append((step, int(logs['width'])))


def _runner(model_dir, strategy=None):
  config = RunConfig(model_dir=str(model_dir), train_batch_size=8, eval_batch_size=8, predict_batch_size=8,
                     iterations_per_loop=4, save_checkpoints_steps=100)
  return Estimator(_recording_model_fn, config, {}, strategy)


@pytest.mark.parametrize('replicas', [1, 2])
def test_stages_switch_at_their_first_step_with_one_trace_each_and_a_resume_starts_in_its_stage(tmp_path, replicas):
  strategy = toy.two_device_strategy() if replicas == 2 else None
  staged = StagedInput(((0, _input(4)), (6, _input(6)), (9, _input(8))))
  TRACED.clear()
  runner, widths = _runner(tmp_path, strategy), _Widths()
  runner.train(staged, max_steps=7, hooks=[widths])
  assert widths.loops == [(4, 4), (6, 4), (7, 6)]      # the loop of 4 steps ends early at the stage's step 6
  # One trace where a stage starts, as at a run's start: the single step's (which names the loop's scalars), which
  # the multi-step loop calls; once per replica. Two replicas all-reduce with collectives inside that call.
  assert TRACED == [w for w in (4, 6) for _ in range(replicas)]
  runner.save()
  TRACED.clear()
  resumed, widths = _runner(tmp_path, strategy), _Widths()
  resumed.train(staged, max_steps=12, hooks=[widths])  # restored at step 7: the second stage, then the third
  assert widths.loops == [(8, 6), (9, 6), (12, 8)] and TRACED == [w for w in (6, 8) for _ in range(replicas)]


def test_train_and_evaluate_chunks_keep_the_stages(tmp_path):
  TRACED.clear()
  runner, widths = _runner(tmp_path), _Widths()
  staged = StagedInput(((0, _input(4)), (5, _input(6))))
  runner.train_and_evaluate(staged, toy.eval_input, max_steps=8, steps_per_eval=4, hooks=[widths])
  assert widths.loops == [(4, 4), (5, 4), (8, 6)] and TRACED == [4, 6]


def test_stages_must_start_at_zero_and_increase():
  with pytest.raises(ValueError, match='starting at step 0 in increasing order'):
    StagedInput(((1, _input(4)),))
  with pytest.raises(ValueError, match='increasing'):
    StagedInput(((0, _input(4)), (5, _input(6)), (5, _input(8))))
  staged = StagedInput(((0, 'a'), (5, 'b')))
  assert (staged.at(0), staged.at(4), staged.at(5), staged.at(99)) == ('a', 'a', 'b', 'b')
  assert (staged.next_start(0), staged.next_start(5)) == (5, None)
