"""The one normalisation of image files: any image Pillow reads -> the upright 8-bit RGB picture a model trains on,
and the bytes a converted record holds. The converter (tools/convert/clean_images.py, in worker processes) and
predict on raw files (image_files.py) both call it, so a photo predicted from its file gives the model the pixels
its record gave in training and eval.

- EXIF orientation applied (a phone photo stored sideways is turned upright); alpha composited on white (RGBA, LA,
  PA, palettes and greys with a transparent colour); CMYK, palette, grey, 1-bit, YCbCr, LAB and HSV to RGB; 16-bit
  and float data rescaled to 8 bits, not clipped; the first frame of GIFs, TIFFs, WebPs and MPOs; ICC profiles
  ignored. With ``max_image_side`` the longer side is shrunk to it (LANCZOS, aspect kept, never upscaled).
- An RGB JPEG that needs none of that keeps its bytes (no second JPEG generation); anything else is re-encoded as
  a JPEG at JPEG_QUALITY. Either way TensorFlow then decodes JPEG bytes (``resnet_preprocessing``), so the pixels
  are those of the record, bit for bit, and not those of a Pillow decode of the original (another JPEG decoder).

Pillow and numpy only, both imported on first use: the converter's workers import this module and must not load
TensorFlow (each would cost ~1 GB and seconds to start), and Pillow loads when the first image is read.
"""
import io
import os
from typing import Any, BinaryIO, NamedTuple, Optional, Tuple, Union

# Re-encoding quality (conversions and resizes): at 95 the re-encoding error is far below what the training
# crop/resize changes, while a 512 px photo stays ~100-200 KB; decode cost depends on pixels, not on quality.
JPEG_QUALITY = 95
# The image files the converter names and predict reads from folders and globs, by extension (any case), with the
# format Pillow reports for them (a file whose content is another format is 'misnamed'; its content decides).
EXTENSION_FORMATS = {'.jpg': 'JPEG', '.jpeg': 'JPEG', '.jpe': 'JPEG', '.jfif': 'JPEG', '.png': 'PNG', '.gif': 'GIF',
                     '.bmp': 'BMP', '.webp': 'WEBP', '.tif': 'TIFF', '.tiff': 'TIFF'}
IMAGE_EXTENSIONS = tuple(EXTENSION_FORMATS)
EXIF_ORIENTATION = 0x0112
# EXIF orientation -> the transpose that makes the image upright (the table ImageOps.exif_transpose uses). Applied
# by hand so that it can follow a resize without depending on EXIF metadata surviving the resize.
ORIENTATION_TRANSPOSE = {2: 'FLIP_LEFT_RIGHT', 3: 'ROTATE_180', 4: 'FLIP_TOP_BOTTOM', 5: 'TRANSPOSE',
                         6: 'ROTATE_270', 7: 'TRANSVERSE', 8: 'ROTATE_90'}
# Resizing keeps at least this factor above the target size before the final LANCZOS pass: JPEGs are decoded at a
# DCT-scaled 1/2, 1/4 or 1/8 size (Image.draft, which skips most of the decode work) and other formats are
# box-reduced by an integer factor (Image.reduce). Pillow documents a gap >= 3 as indistinguishable from a full
# LANCZOS resample in most cases; the cost is a fraction of the decode either way.
RESIZE_REDUCING_GAP = 3.0
UNREADABLE = 'not an image Pillow can read'


def has_image_extension(path: str) -> bool:
  """Whether ``path`` ends in one of IMAGE_EXTENSIONS (any case)."""
  return os.path.splitext(path)[1].lower() in EXTENSION_FORMATS


def open_image(source: Union[bytes, BinaryIO]) -> Any:
  """A lazily loaded PIL image of bytes or an open binary file: the header is read, the pixels not yet."""
  from PIL import Image
  return Image.open(io.BytesIO(source) if isinstance(source, (bytes, bytearray)) else source)


def exif_orientation(img: Any) -> int:
  """The EXIF orientation tag (1-8), 1 when absent or unreadable (a broken EXIF block is not a broken image)."""
  try:
    return int(img.getexif().get(EXIF_ORIENTATION, 1) or 1)
  except Exception:  # pylint: disable=broad-except
    return 1


def resized_size(width: int, height: int, max_image_side: int) -> Optional[Tuple[int, int]]:
  """(width, height) with the longer side max_image_side and the aspect kept; None when no resize is due.

  None for max_image_side <= 0 (off) and for images already within it: never upscales.
  """
  longer = max(width, height)
  if max_image_side <= 0 or longer <= max_image_side:
    return None
  scale = max_image_side / longer
  return (max_image_side if width == longer else max(1, round(width * scale)),
          max_image_side if height == longer else max(1, round(height * scale)))


class Normalisation(NamedTuple):
  """What one image needs: its format, the EXIF orientation applied (1: none), the size it is shrunk to (None:
  kept), and whether its bytes are kept as they are (an RGB JPEG, upright, within the size)."""
  format: str
  orientation: int
  size: Optional[Tuple[int, int]]
  keeps_bytes: bool

  @property
  def turns(self) -> bool:
    return self.orientation in ORIENTATION_TRANSPOSE


def _plain_jpeg(img: Any, max_image_side: int) -> bool:
  """An RGB JPEG within max_image_side: kept as it is unless its EXIF orientation turns it."""
  return img.format == 'JPEG' and img.mode == 'RGB' and resized_size(img.width, img.height, max_image_side) is None


def normalisation(img: Any, apply_exif_orientation: bool = True, max_image_side: int = 0) -> Normalisation:
  """The Normalisation of an opened image (reading its EXIF block may load a PNG: its eXIf chunk can follow the
  pixels)."""
  orientation = exif_orientation(img) if apply_exif_orientation else 1
  turns = orientation in ORIENTATION_TRANSPOSE
  return Normalisation(img.format or 'unknown', orientation, resized_size(img.width, img.height, max_image_side),
                       _plain_jpeg(img, max_image_side) and not turns)


def needs_normalising(img: Any, apply_exif_orientation: bool = True, max_image_side: int = 0) -> Optional[str]:
  """From the header alone (never loads the pixels): None when the bytes are kept as they are, else what is done
  to the image, e.g. 'PNG/RGBA', 'JPEG/RGB EXIF orientation 6', 'JPEG/RGB resized'. The same rule as
  ``normalisation(...).keeps_bytes``."""
  what = f'{img.format or "unknown"}/{img.mode}'
  if _plain_jpeg(img, max_image_side):
    orientation = exif_orientation(img) if apply_exif_orientation else 1
    return f'{what} EXIF orientation {orientation}' if orientation in ORIENTATION_TRANSPOSE else None
  resized = ' resized' if resized_size(img.width, img.height, max_image_side) else ''
  return what + resized


def to_rgb(img: Any) -> Any:
  """Converts any Pillow mode to 8-bit RGB; 16-bit and float data are rescaled, not clipped; transparency is
  composited on white."""
  from PIL import Image
  mode = img.mode
  if mode == 'RGB':
    return img
  if mode.startswith('I') or mode == 'F':
    import numpy as np
    arr = np.nan_to_num(np.asarray(img, dtype=np.float64))
    if mode == 'F':
      scale = 255.0 if arr.max() <= 1.0 else 1.0
    else:  # 'I;16*' is 16-bit; 32-bit 'I' is treated as 16-bit when values exceed 8 bits.
      scale = 1.0 / 257.0 if mode.startswith('I;16') or arr.max() > 255 else 1.0
    gray = np.clip(arr * scale + 0.5, 0, 255).astype(np.uint8)
    return Image.fromarray(gray).convert('RGB')
  if mode in ('RGBA', 'LA', 'PA', 'RGBa', 'La') or 'transparency' in img.info:
    rgba = img.convert('RGBA')
    background = Image.new('RGBA', rgba.size, (255, 255, 255, 255))
    return Image.alpha_composite(background, rgba).convert('RGB')
  return img.convert('RGB')  # CMYK (Adobe-inverted handled by Pillow), L, P, 1, YCbCr, LAB, HSV.


def upright_rgb(img: Any, plan: Normalisation) -> Any:
  """The normalised picture of an opened image: loaded (a JPEG at the smallest DCT scale still RESIZE_REDUCING_GAP
  x a resize's target), converted to RGB, shrunk, then turned upright. Resizing happens in stored orientation and
  the (exact) transpose follows: the same pixels as turning first, on fewer pixels. ``img`` is loaded afterwards
  (its ``mode`` is the decoded one)."""
  from PIL import Image
  box = None
  if plan.size:  # JPEG only (None elsewhere): decode at the smallest DCT scale still RESIZE_REDUCING_GAP x the target.
    box = img.draft(None, (int(plan.size[0] * RESIZE_REDUCING_GAP), int(plan.size[1] * RESIZE_REDUCING_GAP)))
    box = box[1] if box else None
  img.load()
  rgb = to_rgb(img)
  if plan.size:
    rgb = rgb.resize(plan.size, Image.Resampling.LANCZOS, box=box, reducing_gap=RESIZE_REDUCING_GAP)
  if plan.turns:
    rgb = rgb.transpose(Image.Transpose[ORIENTATION_TRANSPOSE[plan.orientation]])
  return rgb


def encode_jpeg(rgb: Any) -> bytes:
  """The record's JPEG of a normalised picture (quality JPEG_QUALITY, Pillow's encoder)."""
  out = io.BytesIO()
  rgb.save(out, 'JPEG', quality=JPEG_QUALITY)
  return out.getvalue()


def record_bytes(data: bytes, apply_exif_orientation: bool = True, max_image_side: int = 0) -> bytes:
  """The image bytes the converter writes into a record for a file of these bytes: the bytes themselves for an
  upright RGB JPEG within max_image_side, else the normalised picture as a JPEG. Raises on data Pillow cannot read
  (PIL.UnidentifiedImageError) or decode."""
  with open_image(data) as img:
    plan = normalisation(img, apply_exif_orientation, max_image_side)
    if plan.keeps_bytes:
      return data
    return encode_jpeg(upright_rgb(img, plan))
