"""Synthetic input: random (uniform 0..255) or constant (zero) images with uniform labels (multi-label: each class
in about a quarter of the images), no files read.

Used when data_dir is None, '', 'null' or 'None' (``dataset_info.is_synthetic``): a built-in default to train,
benchmark and test without data. One batch is made once and repeated, so the input costs nothing per step.
"""
import math
from typing import Any, Optional, Tuple

import tensorflow as tf

from official_input import decode
from official_input import ordering

MODES = ('random', 'constant')


def synthetic_dataset(*, batch_size: int, image_size: int, num_classes: int, dtype: tf.DType, mode: str,
                      seed: Optional[int], is_training: bool, num_images: Optional[int], include_filename: bool,
                      context: Optional[tf.distribute.InputContext], multi_label: bool = False) -> tf.data.Dataset:
  """Per-replica batches of (images, labels), or ({'image', 'filename'}, labels) with ``include_filename``.

  Training repeats forever. Eval/predict yield ceil(num_images / global batch) batches per replica (one when
  num_images is unset), so a synthetic eval ends like a real one.
  """
  if mode not in MODES:
    raise ValueError('synthetic_data must be one of %s, got %r' % (MODES, mode))
  shape = (batch_size, image_size, image_size, 3)

  @tf.autograph.experimental.do_not_convert  # tensor ops: converting would only cost start-up time
  def _make(_: tf.Tensor) -> Tuple[Any, tf.Tensor]:
    if mode == 'random':
      images = tf.random.uniform(shape, 0.0, 255.0, tf.float32, seed=seed)
    else:
      images = tf.zeros(shape, tf.float32)
    if multi_label:  # each class present in about a quarter of the images
      labels = tf.cast(tf.random.uniform([batch_size, num_classes], seed=seed) < 0.25, tf.int32)
    else:
      labels = tf.random.uniform([batch_size], 0, num_classes, tf.int32, seed=seed)
    batch = {'image': tf.cast(images, dtype), 'label': labels, 'filename': tf.fill([batch_size], '')}
    return decode.to_outputs(batch, include_filename)

  ds = tf.data.Dataset.range(1).map(_make).cache()
  if is_training:
    ds = ds.repeat()
  else:
    _, _, per_pipeline = ordering.context_ids(context)
    replicas = context.num_replicas_in_sync if context else 1
    steps = math.ceil(num_images / (batch_size * replicas)) if num_images else 1
    ds = ds.repeat(steps * per_pipeline)
  return ds.prefetch(tf.data.AUTOTUNE)
