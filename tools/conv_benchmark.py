r"""Where a ResNet step's convolution time goes: every convolution shape of the model, each of its three passes
(forward, weight gradient, input gradient) timed alone as TensorFlow runs it, beside the other forms that compute
the same numbers, summed over the model's layers.

  python -m tools.conv_benchmark --precision=float32            # ResNet-50 at 224 px, batch 32
  python -m tools.conv_benchmark --precision=bfloat16 --resnet_depth=18 --image_size=64

Why: the training profile (``--profile_steps``, tools/profile_report) gives op self times, but TensorFlow runs a
layer's two gradients side by side on the inter-op pool, so each looks up to twice as slow as it is alone. Timed
alone, the passes show which kernel is slow for which shape, and whether another form of the same sum is faster
on this CPU. That is how ``conv1x1_filter_grad``'s 'auto' was chosen per CPU kind (resnet/model/cpu_kernels.py).
The layers are the model's plan (resnet/model/plan.py).

Forms (same results up to summation order; ``dx_conv`` is checked against TensorFlow's input gradient):
  fwd, dw, dx     TensorFlow's Conv2D, Conv2DBackpropFilter, Conv2DBackpropInput (oneDNN on x86).
  fwd_mm, dw_mm   1x1 convs as one matmul over every (stride-th) position: ``x W`` and ``x^T dy``.
  dx_mm           1x1 stride-1 input gradient as one matmul, ``dy W^T``.
  dx_conv         3x3 stride-1 input gradient as a forward convolution of dy with the kernel turned 180 degrees and
                  its channels swapped.

Each figure is the median of ``--repeats`` calls of one tf.function after two untimed ones, including the call's
dispatch (~0.1 ms); the totals weigh each shape by how many layers have it. Figures are per training step.
"""
import os
import statistics
import sys
import time
from typing import Callable, Dict, List, Tuple

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '1')  # as resnet_main
if __package__ in (None, ''):
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app  # pylint: disable=g-import-not-at-top,wrong-import-position
from absl import flags  # pylint: disable=g-import-not-at-top,wrong-import-position

FLAGS = flags.FLAGS

# (kernel, channels in, channels out, stride, input side, layers with this shape)
Shape = Tuple[int, int, int, int, int, int]


def define_flags() -> None:
  flags.DEFINE_integer('resnet_depth', 50, 'ResNet depth (params/architectures.py).')
  flags.DEFINE_integer('image_size', 224, 'Square image size.')
  flags.DEFINE_integer('batch_size', 32, 'Batch size of every pass.')
  flags.DEFINE_enum('precision', 'float32', ['float32', 'bfloat16'], 'Dtype of every tensor.')
  flags.DEFINE_integer('repeats', 5, 'Timed calls per figure (the median is shown).')


def model_shapes(resnet_depth: int, image_size: int) -> List[Shape]:
  """The model's convolutions, one entry per distinct shape with its count, in creation order: the model's own
  plan (resnet/model/plan.py, which its tests check against the built model), with each input's side."""
  from params.model_config import ModelConfig  # pylint: disable=g-import-not-at-top
  from resnet.model import plan  # pylint: disable=g-import-not-at-top
  merged: Dict[Tuple[int, ...], int] = {}
  for c in plan.conv_shapes(ModelConfig(resnet_depth=resnet_depth)):
    if not c.pooled:   # squeeze-excitation's 1x1 convs on pooled maps: not a convolution's cost
      key = (c.kernel, c.cin, c.cout, c.stride, plan.feature_size(image_size, c.reduction // c.stride))
      merged[key] = merged.get(key, 0) + 1
  return [k + (n,) for k, n in merged.items()]


def _time(fn: Callable, repeats: int, *args) -> float:
  """Median milliseconds of one call (two untimed calls first: tracing, oneDNN primitive creation)."""
  fn(*args)
  fn(*args)
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    fn(*args).numpy()
    times.append(time.perf_counter() - start)
  return 1000.0 * statistics.median(times)


def measure_shape(shape: Shape, batch: int, dtype, repeats: int) -> Dict[str, float]:
  """One shape's passes in every form that applies to it, in ms; ``dx_conv_error``: its largest difference from
  TensorFlow's input gradient relative to that gradient's largest value."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  k, cin, cout, s, side, _ = shape
  out_side = -(-side // s)
  strides = [1, s, s, 1]
  x = tf.cast(tf.random.normal([batch, side, side, cin]), dtype)
  w = tf.cast(tf.random.normal([k, k, cin, cout], stddev=0.05), dtype)
  dy = tf.cast(tf.random.normal([batch, out_side, out_side, cout]), dtype)
  fwd = tf.function(lambda x, w: tf.nn.conv2d(x, w, strides, 'SAME'))
  dw = tf.function(lambda x, dy: tf.raw_ops.Conv2DBackpropFilter(
      input=x, filter_sizes=[k, k, cin, cout], out_backprop=dy, strides=strides, padding='SAME'))
  dx = tf.function(lambda w, dy: tf.raw_ops.Conv2DBackpropInput(
      input_sizes=[batch, side, side, cin], filter=w, out_backprop=dy, strides=strides, padding='SAME'))
  r = {'fwd': _time(fwd, repeats, x, w), 'dw': _time(dw, repeats, x, dy)}
  if cin > 3:   # the stem's input gradient is never computed (images are not trained)
    r['dx'] = _time(dx, repeats, w, dy)
  if k == 1:
    seen = x[:, ::s, ::s, :] if s > 1 else x
    rows = batch * out_side * out_side
    fwd_mm = tf.function(lambda x, w: tf.matmul(tf.reshape(x, [rows, cin]), tf.reshape(w, [cin, cout])))
    dw_mm = tf.function(lambda x, dy: tf.matmul(tf.reshape(x, [rows, cin]), tf.reshape(dy, [rows, cout]),
                                                transpose_a=True))
    r['fwd_mm'] = _time(fwd_mm, repeats, seen, w)
    r['dw_mm'] = _time(dw_mm, repeats, seen, dy)
    if s == 1:
      dx_mm = tf.function(lambda w, dy: tf.matmul(tf.reshape(dy, [rows, cout]), tf.reshape(w, [cin, cout]),
                                                  transpose_b=True))
      r['dx_mm'] = _time(dx_mm, repeats, w, dy)
  if k == 3 and s == 1:
    turned = tf.transpose(tf.reverse(w, [0, 1]), [0, 1, 3, 2])
    dx_conv = tf.function(lambda wt, dy: tf.nn.conv2d(dy, wt, [1, 1, 1, 1], 'SAME'))
    r['dx_conv'] = _time(dx_conv, repeats, turned, dy)
    ours, theirs = (tf.cast(t, tf.float32) for t in (dx_conv(turned, dy), dx(w, dy)))
    r['dx_conv_error'] = float(tf.reduce_max(tf.abs(ours - theirs)) / tf.reduce_max(tf.abs(theirs)))
  return r


def totals(shapes: List[Shape], results: List[Dict[str, float]]) -> Dict[str, Tuple[float, float]]:
  """Per step, for each alternative form: (ms in that form, ms of TensorFlow's op on the same layers)."""
  pairs = {'fwd_mm': 'fwd', 'dw_mm': 'dw', 'dx_mm': 'dx', 'dx_conv': 'dx'}
  out: Dict[str, Tuple[float, float]] = {}
  for name in ('fwd', 'dw', 'dx'):
    out[name] = (sum(r.get(name, 0.0) * s[5] for s, r in zip(shapes, results)),) * 2
  for alt, base in pairs.items():
    alt_ms = sum(r[alt] * s[5] for s, r in zip(shapes, results) if alt in r)
    base_ms = sum(r[base] * s[5] for s, r in zip(shapes, results) if alt in r)
    if base_ms:
      out[alt] = (alt_ms, base_ms)
  return out


def format_report(shapes: List[Shape], results: List[Dict[str, float]], header: str) -> str:
  lines = [header, '']
  for s, r in zip(shapes, results):
    k, cin, cout, stride, side, count = s
    cells = ' '.join(f'{n}={v:.1f}' if not n.endswith('error') else f'{n}={v:.1e}' for n, v in r.items())
    lines.append(f'{k}x{k} {cin}->{cout} stride {stride} at {side}x{side}, x{count}: {cells}')
  lines += ['', 'Per training step (ms, each pass of every layer once):']
  for name, (ms, base) in totals(shapes, results).items():
    lines.append(f'  {name:8s} {ms:8.0f}' + (f'   TensorFlow\'s op on the same layers {base:6.0f}   ratio '
                                            f'{base / ms:.2f}x' if name not in ('fwd', 'dw', 'dx') else ''))
  return '\n'.join(lines)


def main(argv) -> None:
  del argv
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  dtype = {'float32': tf.float32, 'bfloat16': tf.bfloat16}[FLAGS.precision]
  shapes = model_shapes(FLAGS.resnet_depth, FLAGS.image_size)
  results = [measure_shape(s, FLAGS.batch_size, dtype, FLAGS.repeats) for s in shapes]
  print(format_report(shapes, results, f'ResNet-{FLAGS.resnet_depth} convolutions at {FLAGS.image_size} px, batch '
                                       f'{FLAGS.batch_size}, {FLAGS.precision}: ms per call, median of '
                                       f'{FLAGS.repeats}'))


if __name__ == '__main__':
  define_flags()
  app.run(main)
