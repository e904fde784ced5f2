"""tools/conv_benchmark: the model's convolution shapes, and the alternative forms compute TensorFlow's numbers."""
import numpy as np
import pytest
import tensorflow as tf

from params.model_config import ModelConfig
from resnet.model import plan
from tools import conv_benchmark


def test_the_shapes_are_the_model_plans_convolutions_with_their_input_sides():
  """The layers come from resnet/model/plan.py (checked against the built model by its own tests); here, that every
  conv is counted once and each pass gets its input's side."""
  shapes = conv_benchmark.model_shapes(50, 224)
  assert sum(s[5] for s in shapes) == len(plan.conv_shapes(ModelConfig(resnet_depth=50))) == 53
  assert shapes[0] == (7, 3, 64, 2, 224, 1)                    # the stem sees the image
  assert (3, 128, 128, 2, 56, 1) in shapes and (3, 512, 512, 1, 7, 2) in shapes   # strided 3x3 at its input's side
  assert (1, 64, 64, 1, 16, 1) in conv_benchmark.model_shapes(18, 64)   # each group's first block projects


def test_the_alternative_forms_time_the_same_sums_and_add_up_per_layer():
  shapes = [(1, 8, 16, 1, 6, 2), (3, 8, 8, 1, 6, 3), (1, 8, 16, 2, 6, 1)]
  results = [conv_benchmark.measure_shape(s, batch=2, dtype=tf.float32, repeats=1) for s in shapes]
  assert set(results[0]) == {'fwd', 'dw', 'dx', 'fwd_mm', 'dw_mm', 'dx_mm'}
  assert set(results[1]) == {'fwd', 'dw', 'dx', 'dx_conv', 'dx_conv_error'}
  assert set(results[2]) == {'fwd', 'dw', 'dx', 'fwd_mm', 'dw_mm'}   # strided: no single-matmul input gradient
  assert results[1]['dx_conv_error'] < 1e-5
  totals = conv_benchmark.totals(shapes, results)
  assert totals['dw'][0] == pytest.approx(2 * results[0]['dw'] + 3 * results[1]['dw'] + results[2]['dw'])
  assert totals['dx_mm'] == pytest.approx((2 * results[0]['dx_mm'], 2 * results[0]['dx']))
  assert totals['dx_conv'] == pytest.approx((3 * results[1]['dx_conv'], 3 * results[1]['dx']))
  text = conv_benchmark.format_report(shapes, results, 'header')
  assert '3x3 8->8 stride 1 at 6x6, x3:' in text and 'dx_conv' in text


def test_the_turned_kernel_gives_the_input_gradient():
  """dx_conv's identity (a stride-1 SAME 3x3 input gradient = a forward conv with the kernel turned 180 degrees and
  its channels swapped), checked on TensorFlow's own gradient."""
  x = tf.random.normal([2, 5, 5, 3])
  w = tf.random.normal([3, 3, 3, 4])
  dy = tf.random.normal([2, 5, 5, 4])
  with tf.GradientTape() as tape:
    tape.watch(x)
    y = tf.nn.conv2d(x, w, 1, 'SAME')
  expected = tape.gradient(y, x, output_gradients=dy)
  turned = tf.transpose(tf.reverse(w, [0, 1]), [0, 1, 3, 2])
  np.testing.assert_allclose(tf.nn.conv2d(dy, turned, 1, 'SAME').numpy(), expected.numpy(), rtol=1e-5, atol=1e-5)
