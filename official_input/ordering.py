"""Which records a pipeline reads and in what order: file and record sharding, shuffles, caching, seeds.

Determinism: with a seed, file order and record shuffles are seeded, every interleave and parallel map keeps its
order (and the read interleave width no longer depends on the CPU count, ``read_width``), and each training record
gets its own stateless augmentation seed derived from (seed, its global position in the shuffled stream,
``with_augment_seeds``), so two runs produce bitwise-identical batches. Training reads in a fixed order seeded
or not (the order's seed is then the run's own, saved in its checkpoints), so that a resumed run finds its place
from the step alone (``training_records``, below); eval reads in a fixed order too. Without a seed, only the
augmentation draws are not reproducible.
"""
import dataclasses
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

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


def with_augment_seeds(records: tf.data.Dataset, seed: int, context: Optional[tf.distribute.InputContext],
                       start: int = 0) -> tf.data.Dataset:
  """Pairs each record with a stateless augmentation seed (int64 [2]) derived from ``seed`` and its position.

  The position is the record's index in this pipeline's shuffled, repeated stream, made global across input
  pipelines (index * pipelines + pipeline id). It counts across epochs, so a record seen again in a later epoch gets
  a new seed (and a new crop), and the same position gets the same seed in every run. ``start``: the position of
  the first record (a resumed run's: records this pipeline gave before), so a resumed run gives each record the
  seed the uninterrupted run gave it.
  """
  index, count, _ = context_ids(context)
  base = tf.constant([seed, AUGMENT_SEED_SALT], tf.int64)

  @tf.autograph.experimental.do_not_convert  # tensor ops: converting would only cost start-up time
  def _pair(position: tf.Tensor, record: tf.Tensor) -> Dict[str, tf.Tensor]:
    global_position = position * count + index
    return {'record': record, 'seed': tf.random.experimental.stateless_fold_in(base, global_position)}

  return records.enumerate(start).map(_pair)


# --- training order: a function of (seed, epoch), so that a resumed run seeks to its place ----------------------
#
# The training stream is epochs, each a pure function of (seed, epoch): the pipeline's files in a stateless
# per-epoch order (file_order), read ``width`` at a time by a deterministic interleave, record-sharded where a
# pipeline keeps every count-th record, then shuffled in consecutive windows of ``window`` records, each window
# permuted by a stateless draw of (seed, epoch, window). With use_cache the epoch is the cached blocks in a
# per-epoch order instead. So the record at any position of the stream is known without reading what precedes it:
# a run resumed at global step s starts at position s x (records per step of this pipeline)
# (``training_records``); the interleave's state there is recomputed from the files' record counts
# (``resumed_reads``); no record before the place is decoded, and none is read except those of the shuffle window
# the place falls in (at most ``window`` - 1) and, with use_cache, the cache's own fill.

# Salt of the training order's draws (file order, cached-block order, shuffle windows).
ORDER_SEED_SALT = 0x0DE5


def epoch_seed(seed: int, epoch: Any) -> tf.Tensor:
  """The stateless seed (int64 [2]) of one epoch's order."""
  base = tf.constant([seed, ORDER_SEED_SALT], tf.int64)
  return tf.random.experimental.stateless_fold_in(base, tf.cast(epoch, tf.int64))


def file_order(num_files: int, seed_of_epoch: tf.Tensor) -> tf.Tensor:
  """The epoch's order of the pipeline's files: a permutation of range(num_files) (int32 [num_files])."""
  draws = tf.random.stateless_uniform([num_files], tf.random.experimental.stateless_fold_in(seed_of_epoch, 0))
  return tf.argsort(draws, stable=True)


def _window_permuted(seed_of_epoch: tf.Tensor, window: tf.Tensor, records: tf.Tensor) -> tf.Tensor:
  seed = tf.random.experimental.stateless_fold_in(tf.random.experimental.stateless_fold_in(seed_of_epoch, 1), window)
  return tf.gather(records, tf.argsort(tf.random.stateless_uniform(tf.shape(records), seed), stable=True))


def window_shuffled(records: tf.data.Dataset, window: int, seed_of_epoch: tf.Tensor,
                    first_window: int = 0) -> tf.data.Dataset:
  """One epoch's records, permuted within consecutive windows of ``window`` records (numbered from
  ``first_window``). Unlike a sliding shuffle buffer, whose state depends on every record before, a window's order
  is a function of (seed, epoch, window): a resumed run skips to its window. Memory: two windows of records (the
  next is read while the current one is used), as a shuffle buffer of 2 x window."""
  if window <= 1:
    return records
  plain = tf.autograph.experimental.do_not_convert
  return (records.batch(window).enumerate(first_window)
          .map(plain(lambda i, block: _window_permuted(seed_of_epoch, i, block))).prefetch(1).unbatch())


def interleave_state(counts: Sequence[int], width: int, k: int) -> Tuple[List[Optional[Tuple[int, int]]], int, int]:
  """The state of a deterministic ``interleave(cycle_length=width, block_length=1)`` over inputs of ``counts``
  elements after it yielded ``k``: (each cycle slot's (input, elements taken) or None, the slot it visits next,
  the next input to open). A step-by-step copy of tf.data's interleave (its parallel form, deterministic, yields
  in the same order; tests/official_input/test_ordering.py checks both against this). Python arithmetic on counts:
  16-41 ms for a pipeline's 160,146 ImageNet records (tools/resume_benchmark.py)."""
  if not 0 <= k <= sum(counts):
    raise ValueError(f'position {k} is outside an epoch of {sum(counts)} records')
  slots: List[Optional[Tuple[int, int]]] = [None] * width
  next_input, cycle, produced = 0, 0, 0
  while produced < k:
    slot = slots[cycle]
    if slot is not None:
      source, taken = slot
      if taken < counts[source]:
        slots[cycle] = (source, taken + 1)
        produced += 1
      else:  # its end, found on this visit: the slot empties and the cycle moves on
        slots[cycle] = None
      cycle = (cycle + 1) % width
    elif next_input < len(counts):  # an empty slot opens the next input and reads it on the same visit
      slots[cycle] = (next_input, 0)
      next_input += 1
    else:
      cycle = (cycle + 1) % width
  return slots, cycle, next_input


def resumed_reads(counts: Sequence[int], width: int, k: int) -> List[Tuple[int, int]]:
  """(input, elements to skip) in the order a new interleave of ``width`` over them yields exactly what the
  interleave over all inputs (of ``counts`` elements) yields from its ``k``-th element on: the open slots from the
  one visited next, each empty slot taking the next unopened input, then the unopened rest."""
  slots, cycle, next_input = interleave_state(counts, width, k)
  reads = []
  for i in range(width):
    slot = slots[(cycle + i) % width]
    if slot is not None:
      reads.append(slot)
    elif next_input < len(counts):
      reads.append((next_input, 0))
      next_input += 1
  return reads + [(source, 0) for source in range(next_input, len(counts))]


@dataclasses.dataclass(frozen=True)
class TrainingOrder:
  """How one pipeline orders its training records: ``seed`` (random_seed, or the run's saved input seed),
  ``window`` (shuffle_buffer_size), ``width`` (files read at once), ``shard`` ((pipelines, this one) when each
  pipeline keeps every count-th record of all files, else (1, 0)), ``cache_blocks`` (use_cache: the cached blocks
  shuffled per epoch; None without the cache)."""
  seed: int
  window: int
  width: int
  shard: Tuple[int, int] = (1, 0)
  cache_blocks: Optional[int] = None


def records_per_epoch(counts: Sequence[int], shard: Tuple[int, int]) -> Optional[int]:
  """A pipeline's records per epoch from its files' counts (summary.json), None when any is unknown."""
  if not counts or min(counts) < 0:
    return None
  total, (count, index) = sum(counts), shard
  return len(range(index, total, count)) if count > 1 else total


def training_records(files: Tuple[Sequence[str], Sequence[int], Sequence[int]],
                     read_file: Callable[..., tf.data.Dataset], read: Callable[..., tf.data.Dataset],
                     order: TrainingOrder, start: int,
                     counts: Optional[Sequence[int]] = None) -> Tuple[tf.data.Dataset, str]:
  """The pipeline's endless training records from position ``start`` (records it already gave), and a line
  saying how it found its place.

  ``files``: (paths, sizes, summary.json record counts, -1 unknown); ``read_file(path, size, expected, skip)``: one
  file's records after its first ``skip``; ``read(file_ds, read_file, width)``: the execution's deterministic
  interleave. The place is computed from the files' record counts (no record before it is decoded; none is read
  but the shuffle window's): summary.json's, or ``counts`` where it has none (shards.record_counts, from the
  records' headers; they find the place only: the files' ends are still checked against summary.json's alone).
  """
  paths, sizes, expected = (list(x) for x in files)
  num_files = len(paths)
  count, index = order.shard
  table = (tf.constant(paths, tf.string), tf.constant(sizes, tf.int64), tf.constant(expected, tf.int64))
  block = CACHE_BLOCK_RECORDS
  plain = tf.autograph.experimental.do_not_convert

  def reads_of(seed_of_epoch: tf.Tensor) -> tf.data.Dataset:
    permutation = file_order(num_files, seed_of_epoch)
    ordered = tuple(tf.gather(column, permutation) for column in table) + (tf.zeros([num_files], tf.int64),)
    return read(tf.data.Dataset.from_tensor_slices(ordered), read_file, order.width)

  # use_cache: the records of epoch 0's read order cached in host memory in blocks of CACHE_BLOCK_RECORDS, the
  # blocks in a new order each epoch (a plain cache() would replay the first epoch's order forever); the window
  # shuffle after it mixes neighbouring blocks. The block shuffle holds references to the cached blocks (no copy).
  # Cost: the first batch waits until this pipeline's records are all read into memory (read only, no decoding).
  # Training only: eval builds its pipeline anew for each evaluation, so a cache there would only cost memory.
  cached = reads_of(epoch_seed(order.seed, 0)).batch(block).cache() if order.cache_blocks else None

  def raw(seed_of_epoch: tf.Tensor, skip_blocks: int = 0) -> tf.data.Dataset:
    if cached is None:
      return reads_of(seed_of_epoch)
    shuffle_seed = tf.random.stateless_uniform([], tf.random.experimental.stateless_fold_in(seed_of_epoch, 2),
                                               minval=0, maxval=2 ** 62, dtype=tf.int64)
    return cached.shuffle(max(1, order.cache_blocks), seed=shuffle_seed).skip(skip_blocks).unbatch()

  def arranged(records: tf.data.Dataset, seed_of_epoch: tf.Tensor, first_window: int = 0) -> tf.data.Dataset:
    if count > 1:
      records = records.shard(count, index)
    return window_shuffled(records, order.window, seed_of_epoch, first_window)

  def epoch(e: tf.Tensor) -> tf.data.Dataset:
    seed_of_epoch = epoch_seed(order.seed, e)
    return arranged(raw(seed_of_epoch), seed_of_epoch)

  scanned = counts is not None and min(expected, default=0) < 0
  known = list(counts) if scanned else expected
  per_epoch = records_per_epoch(known, order.shard)
  if not per_epoch and start:
    unknown = sum(c < 0 for c in known)
    raise ValueError(f'Resuming at record {start} needs every file\'s record count (summary.json\'s, or '
                     f'shards.record_counts\'): {unknown} of {len(known)} are unknown.' if unknown else
                     f'Resuming at record {start}: the {len(known)} files hold no record this pipeline reads (their '
                     f'counts are {list(known)[:8]}); check the data (damaged shards are named above).')
  if not per_epoch:
    return tf.data.Dataset.range(2 ** 62).flat_map(plain(epoch)), 'from the start'
  first, within = divmod(start, per_epoch)
  window = max(1, order.window)
  window_start = within - within % window
  raw_start = window_start * count  # position in the unsharded epoch
  seed_of_first = epoch_seed(order.seed, first)
  if cached is not None:
    records = raw(seed_of_first, raw_start // block).skip(raw_start % block)
  else:
    with tf.init_scope():  # the epoch's file order, here in Python (the later epochs' is computed in the graph)
      permutation = file_order(num_files, seed_of_first).numpy()
    reads = resumed_reads([known[i] for i in permutation], order.width, raw_start)
    chosen = [permutation[source] for source, _ in reads]
    skips = [skip for _, skip in reads]
    # A file entered past its start is read without its end check (the bytes skipped are not counted).
    columns = ([paths[i] for i in chosen], [sizes[i] if s == 0 else 0 for i, s in zip(chosen, skips)],
               [expected[i] if s == 0 else -1 for i, s in zip(chosen, skips)], skips)
    records = read(tf.data.Dataset.from_tensor_slices((tf.constant(columns[0], tf.string),) + tuple(
        tf.constant(c, tf.int64) for c in columns[1:])), read_file, order.width)
  records = arranged(records, seed_of_first, window_start // window).skip(within - window_start)
  stream = records.concatenate(tf.data.Dataset.range(first + 1, 2 ** 62).flat_map(plain(epoch)))
  if not start:
    return stream, 'from the start'
  source = "its files' record headers (12 bytes a record, read once a process)" if scanned else 'summary.json'
  return stream, (f'resumed at record {start} of this pipeline: epoch {first}, record {within} of {per_epoch}, '
                  f'found from the record counts of {source} without reading the records before it (but '
                  f'{within - window_start} of its shuffle window{" and the cache fill" if cached is not None else ""})')
