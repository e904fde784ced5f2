"""Rows in child processes: the determinism row, and the PyTorch rows.

TensorFlow cannot turn deterministic ops off again, so a row that turns them on in the benchmark's own process
would slow every row measured after it; a fresh process keeps them there. The PyTorch rows run in the Python that
has torch (torch_row.py says why). Protocol: the parent passes a JSON spec (what to measure, an output path) as
the child's only argument; the child writes the measured row there as JSON.
"""
import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from typing import Optional, Tuple

from tools import torchvision_recipe
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


TORCHVISION_DEPTHS = torchvision_recipe.DEPTHS  # torchvision.models.resnet{depth}


def find_torch_python(cfg: BenchConfig) -> Tuple[Optional[str], str]:
  """(the Python that runs the PyTorch rows, or None; why not). ``--torch_python`` wins; else this Python when it
  can import torch and torchvision (checked without importing them here)."""
  if not cfg.torch:
    return None, 'PyTorch rows off (--torch=false)'
  if cfg.resnet_depth not in TORCHVISION_DEPTHS:
    return None, f'torchvision has no ResNet-{cfg.resnet_depth} (it has {", ".join(map(str, TORCHVISION_DEPTHS))})'
  if cfg.torch_python:
    if not (os.path.isfile(cfg.torch_python) and os.access(cfg.torch_python, os.X_OK)):
      raise ValueError(f'--torch_python={cfg.torch_python} is not an executable Python; point it at the python of '
                       'an environment with torch and torchvision (e.g. /path/to/venv/bin/python).')
    return cfg.torch_python, ''
  if importlib.util.find_spec('torch') and importlib.util.find_spec('torchvision'):
    return sys.executable, ''
  return None, ('No PyTorch rows: this Python cannot import torch and torchvision. Install them in a scratch '
                'environment (never this project\'s) and pass --torch_python=/path/to/that/bin/python.')


def torch_row_in_subprocess(cfg: BenchConfig, precision: str, python: str, compiled: bool = False) -> Row:
  """torch_row.measure in ``python``: torchvision's ResNet of the same depth, image size, batch and precision,
  eager or (``compiled``) under ``torch.compile``."""
  kind = 'torch_compile' if compiled else 'torch'
  with tempfile.TemporaryDirectory(prefix='train-benchmark-torch-') as tmp:
    out = os.path.join(tmp, 'row.json')
    spec = json.dumps({'resnet_depth': cfg.resnet_depth, 'image_size': cfg.image_size, 'batch_size': cfg.batch_size,
                       'num_classes': cfg.num_classes, 'precision': precision, 'steps': cfg.steps,
                       'warmup_steps': cfg.warmup_steps, 'repeats': cfg.repeats, 'seed': cfg.seed, 'out': out,
                       'compile': compiled})
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get('PYTHONPATH')) if p))
    proc = subprocess.run([python, '-m', 'tools.train_bench.torch_row', spec], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0 or not os.path.exists(out):
      raise RuntimeError(f'The {row_name(cfg, kind)} {precision} row failed in {python} (exit code {proc.returncode}); its stderr '
                         f'ends with:\n{proc.stderr[-3000:]}')
    with open(out) as f:
      values = json.load(f)
  return Row(name=row_name(cfg, kind), kind=kind, precision=precision, data='synthetic', **values)
