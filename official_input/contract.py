"""What an ``input_fn`` receives from the runner: TPUEstimator's contract, read by duck typing so that this package
imports nothing of the runner (``resnet/estimator/spec.py`` defines it).

``params['batch_size']`` is the per-replica batch; ``params.context.input_context`` is the tf.distribute
InputContext (which input pipeline this is, of how many), absent when an input_fn is called by hand; a training
input also reads ``params.context.start_step`` and ``params.context.input_seed`` (where a resumed run starts).
"""
from typing import Any, Mapping, Optional

import tensorflow as tf


def check_batch_size(params: Mapping[str, Any]) -> int:
  batch_size = int(params['batch_size'])
  if batch_size < 1:
    raise ValueError('batch_size must be positive, got %d' % batch_size)
  return batch_size


def input_context(params: Mapping[str, Any]) -> Optional[tf.distribute.InputContext]:
  """The tf.distribute input context an input_fn was called with; None for plain params (a call by hand)."""
  context = getattr(params, 'context', None)
  if context is not None and hasattr(context, 'input_context'):
    return context.input_context
  if 'context' in params:  # TPUEstimator's params['context']: ignoring it would read every shard on every host
    raise TypeError("params['context'] is not read: pass spec.RunParams(settings, batch_size, "
                    'spec.RunContext(mode, input_context=...)) as the Estimator does.')
  return None


def start_step(params: Mapping[str, Any]) -> int:
  """The global step a training input starts at (a resumed run's, or a later stage's), 0 when called by hand: the
  pipeline starts at the records that step's batches begin with."""
  return int(getattr(getattr(params, 'context', None), 'start_step', 0) or 0)


def input_seed(params: Mapping[str, Any]) -> Optional[int]:
  """The run's saved seed of the training order where the run has no random_seed (drawn at its first start, kept in
  its checkpoints, so a resumed unseeded run reads its epochs in the order it began them); None when called by hand."""
  seed = getattr(getattr(params, 'context', None), 'input_seed', None)
  return None if seed is None else int(seed)
