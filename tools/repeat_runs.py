r"""Repeats one training command and prints the spread of its accuracy: what a figure is worth without a seed.

A seeded run (``--random_seed``) turns on deterministic kernels, which are not the ones users run unseeded; a
README figure is only one a user can expect when it comes with the spread over a few unseeded runs. Each run is
``resnet_main --mode=train_and_eval`` in a model_dir of its own (``OUTPUT_DIR/NAME-N``); the table gives top-1,
macro F1 and each class's recall as median (min-max) (multi-label runs: mAP, micro AP, F1 at 0.5 and at the tuned
thresholds, each class's AP), and counts runs that failed (e.g. stopped as diverged).

  python -m tools.repeat_runs --name=balanced --runs=5 --output_dir=study -- \
      --config_file=small_data --data_dir=imb/data --train_steps=300 --class_weights=balanced

Everything after ``--`` goes to resnet_main as it is; ``--seeds=1,2,3`` runs seeded instead (one run per seed),
and unseeded runs override a seed the config sets (``random_seed=null``).
"""
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from typing import Dict, List, Mapping, Optional, Sequence

if __package__ in (None, ''):
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags

FLAGS = flags.FLAGS


def define_flags() -> None:
  """This tool's flags, defined when it runs (not at import: a test process imports it beside resnet_main, whose
  flags of the same names would be taken)."""
  flags.DEFINE_string('name', 'run', 'Name of this setting: model_dirs are OUTPUT_DIR/NAME-1, NAME-2, ...')
  flags.DEFINE_string('output_dir', 'repeat_runs', 'Where the runs and NAME.json (every run\'s numbers) go.')
  flags.DEFINE_integer('runs', 3, 'Unseeded runs.')
  flags.DEFINE_list('seeds', [], 'Seeded runs instead, one per seed (random_seed=N).')


def check_args(args: Sequence[str], instead: str = '--seeds=1,2,3 (or --runs=N unseeded)') -> None:
  """The runs' seeding is this tool's (and tools.time_to_accuracy's) to set, never the command's."""
  if any(a.startswith('--random_seed') for a in args):
    raise app.UsageError(f'Seeds are this tool\'s to set: use {instead}, not --random_seed.')
  if any(a.startswith(('--model_dir', '--mode')) for a in args):
    raise app.UsageError('--model_dir and --mode are this tool\'s to set (a model_dir of its own per run, '
                         'train_and_eval): leave them out of the run flags.')


STOP_GRACE_SECONDS = 120.0   # SIGTERM saves a checkpoint first; after this long, SIGKILL
# SIGTERM is sent again this often until the run ends: one that lands before resnet_main handles signals (its
# start-up) or during an evaluation does not stop training.
RESEND_SECONDS = 5.0


def stop_with_parent() -> None:
  """(A Popen preexec_fn.) The run gets SIGTERM (and saves a checkpoint) when the tool that started it dies,
  however it dies (Linux): tools.sweep's trials and tools.time_to_accuracy's runs."""
  try:
    import ctypes  # pylint: disable=g-import-not-at-top
    ctypes.CDLL('libc.so.6', use_errno=True).prctl(1, signal.SIGTERM)   # PR_SET_PDEATHSIG
  except (OSError, AttributeError):
    pass


def stop_run(proc: subprocess.Popen) -> None:
  """Stops a resnet_main run the way a user's Ctrl-C would, and surely: SIGTERM (a checkpoint and a clean exit),
  again every RESEND_SECONDS, then SIGKILL after STOP_GRACE_SECONDS."""
  deadline = time.time() + STOP_GRACE_SECONDS
  while proc.poll() is None and time.time() < deadline:
    proc.send_signal(signal.SIGTERM)
    try:
      proc.wait(timeout=max(0.0, min(RESEND_SECONDS, deadline - time.time())))
    except subprocess.TimeoutExpired:
      pass
  if proc.poll() is None:
    proc.kill()
    proc.wait()


def new_model_dirs(output_dir: str, name: str, count: int,
                   fix: str = 'pick another --name or --output_dir') -> List[str]:
  """OUTPUT_DIR/NAME-1 .. NAME-count, refused when any exists: resnet_main would resume it and report (and a
  timing would time) the old run, not a new one."""
  model_dirs = [os.path.join(output_dir, f'{name}-{i}') for i in range(1, count + 1)]
  taken = [d for d in model_dirs if os.path.exists(d)]
  if taken:
    raise app.UsageError(f'{", ".join(taken)} exist already: {fix}.')
  return model_dirs


def command(args: Sequence[str], model_dir: str, seed: Optional[str]) -> List[str]:
  """resnet_main --mode=train_and_eval in model_dir: seeded, or unseeded with random_seed=null last, so that it
  overrides a seed the config sets."""
  seeding = [f'--random_seed={seed}'] if seed is not None else ['--param_overrides=random_seed=null']
  return [sys.executable, '-m', 'resnet.resnet_main', '--mode=train_and_eval', f'--model_dir={model_dir}', *args,
          *seeding]


def run_once(args: Sequence[str], model_dir: str, seed: Optional[str]) -> Dict[str, object]:
  """One train_and_eval; its eval_results.json plus the exit code and wall time."""
  cmd = command(args, model_dir, seed)
  start = time.time()
  with open(model_dir + '.log', 'w') as log:
    code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=False).returncode
  results: Dict[str, object] = {'exit_code': code, 'wall_seconds': round(time.time() - start, 1), 'seed': seed}
  path = os.path.join(model_dir, 'eval_results.json')
  if code == 0 and os.path.exists(path):
    with open(path) as f:
      results.update(json.load(f))
  return results


# Multi-label runs: what their eval reports instead of top-1 (label_metrics.report).
MULTI_LABEL = {'mAP': 'mAP', 'micro AP': 'micro_AP', 'micro F1 at 0.5': 'micro_f1',
               'micro F1 at tuned thresholds': 'micro_f1_tuned', 'macro F1 at 0.5': 'macro_f1',
               'macro F1 at tuned thresholds': 'macro_f1_tuned'}


def _finished(run: Mapping[str, object]) -> bool:
  return 'top_1_accuracy' in run or 'mAP' in run


def summary_rows(runs: Sequence[Mapping[str, object]]) -> List[str]:
  """'metric: median (min-max)' for top-1, macro F1 and each class's recall over the runs that finished (multi-label
  runs: mAP, micro AP, micro and macro F1 at 0.5 and at the tuned thresholds, each class's AP)."""
  done = [r for r in runs if _finished(r)]
  lines = [f'{len(done)} of {len(runs)} runs finished' + (
      f'; failed (exit code): {[r["exit_code"] for r in runs if not _finished(r)]}'
      if len(done) < len(runs) else '')]
  if not done:
    return lines
  if 'mAP' in done[0]:
    values = {name: [r[key] for r in done] for name, key in MULTI_LABEL.items()}
    for name in done[0].get('per_class', {}):   # AP is None where a run's split had no positive of the class
      aps = [r['per_class'][name]['AP'] for r in done if r['per_class'].get(name, {}).get('AP') is not None]
      if aps:
        values[f'{name} AP'] = aps
  else:
    values = {'top-1': [r['top_1_accuracy'] for r in done],
              'macro F1': [r.get('macro_f1', float('nan')) for r in done]}
    for name in done[0].get('per_class', {}):
      values[f'{name} recall'] = [r['per_class'][name]['recall'] for r in done]
  for metric, xs in values.items():
    lines.append(f'{metric}: {spread(xs)}   runs: {", ".join(f"{x:.3f}" for x in xs)}')
  return lines


def spread(xs: Sequence[float], fmt: str = '.3f') -> str:
  """'median (min-max)': how every tool here states repeated runs."""
  return f'{statistics.median(xs):{fmt}} ({min(xs):{fmt}}-{max(xs):{fmt}})'


def main(argv: Sequence[str]) -> None:
  args = argv[1:]
  check_args(args)
  plan = FLAGS.seeds or [None] * FLAGS.runs
  model_dirs = new_model_dirs(FLAGS.output_dir, FLAGS.name, len(plan))
  os.makedirs(FLAGS.output_dir, exist_ok=True)
  runs = []
  for i, (seed, model_dir) in enumerate(zip(plan, model_dirs), 1):
    runs.append(run_once(args, model_dir, seed))
    print(f'{FLAGS.name} run {i}/{len(plan)} (seed {seed}): exit {runs[-1]["exit_code"]}, '
          f'top-1 {runs[-1].get("top_1_accuracy", "-")}, mAP {runs[-1].get("mAP", "-")}, '
          f'{runs[-1]["wall_seconds"]} s', flush=True)
  with open(os.path.join(FLAGS.output_dir, f'{FLAGS.name}.json'), 'w') as f:
    json.dump({'args': list(args), 'runs': runs}, f, indent=1)
  print(f'\n{FLAGS.name}: resnet_main {" ".join(args)}')
  print('\n'.join(summary_rows(runs)))


def run_main() -> None:
  define_flags()
  app.run(main)


if __name__ == '__main__':
  run_main()
