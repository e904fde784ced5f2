"""The ``basic`` pipeline: the optimized pipeline's work done one element at a time, as tutorials write it.

Kept for comparison (``tools/input_benchmark.py`` measures the optimized pipeline against it): one reader, full
decode of each image (no ``decode_and_crop``), no parallelism, no prefetch, tf.data autotuning and injected
parallelism switched off. It does the same work with the same bad-record handling; nothing is slowed down on
purpose.
"""
from typing import Any, Callable

import tensorflow as tf

from official_input import parallelism


class Sequential(parallelism.Execution):
  name = 'basic'
  full_decode = True
  decode_parallel_iterations = 1

  def read(self, files: tf.data.Dataset, read_file: Callable[..., tf.data.Dataset], width: int,
           deterministic: bool) -> tf.data.Dataset:
    return files.flat_map(read_file)

  def read_width(self, width: int) -> int:
    return 1  # flat_map: one file after another

  def decode(self, chunks: tf.data.Dataset, decode_chunk: Callable[[Any], tf.data.Dataset], num_parallel_calls: int,
             deterministic: bool) -> tf.data.Dataset:
    return chunks.flat_map(decode_chunk)

  def finish(self, ds: tf.data.Dataset, deterministic: bool) -> tf.data.Dataset:
    return ds.with_options(self.options(deterministic))

  def options(self, deterministic: bool) -> tf.data.Options:
    options = super().options(deterministic)
    options.autotune.enabled = False
    options.experimental_optimization.map_parallelization = False
    options.experimental_optimization.inject_prefetch = False
    options.experimental_optimization.parallel_batch = False
    return options


SEQUENTIAL = Sequential()
