"""Prints a text verdict for a captured profile: step time, % waiting on input, what to try first, and what the
step is made of (op time by category and by op type).

  python -m tools.profile_report --logdir=<model_dir | model_dir/plugins/profile | run dir | host.xplane.pb>
      [--run=2026_11_20_22_52_05]

Exit status 1 when the profile cannot be analysed, e.g. it has no steps (no step markers).
"""
import os
import sys
from typing import List, Optional, TextIO

# Hide xprof's C++ INFO lines; set before xprof loads (it is imported lazily by resnet.estimator.profile_analysis).
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '1')

from absl import app  # pylint: disable=g-import-not-at-top,wrong-import-position
from absl import flags  # pylint: disable=g-import-not-at-top,wrong-import-position

from resnet.estimator import profile_analysis  # pylint: disable=g-import-not-at-top,wrong-import-position

FLAGS = flags.FLAGS


def define_flags() -> None:
  """Defines the flags on first call only, so tools sharing flag names can be imported in one process."""
  if 'logdir' not in FLAGS:
    flags.DEFINE_string('logdir', None, 'A model_dir, its plugins/profile dir, one run dir, or one .xplane.pb file.')
    flags.mark_flag_as_required('logdir')
  if 'run' not in FLAGS:
    flags.DEFINE_string('run', None, 'Run (directory name under plugins/profile) to analyse; default: the newest.')


def report(path: str, run: Optional[str] = None, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
  """Prints the report for path; returns the exit status (0 ok, 1 no steps or unreadable profile)."""
  try:
    result = profile_analysis.analyze_profile(path, run=run)
  except profile_analysis.ProfileAnalysisError as e:
    print(f'profile_report: {e}', file=err)
    return 1
  print(profile_analysis.format_report(result), file=out)
  try:
    print(profile_analysis.format_op_breakdown(profile_analysis.op_breakdown(path, run=run)), file=out)
  except profile_analysis.ProfileAnalysisError as e:
    print(f'No op breakdown: {e}', file=out)
  return 0


def main(argv: List[str]) -> int:
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  return report(FLAGS.logdir, FLAGS.run)


def run_main() -> None:
  define_flags()
  app.run(main)


if __name__ == '__main__':
  run_main()
