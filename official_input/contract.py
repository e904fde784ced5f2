"""What an ``input_fn`` receives from the runner: TPUEstimator's contract, read by duck typing so that this package
imports nothing of the runner (``resnet/estimator/spec.py`` defines it).

``params['batch_size']`` is the per-replica batch; ``params.context.input_context`` is the tf.distribute
InputContext (which input pipeline this is, of how many), absent when an input_fn is called by hand.
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
