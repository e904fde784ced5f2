"""AutoAugment (ImageNet policy v0) and RandAugment as pure TensorFlow ops on one [H, W, 3] image in 0..255.

Training-only augmentation, applied after the random crop and resize. Everything is graph-friendly (tf.data map,
tf.map_fn, tf.function): no py_function, no numpy at run time, no tensorflow_addons; rotate, shear and translate
are ``ImageProjectiveTransformV3`` calls (nearest neighbour, uncovered pixels grey 128).

Every random decision (which sub-policy or op, whether an op fires, the sign of a geometric op, where cutout
lands) draws from ``seed`` when one is given (a [2] int32/int64 tensor; one sub-seed per decision via
``stateless_fold_in``), so the same seed gives bit-identical output; with ``seed=None`` the stateful RNG is used.

Ops, magnitude mappings, policy v0 and the hyperparameters (AutoAugment: translate 250 px, cutout 100;
RandAugment: translate 100 px, cutout 40) follow the reference TPU implementation. Deliberate differences:

- Contrast blends towards the mean grey level (PIL's definition). The reference blended towards
  pixel_count / 256, a constant unrelated to the image.
- Float results are rounded to the nearest integer, not truncated (truncation darkened every blend by ~0.5).
- Posterize keeps at least 1 bit: the reference's "0 bits" shifted by 8, which TensorFlow clamps to 7, i.e. 1 bit.
- RandAugment draws no unused per-op probability (the reference drew one and ignored it).

TrivialAugment-Wide (Müller & Hutter 2021; torchvision's ``TrivialAugmentWide``, its recipe for the newer weights)
follows torchvision's op list and magnitude bins; uncovered pixels are grey 128 here, black in torchvision.
"""
import math
from typing import Callable, Dict, Optional, Sequence, Tuple

import tensorflow as tf

MAX_LEVEL = 10.0
REPLACE_VALUE = 128  # fill for pixels that rotate/shear/translate/cutout leave uncovered (the reference's grey)
AUTOAUGMENT_TRANSLATE_CONST = 250.0
AUTOAUGMENT_CUTOUT_CONST = 100.0
RANDAUGMENT_TRANSLATE_CONST = 100.0
RANDAUGMENT_CUTOUT_CONST = 40.0
AUGMENT_NAMES = ('autoaugment', 'randaugment', 'trivialaugment_wide')

# AutoAugment ImageNet policy v0: 25 sub-policies of (op, probability, level); one is chosen uniformly per image.
POLICY_V0: Tuple[Tuple[Tuple[str, float, int], ...], ...] = (
    (('Equalize', 0.8, 1), ('ShearY', 0.8, 4)),
    (('Color', 0.4, 9), ('Equalize', 0.6, 3)),
    (('Color', 0.4, 1), ('Rotate', 0.6, 8)),
    (('Solarize', 0.8, 3), ('Equalize', 0.4, 7)),
    (('Solarize', 0.4, 2), ('Solarize', 0.6, 2)),
    (('Color', 0.2, 0), ('Equalize', 0.8, 8)),
    (('Equalize', 0.4, 8), ('SolarizeAdd', 0.8, 3)),
    (('ShearX', 0.2, 9), ('Rotate', 0.6, 8)),
    (('Color', 0.6, 1), ('Equalize', 1.0, 2)),
    (('Invert', 0.4, 9), ('Rotate', 0.6, 0)),
    (('Equalize', 1.0, 9), ('ShearY', 0.6, 3)),
    (('Color', 0.4, 7), ('Equalize', 0.6, 0)),
    (('Posterize', 0.4, 6), ('AutoContrast', 0.4, 7)),
    (('Solarize', 0.6, 8), ('Color', 0.6, 9)),
    (('Solarize', 0.2, 4), ('Rotate', 0.8, 9)),
    (('Rotate', 1.0, 7), ('TranslateY', 0.8, 9)),
    (('ShearX', 0.0, 0), ('Solarize', 0.8, 4)),
    (('ShearY', 0.8, 0), ('Color', 0.6, 4)),
    (('Color', 1.0, 0), ('Rotate', 0.6, 2)),
    (('Equalize', 0.8, 4), ('Equalize', 0.0, 8)),
    (('Equalize', 1.0, 4), ('AutoContrast', 0.6, 2)),
    (('ShearY', 0.4, 7), ('SolarizeAdd', 0.6, 7)),
    (('Posterize', 0.8, 2), ('Solarize', 0.6, 10)),
    (('Solarize', 0.6, 8), ('Equalize', 0.6, 1)),
    (('Color', 0.8, 6), ('Rotate', 0.4, 5)),
)

RANDAUGMENT_OPS = ('AutoContrast', 'Equalize', 'Invert', 'Rotate', 'Posterize', 'Solarize', 'Color', 'Contrast',
                   'Brightness', 'Sharpness', 'ShearX', 'ShearY', 'TranslateX', 'TranslateY', 'Cutout',
                   'SolarizeAdd')

Seed = Optional[tf.Tensor]


# ---------------------------------------------------------------------------------------------------------------
# Randomness: stateless from a seed when given, stateful otherwise.

def _sub_seed(seed: Seed, index: int) -> Seed:
  """An independent seed for decision ``index``; None stays None (stateful draws)."""
  return None if seed is None else tf.random.experimental.stateless_fold_in(seed, index)


def _as_seed(seed: Seed) -> Seed:
  """int64 [2]: stateless ops give different bits for int32 and int64 seeds of equal value, so normalise."""
  return None if seed is None else tf.cast(tf.ensure_shape(seed, [2]), tf.int64)


def _uniform(seed: Seed, minval: float = 0.0, maxval: float = 1.0) -> tf.Tensor:
  if seed is None:
    return tf.random.uniform([], minval, maxval)
  return tf.random.stateless_uniform([], seed, minval, maxval)


def _randint(seed: Seed, maxval: tf.Tensor) -> tf.Tensor:
  """Scalar int32 uniform in [0, maxval)."""
  if seed is None:
    return tf.random.uniform([], 0, maxval, dtype=tf.int32)
  return tf.random.stateless_uniform([], seed, 0, maxval, dtype=tf.int32)


def _random_sign(value: float, seed: Seed) -> tf.Tensor:
  """``value`` or ``-value`` with equal probability (geometric ops go either way)."""
  return tf.where(_uniform(seed) < 0.5, -value, value)


# ---------------------------------------------------------------------------------------------------------------
# Ops on uint8 [H, W, 3]. Each is deterministic given its arguments.

def _to_uint8(image: tf.Tensor) -> tf.Tensor:
  """Rounds and clips a float image to uint8 (uint8 passes through)."""
  if image.dtype == tf.uint8:
    return image
  return tf.cast(tf.clip_by_value(tf.round(tf.cast(image, tf.float32)), 0.0, 255.0), tf.uint8)


def blend(image1: tf.Tensor, image2: tf.Tensor, factor: tf.Tensor) -> tf.Tensor:
  """image1 + factor * (image2 - image1), rounded and clipped to uint8; factor > 1 extrapolates (PIL enhance)."""
  image1 = tf.cast(image1, tf.float32)
  return _to_uint8(image1 + tf.cast(factor, tf.float32) * (tf.cast(image2, tf.float32) - image1))


def _grey(image: tf.Tensor) -> tf.Tensor:
  """Float [H, W, 1] luma with PIL's 'L' weights."""
  weights = tf.constant([0.299, 0.587, 0.114], tf.float32)
  return tf.reduce_sum(tf.cast(image, tf.float32) * weights, axis=-1, keepdims=True)


def autocontrast(image: tf.Tensor) -> tf.Tensor:
  """Stretches each channel so its min becomes 0 and its max 255; flat channels stay as they are."""
  values = tf.cast(image, tf.float32)
  lo = tf.reduce_min(values, axis=[0, 1])
  hi = tf.reduce_max(values, axis=[0, 1])
  flat = hi <= lo
  scale = tf.where(flat, 1.0, 255.0 / tf.where(flat, 1.0, hi - lo))
  offset = tf.where(flat, 0.0, lo)
  return _to_uint8((values - offset) * scale)


def equalize(image: tf.Tensor) -> tf.Tensor:
  """PIL's histogram equalisation, per channel: step = (pixels - count of the top value) // 255."""
  channels = tf.range(3, dtype=tf.int32)
  codes = tf.cast(image, tf.int32) + channels * 256  # channel c's values live in bins c*256 .. c*256+255
  hist = tf.reshape(tf.math.bincount(tf.reshape(codes, [-1]), minlength=768, maxlength=768), [3, 256])
  top_value = tf.reduce_max(tf.cast(image, tf.int32), axis=[0, 1])
  top_count = tf.gather(hist, top_value, batch_dims=1)
  step = (tf.reduce_sum(hist, axis=1) - top_count) // 255  # [3]
  safe_step = tf.maximum(step, 1)[:, None]
  lut = (tf.cumsum(hist, axis=1, exclusive=True) + safe_step // 2) // safe_step
  lut = tf.where(step[:, None] > 0, tf.clip_by_value(lut, 0, 255), tf.range(256)[None, :])
  return tf.cast(tf.gather(tf.reshape(lut, [-1]), codes), tf.uint8)


def invert(image: tf.Tensor) -> tf.Tensor:
  return 255 - image


def posterize(image: tf.Tensor, bits: tf.Tensor) -> tf.Tensor:
  """Keeps the top ``bits`` (1..8) bits of every value."""
  if isinstance(bits, (int, float)) and not 1 <= bits <= 8:
    raise ValueError(f'posterize keeps 1..8 bits, got {bits}.')
  mask = tf.bitwise.bitwise_and(tf.bitwise.left_shift(255, 8 - tf.cast(bits, tf.int32)), 255)
  return tf.bitwise.bitwise_and(image, tf.cast(mask, tf.uint8))


def solarize(image: tf.Tensor, threshold: tf.Tensor) -> tf.Tensor:
  """Inverts values >= threshold (threshold 256+ leaves the image unchanged)."""
  return tf.where(tf.cast(image, tf.int32) < tf.cast(threshold, tf.int32), image, 255 - image)


def solarize_add(image: tf.Tensor, addition: tf.Tensor, threshold: int = 128) -> tf.Tensor:
  """Adds ``addition`` (clipped to 0..255) to values below ``threshold``."""
  values = tf.cast(image, tf.int32)
  added = tf.cast(tf.clip_by_value(values + tf.cast(addition, tf.int32), 0, 255), tf.uint8)
  return tf.where(values < threshold, added, image)


def color(image: tf.Tensor, factor: tf.Tensor) -> tf.Tensor:
  """PIL Color: 0 gives grey, 1 the original, >1 more saturated."""
  return blend(tf.tile(_grey(image), [1, 1, 3]), image, factor)


def contrast(image: tf.Tensor, factor: tf.Tensor) -> tf.Tensor:
  """PIL Contrast: blends with a flat image at the mean grey level."""
  return blend(tf.fill(tf.shape(image), tf.round(tf.reduce_mean(_grey(image)))), image, factor)


def brightness(image: tf.Tensor, factor: tf.Tensor) -> tf.Tensor:
  """PIL Brightness: blends with black."""
  return blend(tf.zeros_like(image), image, factor)


def sharpness(image: tf.Tensor, factor: tf.Tensor) -> tf.Tensor:
  """PIL Sharpness: blends with a 3x3 smoothed copy (border pixels are not smoothed)."""
  kernel = tf.constant([[1, 1, 1], [1, 5, 1], [1, 1, 1]], tf.float32) / 13.0
  kernel = tf.tile(kernel[:, :, None, None], [1, 1, 3, 1])
  smooth = tf.nn.depthwise_conv2d(tf.cast(image, tf.float32)[None], kernel, [1, 1, 1, 1], 'VALID')[0]
  smooth = tf.cast(_to_uint8(smooth), tf.int32)
  interior = tf.pad(tf.ones_like(smooth, tf.bool), [[1, 1], [1, 1], [0, 0]])
  degenerate = tf.where(interior, tf.pad(smooth, [[1, 1], [1, 1], [0, 0]]), tf.cast(image, tf.int32))
  return blend(degenerate, image, factor)


def transform(image: tf.Tensor, matrix: Sequence[tf.Tensor]) -> tf.Tensor:
  """Projective transform [a0, a1, a2, b0, b1, b2, c0, c1] mapping each output (x, y) to the input point it reads.

  Nearest neighbour; output pixels that read outside the image become REPLACE_VALUE.
  """
  transforms = tf.reshape(tf.stack([tf.cast(v, tf.float32) for v in matrix]), [1, 8])
  out = tf.raw_ops.ImageProjectiveTransformV3(
      images=image[None], transforms=transforms, output_shape=tf.shape(image)[:2],
      fill_value=tf.constant(REPLACE_VALUE, tf.float32), interpolation='NEAREST', fill_mode='CONSTANT')
  return out[0]


def rotate(image: tf.Tensor, degrees: tf.Tensor) -> tf.Tensor:
  """Rotates counter-clockwise (as displayed) by ``degrees`` about the image centre."""
  radians = tf.cast(degrees, tf.float32) * (math.pi / 180.0)
  cos, sin = tf.cos(radians), tf.sin(radians)
  shape = tf.cast(tf.shape(image), tf.float32)
  cy, cx = (shape[0] - 1.0) / 2.0, (shape[1] - 1.0) / 2.0
  # input = R (output - c) + c, R = [[cos, -sin], [sin, cos]] in (x, y) with y pointing down.
  return transform(image, [cos, -sin, cx - cos * cx + sin * cy, sin, cos, cy - sin * cx - cos * cy, 0.0, 0.0])


def shear_x(image: tf.Tensor, level: tf.Tensor) -> tf.Tensor:
  """Output (x, y) reads input (x + level * y, y), sheared about the top-left corner as PIL does."""
  return transform(image, [1.0, level, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0])


def shear_y(image: tf.Tensor, level: tf.Tensor) -> tf.Tensor:
  return transform(image, [1.0, 0.0, 0.0, level, 1.0, 0.0, 0.0, 0.0])


def translate_x(image: tf.Tensor, pixels: tf.Tensor) -> tf.Tensor:
  """Content moves left by ``pixels`` (right when negative)."""
  return transform(image, [1.0, 0.0, pixels, 0.0, 1.0, 0.0, 0.0, 0.0])


def translate_y(image: tf.Tensor, pixels: tf.Tensor) -> tf.Tensor:
  """Content moves up by ``pixels`` (down when negative)."""
  return transform(image, [1.0, 0.0, 0.0, 0.0, 1.0, pixels, 0.0, 0.0])


def cutout(image: tf.Tensor, pad_size: tf.Tensor, center: Tuple[tf.Tensor, tf.Tensor]) -> tf.Tensor:
  """Greys (REPLACE_VALUE) the square [cy - pad, cy + pad) x [cx - pad, cx + pad), clipped to the image."""
  pad_size = tf.cast(pad_size, tf.int32)
  shape = tf.shape(image)
  rows = tf.range(shape[0])[:, None, None]
  cols = tf.range(shape[1])[None, :, None]
  cy, cx = center
  inside = ((rows >= cy - pad_size) & (rows < cy + pad_size) & (cols >= cx - pad_size) & (cols < cx + pad_size))
  return tf.where(inside, tf.constant(REPLACE_VALUE, image.dtype), image)


# ---------------------------------------------------------------------------------------------------------------
# Each op: a level -> argument mapping (plain Python, the reference's arithmetic and rounding) and an application
# (image, argument tensor, seed) -> image. Geometric ops pick their direction at random.

LevelFn = Callable[[float], float]
ApplyFn = Callable[[tf.Tensor, tf.Tensor, Seed], tf.Tensor]


def _enhance_factor(level: float) -> float:
  return level / MAX_LEVEL * 1.8 + 0.1


def _apply_cutout(image: tf.Tensor, pad_size: tf.Tensor, seed: Seed) -> tf.Tensor:
  shape = tf.shape(image)
  center = (_randint(_sub_seed(seed, 0), shape[0]), _randint(_sub_seed(seed, 1), shape[1]))
  return cutout(image, pad_size, center)


def _ops(translate_const: float, cutout_const: float) -> Dict[str, Tuple[LevelFn, ApplyFn]]:
  no_arg = lambda level: 0.0
  return {
      'AutoContrast': (no_arg, lambda image, arg, seed: autocontrast(image)),
      'Equalize': (no_arg, lambda image, arg, seed: equalize(image)),
      'Invert': (no_arg, lambda image, arg, seed: invert(image)),
      'Rotate': (lambda level: level / MAX_LEVEL * 30.0,
                 lambda image, arg, seed: rotate(image, _random_sign(arg, seed))),
      # The reference maps level to int(level / 10 * 4) bits; its 0 bits behaved as 1 (TF clamps the 8-bit shift).
      'Posterize': (lambda level: max(1, int(level / MAX_LEVEL * 4)),
                    lambda image, arg, seed: posterize(image, arg)),
      'Solarize': (lambda level: int(level / MAX_LEVEL * 256), lambda image, arg, seed: solarize(image, arg)),
      'SolarizeAdd': (lambda level: int(level / MAX_LEVEL * 110), lambda image, arg, seed: solarize_add(image, arg)),
      'Color': (_enhance_factor, lambda image, arg, seed: color(image, arg)),
      'Contrast': (_enhance_factor, lambda image, arg, seed: contrast(image, arg)),
      'Brightness': (_enhance_factor, lambda image, arg, seed: brightness(image, arg)),
      'Sharpness': (_enhance_factor, lambda image, arg, seed: sharpness(image, arg)),
      'ShearX': (lambda level: level / MAX_LEVEL * 0.3,
                 lambda image, arg, seed: shear_x(image, _random_sign(arg, seed))),
      'ShearY': (lambda level: level / MAX_LEVEL * 0.3,
                 lambda image, arg, seed: shear_y(image, _random_sign(arg, seed))),
      'TranslateX': (lambda level: level / MAX_LEVEL * translate_const,
                     lambda image, arg, seed: translate_x(image, _random_sign(arg, seed))),
      'TranslateY': (lambda level: level / MAX_LEVEL * translate_const,
                     lambda image, arg, seed: translate_y(image, _random_sign(arg, seed))),
      'Cutout': (lambda level: int(level / MAX_LEVEL * cutout_const), _apply_cutout),
  }


def _augment_dtype(fn: Callable[[tf.Tensor], tf.Tensor], image: tf.Tensor) -> tf.Tensor:
  """Runs ``fn`` on the uint8 version of ``image`` (float values are rounded); returns image's shape and dtype."""
  image = tf.convert_to_tensor(image)
  if image.shape.rank is not None and (image.shape.rank != 3 or image.shape[-1] not in (None, 3)):
    raise ValueError(f'Augmentation takes one RGB image [H, W, 3], got shape {image.shape}; map it over a batch.')
  if not (image.dtype == tf.uint8 or image.dtype.is_floating):
    raise ValueError(f'Augmentation takes uint8 or float images in 0..255, got {image.dtype.name}.')
  out = fn(_to_uint8(image))
  if image.dtype != tf.uint8:
    out = tf.cast(out, image.dtype)
  return tf.ensure_shape(out, image.shape)


@tf.autograph.experimental.do_not_convert
def autoaugment(image: tf.Tensor, seed: Seed = None) -> tf.Tensor:
  """AutoAugment ImageNet policy v0: one of 25 sub-policies, each of its two ops applied with its probability.

  ``image``: uint8 or float [H, W, 3] in 0..255; same shape and dtype come back. Built as two table lookups and
  two switches over the distinct ops (plus "skip"), not 25 x 2 nested conds: a fraction of the graph and of the
  tracing time.
  """
  seed = _as_seed(seed)
  ops = _ops(AUTOAUGMENT_TRANSLATE_CONST, AUTOAUGMENT_CUTOUT_CONST)
  names = sorted({name for sub_policy in POLICY_V0 for name, _, _ in sub_policy})

  def _run(image: tf.Tensor) -> tf.Tensor:
    chosen = _randint(_sub_seed(seed, 0), len(POLICY_V0))
    for position in range(2):
      entries = [sub_policy[position] for sub_policy in POLICY_V0]
      op_index = tf.gather([names.index(name) for name, _, _ in entries], chosen)
      prob = tf.gather([float(prob) for _, prob, _ in entries], chosen)
      arg = tf.gather([float(ops[name][0](float(level))) for name, _, level in entries], chosen)
      position_seed = _sub_seed(seed, 1 + position)
      fires = _uniform(_sub_seed(position_seed, 0)) < prob
      op_seed = _sub_seed(position_seed, 1)
      branches = [lambda name=name, image=image: ops[name][1](image, arg, op_seed) for name in names]
      branches.append(lambda image=image: image)  # the op did not fire
      image = tf.switch_case(tf.where(fires, op_index, len(names)), branches)
    return image

  return _augment_dtype(_run, image)


@tf.autograph.experimental.do_not_convert
def randaugment(image: tf.Tensor, num_layers: int, magnitude: float, seed: Seed = None) -> tf.Tensor:
  """RandAugment: ``num_layers`` ops, each drawn uniformly from RANDAUGMENT_OPS, all at level ``magnitude``.

  ``image``: uint8 or float [H, W, 3] in 0..255; same shape and dtype come back. Magnitudes above 10 are allowed
  (the reference trained with 15); ops whose argument then leaves its range saturate as in the reference.
  """
  if num_layers < 0 or magnitude < 0:
    raise ValueError(f'randaugment needs num_layers >= 0 and magnitude >= 0, got {num_layers} and {magnitude}.')
  seed = _as_seed(seed)
  ops = _ops(RANDAUGMENT_TRANSLATE_CONST, RANDAUGMENT_CUTOUT_CONST)
  args = {name: float(ops[name][0](float(magnitude))) for name in RANDAUGMENT_OPS}

  def _run(image: tf.Tensor) -> tf.Tensor:
    for layer in range(num_layers):
      layer_seed = _sub_seed(seed, layer)
      op_seed = _sub_seed(layer_seed, 1)
      branches = [lambda name=name, image=image: ops[name][1](image, tf.constant(args[name]), op_seed)
                  for name in RANDAUGMENT_OPS]
      image = tf.switch_case(_randint(_sub_seed(layer_seed, 0), len(RANDAUGMENT_OPS)), branches)
    return image

  return _augment_dtype(_run, image)


# TrivialAugment-Wide's ops and magnitude bins (torchvision's ``_augmentation_space`` for 31 bins): per op, the
# magnitude of bin i, and whether a random sign applies. Enhance ops take factor 1 + magnitude.
TRIVIALAUGMENT_BINS = 31


def _linspace(start: float, stop: float) -> Tuple[float, ...]:
  return tuple(start + (stop - start) * i / (TRIVIALAUGMENT_BINS - 1) for i in range(TRIVIALAUGMENT_BINS))


TRIVIALAUGMENT_WIDE: Tuple[Tuple[str, Tuple[float, ...], bool], ...] = (
    ('Identity', (0.0,) * TRIVIALAUGMENT_BINS, False),
    ('ShearX', _linspace(0.0, 0.99), True),
    ('ShearY', _linspace(0.0, 0.99), True),
    ('TranslateX', _linspace(0.0, 32.0), True),
    ('TranslateY', _linspace(0.0, 32.0), True),
    ('Rotate', _linspace(0.0, 135.0), True),
    ('Brightness', _linspace(0.0, 0.99), True),
    ('Color', _linspace(0.0, 0.99), True),
    ('Contrast', _linspace(0.0, 0.99), True),
    ('Sharpness', _linspace(0.0, 0.99), True),
    # torchvision: 8 - round(i / ((bins - 1) / 6)), rounding half to even as torch.round does.
    ('Posterize', tuple(float(8 - round(i / ((TRIVIALAUGMENT_BINS - 1) / 6))) for i in range(TRIVIALAUGMENT_BINS)),
     False),
    ('Solarize', _linspace(255.0, 0.0), False),   # torchvision fixed 256 -> 255 (pytorch/vision#4805)
    ('AutoContrast', (0.0,) * TRIVIALAUGMENT_BINS, False),
    ('Equalize', (0.0,) * TRIVIALAUGMENT_BINS, False),
)

TRIVIALAUGMENT_APPLY: Dict[str, Callable[[tf.Tensor, tf.Tensor], tf.Tensor]] = {
    'Identity': lambda image, m: image,
    'ShearX': shear_x,
    'ShearY': shear_y,
    # torchvision translates by int(magnitude) pixels and solarizes values >= the float threshold.
    'TranslateX': lambda image, m: translate_x(image, tf.cast(tf.cast(m, tf.int32), tf.float32)),
    'TranslateY': lambda image, m: translate_y(image, tf.cast(tf.cast(m, tf.int32), tf.float32)),
    'Rotate': rotate,
    'Brightness': lambda image, m: brightness(image, 1.0 + m),
    'Color': lambda image, m: color(image, 1.0 + m),
    'Contrast': lambda image, m: contrast(image, 1.0 + m),
    'Sharpness': lambda image, m: sharpness(image, 1.0 + m),
    'Posterize': posterize,
    'Solarize': lambda image, m: solarize(image, tf.math.ceil(m)),
    'AutoContrast': lambda image, m: autocontrast(image),
    'Equalize': lambda image, m: equalize(image),
}


def trivialaugment_draws(seed: Seed = None) -> Tuple[tf.Tensor, tf.Tensor]:
  """(op index into TRIVIALAUGMENT_WIDE, signed magnitude) for one image: op and bin uniform, sign a fair coin
  (for the signed ops). Separate from the application so that tests can replay a draw."""
  seed = _as_seed(seed)
  op = _randint(_sub_seed(seed, 0), len(TRIVIALAUGMENT_WIDE))
  bin_index = _randint(_sub_seed(seed, 1), TRIVIALAUGMENT_BINS)
  table = tf.constant([magnitudes for _, magnitudes, _ in TRIVIALAUGMENT_WIDE], tf.float32)
  signed = tf.gather([signed for _, _, signed in TRIVIALAUGMENT_WIDE], op)
  negative = signed & (_uniform(_sub_seed(seed, 2)) < 0.5)
  magnitude = tf.gather_nd(table, tf.stack([op, bin_index]))
  return op, tf.where(negative, -magnitude, magnitude)


@tf.autograph.experimental.do_not_convert
def trivialaugment_wide(image: tf.Tensor, seed: Seed = None) -> tf.Tensor:
  """TrivialAugment-Wide: one op drawn uniformly from 14 (identity included) at a magnitude drawn uniformly from
  31 bins; no hyperparameters. ``image``: uint8 or float [H, W, 3] in 0..255; same shape and dtype come back."""
  op, magnitude = trivialaugment_draws(seed)

  def _run(image: tf.Tensor) -> tf.Tensor:
    branches = [lambda name=name, image=image: TRIVIALAUGMENT_APPLY[name](image, magnitude)
                for name, _, _ in TRIVIALAUGMENT_WIDE]
    return tf.switch_case(op, branches)

  return _augment_dtype(_run, image)


@tf.autograph.experimental.do_not_convert
def apply_augment(image: tf.Tensor, name: Optional[str], num_layers: int = 2, magnitude: float = 10,
                  seed: Seed = None) -> tf.Tensor:
  """Dispatches on ``name``: None or '' is a no-op, else autoaugment / randaugment (N ``num_layers`` ops of level
  ``magnitude``) / trivialaugment_wide."""
  if not name:
    return image
  if name == 'autoaugment':
    return autoaugment(image, seed)
  if name == 'randaugment':
    return randaugment(image, num_layers, magnitude, seed)
  if name == 'trivialaugment_wide':
    return trivialaugment_wide(image, seed)
  raise ValueError(f'Unknown augment_name {name!r}; use one of {", ".join(AUGMENT_NAMES)} (or leave it empty).')

