r"""Runs ``resnet.resnet_main`` unchanged (same flags, same main), then dumps what the run ended with.

  python -m tests.helpers.main_dump --mode=train --model_dir=D ...   # any resnet_main flags

Environment (all optional):
  DUMP_PATH       write an .npz: every model weight at the end ('w:<path>') and after the build ('init:<path>'),
                  the global step, is_chief, replica count.
  DUMP_SEED       keras.utils.set_random_seed(seed) right after the strategy exists (the same initial weights in
                  every process; seeding earlier would initialise TF's context before MultiWorkerMirroredStrategy).
  DESIGNED_DATA   'steps' (int): train on tests.helpers.designed_data instead of ImageNetInput.
  LOGICAL_CPUS    split the CPU into this many logical devices first (MirroredStrategy on one machine).
  OVERFLOW_STEP   with DESIGNED_DATA: at this (0-based) step, input pipeline 1 (worker 1) gets images of 1e6, which
                  overflow float16 on that worker only.
  STALE_LISTING   a non-chief worker's first look at model_dir sees the oldest checkpoint (a listing that lags on
                  shared storage), where the chief sees the newest.
  BEST_COPY_VANISHES_AT  a step: when best/'s writer is about to keep that step's checkpoint, its files vanish
                  first, as keep_checkpoint_max may delete them under a slow copy.
  FAIL_WRITE      a path suffix: this process's atomic writes of a file whose path ends so fail as on a full disk.
  STOP_AT         comma-separated global steps: training stops at the first one past the step it starts from, as
                  SIGINT stops it (a loop ends there, a checkpoint is saved at that step, exit 0), at a step the
                  test chooses rather than one a signal's timing picks.
  RESTORE_VANISHES_ON_NON_CHIEF  a non-chief worker's first restore of a model_dir checkpoint finds its files gone
                  (keep_checkpoint_max deleted them between the workers' existence check and the restore).

Why a wrapper: the multi-worker test needs the weights of the NON-chief worker, whose checkpoints go to a private
temporary directory; everything else runs exactly the code path of the CLI.
"""
import contextlib
import errno
import os
import sys

from absl import app
import keras
import numpy as np

import tensorflow as tf

from official_input import contract
from resnet import resnet_main
from resnet import wiring
from resnet.estimator import best_checkpoint
from resnet.estimator import distribution
from resnet.estimator.estimator import Estimator
from tests.helpers import designed_data

_captured = {}


def _patch() -> None:
  make_estimator, get_strategy = resnet_main.make_estimator, distribution.get_strategy

  def capturing_make_estimator(params, strategy):
    runner = make_estimator(params, strategy)
    build = runner.build

    def build_and_snapshot(mode):  # the initial weights: after the first build, before any restore
      build(mode)
      model = runner.scope.get('model')
      if model is not None and 'initial' not in _captured:
        _captured['initial'] = {v.path: np.asarray(v.numpy()) for v in model.weights}

    runner.build = build_and_snapshot
    _captured['runner'] = runner
    return runner

  def seeding_get_strategy(*args, **kwargs):
    strategy = get_strategy(*args, **kwargs)
    if os.environ.get('DUMP_SEED'):
      keras.utils.set_random_seed(int(os.environ['DUMP_SEED']))
    return strategy

  if os.environ.get('BEST_COPY_VANISHES_AT'):
    keep, vanish_at = best_checkpoint.BestCheckpoint._keep, int(os.environ['BEST_COPY_VANISHES_AT'])

    def vanishing_keep(self, source, record):
      if record['global_step'] == vanish_at:
        for path in tf.io.gfile.glob(source + '.*'):
          tf.io.gfile.remove(path)
      return keep(self, source, record)
    best_checkpoint.BestCheckpoint._keep = vanishing_keep

  if os.environ.get('FAIL_WRITE'):
    from resnet.estimator import files  # pylint: disable=import-outside-toplevel
    suffix, atomic_output = os.environ['FAIL_WRITE'], files.atomic_output

    @contextlib.contextmanager
    def failing_atomic_output(path, mode='w'):
      if path.endswith(suffix):
        raise files.WriteError(path, OSError(errno.ENOSPC, 'No space left on device (injected)'))
      with atomic_output(path, mode) as f:
        yield f
    files.atomic_output = failing_atomic_output

  if os.environ.get('RESTORE_VANISHES_ON_NON_CHIEF'):
    from resnet.estimator import checkpoints  # pylint: disable=import-outside-toplevel
    restore, vanished = checkpoints.Checkpoints.restore, []

    def vanishing_restore(self, path):
      if path and not self._is_chief and not vanished and 'model.ckpt' in path:  # pylint: disable=protected-access
        vanished.append(path)
        raise tf.errors.NotFoundError(None, None, f'{path}.index: no such file (injected)')
      return restore(self, path)
    checkpoints.Checkpoints.restore = vanishing_restore

  if os.environ.get('STALE_LISTING'):
    latest, looked = Estimator.latest_checkpoint, []

    def stale_latest_checkpoint(self):
      if self.is_chief or looked:
        return latest(self)
      looked.append(True)
      return tf.train.get_checkpoint_state(self.model_dir).all_model_checkpoint_paths[0]
    Estimator.latest_checkpoint = stale_latest_checkpoint

  if os.environ.get('STOP_AT'):
    from resnet.estimator import hooks as hooks_lib  # pylint: disable=import-outside-toplevel
    stops = sorted(int(s) for s in os.environ['STOP_AT'].split(','))

    class StopAt(hooks_lib.LoopHook):
      def begin(self, estimator, step):
        self.estimator = estimator  # pylint: disable=attribute-defined-outside-init

      def next_boundary(self, step):
        return next((s for s in stops if s > step), None)

      def after_loop(self, step, logs):
        if step in stops:
          self.estimator.request_stop('SIGINT')

    train = Estimator.train

    def stopping_train(self, input_fn, max_steps, hooks=(), total_steps=None):
      return train(self, input_fn, max_steps, list(hooks) + [StopAt()], total_steps)
    Estimator.train = stopping_train

  resnet_main.make_estimator = capturing_make_estimator
  distribution.get_strategy = seeding_get_strategy
  if os.environ.get('DESIGNED_DATA'):
    steps = int(os.environ['DESIGNED_DATA'])

    class DesignedSource:
      skipped_records = 0
      lost_records = 0

      def __init__(self, params):
        self.input_fn = designed_data.make_input_fn(
            int(os.environ.get('DUMP_SEED', '0')), steps, params.train_batch_size, params.image_size,
            params.num_label_classes)
        if os.environ.get('OVERFLOW_STEP'):
          self.input_fn = _overflowing(self.input_fn, int(os.environ['OVERFLOW_STEP']))

    wiring.input_source = lambda params, split: DesignedSource(params)


def _overflowing(input_fn, step: int):
  def overflowing_input_fn(params):
    dataset = input_fn(params)
    context = contract.input_context(params)
    if context is None or context.input_pipeline_id != 1:
      return dataset

    def maybe_overflow(index, element):
      images, labels = element
      return tf.where(tf.equal(index, step), tf.fill(tf.shape(images), 1e6), images), labels
    return dataset.enumerate().map(maybe_overflow)
  return overflowing_input_fn


def _dump(path: str) -> None:
  runner: Estimator = _captured['runner']
  model = runner.scope.get('model')
  optimizer = runner.scope.get('optimizer')
  scale = getattr(optimizer, 'dynamic_scale', None)
  np.savez(path, loss_scale=np.array(float(scale.numpy()) if scale is not None else np.nan), global_step=np.array(int(runner.global_step.numpy())), is_chief=np.array(runner.is_chief),
           num_replicas=np.array(runner.num_replicas),
           **{'w:' + v.path: np.asarray(v.numpy()) for v in model.weights},
           **{'init:' + k: v for k, v in _captured.get('initial', {}).items()})


def main(argv) -> None:
  resnet_main.main(argv)
  if os.environ.get('DUMP_PATH'):
    _dump(os.environ['DUMP_PATH'])
  print('MAIN_DUMP_DONE', flush=True)


if __name__ == '__main__':
  if os.environ.get('LOGICAL_CPUS'):
    tf.config.set_logical_device_configuration(
        tf.config.list_physical_devices('CPU')[0],
        [tf.config.LogicalDeviceConfiguration()] * int(os.environ['LOGICAL_CPUS']))
  _patch()
  app.run(main)
  sys.exit(0)
