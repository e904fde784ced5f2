"""What the program says on the console: errors a user can act on as one ``error:`` line (and exit 1), TensorFlow's
runtime errors by the line that names the problem, a clean exit on an interrupted run, and no library chatter.

The program's own errors that a user fixes (bad params, missing files, a locked or mismatched model_dir, a failed
write, a diverged run) are exceptions of these types; anything else is a bug and keeps its traceback.
"""
import contextlib
import logging as py_logging
import os
import re
import sys
from typing import Iterator, Tuple

from absl import logging
import tensorflow as tf

from resnet.run_dir import model_dir as model_dir_lib
from resnet.run_dir import run_lock
from resnet.estimator import files
from resnet.estimator import hooks as hooks_lib
from resnet.estimator.estimator import TrainingInterrupted

# Exceptions whose message is the whole story for the user: printed as 'error: <message>', exit 1.
USER_ERRORS = (hooks_lib.DivergenceError, FileNotFoundError, files.WriteError, model_dir_lib.ModelDirMismatch,
               run_lock.ModelDirLocked, RuntimeError, ValueError)


class Outcome:
  """Whether the guarded block ran to its end (False after an interrupted run's clean exit)."""
  completed = False


@contextlib.contextmanager
def reported_errors(also: Tuple[type, ...] = ()) -> Iterator[Outcome]:
  """Runs the block; a user error (USER_ERRORS, and ``also``: KeyError for an unknown params key) exits 1 with one
  'error:' line, an interrupted run (SIGTERM/SIGINT, checkpoint saved) returns cleanly with ``completed`` False,
  and TensorFlow's runtime errors (data or config mismatches met in the input pipeline or the step) exit at once
  with their telling line."""
  outcome = Outcome()
  try:
    yield outcome
    outcome.completed = True
  except TrainingInterrupted as e:
    logging.warning('%s', e)
    print(e)
  except USER_ERRORS + also as e:
    message = e.args[0] if isinstance(e, KeyError) and e.args else e
    logging.error('%s', message)
    sys.exit(f'error: {message}')
  except tf.errors.OpError as e:
    exit_on_op_error(e)


def op_error_summary(error: tf.errors.OpError) -> str:
  """The line of a TensorFlow runtime error that says what went wrong (not 'Graph execution error:')."""
  asserted = re.search(r'assertion failed: \[(.*)\]', error.message)  # to the line's last ']'
  if asserted:  # the input pipeline's own checks (accounting.py) say what is wrong and what to do
    return asserted.group(1).replace("\\'", "'")
  lines = [line.strip() for line in error.message.splitlines() if line.strip()]
  for line in lines:
    if line.split(':', 1)[0].endswith(('Error', 'Exception')) and len(line.split(':', 1)) == 2:
      return line
  informative = [line for line in lines if not line.startswith('[') and not line.endswith(':')]
  return informative[0] if informative else error.message


def exit_on_op_error(e: tf.errors.OpError) -> None:
  logging.error('%s', e.message)
  print(f'error: {op_error_summary(e)}', file=sys.stderr)
  # tf.data threads may still be inside the pipeline's Python hook; a normal interpreter shutdown can wait on them
  # forever, so leave at once (checkpoints are already on disk or were never written).
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(1)  # pylint: disable=protected-access


class _LibraryInfoFilter(py_logging.Filter):
  """Drops INFO records logged from inside TensorFlow/Keras (saver timings, export notes): noise to users."""

  _DIR = os.path.dirname(tf.__file__)
  _PREFIXES = tuple({_DIR + os.sep, os.path.realpath(_DIR) + os.sep})

  def filter(self, record: py_logging.LogRecord) -> bool:
    return record.levelno > py_logging.INFO or not record.pathname.startswith(self._PREFIXES)


def quiet_library_info_logs() -> None:
  logging.get_absl_handler().addFilter(_LibraryInfoFilter())
  py_logging.getLogger('tensorflow').setLevel(py_logging.WARNING)


def print_profile_verdict(model_dir: str, profiled: bool) -> None:
  """After a profiled training run: the offline report's verdict (input-bound or not, what a step is made of)."""
  if not profiled:
    return
  from resnet.estimator import profile_analysis  # pylint: disable=g-import-not-at-top
  try:
    print(profile_analysis.format_report(profile_analysis.analyze_profile(model_dir)))
  except profile_analysis.ProfileAnalysisError as e:
    logging.warning('Could not analyse the captured profile: %s', e)
