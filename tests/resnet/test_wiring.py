"""What the modes hand the runner, where it is more than a call: progressive resizing's staged training input."""
import pytest

from resnet import wiring
from resnet.estimator import hooks as hooks_lib
from resnet.estimator.spec import StagedInput
from tests.helpers import tiny


def test_a_size_schedule_becomes_equal_stages_of_train_steps_and_must_reach_image_size(tmp_path):
  params = tiny.resnet_params(tmp_path, image_size=64, train_size_schedule=[32, 48, 64], train_steps=10)
  assert wiring.size_stages(params) == [(0, 32), (3, 48), (6, 64)]
  source = wiring.train_input(params)
  assert isinstance(source.input_fn, StagedInput) and [s.image_size for s in source.sources] == [32, 48, 64]
  assert [start for start, _ in source.input_fn.stages] == [0, 3, 6]
  assert wiring.train_input(tiny.resnet_params(tmp_path, image_size=64)).sources[0].image_size == 64
  with pytest.raises(ValueError, match=r'train_size_schedule=\[32, 48\] ends at 48 px, below image_size=64: .* end '
                                       r'the schedule with 64'):
    tiny.resnet_params(tmp_path, image_size=64, train_size_schedule=[32, 48])
  with pytest.raises(ValueError, match='train_size_schedule'):
    tiny.resnet_params(tmp_path, image_size=64, train_size_schedule=[16, 64])   # below 32 px


class _Loops(hooks_lib.LoopHook):
  def __init__(self):
    self.loops = []

  def after_loop(self, step, logs):
    self.loops.append(step)


@pytest.mark.slow
def test_a_resnet_trains_through_its_size_stages_and_evaluates_at_image_size(tmp_path):
  params = tiny.resnet_params(tmp_path, image_size=40, train_size_schedule=[32, 40], train_steps=4,
                              iterations_per_loop=3, num_eval_images=4)
  source = wiring.train_input(params)
  for stage_source, size in zip(source.sources, (32, 40)):
    images, _ = next(iter(stage_source.input_fn({'batch_size': 2})))   # synthetic data at the stage's size
    assert images.shape[1:3] == (size, size)
  estimator, loops = tiny.resnet_estimator(params), _Loops()
  estimator.train(source.input_fn, max_steps=4, hooks=[loops])
  assert loops.loops == [2, 3, 4] and int(estimator.global_step.numpy()) == 4   # a loop ends where 40 px starts
  eval_source = wiring.eval_source(params)
  assert eval_source.image_size == 40
  assert estimator.evaluate(eval_source.input_fn)['global_step'] == 4
