"""Image cleaning for the converter: any image Pillow reads becomes an upright RGB JPEG (at most a given side),
in worker processes, with the fingerprints that find copies across splits. The normalisation itself (EXIF
orientation, alpha on white, modes, resizing, the JPEG) is official_input/image_normalisation.py's, which predict on
raw files calls too. Pillow and numpy only: the workers must not import TensorFlow (each would cost ~1 GB and
seconds to start), and Pillow itself is imported when the first image is cleaned.
"""
import collections
import contextlib
import hashlib
import itertools
import multiprocessing
import os
from typing import Any, Deque, Iterator, List, NamedTuple, Optional, Sequence

from official_input import image_normalisation

JPEG_QUALITY = image_normalisation.JPEG_QUALITY  # summary.json and the command's help name it
_FILES_PER_TASK = 16  # Paths per worker task: amortises inter-process overhead, keeps results ordered.
# Items that name a ``batch_key`` (parquet_source.TableRow: its file and row group) are cleaned grouped by it within
# windows of this many items and put back in order: train is shuffled, and a worker keeps one row group, so in
# plan order it would read a row group for almost every image. The parent holds at most a window's cleaned images.
_WINDOW = 2048
_ITEMS_PER_BATCH_TASK = 64  # a larger task would hold more images in flight (4 tasks per worker)


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


def clean_image_bytes(data: bytes, extension: str = '', apply_exif_orientation: bool = True,
                      max_image_side: int = 0) -> CleanedImage:
  """Returns the image as RGB JPEG bytes: the original bytes when they already are one, else re-encoded.

  The format is detected from the content; ``extension`` (e.g. '.jpg') only labels misnamed files in the reason.
  With max_image_side > 0, images whose longer side exceeds it are resized (LANCZOS) to that longer side and
  re-encoded. Raises on unreadable data (the caller turns that into a skip).
  """
  img = image_normalisation.open_image(data)
  plan = image_normalisation.normalisation(img, apply_exif_orientation, max_image_side)
  if plan.keeps_bytes:
    # DCT-scaled decode (still reads every byte), large enough for a difference hash like the full image's.
    width, height = img.size
    img.draft('RGB', (min(width, max(width // 8, 4 * HASH_SIDE)), min(height, max(height // 8, 4 * HASH_SIDE))))
    img.load()
    return CleanedImage(data, height, width, dhash=difference_hash(img))
  rgb = image_normalisation.upright_rgb(img, plan)
  reason = f'{plan.format}/{img.mode}'
  expected = image_normalisation.EXTENSION_FORMATS.get(extension.lower())
  if expected and expected != ('JPEG' if plan.format == 'MPO' else plan.format):  # MPO: multi-picture JPEG.
    reason += f' named {extension}'
  if plan.size:
    reason += f' resized to max side {max_image_side}'
  if plan.turns:
    reason += f' EXIF orientation {plan.orientation}'
  return CleanedImage(image_normalisation.encode_jpeg(rgb), rgb.height, rgb.width, converted=reason,
                      dhash=difference_hash(rgb))


def clean_image_file(path: Any, apply_exif_orientation: bool = True, max_image_side: int = 0) -> CleanedImage:
  """clean_image_bytes for a file, or for a sample inside an archive (an object whose ``.read()`` returns its bytes
  and ``.name`` its name: webdataset_source.TarMember, parquet_source.TableRow, read here in the worker, so the
  parent never holds the images); any failure becomes a CleanedImage with ``error`` set, never an exception."""
  try:
    if isinstance(path, str):
      with open(path, 'rb') as f:
        data = f.read()
    else:
      data, path = path.read(), path.name
    if not data:
      return CleanedImage(None, error='empty file')
    cleaned = clean_image_bytes(data, os.path.splitext(path)[1], apply_exif_orientation, max_image_side)
    return cleaned._replace(sha256=hashlib.sha256(data).hexdigest())
  except Exception as e:  # pylint: disable=broad-except  # One bad file must never stop the run.
    name = type(e).__name__
    if name == 'UnidentifiedImageError':
      return CleanedImage(None, error=image_normalisation.UNREADABLE)
    return CleanedImage(None, error=f'{name}: {e}')


def _clean_chunk(paths: Sequence[Any], apply_exif_orientation: bool, max_image_side: int) -> List[CleanedImage]:
  return [clean_image_file(p, apply_exif_orientation, max_image_side) for p in paths]


def _tasks(paths: Sequence[Any]) -> List[List[int]]:
  """The indices of ``paths`` per worker task: runs of _FILES_PER_TASK in order, except that items with a
  ``batch_key`` are grouped by it within each _WINDOW (stable: in order within a key)."""
  if not any(getattr(p, 'batch_key', None) is not None for p in paths):
    return [list(range(i, min(i + _FILES_PER_TASK, len(paths)))) for i in range(0, len(paths), _FILES_PER_TASK)]
  tasks: List[List[int]] = []
  for start in range(0, len(paths), _WINDOW):
    window = range(start, min(start + _WINDOW, len(paths)))
    by_key: dict = {}
    for i in window:
      key = getattr(paths[i], 'batch_key', None)
      by_key.setdefault(('key', key) if key is not None else ('one', i // _FILES_PER_TASK), []).append(i)
    for indices in by_key.values():
      tasks.extend(indices[j:j + _ITEMS_PER_BATCH_TASK] for j in range(0, len(indices), _ITEMS_PER_BATCH_TASK))
  return tasks


@contextlib.contextmanager
def cleaned_images(paths: Sequence[Any], apply_exif_orientation: bool, num_workers: int,
                    max_image_side: int = 0) -> Iterator[Iterator[CleanedImage]]:
  """Yields an iterator of cleaned images in input order, from a 'spawn' pool with bounded tasks in flight.

  The pool starts on entry (so workers boot while the parent imports TensorFlow) and is terminated on exit. The
  bound keeps memory flat when workers outrun the writer; 'spawn' keeps TensorFlow (imported by the parent) out of
  the workers and behaves the same on Linux, macOS and Windows.
  """
  tasks = _tasks(paths)
  num_workers = min(num_workers, len(tasks))

  def in_order(results: Iterator[List[CleanedImage]]) -> Iterator[CleanedImage]:
    """The tasks' results (in task order) back in the order of ``paths``."""
    done: dict = {}
    task_indices = iter(tasks)
    for index in range(len(paths)):
      while index not in done:
        done.update(zip(next(task_indices), next(results)))
      yield done.pop(index)

  if num_workers <= 1:
    yield in_order(_clean_chunk([paths[i] for i in t], apply_exif_orientation, max_image_side) for t in tasks)
    return
  with multiprocessing.get_context('spawn').Pool(num_workers) as pool:
    todo = iter(tasks)
    pending: Deque[Any] = collections.deque(
        pool.apply_async(_clean_chunk, ([paths[i] for i in task], apply_exif_orientation, max_image_side))
        for task in itertools.islice(todo, 4 * num_workers))

    def ordered() -> Iterator[List[CleanedImage]]:
      while pending:
        results = pending.popleft().get()
        task = next(todo, None)
        if task is not None:
          pending.append(pool.apply_async(_clean_chunk, ([paths[i] for i in task], apply_exif_orientation,
                                                         max_image_side)))
        yield results

    yield in_order(ordered())
