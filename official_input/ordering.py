"""Which records a pipeline reads and in what order: file and record sharding, shuffles, caching, seeds.

Determinism: with a seed, file order and record shuffles are seeded, every interleave and parallel map keeps its
order (and the read interleave width no longer depends on the CPU count, ``read_width``), and each training record
gets its own stateless augmentation seed derived from (seed, its global position in the shuffled stream,
``with_augment_seeds``), so two runs produce bitwise-identical batches. Without a seed, tf.data may reorder for
speed.
"""
from typing import Any, Dict, List, Optional, Sequence, Tuple

import tensorflow as tf

from official_input import parallelism

# At most this many files read in parallel.
MAX_READ_CYCLE = 16
# use_cache: records per cached block (the unit the per-epoch reshuffle moves), and the blocks shuffled together
# when the pipeline's record count is unknown (covers ~1M records).
CACHE_BLOCK_RECORDS = 64
MAX_CACHE_BLOCKS = 16384
# Salt of the per-record augmentation seeds, so they differ from other streams seeded with the same random_seed.
AUGMENT_SEED_SALT = 0x5EED


def context_ids(context: Optional[tf.distribute.InputContext]) -> Tuple[int, int, int]:
  """(pipeline id, number of pipelines, replicas fed by each pipeline) for a possibly missing context."""
  if context is None:
    return 0, 1, 1
  per_pipeline = max(1, context.num_replicas_in_sync // max(1, context.num_input_pipelines))
  return context.input_pipeline_id, context.num_input_pipelines, per_pipeline


def shard_files(files: Sequence[str], index: int, count: int) -> Tuple[List[str], bool]:
  """This pipeline's files, and whether records must be sharded instead (fewer files than pipelines)."""
  if count <= 1:
    return list(files), False
  if len(files) >= count:
    return list(files[index::count]), False
  return list(files), True


def read_width(num_files: int, fixed_order: bool) -> int:
  """Files read at once. The width sets the record order, so runs that need a fixed order (seeded, record-sharded,
  eval, whose first N records every pipeline must agree on) keep it independent of the machine's CPU count."""
  width = num_files if fixed_order else max(4, parallelism.num_cpus())
  return max(1, min(num_files, MAX_READ_CYCLE, width))


def pad_batch_count(ds: tf.data.Dataset, multiple: int, pad_batch: Any) -> tf.data.Dataset:
  """Appends padding batches so the number of batches is a multiple of ``multiple`` (replicas per pipeline)."""
  if multiple <= 1:
    return ds
  padding = tf.data.Dataset.from_tensors(pad_batch).repeat(multiple - 1)
  return ds.concatenate(padding).batch(multiple, drop_remainder=True).unbatch()


def cache_blocks(expected_records: Optional[int]) -> int:
  """Cached blocks one pass of a pipeline holds (its records from summary.json), or a bound when unknown."""
  return -(-expected_records // CACHE_BLOCK_RECORDS) if expected_records else MAX_CACHE_BLOCKS


def cached_in_shuffled_blocks(records: tf.data.Dataset, num_blocks: int, seed: Optional[int]) -> tf.data.Dataset:
  """The records cached in host memory, in blocks of CACHE_BLOCK_RECORDS whose order is reshuffled every epoch.

  A plain ``cache()`` replays the first epoch's order forever (the file shuffle sits before it), so every epoch
  would see the same sequence up to the shuffle window. Shuffling whole cached blocks moves any record anywhere
  each epoch; the record-level shuffle after it mixes neighbouring blocks. The shuffle buffer holds references to
  the cached blocks (no copy). Cost: the first batch waits until this pipeline's records are all read into memory
  (read only, no decoding). Training only: eval builds its pipeline anew for each evaluation, so a cache there
  would only cost memory.
  """
  blocks = records.batch(CACHE_BLOCK_RECORDS).cache()
  return blocks.shuffle(max(1, num_blocks), seed=seed, reshuffle_each_iteration=True).unbatch()


def with_augment_seeds(records: tf.data.Dataset, seed: int,
                       context: Optional[tf.distribute.InputContext]) -> tf.data.Dataset:
  """Pairs each record with a stateless augmentation seed (int64 [2]) derived from ``seed`` and its position.

  The position is the record's index in this pipeline's shuffled, repeated stream, made global across input
  pipelines (index * pipelines + pipeline id). It counts across epochs, so a record seen again in a later epoch gets
  a new seed (and a new crop), and the same position gets the same seed in every run.
  """
  index, count, _ = context_ids(context)
  base = tf.constant([seed, AUGMENT_SEED_SALT], tf.int64)

  @tf.autograph.experimental.do_not_convert  # tensor ops: converting would only cost start-up time
  def _pair(position: tf.Tensor, record: tf.Tensor) -> Dict[str, tf.Tensor]:
    global_position = position * count + index
    return {'record': record, 'seed': tf.random.experimental.stateless_fold_in(base, global_position)}

  return records.enumerate().map(_pair)
