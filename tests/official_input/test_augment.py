"""Tests for official_input/augment.py: hand-checked ops, AutoAugment/RandAugment contracts, seeding, tf.data."""

import numpy as np
import pytest
import tensorflow as tf

from official_input import augment


def _image(height: int = 24, width: int = 24, seed: int = 0) -> np.ndarray:
  return np.random.default_rng(seed).integers(0, 256, size=(height, width, 3), dtype=np.uint8)


def _grey(values) -> tf.Tensor:
  """A [1, N, 3] uint8 image whose three channels all hold ``values``."""
  row = np.asarray(values, np.uint8)
  return tf.constant(np.stack([row] * 3, axis=-1)[None])


def _row(image: tf.Tensor) -> list:
  return image.numpy()[0, :, 0].tolist()


def test_solarize_inverts_values_at_or_above_threshold():
  assert _row(augment.solarize(_grey([0, 127, 128, 200, 255]), 128)) == [0, 127, 127, 55, 0]
  assert _row(augment.solarize(_grey([0, 255]), 256)) == [0, 255]  # threshold past 255: unchanged


def test_solarize_add_adds_below_threshold_only_and_clips():
  assert _row(augment.solarize_add(_grey([0, 100, 127, 128, 200]), 110)) == [110, 210, 237, 128, 200]
  assert _row(augment.solarize_add(_grey([120]), 200)) == [255]


def test_posterize_keeps_top_bits():
  # 219 = 0b11011011 -> 2 bits: 0b11000000 = 192; 63 -> 0; 64 -> 64; 255 -> 192.
  assert _row(augment.posterize(_grey([219, 63, 64, 255]), 2)) == [192, 0, 64, 192]
  assert _row(augment.posterize(_grey([219, 127]), 1)) == [128, 0]
  with pytest.raises(ValueError, match='1..8 bits'):
    augment.posterize(_grey([1]), 0)


def test_invert():
  assert _row(augment.invert(_grey([0, 55, 255]))) == [255, 200, 0]


def test_autocontrast_stretches_each_channel_and_leaves_flat_channels():
  image = np.zeros((1, 3, 3), np.uint8)
  image[0, :, 0] = [51, 61, 102]   # scale 255 / 51 = 5: -> 0, 50, 255
  image[0, :, 1] = [7, 7, 7]       # flat: unchanged
  image[0, :, 2] = [0, 128, 255]   # already full range
  out = augment.autocontrast(tf.constant(image)).numpy()
  assert out[0, :, 0].tolist() == [0, 50, 255]
  assert out[0, :, 1].tolist() == [7, 7, 7]
  assert out[0, :, 2].tolist() == [0, 128, 255]


def test_equalize_matches_hand_computed_lookup_table():
  # 1024 pixels: 512 of 10, 256 of 20, 256 of 30. step = (1024 - 256) // 255 = 3;
  # lut[v] = (pixels below v + step // 2) // step: 10 -> 0, 20 -> 513 // 3 = 171, 30 -> 769 // 3 = 256 -> 255.
  values = np.array([10] * 512 + [20] * 256 + [30] * 256, np.uint8).reshape(32, 32)
  out = augment.equalize(tf.constant(np.stack([values] * 3, axis=-1))).numpy()
  expected = {10: 0, 20: 171, 30: 255}
  for value, mapped in expected.items():
    assert set(out[values == value].ravel().tolist()) == {mapped}


def test_equalize_leaves_images_with_too_few_pixels_unchanged():
  image = _image(8, 8)  # 64 pixels: step = 0, PIL returns the image as is
  np.testing.assert_array_equal(augment.equalize(tf.constant(image)).numpy(), image)


def test_rotate_90_degrees_is_a_counter_clockwise_quarter_turn():
  image = _image(7, 7)
  np.testing.assert_array_equal(augment.rotate(tf.constant(image), 90.0).numpy(), np.rot90(image, 1))
  np.testing.assert_array_equal(augment.rotate(tf.constant(image), 0.0).numpy(), image)


def test_translate_shifts_content_and_fills_with_grey():
  image = _image(6, 8)
  out = augment.translate_x(tf.constant(image), 2.0).numpy()
  np.testing.assert_array_equal(out[:, :-2], image[:, 2:])
  assert (out[:, -2:] == 128).all()
  out = augment.translate_y(tf.constant(image), -1.0).numpy()
  np.testing.assert_array_equal(out[1:], image[:-1])
  assert (out[0] == 128).all()


def test_shear_x_shifts_row_y_by_level_times_y():
  image = _image(3, 5)
  out = augment.shear_x(tf.constant(image), 1.0).numpy()
  np.testing.assert_array_equal(out[0], image[0])
  np.testing.assert_array_equal(out[1, :-1], image[1, 1:])
  np.testing.assert_array_equal(out[2, :-2], image[2, 2:])
  assert (out[2, -2:] == 128).all()


def test_cutout_greys_a_square_around_the_centre():
  image = np.zeros((5, 5, 3), np.uint8)
  out = augment.cutout(tf.constant(image), 1, (tf.constant(2), tf.constant(2))).numpy()
  expected = np.zeros((5, 5), np.uint8)
  expected[1:3, 1:3] = 128
  np.testing.assert_array_equal(out[:, :, 0], expected)


def test_contrast_blends_towards_the_mean_grey_level():
  image = np.zeros((4, 4, 3), np.uint8)
  image[:, 2:] = 200  # mean grey 100
  assert set(augment.contrast(tf.constant(image), 0.0).numpy().ravel().tolist()) == {100}
  out = augment.contrast(tf.constant(image), 0.5).numpy()
  assert out[0, 0, 0] == 50 and out[0, 3, 0] == 150


def test_color_zero_gives_grey_and_brightness_scales():
  red = np.zeros((1, 1, 3), np.uint8)
  red[..., 0] = 255
  assert augment.color(tf.constant(red), 0.0).numpy().ravel().tolist() == [76, 76, 76]  # 0.299 * 255 = 76.2
  assert _row(augment.brightness(_grey([200, 100]), 0.5)) == [100, 50]
  assert _row(augment.brightness(_grey([200, 100]), 1.5)) == [255, 150]


def test_sharpness_zero_smooths_interior_and_keeps_borders():
  image = np.zeros((3, 3, 3), np.uint8)
  image[1, 1] = 255
  out = augment.sharpness(tf.constant(image), 0.0).numpy()
  assert out[1, 1, 0] == 98  # 5 * 255 / 13 = 98.08
  assert (out[0] == 0).all() and (out[2] == 0).all()
  np.testing.assert_array_equal(augment.sharpness(tf.constant(image), 1.0).numpy(), image)


POLICIES = {
    'autoaugment': lambda image, seed=None: augment.autoaugment(image, seed),
    'randaugment': lambda image, seed=None: augment.randaugment(image, 2, 10, seed),
    'trivialaugment_wide': lambda image, seed=None: augment.trivialaugment_wide(image, seed),
}


@pytest.mark.parametrize('name', sorted(POLICIES))
@pytest.mark.parametrize('dtype', [tf.uint8, tf.float32])
def test_policy_changes_pixels_but_keeps_shape_and_dtype(name, dtype):
  image = tf.cast(tf.constant(_image(32, 32)), dtype)
  changed = 0
  for i in range(16):
    out = POLICIES[name](image, tf.constant([i, 7]))
    assert out.shape == (32, 32, 3) and out.dtype == dtype
    values = tf.cast(out, tf.float32).numpy()
    assert values.min() >= 0 and values.max() <= 255
    changed += int(not np.array_equal(values, tf.cast(image, tf.float32).numpy()))
  # Ops fire with their probability (AutoAugment changes ~76% of images, RandAugment ~99%): most must change.
  assert changed >= 8


@pytest.mark.parametrize('name', sorted(POLICIES))
def test_policy_same_seed_same_bits_and_different_seeds_differ(name):
  image = tf.constant(_image(32, 32))
  first = POLICIES[name](image, tf.constant([3, 4])).numpy()
  np.testing.assert_array_equal(first, POLICIES[name](image, tf.constant([3, 4])).numpy())
  others = [POLICIES[name](image, tf.constant([3, s])).numpy() for s in range(5, 10)]
  assert any(not np.array_equal(first, other) for other in others)


@pytest.mark.slow
@pytest.mark.parametrize('name', sorted(POLICIES))
def test_policy_runs_in_tf_data_map_graph_mode_seeded_and_unseeded(name):
  images = np.stack([_image(24, 24, seed=i) for i in range(4)])
  seeds = np.arange(8, dtype=np.int64).reshape(4, 2)
  seeded = tf.data.Dataset.from_tensor_slices((images, seeds)).map(lambda x, s: POLICIES[name](x, s))
  outs = [o.numpy() for o in seeded]
  eager = [POLICIES[name](tf.constant(images[i]), tf.constant(seeds[i])).numpy() for i in range(4)]
  for out, expected in zip(outs, eager):
    np.testing.assert_array_equal(out, expected)  # graph and eager agree bit for bit under the same seed
  unseeded = tf.data.Dataset.from_tensor_slices(images).map(lambda x: POLICIES[name](x))
  assert [o.shape for o in unseeded] == [(24, 24, 3)] * 4


def test_trivialaugment_wide_bins_are_torchvisions():
  table = {name: (magnitudes, signed) for name, magnitudes, signed in augment.TRIVIALAUGMENT_WIDE}
  assert list(table) == ['Identity', 'ShearX', 'ShearY', 'TranslateX', 'TranslateY', 'Rotate', 'Brightness',
                         'Color', 'Contrast', 'Sharpness', 'Posterize', 'Solarize', 'AutoContrast', 'Equalize']
  assert all(len(magnitudes) == 31 for magnitudes, _ in table.values())
  expected_ends = {'ShearX': 0.99, 'TranslateY': 32.0, 'Rotate': 135.0, 'Sharpness': 0.99}
  for name, end in expected_ends.items():
    np.testing.assert_allclose(table[name][0], np.linspace(0.0, end, 31))
    assert table[name][1]
  np.testing.assert_allclose(table['Solarize'][0], np.linspace(255.0, 0.0, 31))   # torchvision since 0.12
  # torchvision: 8 - round(i / 5) bits, 8 for the first bins down to 2.
  assert table['Posterize'][0] == tuple([8.0] * 3 + [7.0] * 5 + [6.0] * 5 + [5.0] * 5 + [4.0] * 5 + [3.0] * 5 +
                                        [2.0] * 3)
  assert not any(table[name][1] for name in ('Posterize', 'Solarize', 'Identity', 'AutoContrast', 'Equalize'))


def _trivialaugment_expected(image: tf.Tensor, name: str, m: float) -> tf.Tensor:
  """torchvision's _apply_op for one op and signed magnitude, written out on our primitives."""
  factor = 1.0 + m
  return {
      'Identity': lambda: image, 'ShearX': lambda: augment.shear_x(image, m),
      'ShearY': lambda: augment.shear_y(image, m), 'TranslateX': lambda: augment.translate_x(image, float(int(m))),
      'TranslateY': lambda: augment.translate_y(image, float(int(m))), 'Rotate': lambda: augment.rotate(image, m),
      'Brightness': lambda: augment.brightness(image, factor), 'Color': lambda: augment.color(image, factor),
      'Contrast': lambda: augment.contrast(image, factor), 'Sharpness': lambda: augment.sharpness(image, factor),
      'Posterize': lambda: augment.posterize(image, int(m)),
      'Solarize': lambda: augment.solarize(image, int(np.ceil(m))),
      'AutoContrast': lambda: augment.autocontrast(image), 'Equalize': lambda: augment.equalize(image),
  }[name]()


def test_trivialaugment_wide_draws_every_op_bin_and_sign_and_applies_the_drawn_one():
  image = tf.constant(_image(24, 24))
  names = [name for name, _, _ in augment.TRIVIALAUGMENT_WIDE]
  ops, magnitudes, checked = [], [], set()
  for i in range(600):
    seed = tf.constant([i, 11])
    op, m = (v.numpy() for v in augment.trivialaugment_draws(seed))
    ops.append(int(op))
    magnitudes.append((names[op], float(m)))
    if names[op] not in checked:  # one image per op: the drawn op at the drawn magnitude, nothing else
      checked.add(names[op])
      np.testing.assert_array_equal(augment.trivialaugment_wide(image, seed).numpy(),
                                    _trivialaugment_expected(image, names[op], float(m)).numpy())
  counts = np.bincount(ops, minlength=14)
  assert counts.min() >= 20, counts  # uniform over 14 ops: ~43 each
  rotations = [m for name, m in magnitudes if name == 'Rotate']
  assert min(rotations) < 0 < max(rotations) and max(abs(r) for r in rotations) <= 135.0
  assert len({abs(m) for name, m in magnitudes if name == 'TranslateX'}) >= 15  # bins drawn, not one level
  assert all(m >= 0 for name, m in magnitudes if name in ('Posterize', 'Solarize'))  # unsigned ops


def test_randaugment_with_zero_layers_is_identity():
  image = tf.constant(_image(16, 16))
  np.testing.assert_array_equal(augment.randaugment(image, 0, 10).numpy(), image.numpy())


def test_apply_augment_dispatches_and_rejects_unknown_names():
  image = tf.constant(_image(16, 16))
  np.testing.assert_array_equal(augment.apply_augment(image, None).numpy(), image.numpy())
  np.testing.assert_array_equal(augment.apply_augment(image, '').numpy(), image.numpy())
  seed = tf.constant([1, 2])
  np.testing.assert_array_equal(augment.apply_augment(image, 'randaugment', 1, 5, seed).numpy(),
                                augment.randaugment(image, 1, 5, seed).numpy())
  np.testing.assert_array_equal(augment.apply_augment(image, 'trivialaugment_wide', seed=seed).numpy(),
                                augment.trivialaugment_wide(image, seed).numpy())
  with pytest.raises(ValueError, match='autoaugment, randaugment, trivialaugment_wide'):
    augment.apply_augment(image, 'autoaug')


def test_non_rgb_input_gets_a_clear_error():
  with pytest.raises(ValueError, match=r'\[H, W, 3\]'):
    augment.autoaugment(tf.zeros([2, 8, 8, 3], tf.uint8))
