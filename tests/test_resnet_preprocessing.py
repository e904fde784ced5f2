"""Tests for official_input/resnet_preprocessing.py: tiny images, JPEG and PNG, train and eval."""
import io

import numpy as np
from PIL import Image
import pytest
import tensorflow as tf

from official_input import resnet_preprocessing as rp


def _image(height: int, width: int, seed: int = 0) -> np.ndarray:
  rng = np.random.default_rng(seed)
  return rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8)


def _encode(array: np.ndarray, fmt: str) -> bytes:
  buf = io.BytesIO()
  Image.fromarray(array).save(buf, format=fmt)
  return buf.getvalue()


@pytest.mark.parametrize('fmt', ['JPEG', 'PNG'])
@pytest.mark.parametrize('is_training', [True, False])
@pytest.mark.parametrize('dtype', [tf.float32, tf.bfloat16, tf.float16])
def test_preprocess_image_shape_dtype_and_range(fmt, is_training, dtype):
  encoded = _encode(_image(48, 64), fmt)
  out = rp.preprocess_image(tf.constant(encoded), is_training, image_size=32, dtype=dtype)
  assert out.shape == (32, 32, 3)
  assert out.dtype == dtype
  values = tf.cast(out, tf.float32).numpy()
  assert values.min() >= 0.0 and values.max() <= 255.0
  assert values.max() > 1.0  # pixels stay 0..255, not rescaled to 0..1


@pytest.mark.parametrize('image_size', [33, 56])
def test_image_size_is_honoured_for_train_and_eval(image_size):
  encoded = tf.constant(_encode(_image(40, 60), 'JPEG'))
  assert rp.preprocess_image(encoded, True, image_size).shape == (image_size, image_size, 3)
  assert rp.preprocess_image(encoded, False, image_size).shape == (image_size, image_size, 3)


@pytest.mark.parametrize('fmt', ['GIF', 'BMP'])
def test_other_formats_decode(fmt):
  out = rp.preprocess_image(tf.constant(_encode(_image(30, 40), fmt)), False, image_size=32)
  assert out.shape == (32, 32, 3)


def test_grayscale_jpeg_becomes_rgb():
  gray = Image.fromarray(_image(40, 40)[:, :, 0])
  buf = io.BytesIO()
  gray.save(buf, format='JPEG')
  out = rp.preprocess_image(tf.constant(buf.getvalue()), True, image_size=32)
  assert out.shape == (32, 32, 3)


@pytest.mark.parametrize('image_size,height,width,pad', [(224, 375, 500, 32), (160, 375, 500, 23), (32, 64, 48, 5)])
def test_center_crop_uses_fraction_0_875_with_rounded_padding(image_size, height, width, pad):
  window = rp.center_crop_window(tf.constant([height, width, 3]), image_size).numpy()
  crop = int(image_size / (image_size + pad) * min(height, width))
  assert list(window) == [(height - crop + 1) // 2, (width - crop + 1) // 2, crop, crop]
  if image_size >= 160:  # tiny sizes round the padding coarsely
    assert abs(crop / min(height, width) - 0.875) < 0.005


def test_random_crop_falls_back_to_center_crop_when_no_window_fits():
  # A 10x1000 image: no 3/4..4/3 crop covers 8% of it, so the sampler returns the whole image.
  shape = tf.constant([10, 1000, 3])
  for _ in range(3):
    np.testing.assert_array_equal(rp.random_crop_window(shape, 32).numpy(),
                                  rp.center_crop_window(shape, 32).numpy())


def test_random_crop_window_respects_area_and_bounds():
  shape = tf.constant([300, 400, 3])
  for _ in range(20):
    y, x, h, w = rp.random_crop_window(shape, 224).numpy()
    assert 0 <= y and 0 <= x and y + h <= 300 and x + w <= 400
    assert h * w >= 0.08 * 300 * 400 * 0.95


def test_decode_and_crop_matches_full_decode_then_crop():
  encoded = tf.constant(_encode(_image(64, 80), 'JPEG'))
  window_fn = lambda shape: tf.constant([8, 16, 32, 40])
  fused = rp.decode_and_crop(encoded, window_fn).numpy().astype(int)
  full = rp.decode_and_crop(encoded, window_fn, full_decode=True).numpy().astype(int)
  assert fused.shape == full.shape == (32, 40, 3)
  # Chroma upsampling differs on the crop's edge pixels only.
  assert np.abs(fused - full)[1:-1, 1:-1].max() <= 2


def test_eval_preprocessing_is_deterministic():
  encoded = tf.constant(_encode(_image(50, 70), 'JPEG'))
  first = rp.preprocess_image(encoded, False, 32).numpy()
  np.testing.assert_array_equal(first, rp.preprocess_image(encoded, False, 32).numpy())


def test_bicubic_overshoot_is_clipped():
  checker = np.kron(np.indices((8, 8)).sum(axis=0) % 2, np.ones((4, 4))).astype(np.uint8) * 255
  encoded = tf.constant(_encode(np.stack([checker] * 3, axis=-1), 'PNG'))
  out = rp.preprocess_image(encoded, False, image_size=45).numpy()
  assert out.min() >= 0.0 and out.max() <= 255.0


def test_works_in_tf_function_with_scalar_string_for_jpeg_and_png():
  @tf.function(input_signature=[tf.TensorSpec([], tf.string)])
  def serve(image_bytes):
    return rp.preprocess_image(image_bytes, is_training=False, image_size=40)

  for fmt in ('JPEG', 'PNG'):
    assert serve(tf.constant(_encode(_image(50, 60), fmt))).shape == (40, 40, 3)


def test_image_format_ok_flags_garbage_and_accepts_images():
  samples = [_encode(_image(20, 20), 'JPEG'), _encode(_image(20, 20), 'PNG'), b'', b'<html>not found</html>',
             b'\x00' * 100]
  ok = rp.image_format_ok(tf.constant(samples)).numpy()
  assert list(ok) == [True, True, False, False, False]
  assert bool(rp.image_format_ok(tf.constant(samples[0])))


def test_min_crop_area_bounds_the_training_crop():
  shape = tf.constant([200, 300, 3])
  for _ in range(30):
    _, _, h, w = [int(v) for v in rp.random_crop_window(shape, 64, min_area=0.5).numpy()]
    assert h * w >= 0.5 * 200 * 300 * 0.98 or (h, w) == (175, 175)  # or the centre-crop fallback
