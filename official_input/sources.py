"""Record sources: how one "record" becomes (encoded image bytes, stored label int64, filename).

A TFRecord holds a serialized ``tf.train.Example`` (``example_schema``); a raw image file's "record" is its path
(no label: -1). Each source has a batched form (the fast path) and a one-record form (the per-record fallback).
Multi-label records give each record's label list, padded with ``NO_LABEL`` to the longest in the batch.
"""
import dataclasses
from typing import Callable, Tuple

import tensorflow as tf

from official_input import example_schema

Parsed = Tuple[tf.Tensor, tf.Tensor, tf.Tensor]


@dataclasses.dataclass(frozen=True)
class RecordSource:
  """Turns records into (image bytes, stored label int64, filename); batched and one-at-a-time forms."""
  parse_batch: Callable[[tf.Tensor], Parsed]
  parse_one: Callable[[tf.Tensor], Parsed]
  name_of: Callable[[tf.Tensor], tf.Tensor]
  labelled: bool = True      # False: raw files, whose stored label is always NO_LABEL


NO_LABEL = -1


def _parse_examples(records: tf.Tensor) -> Parsed:
  parsed = tf.io.parse_example(records, example_schema.FEATURE_SPEC)
  return parsed[example_schema.ENCODED], parsed[example_schema.LABEL], parsed[example_schema.FILENAME]


def _parse_example(record: tf.Tensor) -> Parsed:
  parsed = tf.io.parse_single_example(record, example_schema.FEATURE_SPEC)
  return parsed[example_schema.ENCODED], parsed[example_schema.LABEL], parsed[example_schema.FILENAME]


TFRECORD_SOURCE = RecordSource(parse_batch=_parse_examples, parse_one=_parse_example,
                               name_of=lambda record: _parse_example(record)[2])


def _label_lists(parse: Callable, records: tf.Tensor) -> Parsed:
  parsed = parse(records, example_schema.MULTI_LABEL_FEATURE_SPEC)
  labels = tf.sparse.to_dense(parsed[example_schema.LABEL], default_value=NO_LABEL)
  return parsed[example_schema.ENCODED], labels, parsed[example_schema.FILENAME]


MULTI_LABEL_TFRECORD_SOURCE = RecordSource(
    parse_batch=lambda records: _label_lists(tf.io.parse_example, records),
    parse_one=lambda record: _label_lists(tf.io.parse_single_example, record),
    name_of=lambda record: tf.io.parse_single_example(
        record, {example_schema.FILENAME: example_schema.FEATURE_SPEC[example_schema.FILENAME]})[
            example_schema.FILENAME])
