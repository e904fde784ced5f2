"""tools/convert/clean_images.py: EXIF orientation, resizing to a longer side (aspect kept, never upscaled, by the
upright height of rotated photos), the normalisation it shares with predict (official_input/image_normalisation.py;
its own tests are in tests/official_input/test_image_normalisation.py), and a module the worker processes import
without TensorFlow."""
import io
import subprocess
import sys

import numpy as np
from PIL import Image

from official_input import image_normalisation
from tests.helpers import procs
from tests.tools.convert import drawn_images as drawn
from tools.convert import clean_images


def test_exif_orientation_is_applied_or_bytes_kept():
  exif = Image.Exif()
  exif[0x0112] = 6  # Rotate 90 degrees clockwise to display.
  buf = io.BytesIO()
  drawn.noise(10, 20, 0).save(buf, 'JPEG', exif=exif)
  rotated = clean_images.clean_image_bytes(buf.getvalue(), '.jpg')
  assert (rotated.height, rotated.width) == (20, 10) and 'EXIF orientation 6' in rotated.converted
  kept = clean_images.clean_image_bytes(buf.getvalue(), '.jpg', apply_exif_orientation=False)
  assert kept.encoded == buf.getvalue() and (kept.height, kept.width) == (10, 20)


def _jpeg(img: Image.Image, **kw) -> bytes:
  buf = io.BytesIO()
  img.save(buf, 'JPEG', quality=92, **kw)
  return buf.getvalue()


def _halves(width: int, height: int) -> Image.Image:
  """Left half red, right half blue: shows which way an image was turned."""
  arr = np.zeros((height, width, 3), np.uint8)
  arr[:, :width // 2] = (220, 20, 20)
  arr[:, width // 2:] = (20, 20, 220)
  return Image.fromarray(arr)


def _decoded(data: bytes) -> np.ndarray:
  with Image.open(io.BytesIO(data)) as img:
    assert img.format == 'JPEG' and img.mode == 'RGB'
    return np.asarray(img).astype(int)


def test_max_image_side_shrinks_the_longer_side_and_keeps_the_aspect():
  result = clean_images.clean_image_bytes(_jpeg(_halves(600, 300)), '.jpg', max_image_side=256)
  assert (result.width, result.height) == (256, 128)
  image = _decoded(result.encoded)
  assert image.shape == (128, 256, 3)
  assert np.abs(image[:, :100].mean(axis=(0, 1)) - (220, 20, 20)).max() < 15  # Content scaled, not cropped.
  assert np.abs(image[:, -100:].mean(axis=(0, 1)) - (20, 20, 220)).max() < 15
  assert 'resized to max side 256' in result.converted


def test_images_within_max_image_side_keep_their_bytes_and_are_never_upscaled():
  data = _jpeg(_halves(100, 80))
  result = clean_images.clean_image_bytes(data, '.jpg', max_image_side=256)
  assert result.encoded == data and result.converted is None and (result.width, result.height) == (100, 80)
  exact = _jpeg(_halves(256, 200))
  assert clean_images.clean_image_bytes(exact, '.jpg', max_image_side=256).encoded == exact
  assert clean_images.clean_image_bytes(_jpeg(_halves(600, 300)), '.jpg', max_image_side=0).width == 600  # 0 = off.


def test_portrait_images_resize_by_their_height_including_exif_rotated_ones():
  portrait = clean_images.clean_image_bytes(_jpeg(_halves(300, 600)), '.jpg', max_image_side=256)
  assert (portrait.width, portrait.height) == (128, 256)
  exif = Image.Exif()
  exif[0x0112] = 6  # Stored landscape 600x300, displayed turned 90 degrees clockwise: portrait 300x600.
  rotated = clean_images.clean_image_bytes(_jpeg(_halves(600, 300), exif=exif), '.jpg', max_image_side=256)
  assert (rotated.width, rotated.height) == (128, 256)
  image = _decoded(rotated.encoded)
  assert image.shape == (256, 128, 3)
  # Turning clockwise brings the stored left (red) half to the top.
  assert np.abs(image[:100].mean(axis=(0, 1)) - (220, 20, 20)).max() < 15
  assert np.abs(image[-100:].mean(axis=(0, 1)) - (20, 20, 220)).max() < 15
  assert 'EXIF orientation 6' in rotated.converted and 'resized' in rotated.converted


def test_large_png_is_resized_too():
  buf = io.BytesIO()
  _halves(90, 300).save(buf, 'PNG')
  result = clean_images.clean_image_bytes(buf.getvalue(), '.png', max_image_side=60)
  assert (result.width, result.height) == (18, 60)
  assert _decoded(result.encoded).shape == (60, 18, 3)


def test_the_converter_normalises_with_the_module_predict_calls(monkeypatch):
  """One home for the normalisation: the converter's conversions and JPEG go through image_normalisation (which
  predict on raw files calls too), not through a copy of its own."""
  buf = io.BytesIO()
  _halves(90, 60).convert('RGBA').save(buf, 'PNG')
  before = clean_images.clean_image_bytes(buf.getvalue(), '.png')
  calls = []
  to_rgb = image_normalisation.to_rgb
  monkeypatch.setattr(image_normalisation, 'to_rgb', lambda img: calls.append(img.mode) or to_rgb(img))
  monkeypatch.setattr(image_normalisation, 'JPEG_QUALITY', 30)
  after = clean_images.clean_image_bytes(buf.getvalue(), '.png')
  assert calls == ['RGBA'] and len(after.encoded) < len(before.encoded)
  assert after.encoded == image_normalisation.record_bytes(buf.getvalue())


def test_the_module_the_workers_import_loads_neither_tensorflow_nor_pillow():
  """The cleaning workers ('spawn' processes) import this module and its package: TensorFlow would cost each ~1 GB
  and seconds to start; Pillow is imported when the first image is cleaned."""
  code = ('import sys, tools.convert.clean_images; assert "tensorflow" not in sys.modules, "tensorflow"; '
          'assert "PIL" not in sys.modules, "PIL"')
  subprocess.run([sys.executable, '-c', code], cwd=procs.ROOT, check=True, timeout=60)
