"""official_input/image_normalisation.py: the one normalisation of image files (EXIF orientation, alpha on white,
modes to RGB, 16-bit rescaled, first frames, resizing), the bytes a record holds, and that the converter writes
exactly those bytes. No TensorFlow: the converter's workers import this module."""
import io
import subprocess
import sys

import numpy as np
from PIL import Image
import pytest

from official_input import image_normalisation as norm
from tests.helpers import procs
from tests.official_input import image_kinds
from tools.convert import clean_images

KINDS = image_kinds.kinds()


def _pixels(data: bytes) -> np.ndarray:
  with Image.open(io.BytesIO(data)) as img:
    return np.asarray(img.convert('RGB')).astype(int)


def _record_pixels(name: str, **options) -> np.ndarray:
  data = norm.record_bytes(KINDS[name], **options)
  with Image.open(io.BytesIO(data)) as img:
    assert img.format == 'JPEG' and img.mode == 'RGB', name
  return _pixels(data)


@pytest.mark.parametrize('name', sorted(KINDS))
@pytest.mark.parametrize('apply_exif_orientation, max_image_side', [(True, 0), (False, 0), (True, 40)])
def test_the_converter_writes_the_bytes_record_bytes_gives(name, apply_exif_orientation, max_image_side):
  """One normalisation: what predict feeds the decoder for a file is what the converter stored for it."""
  cleaned = clean_images.clean_image_bytes(KINDS[name], name[name.rfind('.'):], apply_exif_orientation,
                                           max_image_side)
  assert cleaned.error is None
  assert cleaned.encoded == norm.record_bytes(KINDS[name], apply_exif_orientation, max_image_side)
  with norm.open_image(KINDS[name]) as img:  # the header-only rule and the full one agree
    keeps = norm.needs_normalising(img, apply_exif_orientation, max_image_side) is None
    assert keeps == norm.normalisation(img, apply_exif_orientation, max_image_side).keeps_bytes
  assert keeps == (cleaned.converted is None)


def test_only_an_upright_rgb_jpeg_within_the_size_keeps_its_bytes():
  kept = [name for name in sorted(KINDS) if norm.record_bytes(KINDS[name]) == KINDS[name]]
  assert kept == ['rgb.jpg']
  assert norm.record_bytes(KINDS['rgb.jpg'], max_image_side=40) != KINDS['rgb.jpg']
  assert norm.record_bytes(KINDS['phone_exif6.jpg'], apply_exif_orientation=False) == KINDS['phone_exif6.jpg']


@pytest.mark.parametrize('name', ['phone_exif6.jpg', 'phone_exif3.jpg', 'phone_exif8.jpeg'])
def test_phone_photos_are_turned_upright(name):
  upright = image_kinds.picture().astype(int)
  pixels = _record_pixels(name)
  assert pixels.shape == upright.shape
  assert np.abs(pixels - upright).mean() < 4  # two JPEG generations apart, nothing more
  sideways = _pixels(KINDS[name])  # what a decoder that ignores the tag shows
  assert sideways.shape != upright.shape or np.abs(sideways - upright).mean() > 40


@pytest.mark.parametrize('name', ['alpha.png', 'grey_alpha.png', 'web.webp'])
def test_transparency_is_composited_on_white(name):
  pixels = _record_pixels(name)
  transparent = image_kinds.alpha() == 0
  assert pixels[transparent].mean() > 248, name  # white (a little JPEG ringing at the edges)
  opaque = image_kinds.alpha() == 255
  assert pixels[opaque].mean() < 200  # the picture itself stays


def test_a_transparent_palette_colour_and_a_gifs_first_frame_are_white_and_first():
  quantized = Image.fromarray(image_kinds.picture()).quantize(16)
  index = np.asarray(quantized)
  for name in ('palette_transparent.png', 'animated.gif'):
    pixels = _record_pixels(name)
    assert pixels[index == 0].mean() > 240, name
    assert np.abs(pixels[index != 0] - np.asarray(quantized.convert('RGB')).astype(int)[index != 0]).mean() < 8
  assert np.abs(_record_pixels('palette.png') - np.asarray(quantized.convert('RGB'))).mean() < 8  # no transparency


def test_cmyk_grey_and_16_bit_become_the_rgb_they_show():
  picture = image_kinds.picture().astype(int)
  assert np.abs(_record_pixels('cmyk.jpg') - picture).mean() < 6  # not colour-inverted
  grey = np.asarray(Image.fromarray(image_kinds.picture()).convert('L')).astype(int)
  for name in ('grey.png', 'grey.jpg'):
    pixels = _record_pixels(name)
    assert np.abs(pixels - grey[..., None]).mean() < 3, name
  deep = _record_pixels('deep16.png')  # 16-bit values v * 257: rescaled to v, not clipped to 255
  assert np.abs(deep - picture[..., :1]).mean() < 2


def test_max_image_side_shrinks_an_upright_photo_to_its_longer_side():
  pixels = _record_pixels('phone_exif6.jpg', max_image_side=32)
  assert pixels.shape == (24, 32, 3)


def test_the_header_check_reads_only_the_header():
  """Predict checks every file before its dataset is built: a large PNG is not decoded for it."""
  buf = io.BytesIO()
  Image.fromarray(np.random.default_rng(0).integers(0, 256, (600, 600, 3), np.uint8)).save(buf, 'PNG')

  class Counting(io.BytesIO):
    read_bytes = 0

    def read(self, size=-1):
      out = super().read(size)
      Counting.read_bytes += len(out)
      return out

  source = Counting(buf.getvalue())
  with norm.open_image(source) as img:
    assert norm.needs_normalising(img) == 'PNG/RGB'
  assert Counting.read_bytes < 70_000 < len(buf.getvalue())


def test_image_extensions_any_case():
  assert [norm.has_image_extension(p) for p in ('a/IMG_1.JPG', 'b.Tiff', 'c.webp', 'd.heic', 'e', 'f.jpg.txt',
                                                '.jpg')] == [True, True, True, False, False, False, False]
  assert set(norm.IMAGE_EXTENSIONS) >= {'.jpg', '.jpeg', '.png', '.gif', '.bmp', '.webp', '.tif', '.tiff'}


def test_the_module_loads_neither_tensorflow_nor_pillow():
  """The converter's workers import it (through clean_images): TensorFlow would cost each ~1 GB; Pillow loads with
  the first image."""
  code = ('import sys, official_input.image_normalisation; assert "tensorflow" not in sys.modules, "tensorflow"; '
          'assert "PIL" not in sys.modules, "PIL"')
  subprocess.run([sys.executable, '-c', code], cwd=procs.ROOT, check=True, timeout=60)
