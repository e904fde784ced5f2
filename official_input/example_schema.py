"""The TFRecord schema shared by the converter, the fake-data generator and the input pipeline.

The seed's schema: ``image/encoded``, ``image/format``, ``image/class/label`` (1-based; 0 = background),
``image/class/text``, ``image/height``, ``image/width``, ``image/filename`` (plus the reference's
``image/colorspace``/``image/channels``). Writers build Examples here and readers parse with ``FEATURE_SPEC`` so the
two can never drift apart.
"""
from typing import Mapping, Sequence, Union

import numpy as np
import tensorflow as tf

ENCODED = 'image/encoded'
FORMAT = 'image/format'
LABEL = 'image/class/label'
TEXT = 'image/class/text'
HEIGHT = 'image/height'
WIDTH = 'image/width'
FILENAME = 'image/filename'
COLORSPACE = 'image/colorspace'
CHANNELS = 'image/channels'

# What the pipeline parses. Missing optional keys get defaults; a record without image/encoded or label is
# rejected by the parser's checks (label -1 marks "unknown").
FEATURE_SPEC: Mapping[str, tf.io.FixedLenFeature] = {
    ENCODED: tf.io.FixedLenFeature((), tf.string, ''),
    FORMAT: tf.io.FixedLenFeature((), tf.string, 'jpeg'),
    LABEL: tf.io.FixedLenFeature((), tf.int64, -1),
    TEXT: tf.io.FixedLenFeature((), tf.string, ''),
    FILENAME: tf.io.FixedLenFeature((), tf.string, ''),
}


# Multi-label data: ``image/class/label`` is a list, any length (empty: a negative, an image of none of the classes).
MULTI_LABEL_FEATURE_SPEC: Mapping[str, object] = {**FEATURE_SPEC, LABEL: tf.io.VarLenFeature(tf.int64)}


def _bytes(value: bytes) -> tf.train.Feature:
  return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))


def _int64(value: int) -> tf.train.Feature:
  return tf.train.Feature(int64_list=tf.train.Int64List(value=[int(value)]))


def make_example(encoded: bytes, image_format: str, label: Union[int, Sequence[int]], text: str, height: int,
                 width: int, filename: str) -> tf.train.Example:
  """One image as a tf.train.Example in the ImageNet-TFRecord schema above. ``label`` is 1-based; a list is a
  multi-label image's labels (one for single-label data, any number in multi-label data)."""
  labels = [int(label)] if isinstance(label, (int, np.integer)) else [int(v) for v in label]
  return tf.train.Example(features=tf.train.Features(feature={
      ENCODED: _bytes(encoded),
      FORMAT: _bytes(image_format.encode()),
      LABEL: tf.train.Feature(int64_list=tf.train.Int64List(value=labels)),
      TEXT: _bytes(text.encode()),
      HEIGHT: _int64(height),
      WIDTH: _int64(width),
      FILENAME: _bytes(filename.encode()),
      COLORSPACE: _bytes(b'RGB'),
      CHANNELS: _int64(3),
  }))
