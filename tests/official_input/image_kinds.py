"""One image file of each kind users bring (phone photos with EXIF orientations, web PNGs with transparency,
palettes, greys, 16-bit scans, CMYK print JPEGs, TIFF, WebP, BMP, GIF), all of one drawn picture, for the tests
that feed them to the converter and to predict."""
import io
import os
from typing import Dict

import numpy as np
from PIL import Image

HEIGHT, WIDTH = 48, 64  # landscape: a turn shows in the shape as well as in the content


def picture(height: int = HEIGHT, width: int = WIDTH) -> np.ndarray:
  """uint8 [H, W, 3]: colour ramps and a bright block in the top-left corner, so any turn or flip shows."""
  y, x = np.mgrid[0:height, 0:width]
  rgb = np.stack([x * 255 // max(1, width - 1), y * 255 // max(1, height - 1), (x + y) * 3 % 256], axis=-1)
  rgb[:height // 3, :width // 4] = (250, 240, 30)
  return rgb.astype(np.uint8)


def alpha(height: int = HEIGHT, width: int = WIDTH) -> np.ndarray:
  """uint8 [H, W]: an opaque disc on a transparent background, half-transparent at its rim."""
  y, x = np.mgrid[0:height, 0:width]
  r = np.hypot(y - height / 2, x - width / 2)
  return np.where(r < height / 3, 255, np.where(r < height / 2.5, 128, 0)).astype(np.uint8)


def exif_jpeg(orientation: int, upright: np.ndarray) -> bytes:
  """A JPEG as a phone stores it: the pixels as the sensor read them, and the EXIF orientation that turns them
  into ``upright`` on display."""
  undo = {3: Image.Transpose.ROTATE_180, 6: Image.Transpose.ROTATE_90, 8: Image.Transpose.ROTATE_270,
          5: Image.Transpose.TRANSPOSE}[orientation]
  exif = Image.Exif()
  exif[0x0112] = orientation
  buf = io.BytesIO()
  Image.fromarray(upright).transpose(undo).save(buf, 'JPEG', quality=90, exif=exif)
  return buf.getvalue()


def _save(img: Image.Image, fmt: str, **kw) -> bytes:
  buf = io.BytesIO()
  img.save(buf, fmt, **kw)
  return buf.getvalue()


def kinds() -> Dict[str, bytes]:
  """File name -> bytes, one file of each kind."""
  rgb = Image.fromarray(picture())
  rgba = Image.fromarray(np.dstack([picture(), alpha()]), 'RGBA')
  grey = rgb.convert('L')
  palette = rgb.quantize(16)
  transparent_palette = rgb.quantize(16)
  transparent_palette.info['transparency'] = 0
  deep = Image.fromarray(picture()[..., 0].astype(np.uint16) * 257)  # 16-bit grey: 0..65535
  second = Image.fromarray(255 - picture()).quantize(16)
  return {
      'rgb.jpg': _save(rgb, 'JPEG', quality=90),
      'phone_exif6.jpg': exif_jpeg(6, picture()),
      'phone_exif3.jpg': exif_jpeg(3, picture()),
      'phone_exif8.jpeg': exif_jpeg(8, picture()),
      'grey.jpg': _save(grey, 'JPEG', quality=90),
      'cmyk.jpg': _save(rgb.convert('CMYK'), 'JPEG', quality=90),
      'alpha.png': _save(rgba, 'PNG'),
      'palette.png': _save(palette, 'PNG'),
      'palette_transparent.png': _save(transparent_palette, 'PNG', transparency=0),
      'grey.png': _save(grey, 'PNG'),
      'grey_alpha.png': _save(Image.merge('LA', [grey, Image.fromarray(alpha())]), 'PNG'),
      'deep16.png': _save(deep, 'PNG'),
      'scan.tif': _save(rgb, 'TIFF'),
      'web.webp': _save(rgba, 'WEBP', lossless=True),
      'icon.bmp': _save(rgb, 'BMP'),
      'animated.gif': _save(transparent_palette, 'GIF', save_all=True, append_images=[second], duration=100,
                            transparency=0),
  }


def write_kinds(folder: str) -> Dict[str, str]:
  """Writes kinds() into ``folder``; file name -> path."""
  os.makedirs(folder, exist_ok=True)
  paths = {}
  for name, data in kinds().items():
    paths[name] = os.path.join(folder, name)
    with open(paths[name], 'wb') as f:
      f.write(data)
  return paths
