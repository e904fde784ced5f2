"""Raw image files (JPEG, PNG, GIF, BMP, WebP) matched by a glob, as an ``input_fn`` for predict."""
from typing import Any, List, Mapping

import tensorflow as tf

from official_input import accounting
from official_input import contract
from official_input import decode
from official_input import ordering
from official_input import parallelism
from official_input import resnet_preprocessing
from official_input import sources
from official_input.accounting import InputAccounting


class ImageFilesInput(accounting.ReportsSkips):
  """Image files for predict: eval preprocessing, label -1.

  Same ``input_fn(params)`` contract as ImageNetInput; features are ``{'image', 'filename'}``; the last batch is
  padded (filename ''); undecodable files are skipped, counted and logged.
  """

  def __init__(self, file_pattern: str, image_size: int = resnet_preprocessing.IMAGE_SIZE,
               dtype: tf.DType = tf.float32, num_parallel_calls: int = -1,
               crop_fraction: float = resnet_preprocessing.CROP_FRACTION):
    self.file_pattern = file_pattern
    self.image_size = int(image_size)
    self.crop_fraction = float(crop_fraction)
    self.dtype = tf.as_dtype(dtype)
    self.num_parallel_calls = int(num_parallel_calls)
    self._stats = InputAccounting('image files input')

  def list_files(self) -> List[str]:
    files = sorted(f for f in tf.io.gfile.glob(self.file_pattern) if not tf.io.gfile.isdir(f))
    if not files:
      raise FileNotFoundError('No image files match %r: pass a glob such as "photos/*.jpg".' % self.file_pattern)
    return files

  def input_fn(self, params: Mapping[str, Any]) -> tf.data.Dataset:
    batch_size = contract.check_batch_size(params)
    context = contract.input_context(params)
    index, count, _ = ordering.context_ids(context)
    files = self.list_files()[index::count]
    cfg = decode.DecodeConfig(source=sources.FILE_SOURCE, is_training=False, image_size=self.image_size,
                              dtype=self.dtype, batch_size=batch_size, label_offset=0, num_classes=1,
                              check_labels=False, crop_fraction=self.crop_fraction)
    records = tf.data.Dataset.from_tensor_slices(tf.constant(files, tf.string))
    return decode.build_batches(records, cfg, self._stats, include_filename=True, context=context,
                                execution=parallelism.PARALLEL, num_parallel_calls=self.num_parallel_calls)
