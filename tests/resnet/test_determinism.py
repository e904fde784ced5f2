"""--random_seed makes a run repeatable: two runs of the same command write bit-identical checkpoints on CPU."""
import os

import numpy as np

import pytest
from tests.helpers import cli
from tests.helpers import procs

pytestmark = pytest.mark.slow  # end to end: whole runs, processes or their shared fixtures


def _train(data_dir: str, model_dir: str, log: str, *extra: str) -> dict:
  proc = procs.run(cli.main_args('--mode=train', f'--data_dir={data_dir}', f'--model_dir={model_dir}',
                                 '--train_steps=4', '--iterations_per_loop=2', '--shuffle_buffer_size=16',
                                 '--augment_name=randaugment', *extra), log, timeout=240,
                   env=procs.base_env(**{procs.NO_FORKSERVER: '1'}))  # new interpreters: their own hash seeds
  assert proc.popen.returncode == 0, proc.tail()
  return cli.model_weights(os.path.join(model_dir, 'model.ckpt-4'))


def test_two_seeded_runs_write_identical_weights_and_another_seed_differs(tmp_path):
  data_dir = cli.make_tiny_dataset(str(tmp_path / 'data'))
  runs = {name: _train(data_dir, str(tmp_path / name), str(tmp_path / f'{name}.log'), f'--random_seed={seed}')
          for name, seed in (('a', 7), ('b', 7), ('c', 8))}
  assert runs['a'].keys() == runs['b'].keys() and len(runs['a']) > 20
  for key in runs['a']:
    np.testing.assert_array_equal(runs['a'][key], runs['b'][key], err_msg=key)
  assert any(not np.array_equal(runs['a'][k], runs['c'][k]) for k in runs['a'])
