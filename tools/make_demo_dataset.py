r"""Generates a small, learnable image-folder dataset of drawn shapes, for demos and end-to-end tests.

Why: the real datasets (flowers, ImageNet) cannot be downloaded here, yet a demo should show a ResNet actually
learning. Each class is a shape (circles, squares, triangles, stripes, ...) with random position, size and colours
on a noisy background; a small ResNet at 64 px separates 4 classes within a few hundred steps.

Layout (a) of tools/imagenet_to_gcs.py: ``<root>/<class>/<class>_0000.jpg``, with a fraction saved as PNG so the
converter's cleaning path is exercised too. Usage (from the repository root):

  python -m tools.make_demo_dataset --output_dir=demo_images [--records_dir=demo_records]
"""
import os
import shutil
import sys
from typing import Any, Callable, Dict, Sequence, Tuple, Union

from absl import app
from absl import flags
from absl import logging

if __package__ in (None, ''):  # Run as a script: make the repository's packages importable.
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CLASSES = ('circles', 'squares', 'triangles', 'stripes', 'crosses', 'rings', 'checkers', 'dots')
MIN_COLOUR_DISTANCE = 160  # Euclidean RGB distance between shape and background: far above the noise.


def _grid(height: int, width: int) -> Tuple[Any, Any]:
  import numpy as np
  return np.mgrid[0:height, 0:width].astype(np.float32)


def _centre(rng: Any, height: int, width: int, radius: float) -> Tuple[float, float]:
  """A centre that keeps a shape of this radius fully inside the image (with a 2 px margin)."""
  return (rng.uniform(radius + 2, height - radius - 2), rng.uniform(radius + 2, width - radius - 2))


def _circles(rng: Any, h: int, w: int) -> Any:
  r = rng.uniform(0.15, 0.35) * min(h, w)
  cy, cx = _centre(rng, h, w, r)
  y, x = _grid(h, w)
  return (y - cy) ** 2 + (x - cx) ** 2 <= r ** 2


def _squares(rng: Any, h: int, w: int) -> Any:
  half = rng.uniform(0.15, 0.33) * min(h, w)
  cy, cx = _centre(rng, h, w, half)
  y, x = _grid(h, w)
  return (abs(y - cy) <= half) & (abs(x - cx) <= half)


def _triangles(rng: Any, h: int, w: int) -> Any:
  import numpy as np
  r = rng.uniform(0.2, 0.4) * min(h, w)
  cy, cx = _centre(rng, h, w, r)
  angles = rng.uniform(0, 2 * np.pi) + np.array([0, 2, 4]) * np.pi / 3
  vy, vx = cy + r * np.sin(angles), cx + r * np.cos(angles)
  y, x = _grid(h, w)
  # Inside when on the same side of all three edges (counter-clockwise vertices: all cross products >= 0).
  inside = np.ones((h, w), bool)
  for i in range(3):
    j = (i + 1) % 3
    inside &= (vx[j] - vx[i]) * (y - vy[i]) - (vy[j] - vy[i]) * (x - vx[i]) >= 0
  return inside


def _stripes(rng: Any, h: int, w: int) -> Any:
  import numpy as np
  period = rng.uniform(0.12, 0.3) * min(h, w)
  angle = rng.uniform(0, np.pi)
  y, x = _grid(h, w)
  proj = x * np.cos(angle) + y * np.sin(angle) + rng.uniform(0, period)
  return (proj % period) < period / 2


def _crosses(rng: Any, h: int, w: int) -> Any:
  arm = rng.uniform(0.18, 0.35) * min(h, w)
  thick = arm * rng.uniform(0.25, 0.4)
  cy, cx = _centre(rng, h, w, arm)
  y, x = _grid(h, w)
  return ((abs(y - cy) <= thick) & (abs(x - cx) <= arm)) | ((abs(x - cx) <= thick) & (abs(y - cy) <= arm))


def _rings(rng: Any, h: int, w: int) -> Any:
  r = rng.uniform(0.2, 0.38) * min(h, w)
  cy, cx = _centre(rng, h, w, r)
  y, x = _grid(h, w)
  d2 = (y - cy) ** 2 + (x - cx) ** 2
  return (d2 <= r ** 2) & (d2 >= (r * rng.uniform(0.45, 0.65)) ** 2)


def _checkers(rng: Any, h: int, w: int) -> Any:
  cell = rng.uniform(0.08, 0.18) * min(h, w)
  y, x = _grid(h, w)
  return ((y + rng.uniform(0, cell)) // cell + (x + rng.uniform(0, cell)) // cell) % 2 == 0


def _dots(rng: Any, h: int, w: int) -> Any:
  period = rng.uniform(0.15, 0.25) * min(h, w)
  y, x = _grid(h, w)
  dy, dx = (y + rng.uniform(0, period)) % period - period / 2, (x + rng.uniform(0, period)) % period - period / 2
  return dy ** 2 + dx ** 2 <= (period * 0.25) ** 2


_DRAW: Dict[str, Callable[[Any, int, int], Any]] = {
    'circles': _circles, 'squares': _squares, 'triangles': _triangles, 'stripes': _stripes,
    'crosses': _crosses, 'rings': _rings, 'checkers': _checkers, 'dots': _dots,
}


def _colours(rng: Any) -> Tuple[Any, Any]:
  """Background and shape colours, far enough apart that noise never blurs the shape."""
  import numpy as np
  while True:
    bg, fg = rng.uniform(0, 255, 3), rng.uniform(0, 255, 3)
    if np.linalg.norm(bg - fg) >= MIN_COLOUR_DISTANCE:
      return bg, fg


def draw_image(class_name: str, height: int, width: int, rng: Any) -> Any:
  """One HxWx3 uint8 image of the class: the shape mask coloured over a background, plus Gaussian noise."""
  import numpy as np
  mask = _DRAW[class_name](rng, height, width)
  bg, fg = _colours(rng)
  image = np.where(mask[..., None], fg, bg)
  image = image + rng.normal(0, rng.uniform(3, 10), image.shape)
  return np.clip(image + 0.5, 0, 255).astype(np.uint8)


def _prepare_root(root: str, class_names: Sequence[str], overwrite: bool) -> None:
  if os.path.isdir(root) and os.listdir(root):
    if not overwrite:
      raise FileExistsError(f'{root} is not empty: pass overwrite=True (--overwrite) or choose an empty dir.')
    for name in class_names:  # Only what this generator writes; anything else in root is left alone.
      shutil.rmtree(os.path.join(root, name), ignore_errors=True)
  os.makedirs(root, exist_ok=True)


def make_demo_dataset(root: str,
                      num_classes: int = 4,
                      images_per_class: int = 250,
                      image_size: Tuple[int, int] = (96, 160),
                      seed: int = 0,
                      png_fraction: float = 0.1,
                      overwrite: bool = False) -> Dict[str, Any]:
  """Writes num_classes x images_per_class images to root/<class>/; returns {'classes', 'counts', 'num_png'}.

  Each image's height and width are drawn independently from image_size (inclusive). Deterministic for a seed.
  """
  import numpy as np
  from PIL import Image
  if not 2 <= num_classes <= len(CLASSES):
    raise ValueError(f'num_classes must be in [2, {len(CLASSES)}], got {num_classes}.')
  lo, hi = image_size
  if not 16 <= lo <= hi:
    raise ValueError(f'image_size must be (min, max) with 16 <= min <= max, got {image_size}.')
  class_names = CLASSES[:num_classes]
  _prepare_root(root, class_names, overwrite)
  rng = np.random.default_rng(seed)
  num_png = 0
  for name in class_names:
    os.makedirs(os.path.join(root, name), exist_ok=True)
    for i in range(images_per_class):
      h, w = (int(v) for v in rng.integers(lo, hi + 1, size=2))
      image = Image.fromarray(draw_image(name, h, w, rng))
      if rng.uniform() < png_fraction:
        image.save(os.path.join(root, name, f'{name}_{i:04d}.png'), 'PNG')
        num_png += 1
      else:
        image.save(os.path.join(root, name, f'{name}_{i:04d}.jpg'), 'JPEG', quality=int(rng.integers(80, 96)))
  logging.info('Wrote %d images of %d classes (%d PNG) to %s.', num_classes * images_per_class, num_classes,
               num_png, root)
  return {'classes': list(class_names), 'counts': {n: images_per_class for n in class_names}, 'num_png': num_png}


def make_multi_label_dataset(root: str, num_classes: int = 4, num_images: int = 1000, image_size: int = 128,
                             positive_rate: Union[float, Sequence[float]] = 0.3, seed: int = 0,
                             overwrite: bool = False) -> Dict[str, Any]:
  """Multi-label data as it arrives in practice: ``root/images/img_00000.jpg`` and ``root/labels.csv`` in
  Kaggle Planet's shape (``image_name,tags``: names without extension, space-separated tags; an image of none of
  the classes has an empty cell). Each image is a 2 x 2 grid of tiles; each class is in an image with probability
  ``positive_rate`` (one for all, or one per class: rare classes; independently, at most 4 classes), drawn in a
  random tile; the other tiles are background.
  Returns {'classes', 'positives' (per class), 'negatives' (images without a class), 'csv'}."""
  import csv
  import numpy as np
  from PIL import Image
  if not 2 <= num_classes <= len(CLASSES):
    raise ValueError(f'num_classes must be in [2, {len(CLASSES)}], got {num_classes}.')
  images_dir, csv_path = os.path.join(root, 'images'), os.path.join(root, 'labels.csv')
  if os.path.exists(csv_path) or (os.path.isdir(images_dir) and os.listdir(images_dir)):
    if not overwrite:
      raise FileExistsError(f'{root} already holds images/ or labels.csv: pass overwrite=True (--overwrite) or '
                            'choose another directory.')
    shutil.rmtree(images_dir, ignore_errors=True)
  os.makedirs(images_dir, exist_ok=True)
  if image_size < 48:
    raise ValueError(f'image_size must be at least 48 (2 x 2 tiles of 24 px, room for every shape), got {image_size}.')
  class_names = CLASSES[:num_classes]
  rates = [float(positive_rate)] * num_classes if np.isscalar(positive_rate) else [float(r) for r in positive_rate]
  if len(rates) != num_classes or not all(0 <= r <= 1 for r in rates):
    raise ValueError(f'positive_rate must be one rate in [0, 1] or one per class ({num_classes}), got {positive_rate}.')
  rng = np.random.default_rng(seed)
  tile = image_size // 2
  positives = {name: 0 for name in class_names}
  negatives = 0
  rows = []
  for i in range(num_images):
    present = [name for name, rate in zip(class_names, rates) if rng.uniform() < rate][:4]
    tiles = [None] * 4
    for name, cell in zip(present, rng.permutation(4)):
      tiles[cell] = name
    image = np.zeros((2 * tile, 2 * tile, 3), np.uint8)
    for cell, name in enumerate(tiles):
      y, x = divmod(cell, 2)
      if name is None:
        bg, _ = _colours(rng)
        patch = np.clip(bg + rng.normal(0, rng.uniform(3, 10), (tile, tile, 3)) + 0.5, 0, 255).astype(np.uint8)
      else:
        patch = draw_image(name, tile, tile, rng)
      image[y * tile:(y + 1) * tile, x * tile:(x + 1) * tile] = patch
    Image.fromarray(image).save(os.path.join(images_dir, f'img_{i:05d}.jpg'), 'JPEG', quality=90)
    rows.append((f'img_{i:05d}', ' '.join(present)))
    for name in present:
      positives[name] += 1
    negatives += not present
  with open(csv_path, 'w', newline='', encoding='utf-8') as f:
    writer = csv.writer(f)
    writer.writerow(['image_name', 'tags'])
    writer.writerows(rows)
  logging.info('Wrote %d images of up to %d of %d classes each (%d without any) to %s, labels in %s.', num_images,
               min(4, num_classes), num_classes, negatives, images_dir, csv_path)
  return {'classes': list(class_names), 'positives': positives, 'negatives': negatives, 'csv': csv_path}


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """Defines the CLI flags (once); not at import, so importing this module never clashes with other tools."""
  if 'images_per_class' in flag_values:
    return
  fv = flag_values
  flags.DEFINE_string('output_dir', None, 'Where the class folders are written.', flag_values=fv)
  flags.DEFINE_integer('num_classes', 4, f'Classes, in this order: {", ".join(CLASSES)}.', lower_bound=2,
                       upper_bound=len(CLASSES), flag_values=fv)
  flags.DEFINE_integer('images_per_class', 250, 'Images per class.', lower_bound=1, flag_values=fv)
  flags.DEFINE_integer('min_size', 96, 'Smallest image height/width.', lower_bound=16, flag_values=fv)
  flags.DEFINE_integer('max_size', 160, 'Largest image height/width.', lower_bound=16, flag_values=fv)
  flags.DEFINE_float('png_fraction', 0.1, 'Fraction of images saved as PNG (the rest JPEG).', lower_bound=0,
                     upper_bound=1, flag_values=fv)
  flags.DEFINE_integer('seed', 0, 'Random seed.', flag_values=fv)
  flags.DEFINE_boolean('overwrite', False, 'Replace the class folders in a non-empty --output_dir.', flag_values=fv)
  flags.DEFINE_boolean('multi_label', False, 'Multi-label data instead of class folders: output_dir/images/ and '
                       "output_dir/labels.csv (Kaggle Planet's image_name,tags), several shapes per image.",
                       flag_values=fv)
  flags.DEFINE_integer('num_images', 1000, '--multi_label: images.', lower_bound=1, flag_values=fv)
  flags.DEFINE_list('positive_rates', ['0.3'], '--multi_label: the share of images each class is in (one for all, '
                    'or one per class, e.g. 0.3,0.3,0.3,0.05 for a rare fourth class).', flag_values=fv)
  flags.DEFINE_string('records_dir', None, 'If set, also convert to TFRecords there (tools/imagenet_to_gcs.py, '
                      'default 80/10/10 split).', flag_values=fv)


def main(argv: Sequence[str], flag_values: flags.FlagValues = flags.FLAGS) -> None:
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  fv = flag_values
  if not fv.output_dir:
    raise app.UsageError('--output_dir is required.')
  if fv.multi_label:
    try:
      rates = [float(r) for r in fv.positive_rates]
    except ValueError:
      raise app.UsageError(f'--positive_rates takes numbers in [0, 1], one or one per class: got '
                           f'{",".join(fv.positive_rates)}.') from None
    result = make_multi_label_dataset(fv.output_dir, fv.num_classes, fv.num_images, fv.max_size,
                                      rates[0] if len(rates) == 1 else rates, seed=fv.seed, overwrite=fv.overwrite)
    print(f'{fv.num_images} images ({result["negatives"]} without a label) in {fv.output_dir}/images; labels in '
          f'{result["csv"]}: ' + ', '.join(f'{k} {v}' for k, v in result['positives'].items()))
    if fv.records_dir:
      from tools import imagenet_to_gcs  # pylint: disable=g-import-not-at-top
      summary = imagenet_to_gcs.convert_dataset(os.path.join(fv.output_dir, 'images'), fv.records_dir,
                                                seed=fv.seed, overwrite=fv.overwrite, labels_csv_path=result['csv'])
      print(imagenet_to_gcs.format_summary(summary))
    return
  result = make_demo_dataset(fv.output_dir, fv.num_classes, fv.images_per_class, (fv.min_size, fv.max_size),
                             fv.seed, fv.png_fraction, fv.overwrite)
  print(f'{sum(result["counts"].values())} images ({result["num_png"]} PNG) of {", ".join(result["classes"])} '
        f'in {fv.output_dir}')
  if fv.records_dir:
    from tools import imagenet_to_gcs  # pylint: disable=g-import-not-at-top
    summary = imagenet_to_gcs.convert_dataset(fv.output_dir, fv.records_dir, seed=fv.seed, overwrite=fv.overwrite)
    print(imagenet_to_gcs.format_summary(summary))


def run_main() -> None:
  define_flags()
  app.run(main)


if __name__ == '__main__':
  run_main()
