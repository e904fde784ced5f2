r"""Training benchmark: our Estimator vs Keras ``fit`` and PyTorch, against ceilings measured in the same run, the
costs of XLA and determinism, and real vs synthetic input, in one run.

  python -m tools.train_benchmark --markdown    # docs/performance.md's table: ResNet-50, 224 px, batch 32, fp32+bf16
  python -m tools.train_benchmark --quick              # ResNet-50 at 128 px, fewer steps
  python -m tools.train_benchmark --data_dir=DIR       # real-data row on your own TFRecords (train-*)
  python -m tools.train_benchmark --torch_python=/path/to/venv/bin/python   # PyTorch rows from a scratch venv

Rows, per precision, in this order (each compared with a neighbour measured in the same run):
- ``keras``: what a user writes: ``keras.applications.ResNet<depth>(weights=None)``, ``compile`` with SGD momentum
  and sparse cross-entropy, ``fit`` with ``jit_compile=False`` and ``steps_per_execution=1``. The baseline.
- ``keras_ours``: the same ``compile``/``fit`` on OUR model (``resnet_model_fn.build_model``, same precision
  policy). Against ``keras`` it isolates the model implementation; ``ours`` against it isolates the runner.
- ``ours``: the production path: ``Estimator`` + ``resnet_model_fn`` under a OneDeviceStrategy, one compiled loop
  of ``--steps`` steps per timed window, ImageNetInput's synthetic batches.
- ``ours_xla``: the same with ``jit_compile=True`` (XLA on each replica step), against ``ours``.
- ``ours`` on JPEG records (one precision), against ``ours`` on synthetic batches.
- ``ours_det``: seeded, with deterministic ops turned on as ``resnet_main --random_seed`` does; they stay on
  process-wide and for good, so it runs last, in a child process by default, against ``ours``.
- ``torch``: torchvision's ResNet of the same depth, image size, batch and precision, trained eagerly in a child
  process with the Python that has torch (never a dependency): ``ours`` is rated against it ("vs PyTorch").
- ``torch_compile``: the same under ``torch.compile`` (inductor), in its own child process: what a PyTorch user
  turns on first, and the peer we lead least ("vs torch.compile").

How it measures:
- Warm-up (tracing, XLA compilation, oneDNN primitive creation) runs first and is never timed. Every row is timed
  over ``--repeats`` windows (default 3) of ``--steps`` steps; the table shows the median window and the range
  (slowest..fastest window). A ratio is of medians, with its range: slowest/fastest .. fastest/slowest window.
- Our rows are one ``train()`` call whose loop hook ends a loop after the warm-up and after every window, and times
  each loop alone (summaries and logging between loops, and the one checkpoint at the end, are outside); Keras
  windows are measured by a batch callback. Both Keras rows get the very same synthetic batch our rows train on,
  as float32.
- Utilisation uses the analytic count ``plan.count_flops`` (forward = 2 x multiply-adds of convs + dense;
  training = 3 x forward) against ceilings measured in the same run (ceilings.py): TensorFlow's fp32 and bf16
  2048^3 matmul and a ResNet 3x3 conv; every row shows its share of the conv ceiling of its precision. A peak
  from the nominal clock is printed beside them, for reference only.
- Timings on a shared machine are noisy: every row reports the share of the cores used by other processes during
  its timed windows (from /proc/stat); more than 10% prints a noise warning.

Code: tools/train_bench/ (machine: CPU and load; ceilings: measured kernels; rows: config, rows, ratios; measure:
one row; child: the determinism and PyTorch rows' processes; torch_row: the PyTorch row; suite: the run; report:
the text). This module is the command line.
"""
import os
import shlex
import sys
from typing import Sequence, Tuple

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')  # hide TensorFlow's C++ banner; absl logs stay
os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '1')  # as resnet_main: oneDNN on AVX2-only CPUs too
if __name__ == '__main__' and __package__ in (None, ''):  # `python tools/train_benchmark.py`: import from the root
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# pylint: disable=g-import-not-at-top,wrong-import-position
from absl import app
from absl import flags
from absl import logging

from tools.train_bench.report import format_markdown, format_report
from tools.train_bench.rows import DETERMINISM_MODES, PRECISIONS, BenchConfig, validate
from tools.train_bench.suite import run_benchmark
# pylint: enable=g-import-not-at-top,wrong-import-position


QUICK = {'image_size': 128, 'steps': 5, 'warmup_steps': 2}


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """Defined on demand (run_main), so importing this module in tests defines nothing."""
  fv = flag_values
  flags.DEFINE_integer('resnet_depth', 50, 'ResNet depth (keras.applications rows exist for 50, 101, 152).',
                       flag_values=fv)
  flags.DEFINE_integer('image_size', 224, 'Square image size.', flag_values=fv)
  flags.DEFINE_integer('batch_size', 32, 'Global batch size.', flag_values=fv)
  flags.DEFINE_integer('steps', 6, 'Timed steps per window (our runner: one compiled loop of this many steps).',
                       flag_values=fv)
  flags.DEFINE_integer('warmup_steps', 3, 'Untimed steps first (tracing, oneDNN primitive creation).',
                       flag_values=fv)
  flags.DEFINE_integer('repeats', 3, 'Timed windows per row; the median is shown, with the min-max range.',
                       flag_values=fv)
  flags.DEFINE_list('precisions', list(PRECISIONS), 'Precisions to measure: float32, bfloat16.', flag_values=fv)
  flags.DEFINE_bool('keras', True, 'Measure keras.applications ResNet with compile/fit (the baseline).',
                    flag_values=fv)
  flags.DEFINE_string('keras_application', None, 'keras.applications model of the baseline row (default: the '
                      'ResNet of --resnet_depth), e.g. ResNet50V2.', flag_values=fv)
  flags.DEFINE_bool('keras_xla', False, 'Also measure Keras applications fit with jit_compile=True (XLA).',
                    flag_values=fv)
  flags.DEFINE_bool('keras_ours', True, 'Measure Keras compile/fit on our model (separates model from runner).',
                    flag_values=fv)
  flags.DEFINE_list('xla_precisions', ['float32'], 'Precisions with an Estimator jit_compile=True row (empty: '
                    'none); each must be in --precisions.', flag_values=fv)
  flags.DEFINE_list('determinism_precisions', ['bfloat16'], 'Precisions with a seeded, deterministic-ops '
                    'row (empty: none); each must be in --precisions. Default: the default '
                    'training precision.', flag_values=fv)
  flags.DEFINE_list('kernel_precisions', ['bfloat16'], 'Precisions with rows that turn one of bfloat16\'s CPU '
                    'kernels back to TensorFlow\'s own (conv1x1_filter_grad=conv, residual_add_relu=ops), each '
                    'against ours: what each bought (empty: none); each must be in --precisions.', flag_values=fv)
  flags.DEFINE_list('recipe_precisions', ['bfloat16'], 'Precisions with rows for mixup 0.2 + CutMix 1.0, '
                    'gradient_accumulation_steps=2, BCE, AdamW, LAMB and clip_grad_norm, each against ours (empty: '
                    'none); each must be in --precisions.',
                    flag_values=fv)
  flags.DEFINE_enum('determinism_mode', 'subprocess', DETERMINISM_MODES, 'Where the determinism rows run: a child '
                    'process, or this one after every other row (deterministic ops cannot be turned off).',
                    flag_values=fv)
  flags.DEFINE_bool('real_data', True, 'Measure our runner on TFRecords too (real vs synthetic).', flag_values=fv)
  flags.DEFINE_string('data_dir', None, 'TFRecords (train-*) for the real-data row; unset: fake ImageNet records '
                      'are written to a temp dir.', flag_values=fv)
  flags.DEFINE_bool('profile', False, 'Capture a short profile of the real-data run and print its input-wait %.',
                    flag_values=fv)
  flags.DEFINE_float('peak_clock_ghz', None, "CPU clock of the reference-only clock-derived peak (default: "
                     "/proc/cpuinfo 'cpu MHz').", flag_values=fv)
  flags.DEFINE_bool('ceilings', True, "Measure TensorFlow's fp32 and bf16 matmul and conv throughput at the start "
                    'and end of the run; rows are rated against the conv ceiling.', flag_values=fv)
  flags.DEFINE_bool('torch', True, "PyTorch rows (torchvision's ResNet, eager) where a Python with torch and "
                    'torchvision is found (--torch_python, else this one).', flag_values=fv)
  flags.DEFINE_bool('torch_compile', True, 'Beside the eager PyTorch row, the same model under torch.compile '
                    '(inductor, default mode; compiled in the warm-up steps, not timed).', flag_values=fv)
  flags.DEFINE_string('torch_python', '', 'Python of a scratch environment with torch and torchvision, for the '
                      'PyTorch rows (torch is never a dependency of this project).', flag_values=fv)
  flags.DEFINE_bool('quick', False, 'A fast look: ResNet-50 at 128 px, 5 timed steps, 2 warm-up (explicit flags '
                    'win).', flag_values=fv)
  flags.DEFINE_bool('markdown', False, "Also print docs/performance.md's markdown table, the machine and this command.",
                    flag_values=fv)


def _precision_list(values: Sequence[str]) -> Tuple[str, ...]:
  return tuple(p.strip() for p in values if p.strip())


def config_from_flags(fv: flags.FlagValues = flags.FLAGS) -> BenchConfig:
  values = {name: fv[name].value for name in ('resnet_depth', 'image_size', 'batch_size', 'steps', 'warmup_steps',
                                               'repeats', 'keras', 'keras_application', 'keras_xla', 'keras_ours',
                                               'determinism_mode', 'real_data', 'data_dir', 'profile',
                                               'peak_clock_ghz', 'ceilings', 'torch', 'torch_compile',
                                               'torch_python')}
  if fv['quick'].value:
    values.update({k: v for k, v in QUICK.items() if not fv[k].present})
  for name in ('precisions', 'xla_precisions', 'determinism_precisions', 'recipe_precisions', 'kernel_precisions'):
    values[name] = _precision_list(fv[name].value)
  return BenchConfig(**values)


def command_line(argv: Sequence[str]) -> str:
  """The command that reproduces this run, as ``python -m tools.train_benchmark ...``."""
  return shlex.join(['python', '-m', 'tools.train_benchmark', *argv[1:]])


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  cfg = config_from_flags()
  validate(cfg)
  logging.info('Benchmark config: %s', cfg)
  results = run_benchmark(cfg)
  print(format_report(results))
  if flags.FLAGS.markdown:
    print('\nMarkdown (docs/performance.md):\n')
    print(format_markdown(results, command_line(sys.argv)))


def run_main() -> None:
  define_flags()
  app.run(main)


if __name__ == '__main__':
  run_main()
