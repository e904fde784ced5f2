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


def test_crop_area_range_bounds_the_training_crop():
  shape = tf.constant([200, 300, 3])
  for _ in range(30):
    _, _, h, w = [int(v) for v in rp.random_crop_window(shape, 64, area_range=(0.5, 0.6)).numpy()]
    assert (0.5 * 0.98 <= h * w / (200 * 300) <= 0.6 * 1.02) or (h, w) == (175, 175)  # or the centre-crop fallback


def _gradient_png(size: int = 48) -> bytes:
  """Left-to-right ramp (same in every row and channel): a mirrored crop is darker on the right."""
  ramp = np.linspace(0, 255, size).astype(np.uint8)
  return _encode(np.stack([np.tile(ramp, (size, 1))] * 3, axis=-1), 'PNG')


def _is_mirrored(image: tf.Tensor) -> bool:
  values = image.numpy()
  return values[:, :4].mean() > values[:, -4:].mean()


def test_random_flip_false_never_mirrors_and_true_sometimes_does():
  encoded = tf.constant(_gradient_png())
  no_flip = rp.AugmentConfig(random_flip=False)
  for i in range(20):
    assert not _is_mirrored(rp.preprocess_image(encoded, True, 32, augment=no_flip))
    assert not _is_mirrored(rp.preprocess_image(encoded, True, 32, augment=no_flip, seed=tf.constant([i, 0])))
  flips = [_is_mirrored(rp.preprocess_image(encoded, True, 32, seed=tf.constant([i, 0]))) for i in range(20)]
  assert 3 <= sum(flips) <= 17  # the default config flips about half the time


def test_full_area_square_crop_returns_the_whole_image_resized():
  image = _image(40, 40)
  cfg = rp.AugmentConfig(crop_area_range=(1.0, 1.0), crop_aspect_ratio_range=(1.0, 1.0), random_flip=False)
  out = rp.preprocess_image(tf.constant(_encode(image, 'PNG')), True, 32, augment=cfg).numpy()
  expected = tf.image.resize(image, [32, 32], method='bilinear').numpy()
  np.testing.assert_allclose(out, expected, atol=1e-3)


def test_crop_aspect_ratio_range_is_honoured():
  shape = tf.constant([300, 300, 3])
  for i in range(20):
    _, _, h, w = [int(v) for v in rp.random_crop_window(shape, 32, (0.2, 0.5), (2.0, 2.5),
                                                        tf.constant([i, 1])).numpy()]
    assert 2.0 * 0.95 <= w / h <= 2.5 * 1.05 or (h, w) == (262, 262)  # or the centre-crop fallback


@pytest.mark.parametrize('name', [None, 'autoaugment', 'randaugment', 'trivialaugment_wide'])
def test_same_seed_gives_identical_output_and_different_seeds_differ(name):
  encoded = tf.constant(_encode(_image(48, 64), 'JPEG'))
  cfg = rp.AugmentConfig(augment_name=name)
  first = rp.preprocess_image(encoded, True, 32, augment=cfg, seed=tf.constant([7, 8])).numpy()
  again = rp.preprocess_image(encoded, True, 32, augment=cfg, seed=tf.constant([7, 8], tf.int64)).numpy()
  np.testing.assert_array_equal(first, again)
  others = [rp.preprocess_image(encoded, True, 32, augment=cfg, seed=tf.constant([7, s])).numpy() for s in (9, 10)]
  assert all(not np.array_equal(first, other) for other in others)


def test_seeded_path_is_stateless_in_tf_data_and_map_fn():
  encoded = [_encode(_image(48, 64, seed=i), 'JPEG') for i in range(3)]
  seeds = np.array([[1, 2], [3, 4], [1, 2]], np.int64)
  cfg = rp.AugmentConfig(augment_name='randaugment', randaug_num_layers=1)
  fn = lambda b, s: rp.preprocess_image(b, True, 32, augment=cfg, seed=s)
  eager = [fn(tf.constant(b), tf.constant(s)).numpy() for b, s in zip(encoded, seeds)]
  dataset = tf.data.Dataset.from_tensor_slices((encoded, seeds)).map(fn)
  for _ in range(2):  # iterating twice replays the same bits: no hidden RNG state
    for out, expected in zip(dataset, eager):
      np.testing.assert_array_equal(out.numpy(), expected)
  batch = tf.map_fn(lambda x: fn(x[0], x[1]), (tf.constant(encoded), tf.constant(seeds)),
                    fn_output_signature=tf.TensorSpec([32, 32, 3], tf.float32))
  np.testing.assert_array_equal(batch.numpy(), np.stack(eager))


def test_bad_seed_gets_a_clear_error():
  encoded = tf.constant(_encode(_image(20, 20), 'JPEG'))
  with pytest.raises(ValueError, match='shape \\[2\\]'):
    rp.preprocess_image(encoded, True, 16, seed=tf.constant([1, 2, 3]))
  with pytest.raises(ValueError, match='int32/int64'):
    rp.preprocess_image(encoded, True, 16, seed=tf.constant([1.0, 2.0]))


def test_unknown_augment_name_is_rejected_with_the_valid_names():
  with pytest.raises(ValueError, match='autoaugment, randaugment'):
    rp.AugmentConfig(augment_name='autoaugmnet')
  with pytest.raises(TypeError, match='from_params'):
    rp.preprocess_image(tf.constant(b''), True, augment={'augment_name': 'randaugment'})


def test_augment_config_from_params_accepts_lists_and_fills_defaults():
  cfg = rp.AugmentConfig.from_params({'crop_area_range': [0.35, 1], 'random_flip': False,
                                      'augment_name': 'RandAugment', 'randaug_magnitude': 9,
                                      'augment_name_unrelated': 1, 'randaug_num_layers': None})
  assert cfg == rp.AugmentConfig(crop_area_range=(0.35, 1.0), crop_aspect_ratio_range=(0.75, 4.0 / 3.0),
                                 random_flip=False, augment_name='randaugment', randaug_num_layers=2,
                                 randaug_magnitude=9)
  assert rp.AugmentConfig.from_params({}) == rp.AugmentConfig()
  assert rp.AugmentConfig.from_params({'augment_name': ''}).augment_name is None
  with pytest.raises(ValueError, match='crop_area_range'):
    rp.AugmentConfig.from_params({'crop_area_range': [0.5, 0.2]})
  with pytest.raises(ValueError, match='pair'):
    rp.AugmentConfig(crop_aspect_ratio_range=0.75)


@pytest.mark.parametrize('window,ratio', [((0, 0, 100, 60), 1), ((0, 0, 64, 200), 2), ((0, 0, 255, 300), 4),
                                          ((0, 0, 256, 300), 8), ((0, 0, 900, 900), 8)])
def test_jpeg_scale_ratio_is_the_largest_that_keeps_the_short_side(window, ratio):
  assert rp.JPEG_SCALE_RATIOS[int(rp.jpeg_scale_ratio(tf.constant(window), 32))] == ratio


def _smooth_jpeg(height: int, width: int) -> bytes:
  ys, xs = np.mgrid[0:height, 0:width].astype(np.float32)
  image = np.stack([127 + 100 * np.sin(xs / 23.0), 127 + 100 * np.cos(ys / 31.0), (xs + ys) / (height + width) * 255],
                   axis=-1)
  return _encode(np.clip(image, 0, 255).astype(np.uint8), 'JPEG')


def test_fast_decode_decodes_large_windows_at_reduced_scale():
  encoded = tf.constant(_smooth_jpeg(160, 200))
  window_fn = lambda shape: tf.constant([10, 20, 130, 150])
  # Short side 130 >= 4 * 32 (< 8 * 32): decoded at 1/4 scale, ceil(130 / 4) x ceil(150 / 4) scaled pixels.
  assert rp.decode_and_crop(encoded, window_fn, min_decoded_side=32).shape == (33, 38, 3)
  assert rp.decode_and_crop(encoded, window_fn).shape == (130, 150, 3)
  assert rp.decode_and_crop(encoded, window_fn, min_decoded_side=100).shape == (130, 150, 3)  # 130 < 2 * 100


def test_fast_decode_output_stays_close_to_full_scale_decode():
  encoded = tf.constant(_smooth_jpeg(240, 320))
  cfg = rp.AugmentConfig(crop_area_range=(0.5, 1.0), random_flip=False)
  diffs, colour_shifts = [], []
  for i in range(8):
    seed = tf.constant([i, 3])
    fast = rp.preprocess_image(encoded, True, 32, augment=cfg, seed=seed, fast_decode=True).numpy()
    exact = rp.preprocess_image(encoded, True, 32, augment=cfg, seed=seed).numpy()
    assert fast.shape == (32, 32, 3)
    diffs.append(np.abs(fast - exact).mean())
    colour_shifts.append(np.abs(fast.mean(axis=(0, 1)) - exact.mean(axis=(0, 1))).max())
  # Every window is >= 2x the output here, so each image took the reduced-scale path (and differs a little).
  assert min(diffs) > 0.0
  # Measured: mean abs diff 1.5-4.2 (0..255) and channel means within 3, mostly the scaled window snapping to whole
  # scaled pixels (under half an output pixel of shift on these steep gradients); with an exactly aligned window
  # the reduced-scale decode differs from full decode + bilinear by ~1 (as much as antialiasing does).
  assert max(diffs) < 6.0, diffs
  assert max(colour_shifts) < 4.0, colour_shifts


def test_eval_ignores_training_options():
  encoded = tf.constant(_encode(_image(50, 70), 'JPEG'))
  plain = rp.preprocess_image(encoded, False, 32).numpy()
  cfg = rp.AugmentConfig(augment_name='autoaugment', crop_area_range=(0.1, 0.2))
  np.testing.assert_array_equal(rp.preprocess_image(encoded, False, 32, augment=cfg, seed=tf.constant([1, 2]),
                                                    fast_decode=True).numpy(), plain)


# ------------------------------------------------------------------------------------------------ random erasing
def _erased(out: np.ndarray, flat: float) -> np.ndarray:
  return np.any(out != flat, axis=-1)


def test_random_erasing_replaces_one_box_of_pixel_noise_sized_as_timm():
  flat = 7.0   # noise never lands exactly on it: every erased pixel shows
  image = tf.fill([32, 32, 3], flat)
  areas, aspects, values = [], [], []
  for i in range(200):
    out = rp.random_erase(image, 1.0, seed=tf.constant([i, 1], tf.int64)).numpy()
    changed = _erased(out, flat)
    rows, cols = np.where(changed.any(axis=1))[0], np.where(changed.any(axis=0))[0]
    height, width = rows.max() - rows.min() + 1, cols.max() - cols.min() + 1
    assert changed.sum() == height * width   # one solid box
    areas.append(height * width / 1024)
    aspects.append(height / width)
    values.append(out[changed])
  assert 0.015 <= min(areas) and max(areas) <= 0.40   # 2%..33%, give or take the rounding of a 32-pixel side
  assert min(aspects) < 0.6 and max(aspects) > 1.7   # both orientations, log-uniform 0.3..3.3
  pixels = np.concatenate(values)
  np.testing.assert_allclose(pixels.mean(axis=0), rp.ERASE_MEAN, atol=4.0)   # ImageNet's mean + std * N(0, 1)
  np.testing.assert_allclose(pixels.std(axis=0), rp.ERASE_STD, rtol=0.12)    # (less at the 0..255 clip)
  assert pixels.min() >= 0.0 and pixels.max() <= 255.0


def test_random_erasing_probability_seeds_and_the_stateful_path():
  image = tf.fill([16, 16, 3], 7.0)
  erased = [bool(_erased(rp.random_erase(image, 0.3, tf.constant([i, 2], tf.int64)).numpy(), 7.0).any())
            for i in range(400)]
  assert abs(np.mean(erased) - 0.3) < 4 * np.sqrt(0.3 * 0.7 / 400)
  seed = tf.constant([5, 5], tf.int64)
  np.testing.assert_array_equal(rp.random_erase(image, 1.0, seed), rp.random_erase(image, 1.0, seed))
  unseeded = rp.random_erase(image, 1.0).numpy()
  assert _erased(unseeded, 7.0).any() and 0.0 <= unseeded.min() and unseeded.max() <= 255.0
  with pytest.raises(ValueError, match='random_erase_prob must be in'):
    rp.AugmentConfig(random_erase_prob=1.5)
  from resnet.run_setup import run_params  # pylint: disable=import-outside-toplevel
  params = run_params.make_params({'random_erase_prob': 0.25, 'model_dir': '/tmp/unused-run'})
  assert rp.AugmentConfig.from_params(params).random_erase_prob == 0.25   # the param reaches the pipeline


def test_erasing_a_seeded_training_image_keeps_its_crop_and_flip():
  """Erasing draws from its own sub-seed: the seeded crop and flip (and so a seeded run's other draws) are
  unchanged, and the pixels outside the box are the image without erasing."""
  encoded = tf.io.encode_jpeg(tf.constant(_image(48, 64, seed=3))).numpy()
  seed = tf.constant([11, 3], tf.int64)
  plain = rp.preprocess_for_train(encoded, 32, seed=seed).numpy()
  erased = rp.preprocess_for_train(encoded, 32, augment=rp.AugmentConfig(random_erase_prob=1.0), seed=seed).numpy()
  changed = np.any(erased != plain, axis=-1)
  assert 0 < changed.sum() < changed.size
  np.testing.assert_array_equal(erased[~changed], plain[~changed])


@pytest.mark.parametrize('tta,view', [('none', (224, 0.875)), ('flip', (224, 0.875)), ('five_crop', (256, 1.0)),
                                      ('ten_crop', (256, 1.0))])
def test_multi_crop_tta_reads_the_whole_short_side_at_s_plus_pad(tta, view):
  """The centred square of the whole short side at 256 (for 224), whose centre 224 crop is the usual 0.875 eval
  crop (torchvision's Resize(256) + FiveCrop(224) crops the whole rectangle: see eval_view)."""
  assert rp.eval_view({'image_size': 224, 'eval_image_size': None, 'tta': tta}) == view
  assert rp.eval_view({'image_size': 64, 'eval_image_size': 96, 'tta': tta})[0] == (96 if tta in ('none', 'flip')
                                                                                     else 96 + 14)


def test_the_centre_of_the_multi_crop_view_is_the_usual_eval_image():
  # A smooth image (resampling twice differs little there), wider than tall: the square is centred.
  y, x = np.mgrid[0:90, 0:120]
  smooth = np.stack([x * 2, y * 2, (x + y)], axis=-1).clip(0, 255).astype(np.uint8)
  encoded = tf.constant(_encode(smooth, 'PNG'))
  usual = rp.preprocess_image(encoded, False, 32).numpy()
  full = rp.preprocess_image(encoded, False, 37, crop_fraction=1.0).numpy()
  assert full.shape == (37, 37, 3)
  np.testing.assert_allclose(full[2:34, 2:34], usual, atol=6.0)   # pad 5: the centre crop starts at 2
  assert np.abs(full[:2, :2] - usual[:2, :2]).mean() > 3.0        # the corners see more of the image


def test_multi_crop_views_are_the_centre_and_corner_crops_and_their_mirrors():
  """eval_view pads 14 px views to 16 (round(14 / 7)); the crops are taken from there, and nothing else fits."""
  images = tf.reshape(tf.range(2 * 16 * 16 * 1, dtype=tf.float32), [2, 16, 16, 1])
  params = {'tta': 'ten_crop', 'image_size': 14, 'eval_image_size': None}
  views = rp.tta_views(images, params)
  assert len(views) == 10 and all(v.shape == (2, 14, 14, 1) for v in views)
  x = images.numpy()
  for view, (y0, x0) in zip(views[:5], [(1, 1), (0, 0), (0, 2), (2, 0), (2, 2)]):
    np.testing.assert_array_equal(view.numpy(), x[:, y0:y0 + 14, x0:x0 + 14])
  for crop, mirrored in zip(views[:5], views[5:]):
    np.testing.assert_array_equal(mirrored.numpy(), crop.numpy()[:, :, ::-1])
  assert len(rp.tta_views(images, dict(params, tta='five_crop'))) == 5
  with pytest.raises(ValueError, match='16 x 16 images the input gives'):
    rp.tta_views(images[:, :15, :15], params)
