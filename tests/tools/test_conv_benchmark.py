"""tools/conv_benchmark: the model's convolution shapes, and the alternative forms compute TensorFlow's numbers."""
import collections

import numpy as np
import pytest
import tensorflow as tf

from params.merging import make_params
from resnet.training import resnet_model_fn
from tools import conv_benchmark


@pytest.mark.parametrize('depth,size', [(18, 64), (50, 96)])
def test_the_shapes_are_the_built_models_convolutions(depth, size):
  model = resnet_model_fn.build_model(make_params({'resnet_depth': depth, 'image_size': size,
                                                   'num_label_classes': 10}))
  kernels = collections.Counter((layer.kernel.shape[0], layer.kernel.shape[2], layer.kernel.shape[3], layer.strides[0])
                                for layer in model.layers
                                if hasattr(layer, 'kernel') and len(layer.kernel.shape) == 4)
  listed = collections.Counter()
  for k, cin, cout, stride, _, count in conv_benchmark.model_shapes(depth, size):
    listed[(k, cin, cout, stride)] += count
  assert listed == kernels


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
