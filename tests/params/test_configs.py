"""Every shipped config runs: a tiny end-to-end train_and_eval (+ export) through the CLI's main on CPU, sizes
overridden; in this process, but a seeded config in a process of its own (its deterministic ops stay on).

Only sizes change (depth 18, 32 px, batch 8, 2 steps); everything else -- precision, XLA, strategy, schedule,
augmentation -- is the config's own, so a config that cannot run on the path it promises fails here.
"""
import glob
import os

import pytest

from resnet import resnet_flags
from tests.helpers import cli

pytestmark = pytest.mark.slow  # end to end: whole runs, processes or their shared fixtures

CONFIGS = sorted(glob.glob(os.path.join(resnet_flags.CONFIG_DIR, '*.yaml')))
TINY = ['--resnet_depth=10', '--image_size=32', '--train_batch_size=8', '--eval_batch_size=8',
        '--predict_batch_size=8', '--train_steps=2', '--iterations_per_loop=1', '--steps_per_eval=2',
        '--use_cache=false']
# What a config needs on a CPU-only machine, beyond sizes: the TPU config runs locally only with use_tpu=false.
EXTRA = {'resnet50_tpu_v3_8.yaml': ['--use_tpu=false']}


@pytest.mark.parametrize('path', CONFIGS, ids=os.path.basename)
def test_shipped_config_trains_evaluates_and_exports_on_cpu(path, records, tmp_path):
  name = os.path.basename(path)
  model_dir = str(tmp_path / 'run')
  flags = ('--mode=train_and_eval', f'--config_file={path}', f'--data_dir={records}', f'--model_dir={model_dir}',
           f'--export_dir={model_dir}/export', *TINY, *EXTRA.get(name, []))
  if 'random_seed' in open(path).read():
    proc = cli.run_cli(*flags)
    assert proc.returncode == 0, proc.stderr[-3000:]
  else:
    result = cli.run_in_process(*flags, base=())
    assert result.code == 0, result.log[-3000:]
  assert os.path.exists(os.path.join(model_dir, 'eval_results.json'))
  assert glob.glob(os.path.join(model_dir, 'export', '*', 'saved_model.pb'))


def test_the_tpu_config_without_use_tpu_false_asks_for_a_tpu(records, tmp_path):
  """The TPU config really selects TPUStrategy: without a TPU it fails fast and says how to run locally."""
  result = cli.run_in_process('--mode=train', '--config_file=resnet50_tpu_v3_8', '--tpu=grpc://127.0.0.1:1',
                              '--strategy=auto', f'--data_dir={records}', f'--model_dir={tmp_path}', *TINY, base=())
  assert result.code != 0
  assert 'use_tpu=false' in result.log
