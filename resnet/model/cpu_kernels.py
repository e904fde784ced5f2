"""Which kernels the model's training step runs on a CPU: the choice the ``conv1x1_filter_grad`` and
``residual_add_relu`` options leave to ``auto``, made from the precision and the hardware when the model is built.

'auto' picks the faster forms where they were measured faster (docs/performance.md):
- bfloat16 on CPUs with AMX: both (1x1 weight gradients as matmuls, the residual add + ReLU as one XLA function).
- float32 on CPUs with AVX-512 and no AMX (a 2-core AMD EPYC Zen 4): the 1x1 weight gradients as matmuls, which
  oneDNN runs faster than its float32 backward-weights convolution there (ResNet-50 at 224, batch 32: 0.77 against
  0.91 s of 1x1 weight gradients per step alone, +3% and +7% whole-step in two A/B pairs). On the AMX Xeon float32
  matmuls were slower (0.63 against 0.56 s), and in bfloat16 on the EPYC they were slower too (-5%), so neither
  takes them.
GPUs and TPUs keep the kernels they have, and so do AVX2-only CPUs, where neither was measured (set the options
explicitly to try them there). Either form computes the same results up to summation order; they differ in speed.
"""
import functools
from typing import NamedTuple

import keras
import tensorflow as tf


class Kernels(NamedTuple):
  matmul_filter_grad: bool  # 1x1 convs take their weight gradient from one matmul (layers.Conv2D)
  xla_add_relu: bool        # each block's relu(x + shortcut) is one XLA-compiled function (layers.ResidualAddReLU)


def choose(conv1x1_filter_grad: str, residual_add_relu: str, dtype_policy) -> Kernels:
  """The kernels for the options ('auto', or the form to use) under ``dtype_policy`` (a Keras policy or its name)."""
  if dtype_policy is None:   # the model's layers then follow Keras' global policy: so does the choice
    dtype_policy = keras.config.dtype_policy()
  name = str(getattr(dtype_policy, 'name', dtype_policy) or '')
  on_cpu = None

  def cpu_only() -> bool:
    nonlocal on_cpu
    if on_cpu is None:
      on_cpu = not (tf.config.list_logical_devices('GPU') + tf.config.list_logical_devices('TPU'))
    return on_cpu

  def bfloat16_with_amx() -> bool:
    return 'bfloat16' in name and cpu_only() and cpu_has_amx()

  def float32_with_avx512_only() -> bool:
    return name == 'float32' and cpu_only() and cpu_has_avx512() and not cpu_has_amx()

  return Kernels(
      matmul_filter_grad=(bfloat16_with_amx() or float32_with_avx512_only()) if conv1x1_filter_grad == 'auto'
      else conv1x1_filter_grad == 'matmul',
      xla_add_relu=bfloat16_with_amx() if residual_add_relu == 'auto' else residual_add_relu == 'xla')


@functools.lru_cache(maxsize=None)
def _cpu_flags() -> frozenset:
  """Linux /proc/cpuinfo's flags (empty where unreadable: no CPU feature is assumed)."""
  try:
    with open('/proc/cpuinfo') as f:
      return frozenset(f.read().split())
  except OSError:
    return frozenset()


def cpu_has_amx() -> bool:
  """Whether this CPU has AMX bfloat16 tiles (the amx_bf16 flag)."""
  return 'amx_bf16' in _cpu_flags()


def cpu_has_avx512() -> bool:
  """Whether this CPU has AVX-512 (the avx512f flag)."""
  return 'avx512f' in _cpu_flags()
