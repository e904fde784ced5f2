"""Image cleaning for the converter: any image Pillow reads becomes an upright RGB JPEG (at most a given side),
in worker processes. Pillow and numpy only: the workers must not import TensorFlow (each would cost ~1 GB and
seconds to start), and Pillow itself is imported when the first image is cleaned.
"""
import collections
import contextlib
import hashlib
import io
import itertools
import multiprocessing
import os
from typing import Any, Deque, Iterator, List, NamedTuple, Optional, Sequence, Tuple

# Re-encoding quality (conversions and resizes): at 95 the re-encoding error is far below what the training
# crop/resize changes, while a 512 px photo stays ~100-200 KB; decode cost depends on pixels, not on quality.
JPEG_QUALITY = 95
_EXT_FORMATS = {'.jpg': 'JPEG', '.jpeg': 'JPEG', '.jpe': 'JPEG', '.jfif': 'JPEG', '.png': 'PNG', '.gif': 'GIF',
                '.bmp': 'BMP', '.webp': 'WEBP', '.tif': 'TIFF', '.tiff': 'TIFF'}
_EXIF_ORIENTATION = 0x0112
_FILES_PER_TASK = 16  # Paths per worker task: amortises inter-process overhead, keeps results ordered.
# EXIF orientation -> the transpose that makes the image upright (the table ImageOps.exif_transpose uses). Applied
# by hand so that it can follow a resize without depending on EXIF metadata surviving the resize.
_ORIENTATION_TRANSPOSE = {2: 'FLIP_LEFT_RIGHT', 3: 'ROTATE_180', 4: 'FLIP_TOP_BOTTOM', 5: 'TRANSPOSE',
                          6: 'ROTATE_270', 7: 'TRANSVERSE', 8: 'ROTATE_90'}
# Resizing keeps at least this factor above the target size before the final LANCZOS pass: JPEGs are decoded at a
# DCT-scaled 1/2, 1/4 or 1/8 size (Image.draft, which skips most of the decode work) and other formats are
# box-reduced by an integer factor (Image.reduce). Pillow documents a gap >= 3 as indistinguishable from a full
# LANCZOS resample in most cases; the cost is a fraction of the decode either way.
RESIZE_REDUCING_GAP = 3.0


class CleanedImage(NamedTuple):
  """What a worker returns for one file: JPEG bytes and size, or why the file was skipped; and the file's
  fingerprints (SHA-256 of its bytes, a difference hash of its picture) that find copies across splits."""
  encoded: Optional[bytes]
  height: int = 0
  width: int = 0
  converted: Optional[str] = None  # Why it was re-encoded (e.g. 'PNG/RGBA'); None when the bytes are original.
  error: Optional[str] = None
  sha256: str = ''
  dhash: int = -1  # difference_hash, 256 bits


HASH_SIDE = 16  # difference hash: HASH_SIDE x HASH_SIDE bits


def difference_hash(img: Any) -> int:
  """A 256-bit difference hash: a 17x16 greyscale thumbnail, one bit per horizontal neighbour pair (is the left one
  brighter?). Re-encodes, resizes and recompression move a few bits; different pictures differ in about half."""
  from PIL import Image
  thumb = img.convert('L').resize((HASH_SIDE + 1, HASH_SIDE), Image.Resampling.BILINEAR, reducing_gap=2.0)
  pixels = list(thumb.getdata())
  bits = 0
  for row in range(HASH_SIDE):
    for col in range(HASH_SIDE):
      index = row * (HASH_SIDE + 1) + col
      bits = (bits << 1) | int(pixels[index] > pixels[index + 1])
  return bits


def _to_rgb(img: Any) -> Any:
  """Converts any Pillow mode to 8-bit RGB; 16-bit and float data are rescaled, not clipped."""
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


def clean_image_bytes(data: bytes, extension: str = '', apply_exif_orientation: bool = True,
                      max_image_side: int = 0) -> CleanedImage:
  """Returns the image as RGB JPEG bytes: the original bytes when they already are one, else re-encoded.

  The format is detected from the content; ``extension`` (e.g. '.jpg') only labels misnamed files in the reason.
  With max_image_side > 0, images whose longer side exceeds it are resized (LANCZOS) to that longer side and
  re-encoded. Raises on unreadable data (the caller turns that into a skip).
  """
  from PIL import Image
  img = Image.open(io.BytesIO(data))
  fmt = img.format or 'unknown'
  width, height = img.size
  orientation = 1
  if apply_exif_orientation:
    try:
      orientation = int(img.getexif().get(_EXIF_ORIENTATION, 1) or 1)
    except Exception:  # pylint: disable=broad-except  # A broken EXIF block is not a broken image.
      orientation = 1
  rotate = orientation in range(2, 9)
  # The longer side is the same upright or not, so the stored size decides; resizing happens in stored
  # orientation and the (exact) transpose follows, which gives the same pixels as rotating first, on fewer pixels.
  size = resized_size(width, height, max_image_side)
  if fmt == 'JPEG' and img.mode == 'RGB' and not rotate and size is None:
    # DCT-scaled decode (still reads every byte), large enough for a difference hash like the full image's.
    img.draft('RGB', (min(width, max(width // 8, 4 * HASH_SIDE)), min(height, max(height // 8, 4 * HASH_SIDE))))
    img.load()
    return CleanedImage(data, height, width, dhash=difference_hash(img))
  box = None
  if size:  # JPEG only (None elsewhere): decode at the smallest DCT scale still RESIZE_REDUCING_GAP x the target.
    box = img.draft(None, (int(size[0] * RESIZE_REDUCING_GAP), int(size[1] * RESIZE_REDUCING_GAP)))
    box = box[1] if box else None
  img.load()
  reason = f'{fmt}/{img.mode}'
  expected = _EXT_FORMATS.get(extension.lower())
  if expected and expected != ('JPEG' if fmt == 'MPO' else fmt):  # MPO: multi-picture JPEG from cameras.
    reason += f' named {extension}'
  rgb = _to_rgb(img)
  if size:
    rgb = rgb.resize(size, Image.Resampling.LANCZOS, box=box, reducing_gap=RESIZE_REDUCING_GAP)
    reason += f' resized to max side {max_image_side}'
  if rotate:
    rgb = rgb.transpose(Image.Transpose[_ORIENTATION_TRANSPOSE[orientation]])
    reason += f' EXIF orientation {orientation}'
  out = io.BytesIO()
  rgb.save(out, 'JPEG', quality=JPEG_QUALITY)
  return CleanedImage(out.getvalue(), rgb.height, rgb.width, converted=reason, dhash=difference_hash(rgb))


def clean_image_file(path: str, apply_exif_orientation: bool = True, max_image_side: int = 0) -> CleanedImage:
  """clean_image_bytes for a file; any failure becomes a CleanedImage with ``error`` set, never an exception."""
  try:
    with open(path, 'rb') as f:
      data = f.read()
    if not data:
      return CleanedImage(None, error='empty file')
    cleaned = clean_image_bytes(data, os.path.splitext(path)[1], apply_exif_orientation, max_image_side)
    return cleaned._replace(sha256=hashlib.sha256(data).hexdigest())
  except Exception as e:  # pylint: disable=broad-except  # One bad file must never stop the run.
    name = type(e).__name__
    if name == 'UnidentifiedImageError':
      return CleanedImage(None, error='not an image Pillow can read')
    return CleanedImage(None, error=f'{name}: {e}')


def _clean_chunk(paths: Sequence[str], apply_exif_orientation: bool, max_image_side: int) -> List[CleanedImage]:
  return [clean_image_file(p, apply_exif_orientation, max_image_side) for p in paths]


@contextlib.contextmanager
def cleaned_images(paths: Sequence[str], apply_exif_orientation: bool, num_workers: int,
                    max_image_side: int = 0) -> Iterator[Iterator[CleanedImage]]:
  """Yields an iterator of cleaned images in input order, from a 'spawn' pool with bounded tasks in flight.

  The pool starts on entry (so workers boot while the parent imports TensorFlow) and is terminated on exit. The
  bound keeps memory flat when workers outrun the writer; 'spawn' keeps TensorFlow (imported by the parent) out of
  the workers and behaves the same on Linux, macOS and Windows.
  """
  chunks = [paths[i:i + _FILES_PER_TASK] for i in range(0, len(paths), _FILES_PER_TASK)]
  num_workers = min(num_workers, len(chunks))
  if num_workers <= 1:
    yield (image for chunk in chunks for image in _clean_chunk(chunk, apply_exif_orientation, max_image_side))
    return
  with multiprocessing.get_context('spawn').Pool(num_workers) as pool:
    todo = iter(chunks)
    pending: Deque[Any] = collections.deque(
        pool.apply_async(_clean_chunk, (chunk, apply_exif_orientation, max_image_side))
        for chunk in itertools.islice(todo, 4 * num_workers))

    def ordered() -> Iterator[CleanedImage]:
      while pending:
        results = pending.popleft().get()
        chunk = next(todo, None)
        if chunk is not None:
          pending.append(pool.apply_async(_clean_chunk, (chunk, apply_exif_orientation, max_image_side)))
        yield from results

    yield ordered()
