"""Raw image files for predict (``--predict_input``), as an ``input_fn``: the files a user points at, each normalised
as the converter normalises it, so the model sees the pixels the file's record would give eval.

What ``--predict_input`` names (``match``): a folder (the image files under it, recursively, links followed once
per real folder), a glob (its files, and the image files under the folders it matches), a file, or several of
these separated by commas. From folders and globs only names with an image extension (``IMAGE_EXTENSIONS``, the
converter's) are read, and hidden names (``.*``, macOS ``._*`` forks) never; a file named on its own is read
whatever its name. What matched, what each file needs and what was skipped and why is logged once.

How a file is read: its header once, with Pillow, before the dataset is built (``image_normalisation``). An RGB JPEG
that is upright (no EXIF turn) and within ``max_image_side`` is read and decoded by TensorFlow ops alone: the
converter keeps such a file's bytes, so the decode is the record's. Any other file (EXIF-turned, transparent, CMYK,
palette, grey, 16-bit, TIFF, WebP, BMP, GIF, ...) becomes the bytes the converter writes for it
(``image_normalisation.record_bytes``: upright, alpha on white, RGB, a JPEG at quality 95) in a ``tf.numpy_function``
inside the dataset, then the same ops decode them. Either way the eval preprocessing then gets the record's bytes:
the same pixels, bit for bit (given the data's ``max_image_side`` and EXIF setting). Why the record's JPEG and not
Pillow's lossless pixels: the model trained and was evaluated on that JPEG's pixels, and Pillow's decode of a JPEG
is not TensorFlow's (another inverse DCT). Files Pillow cannot read are skipped before the dataset, counted with the
pipeline's own skips (``skipped_by_reason``).

The dataset holds a Python op only when some file needs normalising: a TPU host without a Python interpreter (a
TPU Node, a pod's other hosts) predicts plain upright RGB JPEGs only; normalise other files first with the converter
or predict them where Python runs the input (a TPU VM, a GPU or CPU machine).
"""
import collections
import concurrent.futures
import io
import os
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Tuple

from absl import logging
import tensorflow as tf

from official_input import accounting
from official_input import contract
from official_input import decode
from official_input import file_walk
from official_input import image_normalisation
from official_input import ordering
from official_input import parallelism
from official_input import resnet_preprocessing
from official_input import sources
from official_input.accounting import InputAccounting

IMAGE_EXTENSIONS = image_normalisation.IMAGE_EXTENSIONS
NOT_AN_IMAGE_NAME = 'not an image file extension'
NORMALISE = 'normalise'  # a record's second field: the file goes through image_normalisation.record_bytes
_GLOB_CHARS = '*?['
_HEADER_THREADS = 16  # header reads in flight (remote files: one round trip each)
_EXAMPLES = 3  # file names logged per reason


class Matched(NamedTuple):
  """What --predict_input matched: image files to read, files passed over with why, items that matched nothing."""
  files: List[str]
  skipped: List[Tuple[str, str]]
  unmatched: List[str]


def split_items(spec: str) -> List[str]:
  """The comma-separated items of ``spec``, unless ``spec`` itself is an existing path (a name with a comma)."""
  if ',' in spec and not tf.io.gfile.exists(spec):
    return [item.strip() for item in spec.split(',') if item.strip()]
  return [spec.strip()]


def match(spec: str) -> Matched:
  """The image files ``spec`` names (see the module docstring), sorted, each real file once (by the path that
  reaches it without a link, else the first)."""
  found: Dict[str, str] = {}  # real path -> the path read
  skipped: Dict[str, Tuple[str, str]] = {}  # real path -> (path, why)
  unmatched: List[str] = []
  walker = file_walk.Walker()

  def keep(table: Dict[str, Any], path: str, value: Any) -> None:
    real = file_walk.real_path(path)
    if real not in table or os.path.abspath(path) == real:
      table[real] = value

  for item in split_items(spec):
    if tf.io.gfile.isdir(item):
      listed = walker.files(item)
    elif tf.io.gfile.exists(item):
      keep(found, item, item)  # a file named on its own: its content decides
      continue
    elif any(c in item for c in _GLOB_CHARS):
      listed = []
      for path in sorted(tf.io.gfile.glob(item)):
        if not tf.io.gfile.isdir(path):
          listed.append(path)
        elif file_walk.visible(path):
          listed += walker.files(path)
    else:
      listed = []
    for path in listed:  # found in a folder or by a glob: read by its name's extension
      if not file_walk.visible(path):
        continue
      if image_normalisation.has_image_extension(path):
        keep(found, path, path)
      else:
        keep(skipped, path, (path, NOT_AN_IMAGE_NAME))
    if not listed:
      unmatched.append(item)
  return Matched(sorted(found.values()), sorted(v for real, v in skipped.items() if real not in found), unmatched)


def _examples(paths: List[str]) -> str:
  more = f', ... ({len(paths) - _EXAMPLES} more)' if len(paths) > _EXAMPLES else ''
  return ', '.join(paths[:_EXAMPLES]) + more


class ImageFilesInput(accounting.ReportsSkips):
  """Image files for predict: each normalised as the converter does, eval preprocessing, label -1.

  Same ``input_fn(params)`` contract as ImageNetInput; features are ``{'image', 'filename'}``; the last batch is
  padded (filename ''); files Pillow cannot read, or that the decode fails on, are skipped, counted and logged.
  ``file_pattern``: what --predict_input names (folders, globs, files, comma-separated). ``max_image_side`` and
  ``apply_exif_orientation``: the converter's settings for the run's data (summary.json's max_image_side), so a
  large photo is shrunk as its record was.
  """

  def __init__(self, file_pattern: str, image_size: int = resnet_preprocessing.IMAGE_SIZE,
               dtype: tf.DType = tf.float32, num_parallel_calls: int = -1,
               crop_fraction: float = resnet_preprocessing.CROP_FRACTION, max_image_side: int = 0,
               apply_exif_orientation: bool = True):
    self.file_pattern = file_pattern
    self.image_size = int(image_size)
    self.crop_fraction = float(crop_fraction)
    self.dtype = tf.as_dtype(dtype)
    self.num_parallel_calls = int(num_parallel_calls)
    self.max_image_side = int(max_image_side or 0)
    self.apply_exif_orientation = bool(apply_exif_orientation)
    self._stats = InputAccounting('image files input')
    self._plan: Optional[List[Tuple[str, Optional[str]]]] = None  # (file, what normalising it does, or None)
    self._listing_skips: List[Tuple[str, str]] = []

  # --- the files -----------------------------------------------------------------------------------------------
  def _inspect(self, path: str) -> Tuple[Optional[str], Optional[str]]:
    """(what normalising does to the file, or None: read as it is; why it is skipped, or None)."""
    try:
      if '://' in path:  # one request for the whole file (and GFile raises at EOF where Pillow expects b'')
        with tf.io.gfile.GFile(path, 'rb') as f:
          source = io.BytesIO(f.read())
      else:
        source = open(path, 'rb')  # pylint: disable=consider-using-with  # closed below
      with source, image_normalisation.open_image(source) as img:
        return image_normalisation.needs_normalising(img, self.apply_exif_orientation, self.max_image_side), None
    except Exception as e:  # pylint: disable=broad-except  # one bad file is a skip, never the end of predict
      if type(e).__name__ == 'UnidentifiedImageError':
        return None, image_normalisation.UNREADABLE
      return None, f'unreadable ({type(e).__name__}: {e})'

  def plan(self) -> List[Tuple[str, Optional[str]]]:
    """[(file, what normalising does to it or None)] for the files to predict; matched, read and logged once."""
    if self._plan is not None:
      return self._plan
    matched = match(self.file_pattern)
    skipped = list(matched.skipped)
    with concurrent.futures.ThreadPoolExecutor(max(1, min(_HEADER_THREADS, len(matched.files)))) as pool:
      inspected = list(pool.map(self._inspect, matched.files))
    plan = []
    for path, (how, why) in zip(matched.files, inspected):
      if why:
        skipped.append((path, why))
      else:
        plan.append((path, how))
    self._log(matched, plan, skipped)
    if not plan:
      raise FileNotFoundError(self._nothing_message(skipped))
    self._plan, self._listing_skips = plan, skipped
    return plan

  def list_files(self) -> List[str]:
    """The files to predict, sorted."""
    return [path for path, _ in self.plan()]

  def _nothing_message(self, skipped: List[Tuple[str, str]]) -> str:
    if not skipped:
      return (f'No image files match {self.file_pattern!r}: pass a folder, a glob such as "photos/*.jpg", or '
              'files, comma-separated.')
    reasons = collections.Counter(why for _, why in skipped)
    return (f'No image to predict in {self.file_pattern!r}: {len(skipped)} files matched, each skipped ('
            + '; '.join(f'{n} {why}' for why, n in reasons.items())
            + f'). Image files end in {", ".join(IMAGE_EXTENSIONS)} (any case); name a file to read it whatever '
            'its name.')

  def _log(self, matched: Matched, plan: List[Tuple[str, Optional[str]]], skipped: List[Tuple[str, str]]) -> None:
    normalised = collections.Counter(how for _, how in plan if how)
    logging.info('predict_input=%s: %d image files to predict, %d read as they are (upright RGB JPEGs), %d '
                 'normalised as the converter does first%s.', self.file_pattern, len(plan),
                 len(plan) - sum(normalised.values()), sum(normalised.values()),
                 (' (' + ', '.join(f'{n} {how}' for how, n in sorted(normalised.items())) + ')') if normalised else '')
    if skipped:
      by_reason: Dict[str, List[str]] = collections.defaultdict(list)
      for path, why in skipped:
        by_reason[why].append(path)
      logging.warning('predict_input=%s: skipping %d of the %d files matched: %s.', self.file_pattern,
                      len(skipped), len(plan) + len(skipped),
                      '; '.join(f'{len(paths)} {why} ({_examples(paths)})' for why, paths in sorted(by_reason.items())))
    if matched.unmatched:
      logging.warning('predict_input=%s: %s matched no file.', self.file_pattern, ', '.join(matched.unmatched))

  # --- counts read by the run ------------------------------------------------------------------------------------
  @property
  def skipped_by_reason(self) -> Dict[str, int]:
    """The pipeline's skips by reason, and the files skipped before it (Pillow cannot read them, or their name is
    not an image's)."""
    counts = dict(self._stats.by_reason)
    for _, why in self._listing_skips:
      counts[why] = counts.get(why, 0) + 1
    return counts

  @property
  def skipped_records(self) -> int:
    return self._stats.skipped + len(self._listing_skips)

  # --- the dataset ---------------------------------------------------------------------------------------------
  def _normalised_bytes(self, data: bytes) -> bytes:
    """Runs in the dataset (tf.numpy_function): a file's bytes -> the bytes its record holds."""
    return image_normalisation.record_bytes(data, self.apply_exif_orientation, self.max_image_side)

  def _source(self, normalises: bool) -> sources.RecordSource:
    """Records are [path, how]: how is NORMALISE, or '' for a file read as it is. Without a file to normalise the
    dataset holds no Python op."""
    def read(record: tf.Tensor) -> tf.Tensor:
      data = tf.io.read_file(record[0])
      if not normalises:
        return data
      return tf.cond(tf.equal(record[1], NORMALISE),
                     lambda: tf.ensure_shape(tf.numpy_function(self._normalised_bytes, [data], tf.string,
                                                               stateful=False), []),
                     lambda: data)

    def parse_batch(records: tf.Tensor) -> sources.Parsed:
      contents = tf.map_fn(read, records, fn_output_signature=tf.string)
      return contents, tf.fill(tf.shape(records)[:1], tf.constant(-1, tf.int64)), records[:, 0]

    return sources.RecordSource(parse_batch=parse_batch,
                                parse_one=lambda record: (read(record), tf.constant(-1, tf.int64), record[0]),
                                name_of=lambda record: record[0], labelled=False)

  def input_fn(self, params: Mapping[str, Any]) -> tf.data.Dataset:
    batch_size = contract.check_batch_size(params)
    context = contract.input_context(params)
    index, count, _ = ordering.context_ids(context)
    mine = self.plan()[index::count]
    normalises = any(how for _, how in mine)
    cfg = decode.DecodeConfig(source=self._source(normalises), is_training=False, image_size=self.image_size,
                              dtype=self.dtype, batch_size=batch_size, label_offset=0, num_classes=1,
                              check_labels=False, crop_fraction=self.crop_fraction)
    rows = [[path, NORMALISE if how else ''] for path, how in mine]
    records = tf.data.Dataset.from_tensor_slices(tf.constant(rows, tf.string, shape=[len(rows), 2]))
    return decode.build_batches(records, cfg, self._stats, include_filename=True, context=context,
                                execution=parallelism.PARALLEL, num_parallel_calls=self.num_parallel_calls)
