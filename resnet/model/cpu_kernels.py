"""Which kernels the model's training step runs on a CPU: the choice the ``conv1x1_filter_grad`` and
``residual_add_relu`` options leave to ``auto``, made from the precision and the hardware when the model is built.

'auto' picks the faster forms where they were measured faster: bfloat16 on CPUs with AMX (docs/performance.md).
GPUs and TPUs keep the kernels they have, float32 too (there the matmul gradient was slower), and so do CPUs
without AMX, where neither was measured (set the options explicitly to try them there). Either form computes the
same results; they differ in speed only.
"""
import functools
from typing import NamedTuple

import tensorflow as tf


class Kernels(NamedTuple):
  matmul_filter_grad: bool  # 1x1 convs take their weight gradient from one matmul (layers.Conv2D)
  xla_add_relu: bool        # each block's relu(x + shortcut) is one XLA-compiled function (layers.ResidualAddReLU)


def choose(conv1x1_filter_grad: str, residual_add_relu: str, dtype_policy) -> Kernels:
  """The kernels for the options ('auto', or the form to use) under ``dtype_policy`` (a Keras policy or its name)."""
  name = getattr(dtype_policy, 'name', dtype_policy) or ''
  bfloat16_cpu_with_amx = None

  def auto() -> bool:
    nonlocal bfloat16_cpu_with_amx
    if bfloat16_cpu_with_amx is None:
      accelerators = tf.config.list_logical_devices('GPU') + tf.config.list_logical_devices('TPU')
      bfloat16_cpu_with_amx = 'bfloat16' in str(name) and not accelerators and cpu_has_amx()
    return bfloat16_cpu_with_amx

  return Kernels(matmul_filter_grad=auto() if conv1x1_filter_grad == 'auto' else conv1x1_filter_grad == 'matmul',
                 xla_add_relu=auto() if residual_add_relu == 'auto' else residual_add_relu == 'xla')


@functools.lru_cache(maxsize=None)
def cpu_has_amx() -> bool:
  """Whether this CPU has AMX bfloat16 tiles (Linux /proc/cpuinfo's amx_bf16 flag; False where unreadable)."""
  try:
    with open('/proc/cpuinfo') as f:
      return 'amx_bf16' in f.read().split()
  except OSError:
    return False
