"""How the pipeline's two heavy stages run: reading files and decoding batches.

``ImageNetInput`` builds one pipeline and asks an ``Execution`` how to run each stage. ``PARALLEL`` (the
``optimized`` pipeline) interleaves file reads and batch decodes across threads, lets tf.data autotune, and
prefetches; ``basic_pipeline.SEQUENTIAL`` runs the same work one element at a time, for comparison only. The
pipeline's element order, shuffles and seeds do not depend on the execution (see ``ordering``).
"""
import os
from typing import Any, Callable

import tensorflow as tf

AUTOTUNE = tf.data.AUTOTUNE
# Decoding: how many images of one batch a single decode call runs concurrently (tf.map_fn parallel_iterations).
DECODE_PARALLEL_ITERATIONS = 1


def num_cpus() -> int:
  return os.cpu_count() or 1


class Execution:
  """The parallel execution (the production pipeline); subclasses may run the stages differently."""
  name = 'optimized'
  full_decode = False  # decode whole JPEGs before cropping instead of decode_and_crop
  decode_parallel_iterations = DECODE_PARALLEL_ITERATIONS

  def read(self, files: tf.data.Dataset, read_file: Callable[..., tf.data.Dataset], width: int,
           deterministic: bool) -> tf.data.Dataset:
    """The records of ``files``: ``width`` files read at once, one record from each in turn."""
    return files.interleave(read_file, cycle_length=max(1, width), block_length=1, num_parallel_calls=AUTOTUNE,
                            deterministic=deterministic)

  def read_width(self, width: int) -> int:
    """The cycle length ``read`` gives ``width``: the order's arithmetic (ordering.resumed_reads) needs it."""
    return max(1, width)

  def decode(self, chunks: tf.data.Dataset, decode_chunk: Callable[[Any], tf.data.Dataset], num_parallel_calls: int,
             deterministic: bool) -> tf.data.Dataset:
    """One batch per chunk of records; ``num_parallel_calls`` -1 = autotuned over the machine's CPUs."""
    parallel = AUTOTUNE if num_parallel_calls < 0 else max(1, num_parallel_calls)
    cycle = num_cpus() if num_parallel_calls < 0 else max(1, num_parallel_calls)
    return chunks.interleave(decode_chunk, cycle_length=max(2, cycle), block_length=1, num_parallel_calls=parallel,
                             deterministic=deterministic)

  def finish(self, ds: tf.data.Dataset, deterministic: bool) -> tf.data.Dataset:
    """Prefetched, with tf.data's defaults; ``deterministic`` keeps the element order through parallel stages."""
    return ds.prefetch(AUTOTUNE).with_options(self.options(deterministic))

  def options(self, deterministic: bool) -> tf.data.Options:
    options = tf.data.Options()
    options.deterministic = deterministic
    return options


PARALLEL = Execution()
