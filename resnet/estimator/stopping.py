"""Stopping training early, cleanly: SIGTERM/SIGINT handlers and the multi-worker stop vote.

A single worker stops after the current step (the compiled loop checks a flag each step). Several workers must run
the same number of steps -- every step is a collective -- so they vote at loop boundaries that all of them reach,
and stop together.
"""
import contextlib
import signal
import threading
from typing import Iterator

from absl import logging
import tensorflow as tf


class StopControl:
  """The stop flag (read inside compiled loops), who asked for it, and the agreement between workers."""

  def __init__(self, strategy: tf.distribute.Strategy, num_workers: int):
    self._strategy = strategy
    self.num_workers = num_workers
    self.flag = tf.Variable(False, trainable=False, name='stop_requested')
    self.reason = ''
    self._vote = None

  @property
  def requested(self) -> bool:
    return bool(self.flag.numpy())

  def request(self, reason: str = 'stop requested') -> None:
    self.reason = reason
    self.flag.assign(True)

  def clear(self) -> None:
    self.reason = ''
    self.flag.assign(False)

  @contextlib.contextmanager
  def signals_handled(self) -> Iterator[None]:
    """SIGTERM/SIGINT request a stop (with a checkpoint); a second Ctrl-C stops at once, without one."""
    if threading.current_thread() is not threading.main_thread():
      yield
      return

    def handler(signum, frame):  # pylint: disable=unused-argument
      if self.requested and signum == signal.SIGINT:
        raise KeyboardInterrupt
      name = signal.Signals(signum).name
      logging.warning('%s received: saving a checkpoint at the current step, then exiting.', name)
      self.request(name)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
      yield
    finally:
      for sig, old in previous.items():
        signal.signal(sig, old)

  def agreed(self, at_common_boundary: bool) -> bool:
    """Whether to stop now. One worker reads its flag. Several agree through one all-reduce, only at a boundary
    every worker reaches (``at_common_boundary``), so that their collectives stay in step."""
    if self.num_workers == 1:
      return self.requested
    if not at_common_boundary:
      return False
    if self._vote is None:
      strategy, flag = self._strategy, self.flag

      @tf.function
      def vote():
        votes = strategy.run(lambda: tf.cast(flag.read_value(), tf.int32))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, votes, axis=None)  # ReduceOp has no MAX: > 0 = stop

      self._vote = vote
    return int(self._vote().numpy()) > 0
