"""ImageNet preprocessing for ResNet: Inception-style random crop for training, 0.875 centre crop for eval.

Small pure functions, composed by ``preprocess_image``. Pixels stay in 0..255 (the model normalises), output dtype
follows the run's precision. What differs from the reference (tensorflow/tpu resnet_preprocessing.py), on purpose:

- JPEG bytes decode only the crop window (``decode_and_crop_jpeg``; measured ~20% less decode CPU per training
  image than a full decode). Other formats (PNG, GIF, BMP, WebP) decode fully and are then cropped, so PNG works
  everywhere, including the SavedModel's serving function (the reference export was JPEG-only).
- The window is computed first and decoded once; the "sampler returned the whole image" fallback to the centre crop
  is a choice of window, not a second decode.
- Resizing uses TF2 ``tf.image.resize`` (half-pixel centres; the reference used the TF1 kernel). Training resizes
  bilinearly, measured ~18% cheaper per image than bicubic on CPU; eval keeps the reference's bicubic, with its
  overshoot clipped to 0..255 (the reference did not clip).
- Training randomness can be stateless: with a ``seed`` ([2] int tensor) the crop, AutoAugment/RandAugment and
  flip all derive from it, so an image's augmentation is reproducible (same seed, same bits).
- Flipping is optional (``AugmentConfig.random_flip``): mirrored digits or text change meaning.
- Optional reduced-scale JPEG decode for training (``fast_decode``): a crop window at least twice the output size
  decodes at 1/2, 1/4 or 1/8 scale (libjpeg DCT scaling), never below the output size.
"""
import dataclasses
import math
from typing import Any, Callable, List, Mapping, Optional, Tuple

import tensorflow as tf

from official_input import augment as augment_lib

IMAGE_SIZE = 224
CROP_FRACTION = 0.875
# Inception-style crop: the reference's values (tf.image's own defaults are 0.75-1.33, 0.05-1, 100 attempts).
MIN_OBJECT_COVERED = 0.1
ASPECT_RATIO_RANGE = (3.0 / 4.0, 4.0 / 3.0)
AREA_RANGE = (0.08, 1.0)
MAX_ATTEMPTS = 10
# Measured on this 2-core machine (tools/input_benchmark.py, CPU time per 224px training image): bilinear ~0.68 ms,
# bicubic ~0.82 ms, i.e. ~18% more images/s in a CPU-bound pipeline. Training uses bilinear (its random crop already
# varies sharpness far more, and Model Garden / torchvision train with it); eval and the SavedModel keep the
# reference's bicubic, so accuracy is comparable with the reference and with checkpoints trained by it.
TRAIN_RESIZE_METHOD = tf.image.ResizeMethod.BILINEAR
EVAL_RESIZE_METHOD = tf.image.ResizeMethod.BICUBIC

JPEG_MAGIC = b'\xff\xd8\xff'  # what tf.io.is_jpeg checks
PNG_MAGIC = b'\x89PNG\r\n\x1a\n'
GIF_MAGIC = b'GIF8'
BMP_MAGIC = b'BM'
RIFF_MAGIC = b'RIFF'
WEBP_MAGIC = b'WEBP'
# Smallest plausible encoded image: real JPEG/PNG headers alone are longer than this.
MIN_ENCODED_BYTES = 16

# Reduced-scale JPEG decode ratios libjpeg supports through TensorFlow's ``ratio`` attribute.
JPEG_SCALE_RATIOS = (1, 2, 4, 8)

WindowFn = Callable[[tf.Tensor], tf.Tensor]


@dataclasses.dataclass(frozen=True)
class AugmentConfig:
  """Training augmentation settings (params of the same names); eval and serving ignore them.

  crop_area_range: fraction of the image the random crop covers, 0 < lo <= hi <= 1.
  crop_aspect_ratio_range: width / height of the random crop, 0 < lo <= hi.
  random_flip: mirror left-right half the time; switch off for digits, text or other chiral content.
  augment_name: None (or ''), 'autoaugment' (ImageNet policy v0), 'randaugment' or 'trivialaugment_wide'.
  randaug_num_layers, randaug_magnitude: RandAugment's N ops per image and their shared level M (10 = the ops'
    nominal maximum).
  random_erase_prob: probability of random erasing (timm's --reprob; ``random_erase``), after the flip.
  """
  crop_area_range: Tuple[float, float] = AREA_RANGE
  crop_aspect_ratio_range: Tuple[float, float] = ASPECT_RATIO_RANGE
  random_flip: bool = True
  augment_name: Optional[str] = None        # None | one of augment_lib.AUGMENT_NAMES
  randaug_num_layers: int = 2
  randaug_magnitude: int = 10
  random_erase_prob: float = 0.0

  def __post_init__(self):
    area = _pair('crop_area_range', self.crop_area_range)
    aspect = _pair('crop_aspect_ratio_range', self.crop_aspect_ratio_range)
    if not 0.0 < area[0] <= area[1] <= 1.0:
      raise ValueError(f'crop_area_range must satisfy 0 < low <= high <= 1 (fractions of the image), got {area}.')
    if not 0.0 < aspect[0] <= aspect[1]:
      raise ValueError(f'crop_aspect_ratio_range must satisfy 0 < low <= high (width / height), got {aspect}.')
    name = self.augment_name.strip().lower() if isinstance(self.augment_name, str) else self.augment_name
    if name is not None and name != '' and name not in augment_lib.AUGMENT_NAMES:
      raise ValueError(f'Unknown augment_name {self.augment_name!r}; use one of '
                       f'{", ".join(augment_lib.AUGMENT_NAMES)} (or leave it empty for none).')
    if int(self.randaug_num_layers) != self.randaug_num_layers or self.randaug_num_layers < 0:
      raise ValueError(f'randaug_num_layers must be an integer >= 0, got {self.randaug_num_layers!r}.')
    if not 0 <= self.randaug_magnitude <= 30:
      raise ValueError(f'randaug_magnitude must be in 0..30 (10 = the ops\' nominal maximum), got '
                       f'{self.randaug_magnitude!r}.')
    if not 0.0 <= self.random_erase_prob <= 1.0:
      raise ValueError(f'random_erase_prob must be in [0, 1] (a probability per image), got '
                       f'{self.random_erase_prob!r}.')
    # Frozen: normalise through object.__setattr__ so lists from YAML become hashable tuples.
    object.__setattr__(self, 'crop_area_range', area)
    object.__setattr__(self, 'crop_aspect_ratio_range', aspect)
    object.__setattr__(self, 'random_flip', bool(self.random_flip))
    object.__setattr__(self, 'augment_name', name or None)
    object.__setattr__(self, 'randaug_num_layers', int(self.randaug_num_layers))

  @classmethod
  def from_params(cls, params: Mapping[str, Any]) -> 'AugmentConfig':
    """Reads the fields of the same names; missing or None keys take the defaults, ranges may be lists."""
    return cls(**{f.name: params[f.name] for f in dataclasses.fields(cls) if params.get(f.name) is not None})


def image_size(params: Mapping[str, Any], training: bool) -> int:
  """The one rule for the image size of each mode: training crops ``image_size``; eval, predict and everything
  exported (serving signatures, TFLite, warm-up requests) use ``eval_image_size``, unset meaning image_size."""
  size = None if training else params.get('eval_image_size')
  return int(params['image_size'] if size is None else size)


CROP_TTA = ('five_crop', 'ten_crop')


def eval_view(params: Mapping[str, Any]) -> Tuple[int, float]:
  """(size, crop fraction) of the images eval and predict read. Multi-crop TTA (tta=five_crop|ten_crop) reads
  the centred square of the whole short side at S + pad (256 for 224), from which the model_fn takes its S x S
  crops: the centre one is the usual 0.875 crop. Unlike torchvision's Resize(256) + FiveCrop(224), whose corners
  are those of the whole resized rectangle, the corners here are those of its centred square (eval views stay
  square, as the usual one is). Else S at 0.875. Exports, TFLite and ONNX always serve the usual view
  (image_size(params, training=False))."""
  size = image_size(params, training=False)
  if params.get('tta') in CROP_TTA:
    return size + crop_padding(size), 1.0
  return size, CROP_FRACTION


def served_tta(params: Mapping[str, Any], deployed: bool = False) -> str:
  """The test-time views what is served averages: ``tta`` for eval and predict with the checkpoint; 'none' for an
  export (a SavedModel, and so its TFLite and ONNX files, serves the single usual view) and a deployed file."""
  return 'none' if deployed else params['tta']


def tta_views(images: tf.Tensor, params: Mapping[str, Any]) -> List[tf.Tensor]:
  """The test-time views of a batch [B, H, W, C] that eval_view's input gives (W is axis 2, which a mirror image
  reverses): flip = the images and their mirror images; five_crop = the centre and the four corner S x S crops of
  the S + pad squares; ten_crop = those and their mirror images. Both halves of the geometry are here: the input's
  size (eval_view) and the crops taken from it."""
  mirror = lambda x: tf.reverse(x, axis=[2])
  if params['tta'] == 'flip':
    return [images, mirror(images)]
  size = image_size(params, training=False)
  padded, _ = eval_view(params)
  if tuple(images.shape[1:3]) != (padded, padded):
    raise ValueError(f'tta={params["tta"]} crops {size} x {size} views from the {padded} x {padded} images the input '
                     f'gives (eval_view), got images of shape {images.shape}.')
  pad = padded - size
  corners = [(pad // 2, pad // 2), (0, 0), (0, pad), (pad, 0), (pad, pad)]   # the centre first
  crops = [images[:, y:y + size, x:x + size, :] for y, x in corners]
  return crops + [mirror(crop) for crop in crops] if params['tta'] == 'ten_crop' else crops


def _pair(name: str, value: Any) -> Tuple[float, float]:
  try:
    low, high = value
    return float(low), float(high)
  except (TypeError, ValueError):
    raise ValueError(f'{name} must be a pair (low, high) of numbers, got {value!r}.') from None


def crop_padding(image_size: int, crop_fraction: float = CROP_FRACTION) -> int:
  """The eval crop's padding in pixels at ``image_size``: round(S * (1 / 0.875 - 1)), 32 at 224."""
  return round(image_size * (1.0 / crop_fraction - 1.0))


def center_crop_size(height: tf.Tensor, width: tf.Tensor, image_size: int,
                     crop_fraction: float = CROP_FRACTION) -> tf.Tensor:
  """Side of the eval crop: CROP_FRACTION of the short side, with the padding rounded as the reference does.

  pad = round(S * (1 / 0.875 - 1)) (32 at 224) and crop = int(S / (S + pad) * min(H, W)), so the crop fraction
  stays ~0.875 for any image_size (the old fixed pad of 32 gave 0.833 at 160). ``crop_fraction`` 1 keeps the whole
  short side (multi-crop TTA takes its crops from that square).
  """
  pad = crop_padding(image_size, crop_fraction)
  short_side = tf.cast(tf.minimum(height, width), tf.float32)  # float32 as the reference: same pixel counts
  return tf.cast(image_size / (image_size + pad) * short_side, tf.int32)


def center_crop_window(shape: tf.Tensor, image_size: int, crop_fraction: float = CROP_FRACTION) -> tf.Tensor:
  """[offset_y, offset_x, crop, crop] of the centred eval crop for an image of ``shape`` [H, W, ...]."""
  height, width = shape[0], shape[1]
  crop = center_crop_size(height, width, image_size, crop_fraction)
  offset_y = (height - crop + 1) // 2
  offset_x = (width - crop + 1) // 2
  return tf.stack([offset_y, offset_x, crop, crop])


def random_crop_window(shape: tf.Tensor, image_size: int, area_range: Tuple[float, float] = AREA_RANGE,
                       aspect_ratio_range: Tuple[float, float] = ASPECT_RATIO_RANGE,
                       seed: Optional[tf.Tensor] = None) -> tf.Tensor:
  """[offset_y, offset_x, h, w] of an Inception-style random crop; the centre crop when the sampler gives up.

  The whole image is the bounding box (ImageNet boxes are ignored, as in the reference). When no attempt meets the
  constraints the sampler returns the whole image; like the reference we then use the eval centre crop, unless
  ``area_range`` asks for the whole image (low bound 1), where the whole image is the answer. ``seed`` ([2] int)
  makes the choice stateless.
  """
  shape = tf.cast(shape, tf.int32)
  kwargs = dict(bounding_boxes=tf.constant([0.0, 0.0, 1.0, 1.0], tf.float32, [1, 1, 4]),
                min_object_covered=MIN_OBJECT_COVERED, aspect_ratio_range=tuple(aspect_ratio_range),
                area_range=tuple(area_range), max_attempts=MAX_ATTEMPTS, use_image_if_no_bounding_boxes=True)
  if seed is None:
    begin, size, _ = tf.image.sample_distorted_bounding_box(shape, **kwargs)
  else:
    begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(shape, seed=seed, **kwargs)
  window = tf.stack([begin[0], begin[1], size[0], size[1]])
  if area_range[0] >= 1.0:
    return window
  whole_image = tf.logical_and(tf.equal(size[0], shape[0]), tf.equal(size[1], shape[1]))
  return tf.where(whole_image, center_crop_window(shape, image_size), window)


def decode_image(image_bytes: tf.Tensor) -> tf.Tensor:
  """Full decode of JPEG/PNG/GIF/BMP to uint8 [H, W, 3] (first frame of a GIF; grey becomes RGB)."""
  return tf.io.decode_image(image_bytes, channels=3, expand_animations=False)


def crop(image: tf.Tensor, window: tf.Tensor) -> tf.Tensor:
  """Crops a decoded [H, W, 3] image to ``window`` [offset_y, offset_x, h, w]."""
  return tf.slice(image, tf.stack([window[0], window[1], 0]), tf.stack([window[2], window[3], 3]))


def jpeg_scale_ratio(window: tf.Tensor, min_side: int) -> tf.Tensor:
  """Index into JPEG_SCALE_RATIOS of the largest ratio r with min(window h, w) / r >= ``min_side``."""
  short_side = tf.minimum(window[2], window[3])
  return tf.add_n([tf.cast(short_side >= r * min_side, tf.int32) for r in JPEG_SCALE_RATIOS[1:]])


def decode_jpeg_window_scaled(image_bytes: tf.Tensor, window: tf.Tensor, shape: tf.Tensor, ratio: int) -> tf.Tensor:
  """Decodes ``window`` (full-scale coordinates) of a JPEG at 1/``ratio`` scale.

  The scaled window starts at the nearest scaled pixel and spans ceil(size / ratio) pixels, so its short side is
  never below the full window's / ratio (moved back inside the ceil(H / ratio) x ceil(W / ratio) scaled image).
  """
  if ratio == 1:
    return tf.image.decode_and_crop_jpeg(image_bytes, window, channels=3)

  def _span(start, size, full):
    scaled_size = -(-size // ratio)
    scaled_full = -(-full // ratio)
    scaled_start = tf.minimum((start + ratio // 2) // ratio, scaled_full - scaled_size)
    return scaled_start, scaled_size

  top, height = _span(window[0], window[2], shape[0])
  left, width = _span(window[1], window[3], shape[1])
  return tf.io.decode_and_crop_jpeg(image_bytes, tf.stack([top, left, height, width]), channels=3, ratio=ratio)


def decode_and_crop(image_bytes: tf.Tensor, window_fn: WindowFn, full_decode: bool = False,
                    min_decoded_side: Optional[int] = None) -> tf.Tensor:
  """Decodes only the crop window of a JPEG; other formats (or ``full_decode``) decode fully, then crop.

  ``window_fn`` maps the image shape [H, W, C] to the window, so the shape comes from the JPEG header alone
  (``extract_jpeg_shape``) and each image is decoded exactly once. ``full_decode`` is the basic pipeline's path.
  ``min_decoded_side``: when set, a JPEG window at least twice that on its short side is decoded at the largest
  1/2, 1/4 or 1/8 scale that keeps its short side >= ``min_decoded_side`` (no upscaling later; the result is then
  smaller than the window).
  """
  def _decode_full() -> tf.Tensor:
    image = decode_image(image_bytes)
    return crop(image, window_fn(tf.shape(image)))

  if full_decode:
    return _decode_full()

  def _decode_jpeg_window() -> tf.Tensor:
    shape = tf.image.extract_jpeg_shape(image_bytes)
    window = window_fn(shape)
    if min_decoded_side is None:
      return tf.image.decode_and_crop_jpeg(image_bytes, window, channels=3)
    branches = [lambda r=r: decode_jpeg_window_scaled(image_bytes, window, shape, r) for r in JPEG_SCALE_RATIOS]
    return tf.switch_case(jpeg_scale_ratio(window, min_decoded_side), branches)

  return tf.cond(tf.io.is_jpeg(image_bytes), _decode_jpeg_window, _decode_full)


def resize(image: tf.Tensor, image_size: int, method: str = EVAL_RESIZE_METHOD) -> tf.Tensor:
  """Resizes to [S, S, 3] float32 in 0..255; bicubic overshoot is clipped so values stay valid pixels."""
  image = tf.image.resize(image, [image_size, image_size], method=method)
  if method in (tf.image.ResizeMethod.BILINEAR, tf.image.ResizeMethod.NEAREST_NEIGHBOR,
                tf.image.ResizeMethod.AREA):
    return image  # convex combinations of pixels cannot overshoot: skip a pass over the image
  return tf.clip_by_value(image, 0.0, 255.0)


def split_seed(seed: Optional[tf.Tensor], num: int) -> Tuple[Optional[tf.Tensor], ...]:
  """``num`` independent [2] seeds from one (Nones when ``seed`` is None)."""
  if seed is None:
    return (None,) * num
  return tuple(tf.unstack(tf.random.experimental.stateless_split(seed, num)))


def check_seed(seed: Optional[tf.Tensor]) -> Optional[tf.Tensor]:
  """None, or ``seed`` (int32/int64, shape [2]) as int64; anything else raises with the fix."""
  if seed is None:
    return None
  seed = tf.convert_to_tensor(seed)
  if seed.dtype not in (tf.int32, tf.int64) or not seed.shape.is_compatible_with([2]):
    raise ValueError(f'seed must be an int32/int64 tensor of shape [2] (one per image; in a batch use tf.map_fn '
                     f'over (bytes, seeds[N, 2])), got {seed.dtype.name} {seed.shape}.')
  return tf.cast(tf.ensure_shape(seed, [2]), tf.int64)  # int32 and int64 seeds of equal value: the same bits


def random_flip(image: tf.Tensor, seed: Optional[tf.Tensor] = None) -> tf.Tensor:
  """Left-right flip with probability 1/2; stateless when ``seed`` is given."""
  if seed is None:
    return tf.image.random_flip_left_right(image)
  return tf.image.stateless_random_flip_left_right(image, seed)


# Random erasing as timm's RandomErasing(mode='pixel', max_count=1): a box of 2%-33% of the image with log-uniform
# aspect 0.3..3.3, filled per pixel with N(0, 1) noise in the normalised space, i.e. ImageNet's mean + std * N(0, 1)
# in 0..255 pixels (clipped to 0..255, the preprocessing's range).
ERASE_AREA = (0.02, 1 / 3)
ERASE_LOG_ASPECT = (math.log(0.3), math.log(1 / 0.3))
ERASE_MEAN = (123.675, 116.28, 103.53)
ERASE_STD = (58.395, 57.12, 57.375)


def random_erase(image: tf.Tensor, probability: float, seed: Optional[tf.Tensor] = None) -> tf.Tensor:
  """With ``probability``, one box of ``image`` [S, S, 3] (0..255) replaced by noise; stateless with ``seed``. A box
  too tall or wide for the image is clamped to it (timm draws again up to 10 times)."""
  size = tf.shape(image)[0]
  if seed is None:
    draws = tf.random.uniform([5])
    noise = tf.random.normal(tf.shape(image))
  else:
    uniform_seed, noise_seed = split_seed(seed, 2)
    draws = tf.random.stateless_uniform([5], uniform_seed)
    noise = tf.random.stateless_normal(tf.shape(image), noise_seed)
  area = tf.cast(size * size, tf.float32) * (ERASE_AREA[0] + draws[1] * (ERASE_AREA[1] - ERASE_AREA[0]))
  aspect = tf.exp(ERASE_LOG_ASPECT[0] + draws[2] * (ERASE_LOG_ASPECT[1] - ERASE_LOG_ASPECT[0]))
  height = tf.clip_by_value(tf.cast(tf.round(tf.sqrt(area * aspect)), tf.int32), 1, size)
  width = tf.clip_by_value(tf.cast(tf.round(tf.sqrt(area / aspect)), tf.int32), 1, size)
  top = tf.cast(draws[3] * tf.cast(size - height + 1, tf.float32), tf.int32)
  left = tf.cast(draws[4] * tf.cast(size - width + 1, tf.float32), tf.int32)
  rows, cols = tf.range(size)[:, None], tf.range(size)[None, :]
  box = (rows >= top) & (rows < top + height) & (cols >= left) & (cols < left + width)
  erase = box & (draws[0] < probability)
  fill = tf.clip_by_value(tf.constant(ERASE_MEAN) + tf.constant(ERASE_STD) * noise, 0.0, 255.0)
  return tf.where(erase[:, :, None], tf.cast(fill, image.dtype), image)


def preprocess_for_train(image_bytes: tf.Tensor, image_size: int = IMAGE_SIZE, full_decode: bool = False,
                         method: str = TRAIN_RESIZE_METHOD, augment: AugmentConfig = AugmentConfig(),
                         seed: Optional[tf.Tensor] = None, fast_decode: bool = False) -> tf.Tensor:
  """Random crop, resize, AutoAugment/RandAugment if configured, optional flip, optional random erasing: float32
  [S, S, 3] in 0..255.

  With ``seed`` every random choice is stateless (crop, augmentation and flip get independent sub-seeds).
  ``fast_decode`` decodes large JPEG windows at reduced DCT scale (see ``decode_and_crop``).
  """
  seed = check_seed(seed)
  crop_seed, augment_seed, flip_seed = split_seed(seed, 3)
  window_fn = lambda shape: random_crop_window(shape, image_size, augment.crop_area_range,
                                               augment.crop_aspect_ratio_range, crop_seed)
  image = decode_and_crop(image_bytes, window_fn, full_decode, image_size if fast_decode else None)
  image = resize(image, image_size, method)
  image = augment_lib.apply_augment(image, augment.augment_name, augment.randaug_num_layers,
                                    augment.randaug_magnitude, augment_seed)
  if augment.random_flip:
    image = random_flip(image, flip_seed)
  if augment.random_erase_prob:  # its own sub-seed: the other draws of a seeded run stay what they were
    image = random_erase(image, augment.random_erase_prob,
                         None if seed is None else tf.random.experimental.stateless_fold_in(seed, 3))
  return image


def preprocess_for_eval(image_bytes: tf.Tensor, image_size: int = IMAGE_SIZE, full_decode: bool = False,
                        method: str = EVAL_RESIZE_METHOD, crop_fraction: float = CROP_FRACTION) -> tf.Tensor:
  """Centre crop (fraction 0.875), resize: float32 [S, S, 3] in 0..255. Deterministic."""
  image = decode_and_crop(image_bytes, lambda shape: center_crop_window(shape, image_size, crop_fraction),
                          full_decode)
  return resize(image, image_size, method)


def preprocess_image(image_bytes: tf.Tensor, is_training: bool, image_size: int = IMAGE_SIZE,
                     dtype: tf.DType = tf.float32, full_decode: bool = False, method: Optional[str] = None,
                     augment: AugmentConfig = AugmentConfig(), seed: Optional[tf.Tensor] = None,
                     fast_decode: bool = False, crop_fraction: float = CROP_FRACTION) -> tf.Tensor:
  """Encoded image bytes (scalar string; JPEG, PNG, GIF or BMP) -> [S, S, 3] of ``dtype``, values 0..255.

  Works eagerly, in tf.data, in tf.map_fn and in a tf.function (the SavedModel's serving function calls it with
  ``is_training=False``). ``full_decode`` decodes whole JPEGs before cropping (the basic pipeline). ``method``
  defaults to bilinear for training and bicubic for eval (see TRAIN_RESIZE_METHOD). Training only: ``augment``
  (crop ranges, flip, AutoAugment/RandAugment), ``seed`` ([2] int32/int64: stateless, reproducible randomness;
  None: stateful ops) and ``fast_decode`` (reduced-scale decode of large JPEG windows). Eval is exact and
  deterministic; ``crop_fraction`` is the share of the short side its centre crop keeps (see eval_view).
  """
  if not isinstance(augment, AugmentConfig):
    raise TypeError(f'augment must be an AugmentConfig (build one with AugmentConfig.from_params(params)), '
                    f'got {type(augment).__name__}.')
  if is_training:
    image = preprocess_for_train(image_bytes, image_size, full_decode, method or TRAIN_RESIZE_METHOD, augment,
                                 seed, fast_decode)
  else:
    image = preprocess_for_eval(image_bytes, image_size, full_decode, method or EVAL_RESIZE_METHOD, crop_fraction)
  image = tf.ensure_shape(image, [image_size, image_size, 3])
  return tf.cast(image, dtype)


def image_format_ok(image_bytes: tf.Tensor) -> tf.Tensor:
  """Cheap check, no decoding: do the bytes start like a JPEG, PNG, GIF, BMP or WebP? Never raises.

  Works elementwise on a scalar or a vector of strings.

  Catches empty, truncated-to-nothing and non-image payloads (HTML error pages, garbage) before the decoder would
  raise on them; the pipeline's error catch handles the rare corrupt file that has a valid header.
  """
  # substr raises when the start is past the end, so inspect a zero-padded copy of the first 12 bytes.
  head = tf.strings.join([tf.strings.substr(image_bytes, 0, 12), b'\0' * 12])

  def _has(magic: bytes, pos: int = 0) -> tf.Tensor:
    return tf.equal(tf.strings.substr(head, pos, len(magic)), magic)

  is_webp = tf.logical_and(_has(RIFF_MAGIC), _has(WEBP_MAGIC, 8))
  known = tf.reduce_any(tf.stack([_has(JPEG_MAGIC), _has(PNG_MAGIC), _has(GIF_MAGIC), _has(BMP_MAGIC), is_webp],
                                 axis=0), axis=0)
  return tf.logical_and(known, tf.strings.length(image_bytes) >= MIN_ENCODED_BYTES)
