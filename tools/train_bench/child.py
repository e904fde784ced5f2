"""The determinism row in a child process: deterministic ops, once on, stay on for the whole process.

TensorFlow cannot turn deterministic ops off again, so a row that turns them on in the benchmark's own process
would slow every row measured after it; a fresh process keeps them there. Protocol: the parent passes a JSON spec
(config, precision, output path) as the child's only argument; the child writes the measured Row there as JSON.
"""
import dataclasses
import json
import os
import subprocess
import sys
import tempfile

from tools.train_bench import measure
from tools.train_bench.rows import BenchConfig, Row, row_name

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def bench_ours_in_subprocess(cfg: BenchConfig, precision: str, deterministic: bool = True) -> Row:
  """``bench_ours`` in a fresh Python process, so that what it turns on (deterministic ops) stays there."""
  with tempfile.TemporaryDirectory(prefix='train-benchmark-child-') as tmp:
    out = os.path.join(tmp, 'row.json')
    spec = json.dumps({'cfg': cfg.to_json(), 'precision': precision, 'deterministic': deterministic, 'out': out})
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get('PYTHONPATH')) if p))
    env.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')  # as the CLI sets for itself: no C++ banner in the child's stderr
    command = [sys.executable, '-c', 'import sys; from tools.train_bench import child; child.child_main(sys.argv[1])',
               spec]
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0 or not os.path.exists(out):
      raise RuntimeError(f'The {row_name(cfg, "ours_det" if deterministic else "ours")} row failed in its child '
                         f'process (exit code {proc.returncode}); its stderr ends with:\n{proc.stderr[-3000:]}')
    with open(out) as f:
      return Row(**json.load(f))


def child_main(spec: str) -> None:
  """Entry point of ``bench_ours_in_subprocess``'s child: measures one row and writes it as JSON."""
  values = json.loads(spec)
  row, _ = measure.bench_ours(BenchConfig.from_json(values['cfg']), values['precision'],
                              deterministic=values['deterministic'])
  with open(values['out'], 'w') as f:
    json.dump(dataclasses.asdict(row), f)
