"""Exact resume, end to end: a seeded run stopped and resumed several times ends with the checkpoint of the same run
uninterrupted, tensor by tensor, bit for bit.

Each case trains the tiny run (12 steps, loops of 2, a checkpoint every 4) once uninterrupted, and once in three
processes: stopped at step 5 as SIGINT stops it (mid-loop: a checkpoint at step 5, exit 0), stopped again at step
9, then the step-9 checkpoint is deleted as if the process had been killed (SIGKILL) before saving it, so the last
process resumes from step 8 and runs to the end. Seeded runs (deterministic ops) run in processes of their own.
"""
import os

import numpy as np
import pytest

from tests.helpers import cli
from tests.helpers import procs

pytestmark = pytest.mark.slow  # end to end: 4 training processes a case

STEPS = 12
LOOP = ('--train_steps=12', '--iterations_per_loop=2', '--save_checkpoints_steps=4', '--keep_checkpoint_max=20',
        '--shuffle_buffer_size=16', '--random_seed=7', '--num_train_images=32')


def _train(data_dir: str, model_dir: str, log: str, flags, stop_at: str = '', cpus: str = '') -> str:
  env = procs.base_env(**{procs.NO_FORKSERVER: '1'}, **({'STOP_AT': stop_at} if stop_at else {}),
                       **({'LOGICAL_CPUS': cpus} if cpus else {}))
  args = cli.MAIN_DUMP + list(cli.TINY) + ['--mode=train', f'--data_dir={data_dir}', f'--model_dir={model_dir}',
                                           *LOOP, *flags]
  proc = procs.run(args, log, timeout=300, env=env)
  assert proc.popen.returncode == 0, proc.tail()
  return proc.log()


def _killed_after(model_dir: str, step: int) -> None:
  """The checkpoints after ``step`` lost, as when the process was killed before writing them."""
  for name in os.listdir(model_dir):
    if name.startswith('model.ckpt-') and int(name.split('-')[1].split('.')[0]) > step:
      os.remove(os.path.join(model_dir, name))


def _data(tmp_path, counted: bool = True) -> str:
  """32 training records in 4 shards; ``counted``: with summary.json (the place is computed from its counts), else
  without (the place is found from the records' headers, shards.count_records)."""
  path = cli.make_tiny_dataset(str(tmp_path / 'data'), num_shards=4)
  return cli.write_summary(path) if counted else path


def stopped_and_resumed_equals_uninterrupted(tmp_path, flags, cpus: str = '', counted: bool = True) -> int:
  data_dir = _data(tmp_path, counted)
  whole, parts = str(tmp_path / 'whole'), str(tmp_path / 'parts')
  _train(data_dir, whole, str(tmp_path / 'whole.log'), flags, cpus=cpus)
  log = _train(data_dir, parts, str(tmp_path / 'p1.log'), flags, stop_at='5', cpus=cpus)
  assert 'Training interrupted (SIGINT) at step 5' in log
  log = _train(data_dir, parts, str(tmp_path / 'p2.log'), flags, stop_at='9', cpus=cpus)
  assert cli.restored_steps(log) == [5] and 'Training interrupted (SIGINT) at step 9' in log
  assert ('from the record counts of summary.json' if counted else "from the record counts of its files' record "
          'headers') in log
  _killed_after(parts, 8)
  log = _train(data_dir, parts, str(tmp_path / 'p3.log'), flags, cpus=cpus)
  assert cli.restored_steps(log) == [8]
  want = cli.load_checkpoint_fully(os.path.join(whole, f'model.ckpt-{STEPS}'))
  got = cli.load_checkpoint_fully(os.path.join(parts, f'model.ckpt-{STEPS}'))
  assert sorted(got) == sorted(want)
  differ = [k for k in want if not np.array_equal(want[k], got[k])]
  assert not differ, f'{len(differ)} of {len(want)} tensors differ: {differ[:8]}'
  return len(want)


@pytest.mark.parametrize('counted', [True, False])
def test_a_seeded_run_stopped_and_killed_ends_bit_identical_to_the_uninterrupted_run(tmp_path, counted):
  assert stopped_and_resumed_equals_uninterrupted(tmp_path, [], counted=counted) > 100


def test_with_cache_mixing_augmentation_masks_ema_accumulation_float16_and_progressive_resizing(tmp_path):
  flags = ['--use_cache=true', '--mixup_alpha=0.2', '--cutmix_alpha=1.0', '--augment_name=randaugment',
           '--random_erase_prob=0.5', '--drop_connect_rate=0.2', '--dropout_rate=0.2', '--moving_average_decay=0.9',
           '--gradient_accumulation_steps=2', '--precision=float16', '--image_size=48', '--train_size_schedule=32,48']
  stopped_and_resumed_equals_uninterrupted(tmp_path, flags)


def test_with_autoaugment_and_distillation(tmp_path):
  teacher, _, _ = cli.shared_trained_run()
  stopped_and_resumed_equals_uninterrupted(tmp_path, ['--augment_name=autoaugment',
                                                      f'--teacher_checkpoint={teacher}'])


def test_on_two_mirrored_replicas_with_trivialaugment(tmp_path):
  stopped_and_resumed_equals_uninterrupted(tmp_path, ['--augment_name=trivialaugment_wide', '--strategy=mirrored',
                                                      '--drop_connect_rate=0.2'], cpus='2')


def test_with_dropblock(tmp_path):
  stopped_and_resumed_equals_uninterrupted(tmp_path, ['--resnet_depth=50', '--dropblock_groups=3,4',
                                                      '--dropblock_keep_prob=0.8', '--dropblock_size=3',
                                                      '--train_batch_size=4'])


def test_an_unseeded_run_keeps_its_input_order_and_resumes_at_its_place(tmp_path):
  """Unseeded: the run's input seed is drawn once and kept in its checkpoints; a resume starts at step x batch."""
  data_dir = _data(tmp_path)
  model_dir = str(tmp_path / 'run')
  common = (f'--data_dir={data_dir}', f'--model_dir={model_dir}', '--iterations_per_loop=3',
            '--save_checkpoints_steps=3', '--mode=train', '--num_train_images=32')
  first = cli.run_in_process(*common, '--train_steps=3')
  assert first.code == 0, first.log
  seed = cli.load_checkpoint_fully(os.path.join(model_dir, 'model.ckpt-3'))['input_seed/.ATTRIBUTES/VARIABLE_VALUE']
  assert seed != 0 and 'Training input pipeline 0 of 1: from the start' in first.log
  second = cli.run_in_process(*common, '--train_steps=6')
  assert second.code == 0, second.log
  assert 'resumed at record 24 of this pipeline: epoch 0, record 24 of 32' in second.log   # 3 steps x batch 8
  assert cli.load_checkpoint_fully(os.path.join(model_dir, 'model.ckpt-6'))[
      'input_seed/.ATTRIBUTES/VARIABLE_VALUE'] == seed
