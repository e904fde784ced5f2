"""tools/repeat_runs.py: the spread of repeated unseeded runs, and the runs it refuses to mix up."""
import subprocess
import sys

from tests.helpers import procs
from tools import repeat_runs


def _run(top_1, rare_recall, code=0):
  return {'exit_code': code, 'top_1_accuracy': top_1, 'macro_f1': top_1 - 0.1,
          'per_class': {'common': {'recall': 0.9}, 'rare': {'recall': rare_recall}}}


def test_the_summary_gives_median_min_max_per_metric_and_class_and_counts_failures():
  runs = [_run(0.7, 0.1), _run(0.8, 0.3), {'exit_code': 1}, _run(0.75, 0.0)]
  rows = repeat_runs.summary_rows(runs)
  assert rows[0] == '3 of 4 runs finished; failed (exit code): [1]'
  assert rows[1] == 'top-1: 0.750 (0.700-0.800)   runs: 0.700, 0.800, 0.750'
  assert rows[2].startswith('macro F1: 0.650 (0.600-0.700)')
  assert rows[4] == 'rare recall: 0.100 (0.000-0.300)   runs: 0.100, 0.300, 0.000'


def test_multi_label_runs_report_map_and_f1_at_both_thresholds():
  run = lambda m: {'exit_code': 0, 'mAP': m, 'micro_AP': m, 'micro_f1': m - 0.2, 'micro_f1_tuned': m - 0.1,
                   'macro_f1': m - 0.3, 'macro_f1_tuned': m - 0.1, 'per_class': {'rare': {'AP': m - 0.4}}}
  no_positives = dict(run(0.7), per_class={'rare': {'AP': None}})   # its validation split had no 'rare' image
  rows = repeat_runs.summary_rows([run(0.9), {'exit_code': 3}, run(0.8), no_positives])
  assert rows[0] == '3 of 4 runs finished; failed (exit code): [3]'
  assert rows[1] == 'mAP: 0.800 (0.700-0.900)   runs: 0.900, 0.800, 0.700'
  assert rows[3].startswith('micro F1 at 0.5: 0.600') and rows[4].startswith('micro F1 at tuned thresholds: 0.700')
  assert rows[-1].startswith('rare AP: 0.450 (0.400-0.500)')


def test_it_refuses_a_seed_in_the_command_and_model_dirs_that_exist(tmp_path):
  (tmp_path / 'x-1').mkdir()
  for extra, message in ((['--name=x'], 'x-1 exist already'), (['--name=y', '--', '--random_seed=3'],
                                                                 'not --random_seed')):
    proc = subprocess.run([sys.executable, '-m', 'tools.repeat_runs', f'--output_dir={tmp_path}', '--runs=2',
                           *extra], capture_output=True, text=True, env=procs.base_env(), cwd=procs.ROOT,
                          timeout=120, check=False)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr[-1000:]
