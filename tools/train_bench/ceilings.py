"""Measured ceilings: what TensorFlow's own kernels reach on this machine, in the same run as the rows they rate.

Why measured and not derived: a peak from cores x clock x FLOPs/cycle needs the clock (a VM's /proc/cpuinfo gives
the nominal one, boost runs faster), the FMA pipes per core and what AMX or AVX512-BF16 add; every one of them is
an assumption that can be off by 2x. A kernel measured a minute before the rows answers the question a user asks:
how close does training come to what this TensorFlow can do here? Two kernels per precision:
- ``matmul``: a 2048^3 matmul, the densest work oneDNN does;
- ``conv``: ResNet-50's most common 3x3 convolution (64 -> 64 channels at 56x56, forward, SAME, NHWC, the
  benchmark's batch), the kind of work a ResNet step is made of. Rows are rated against it.
Each is the best of a few calls, measured at the start and at the end of the run (the better one is kept).
"""
import time
from typing import Dict

CEILING_PRECISIONS = ('float32', 'bfloat16')
KERNELS = ('matmul', 'conv')
CONV_SHAPE = (56, 64, 64, 3)  # spatial size, input channels, output channels, kernel size


def _best_gflops(fn, args, flops: float, repeats: int, calls: int) -> float:
  fn(*args).numpy()  # trace, create the oneDNN primitive
  best = 0.0
  for _ in range(repeats):
    start = time.perf_counter()
    for _ in range(calls):
      out = fn(*args)
    out.numpy()
    best = max(best, flops * calls / (time.perf_counter() - start) / 1e9)
  return best


def measure_matmul(precision: str, n: int = 2048, repeats: int = 3) -> float:
  """GFLOP/s of an n x n x n matmul in ``precision``."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  a = tf.cast(tf.random.stateless_normal([n, n], seed=[1, 2]), precision)
  b = tf.cast(tf.random.stateless_normal([n, n], seed=[3, 4]), precision)
  return _best_gflops(tf.function(tf.linalg.matmul), (a, b), 2.0 * n ** 3, repeats, calls=4)


def measure_conv(precision: str, batch_size: int, repeats: int = 3) -> float:
  """GFLOP/s of CONV_SHAPE's forward convolution on a batch of ``batch_size`` in ``precision``."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  size, cin, cout, k = CONV_SHAPE
  x = tf.cast(tf.random.stateless_normal([batch_size, size, size, cin], seed=[5, 6]), precision)
  w = tf.cast(tf.random.stateless_normal([k, k, cin, cout], seed=[7, 8]) * 0.05, precision)
  conv = tf.function(lambda a, b: tf.nn.conv2d(a, b, 1, 'SAME'))
  return _best_gflops(conv, (x, w), 2.0 * batch_size * size * size * k * k * cin * cout, repeats, calls=4)


def measure_ceilings(batch_size: int) -> Dict[str, Dict[str, float]]:
  """{kernel: {precision: GFLOP/s}} for every kernel and both precisions."""
  return {'matmul': {p: measure_matmul(p) for p in CEILING_PRECISIONS},
          'conv': {p: measure_conv(p, batch_size) for p in CEILING_PRECISIONS}}


def best_of(a: Dict[str, Dict[str, float]], b: Dict[str, Dict[str, float]]) -> Dict[str, Dict[str, float]]:
  """The higher figure of two measurements, kernel by kernel and precision by precision."""
  return {k: {p: max(v, b.get(k, {}).get(p, 0.0)) for p, v in per.items()} for k, per in a.items()}


def describe() -> str:
  size, cin, cout, k = CONV_SHAPE
  return (f'matmul = 2048^3 tf.linalg.matmul; conv = tf.nn.conv2d {k}x{k}, {cin}->{cout} channels at '
          f'{size}x{size}, forward, NHWC, the benchmark\'s batch')
