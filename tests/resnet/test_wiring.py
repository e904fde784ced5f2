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


def _checkpoint_at(model_dir, step: int) -> None:
  """A checkpoint of step ``step`` in model_dir, as a run that reached it leaves (what makes a start a resume)."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  manager = tf.train.CheckpointManager(tf.train.Checkpoint(v=tf.Variable(1.0)), str(model_dir), max_to_keep=3,
                                       checkpoint_name='model.ckpt')
  manager.save(checkpoint_number=step)


def test_size_stages_planned_at_the_run_start_hold_when_train_steps_changes(tmp_path, caplog):
  """Equal shares of the new train_steps would move the boundaries (20 steps: 48 px from step 6, 64 from 13, so a
  run at step 8 would go back to 48 px); the stages recorded at the run's start hold, the last one takes the added
  steps, and a resume that would train only below the last size is refused before anything is written."""
  first = tiny.resnet_params(tmp_path, image_size=64, train_size_schedule=[32, 48, 64], train_steps=10)
  wiring.record_run_start(first)
  assert wiring.size_stages(first) == [(0, 32), (3, 48), (6, 64)]
  _checkpoint_at(tmp_path, 2)
  longer = tiny.resnet_params(tmp_path, image_size=64, train_size_schedule=[32, 48, 64], train_steps=20)
  with caplog.at_level('INFO', logger='absl'):
    assert wiring.size_stages(longer) == [(0, 32), (3, 48), (6, 64)]
  assert 'keeps the stages this run planned at its start over train_steps=10' in caplog.text
  assert [start for start, _ in wiring.train_input(longer).input_fn.stages] == [0, 3, 6]
  wiring.record_run_start(longer)   # a resume records nothing new: the plan stays the first start's
  shorter = tiny.resnet_params(tmp_path, image_size=64, train_size_schedule=[32, 48, 64], train_steps=5)
  with pytest.raises(ValueError, match=r'train_steps=5 ends before the last stage .* planned at the run\'s start over '
                                       r'train_steps=10 .*64 px would start at step 6 and never train'):
    wiring.check_resume(shorter)
  assert wiring.size_stages(tiny.resnet_params(tmp_path, image_size=64, train_size_schedule=[32, 48, 64],
                                               train_steps=8)) == [(0, 32), (3, 48), (6, 64)]
  # Another schedule is a new plan, over the train_steps it comes with.
  other = tiny.resnet_params(tmp_path, image_size=64, train_size_schedule=[48, 64], train_steps=20)
  assert wiring.size_stages(other) == [(0, 48), (10, 64)]


@pytest.mark.slow
def test_a_resume_that_cannot_reach_the_last_size_is_refused_before_params_yaml_is_written(tmp_path):
  """Through the CLI: the refusal comes before model_dir_lib.check_and_record rewrites params.yaml."""
  from tests.helpers import cli  # pylint: disable=import-outside-toplevel
  model_dir = tmp_path / 'run'
  flags = ('--mode=train', f'--model_dir={model_dir}', '--image_size=40', '--train_size_schedule=32,36,40',
           '--iterations_per_loop=2', '--save_checkpoints_steps=2')
  first = cli.run_in_process(*flags, '--train_steps=6')
  assert first.code == 0, first.log[-3000:]
  for path in model_dir.glob('model.ckpt-[46].*'):   # back to the step-2 checkpoint, as a run stopped there leaves
    path.unlink()
  params_yaml = (model_dir / 'params.yaml').read_bytes()
  refused = cli.run_in_process(*flags, '--train_steps=3')
  assert refused.code == 1 and 'train_steps=3 ends before the last stage' in refused.log
  assert (model_dir / 'params.yaml').read_bytes() == params_yaml
  resumed = cli.run_in_process(*flags, '--train_steps=8')
  assert resumed.code == 0, resumed.log[-3000:]
  assert '32 px from step 0, 36 px from step 2, 40 px from step 4' in resumed.log   # not 0, 2, 5 (equal thirds of 8)


def test_a_seeded_epoch_across_a_size_stage_boundary_reads_each_record_once(tmp_path):
  """Every stage reads the one order: a later stage goes on at its first step's place (step x batch) of the same
  permutation, so the epoch it finishes holds each record once (a seed per stage read 30 records: some twice, some
  never). Only the augmentation draws are salted by stage."""
  from tests.helpers import cli  # pylint: disable=import-outside-toplevel
  from tools import make_fake_imagenet  # pylint: disable=import-outside-toplevel
  data = str(tmp_path / 'data')
  make_fake_imagenet.write_fake_imagenet(data, num_train=30, num_validation=4, num_test=2, num_shards=4,
                                         num_classes=2, min_size=32, max_size=48, seed=5)
  cli.write_summary(data)
  params = tiny.resnet_params(tmp_path / 'run', data_dir=data, image_size=64, train_size_schedule=[32, 64],
                              train_steps=10, random_seed=3, train_batch_size=3)
  (_, _), (boundary, _) = wiring.size_stages(params)
  first, second = wiring.train_input(params).sources
  place = boundary * 3   # the records the first stage's steps took
  before = list(first.training_records(first.list_files(), None, 0).take(place).as_numpy_iterator())
  after = list(second.training_records(second.list_files(), None, place).take(30 - place).as_numpy_iterator())
  assert len(set(before + after)) == 30
  assert first.augment_seed != second.augment_seed
