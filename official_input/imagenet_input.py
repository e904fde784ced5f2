"""The ImageNet input pipeline: TFRecords (or raw image files, or synthetic tensors) to batches for one replica.

``ImageNetInput(...).input_fn(params)`` returns a ``tf.data.Dataset`` of ``(images [B, S, S, 3], labels int32 [B])``
for a per-replica batch ``B = params['batch_size']`` and the worker's ``params['context']``
(``tf.distribute.InputContext``), so it plugs into ``strategy.distribute_datasets_from_function``.

Design, and why:

- Records are batched *before* decoding, and a whole batch is decoded in one function call (``tf.map_fn`` over the
  batch). Throughput equals a per-record parallel map plus map-and-batch fusion (measured: same CPU per image), and
  it gives a cheap, exact way to survive bad data: a batch whose decode fails (corrupt JPEG, garbage bytes, a label
  out of range) is re-decoded record by record, the bad records are dropped, counted and logged with their
  filename and reason, and the batch is refilled. The common, clean path pays nothing for this.
- Training refills a batch with duplicates of its good records (so shapes stay static and the loss never sees a
  fake label); eval pads with zero images and label -1 instead, so every good record is seen exactly once.
- Eval is finite and deterministic: sorted files, deterministic interleave, no shuffle, the last batch padded to
  ``B`` (label -1, filename ''), and whole padding batches appended so that every replica of a worker gets the
  same number of batches.
- ``pipeline='basic'`` is a plain sequential pipeline (as simple tutorials write it), kept for comparison: one
  reader, full decode of each image (no ``decode_and_crop``), no parallelism, no prefetch, tf.data autotuning and
  injected parallelism switched off.
  It does the same work and has the same bad-record handling; nothing is slowed down on purpose.

Counting skipped records: a ``filter`` after decoding counts each batch's records by status in TF ops
(``accounting.py``: resource variables, warnings printed to stderr by TF ops, assertions), so the dataset holds no
Python op and runs on TPU hosts without a Python interpreter. Read the counts between training loops with
``ImageNetInput.skipped_records`` / ``skipped_by_reason``.

Damaged shards (an interrupted copy, a flipped bit): TFRecord framing errors stop ``TFRecordDataset`` with a
DataLoss error at the bad record, and the rest of that file is unreadable. The pipeline checks two things:

- Up front, when ``<data_dir>/summary.json`` records the shards: each file's byte size (one stat per file) against
  the converter's. A mismatch is named (file, both sizes, records expected) before any record is read.
- While reading, with or without summary.json: every record takes ``len(record) + 16`` bytes in the file (length,
  two CRCs), so a running count and byte sum per file (``read_accounted``: one ``scan`` step per block of 32
  records) tell at the file's end whether the reader stopped before the last byte, and, when summary.json knows the
  file's record count, exactly how many records were lost. Lost records are counted apart from bad images
  (``lost_records``, ``damaged_files``). A shard cut exactly at a record boundary reads cleanly; only the
  summary.json checks catch that one.

``fail_on_data_loss=True`` turns a damaged shard into an error naming the file and the fix instead of a skip.

Determinism: with ``seed`` set, file order and record shuffles are seeded, every interleave and parallel map keeps
its order (and the read interleave width no longer depends on the CPU count), and each training record gets its
own stateless augmentation seed derived from (seed, its global position in the shuffled stream), so two runs
produce bitwise-identical batches. With ``seed`` None, tf.data may reorder for speed.
"""
import concurrent.futures
import dataclasses
import math
import os
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from absl import logging
import tensorflow as tf

from official_input import accounting
from official_input.accounting import (  # pylint: disable=unused-import (the pipeline's public names)
    BAD_FORMAT, BAD_LABEL, END_OF_DATA, OK, REASONS, TOO_MANY_CLASSES, UNDECODABLE, UNPARSEABLE, DataLossError,
    InputAccounting, ReadReport)
from official_input import dataset_info as dataset_info_lib
from official_input import example_schema
from official_input import record_check
from official_input import resnet_preprocessing

AUTOTUNE = tf.data.AUTOTUNE
SPLITS = ('train', 'validation', 'test')
PIPELINES = ('optimized', 'basic')
SYNTHETIC_MODES = ('random', 'constant')

# Reading: TFRecord read buffer (the reference's 8 MiB) and at most this many files read in parallel.
READ_BUFFER_BYTES = 8 * 1024 * 1024
MAX_READ_CYCLE = 16
# Decoding: how many images of one batch a single decode call runs concurrently (tf.map_fn parallel_iterations).
DECODE_PARALLEL_ITERATIONS = 1
# Training: fail instead of spinning forever when this many records in a row are bad (wrong data or config).
MAX_CONSECUTIVE_BAD = 1000
NULL_DATA_DIRS = dataset_info_lib.NULL_DATA_DIRS
IMAGENET_CLASSES_WITH_BACKGROUND = dataset_info_lib.IMAGENET_CLASSES_WITH_BACKGROUND
# Bytes a TFRecord adds around each record: uint64 length, its masked CRC32C, and the data's masked CRC32C.
TFRECORD_FRAMING_BYTES = 16
# Records per accounting step of a shard read (read_accounted): amortises the per-step cost, bounds the extra
# buffering (per file open in the read interleave) to this many records.
ACCOUNT_BLOCK_RECORDS = 32
# Concurrent stats of shard files at pipeline build (one request each; matters on gs://).
STAT_THREADS = 16
# use_cache: records per cached block (the unit the per-epoch reshuffle moves), and the blocks shuffled together
# when the pipeline's record count is unknown (covers ~1M records).
CACHE_BLOCK_RECORDS = 64
MAX_CACHE_BLOCKS = 16384
# Salt of the per-record augmentation seeds, so they differ from other streams seeded with the same random_seed.
AUGMENT_SEED_SALT = 0x5EED


has_background_class = dataset_info_lib.has_background_class


is_synthetic = dataset_info_lib.is_synthetic


def default_split(is_training: bool) -> str:
  return 'train' if is_training else 'validation'


def num_cpus() -> int:
  return os.cpu_count() or 1


# ---------------------------------------------------------------------------------------------------------------
# Record sources: how a "record" becomes (encoded image bytes, stored label, filename).


@dataclasses.dataclass(frozen=True)
class RecordSource:
  """Turns records into (image bytes, stored label int64, filename); batched and one-at-a-time forms."""
  parse_batch: Callable[[tf.Tensor], Tuple[tf.Tensor, tf.Tensor, tf.Tensor]]
  parse_one: Callable[[tf.Tensor], Tuple[tf.Tensor, tf.Tensor, tf.Tensor]]
  name_of: Callable[[tf.Tensor], tf.Tensor]


def _parse_examples(records: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
  parsed = tf.io.parse_example(records, example_schema.FEATURE_SPEC)
  return parsed[example_schema.ENCODED], parsed[example_schema.LABEL], parsed[example_schema.FILENAME]


def _parse_example(record: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
  parsed = tf.io.parse_single_example(record, example_schema.FEATURE_SPEC)
  return parsed[example_schema.ENCODED], parsed[example_schema.LABEL], parsed[example_schema.FILENAME]


TFRECORD_SOURCE = RecordSource(parse_batch=_parse_examples, parse_one=_parse_example,
                               name_of=lambda record: _parse_example(record)[2])


def _read_files(paths: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
  contents = tf.map_fn(tf.io.read_file, paths, fn_output_signature=tf.string)
  return contents, tf.fill(tf.shape(paths), tf.constant(-1, tf.int64)), paths


FILE_SOURCE = RecordSource(parse_batch=_read_files,
                           parse_one=lambda path: (tf.io.read_file(path), tf.constant(-1, tf.int64), path),
                           name_of=tf.identity)


# ---------------------------------------------------------------------------------------------------------------
# Decoding batches with bad-record recovery.


@dataclasses.dataclass(frozen=True)
class DecodeConfig:
  """Everything the decode stage needs; one per input_fn call."""
  source: RecordSource
  is_training: bool
  image_size: int
  dtype: tf.DType
  batch_size: int
  label_offset: int            # subtracted from stored labels: 1, or 0 with a background class
  num_classes: int
  check_labels: bool           # False for unlabelled data (test split, raw files)
  full_decode: bool = False    # basic pipeline: decode whole JPEGs, then crop
  parallel_iterations: int = 1  # images of one batch decoded concurrently (tf.map_fn)
  augment: resnet_preprocessing.AugmentConfig = resnet_preprocessing.AugmentConfig()  # training only
  deterministic: bool = False  # keep element order in parallel stages (eval, or a seeded run)
  fast_decode: bool = False    # training: decode large JPEG crops at reduced DCT scale

  @property
  def image_shape(self) -> Tuple[int, int, int]:
    return (self.image_size, self.image_size, 3)


def record_labels(stored: tf.Tensor, cfg: DecodeConfig) -> tf.Tensor:
  """Stored 1-based labels to model labels: minus 1, unless the model has a background class (1001 classes)."""
  labels = tf.cast(stored, tf.int32) - cfg.label_offset
  if not cfg.check_labels:
    return tf.where(labels >= 0, labels, -1)
  return labels


def record_status(encoded: tf.Tensor, labels: tf.Tensor, cfg: DecodeConfig) -> tf.Tensor:
  """OK, BAD_FORMAT or BAD_LABEL per record, from cheap checks that never raise (works on scalars or vectors)."""
  format_ok = resnet_preprocessing.image_format_ok(encoded)
  status = tf.where(format_ok, OK, BAD_FORMAT)
  if cfg.check_labels:
    label_ok = tf.logical_and(labels >= 0, labels < cfg.num_classes)
    status = tf.where(tf.logical_and(format_ok, tf.logical_not(label_ok)), BAD_LABEL, status)
    status = tf.where(tf.logical_and(format_ok, labels >= cfg.num_classes), TOO_MANY_CLASSES, status)
  return tf.cast(status, tf.int32)


def _preprocess(encoded: tf.Tensor, cfg: DecodeConfig, seed: Optional[tf.Tensor] = None) -> tf.Tensor:
  """One image; ``seed`` (int [2]) makes the training augmentation stateless and reproducible."""
  return resnet_preprocessing.preprocess_image(encoded, cfg.is_training, cfg.image_size, tf.float32,
                                               full_decode=cfg.full_decode, augment=cfg.augment, seed=seed,
                                               fast_decode=cfg.fast_decode)


def _split_chunk(chunk: Any) -> Tuple[tf.Tensor, Optional[tf.Tensor]]:
  """A chunk is a batch of records, or {'record': [k], 'seed': [k, 2]} when the augmentation is seeded."""
  if isinstance(chunk, dict):
    return chunk['record'], chunk['seed']
  return chunk, None


def _pad_to_batch(batch: Dict[str, tf.Tensor], batch_size: int) -> Dict[str, tf.Tensor]:
  """Pads the per-record fields to batch_size rows: zero images, label -1, filename ''."""
  pad = batch_size - tf.shape(batch['label'])[0]
  out = dict(batch)
  out['image'] = tf.pad(batch['image'], [[0, pad], [0, 0], [0, 0], [0, 0]])
  out['label'] = tf.pad(batch['label'], [[0, pad]], constant_values=-1)
  out['filename'] = tf.concat([batch['filename'], tf.fill([pad], '')], axis=0)
  return out


def _set_batch_shape(batch: Dict[str, tf.Tensor], cfg: DecodeConfig) -> Dict[str, tf.Tensor]:
  out = dict(batch)
  out['image'] = tf.ensure_shape(batch['image'], (cfg.batch_size,) + cfg.image_shape)
  out['label'] = tf.ensure_shape(batch['label'], [cfg.batch_size])
  out['filename'] = tf.ensure_shape(batch['filename'], [cfg.batch_size])
  out['status'] = tf.ensure_shape(batch['status'], [None])
  out['record_name'] = tf.ensure_shape(batch['record_name'], [None])
  return out


def decode_batch(records: tf.Tensor, cfg: DecodeConfig, seeds: Optional[tf.Tensor] = None) -> Dict[str, tf.Tensor]:
  """The fast path: decodes a batch of k <= B records; raises if any record is bad (the caller falls back).

  ``seeds`` [k, 2]: one augmentation seed per record (seeded training), mapped alongside the image bytes.
  """
  encoded, stored, names = cfg.source.parse_batch(records)
  labels = record_labels(stored, cfg)
  status = record_status(encoded, labels, cfg)
  check = tf.debugging.assert_equal(status, OK, message='bad record in batch')
  signature = tf.TensorSpec(cfg.image_shape, tf.float32)
  with tf.control_dependencies([check]):
    if seeds is None:
      images = tf.map_fn(lambda e: _preprocess(e, cfg), encoded, fn_output_signature=signature,
                         parallel_iterations=cfg.parallel_iterations)
    else:
      images = tf.map_fn(lambda es: _preprocess(es[0], cfg, es[1]), (encoded, seeds), fn_output_signature=signature,
                         parallel_iterations=cfg.parallel_iterations)
  batch = {'image': tf.cast(images, cfg.dtype), 'label': labels, 'filename': names, 'status': status,
           'record_name': names}
  if not cfg.is_training:
    batch = _pad_to_batch(batch, cfg.batch_size)
  return _set_batch_shape(batch, cfg)


def _record_element(image: tf.Tensor, label: tf.Tensor, name: tf.Tensor, status) -> Dict[str, tf.Tensor]:
  return {'image': image, 'label': tf.cast(label, tf.int32), 'filename': name,
          'status': tf.constant(status, tf.int32) if isinstance(status, int) else status}


def _decode_one(record: tf.Tensor, cfg: DecodeConfig, seed: Optional[tf.Tensor] = None) -> Dict[str, tf.Tensor]:
  """One record with its status; bad-but-harmless records get a zero image instead of raising."""
  encoded, stored, name = cfg.source.parse_one(record)
  label = record_labels(stored, cfg)
  status = record_status(encoded, label, cfg)
  image = tf.cond(tf.equal(status, OK), lambda: _preprocess(encoded, cfg, seed),
                  lambda: tf.zeros(cfg.image_shape, tf.float32))
  return _record_element(image, label, name, status)


def _decode_one_or_marker(record: tf.Tensor, cfg: DecodeConfig, seed: Optional[tf.Tensor] = None) -> tf.data.Dataset:
  """Exactly one element per record: the decoded record, or a marker saying why it failed."""
  zeros = tf.zeros(cfg.image_shape, tf.float32)
  decoded = tf.data.Dataset.from_tensors(record).map(
      lambda r: _decode_one(r, cfg, seed)).ignore_errors(log_warning=True)
  undecodable = tf.data.Dataset.from_tensors(record).map(
      lambda r: _record_element(zeros, -1, cfg.source.name_of(r), UNDECODABLE)).ignore_errors()
  unparseable = tf.data.Dataset.from_tensors(_record_element(zeros, -1, tf.constant(''), UNPARSEABLE))
  return decoded.concatenate(undecodable).concatenate(unparseable).take(1)


def _refill(batch: Dict[str, tf.Tensor], cfg: DecodeConfig) -> Dict[str, tf.Tensor]:
  """Keeps the good records of a per-record-decoded batch and refills it to B rows.

  Training repeats good records (never a fake label in the loss); eval pads (every record seen exactly once).
  A batch without any good record is dropped later by the filter.
  """
  status = batch['status']
  good = tf.reshape(tf.where(tf.equal(status, OK)), [-1])
  num_good = tf.size(good)
  if cfg.is_training:
    # With no good record at all the index points at row 0 (a zero image); the filter drops that batch.
    index = tf.gather(tf.concat([good, [0]], axis=0), tf.range(cfg.batch_size) % tf.maximum(num_good, 1))
  else:
    index = good
  out = {'image': tf.cast(tf.gather(batch['image'], index), cfg.dtype),
         'label': tf.gather(batch['label'], index),
         'filename': tf.gather(batch['filename'], index),
         'status': status,
         'record_name': batch['filename']}
  if not cfg.is_training:
    out = _pad_to_batch(out, cfg.batch_size)
  return _set_batch_shape(out, cfg)


def decode_records_one_by_one(records: tf.Tensor, cfg: DecodeConfig,
                              seeds: Optional[tf.Tensor] = None) -> tf.data.Dataset:
  """The slow path for a batch that failed: per-record decode, bad records counted and replaced."""
  if seeds is None:
    per_record = tf.data.Dataset.from_tensor_slices(records).flat_map(lambda r: _decode_one_or_marker(r, cfg))
  else:
    per_record = tf.data.Dataset.from_tensor_slices((records, seeds)).flat_map(
        lambda r, s: _decode_one_or_marker(r, cfg, s))
  return per_record.batch(tf.cast(tf.size(records), tf.int64)).map(lambda b: _refill(b, cfg))


def decode_chunk(chunk: Any, cfg: DecodeConfig) -> tf.data.Dataset:
  """One output batch from k raw records: the fast path, or the per-record path if the fast path raised.

  ``chunk``: a [k] batch of records, or {'record': [k], 'seed': [k, 2]} for seeded augmentation.
  """
  records, seeds = _split_chunk(chunk)
  def _fast(c: Any) -> Dict[str, tf.Tensor]:
    c_records, c_seeds = _split_chunk(c)
    return decode_batch(c_records, cfg, c_seeds)

  fast = tf.data.Dataset.from_tensors(chunk).map(_fast).ignore_errors()
  return fast.concatenate(decode_records_one_by_one(records, cfg, seeds)).take(1)


def end_of_data_element(cfg: DecodeConfig) -> Dict[str, tf.Tensor]:
  return {'image': tf.zeros((cfg.batch_size,) + cfg.image_shape, cfg.dtype),
          'label': tf.fill([cfg.batch_size], -1),
          'filename': tf.fill([cfg.batch_size], ''),
          'status': tf.constant([END_OF_DATA], tf.int32),
          'record_name': tf.constant([''])}


def report_filter(stats: InputAccounting, context: Optional[tf.distribute.InputContext]
                  ) -> Callable[[Dict[str, tf.Tensor]], tf.Tensor]:
  """A filter predicate that counts each batch's bad records (TF ops) and drops batches without a good record."""
  counters = stats.pipeline(context_ids(context)[0])

  def _predicate(batch: Dict[str, tf.Tensor]) -> tf.Tensor:
    return stats.count_batch(counters, batch['status'], batch['record_name'])
  return _predicate


def to_outputs(batch: Dict[str, tf.Tensor], include_filename: bool) -> Tuple[Any, tf.Tensor]:
  """(images, labels), or ({'image', 'filename'}, labels) for predict."""
  if include_filename:
    return {'image': batch['image'], 'filename': batch['filename']}, batch['label']
  return batch['image'], batch['label']


# ---------------------------------------------------------------------------------------------------------------
# Distribution helpers.


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


def pad_batch_count(ds: tf.data.Dataset, multiple: int, pad_batch: Any) -> tf.data.Dataset:
  """Appends padding batches so the number of batches is a multiple of ``multiple`` (replicas per pipeline)."""
  if multiple <= 1:
    return ds
  padding = tf.data.Dataset.from_tensors(pad_batch).repeat(multiple - 1)
  return ds.concatenate(padding).batch(multiple, drop_remainder=True).unbatch()


def check_batch_size(params: Mapping[str, Any]) -> int:
  batch_size = int(params['batch_size'])
  if batch_size < 1:
    raise ValueError('batch_size must be positive, got %d' % batch_size)
  return batch_size


def read_accounted(path: tf.Tensor, size: tf.Tensor, expected: tf.Tensor, stats: InputAccounting,
                   pipeline_id: int = 0) -> tf.data.Dataset:
  """The records of one TFRecord file, reporting at its end how many were read and how many bytes they span.

  A framing error (bad length or CRC, a cut in mid-record) stops ``TFRecordDataset`` at that record; ignoring the
  error ends the file there. Each record spans exactly ``len(record) + TFRECORD_FRAMING_BYTES`` bytes, so a running
  (count, bytes) sum reaching less than the file's ``size`` proves the file was not read to its end, and with
  ``expected`` (the converter's record count, -1 unknown) how many records were lost (``stats.count_file``).

  Cost: the sums run over blocks of ACCOUNT_BLOCK_RECORDS records (batch, one scan step, unbatch) instead of a
  function call per record. Measured (CPU time, 110 KB records, busy 2-core machine): bare read 85-98 us per record,
  accounted read 87-112 us, i.e. ~10 us, 1-2% of a training image's decode and crop; a per-record scan and filter
  cost ~100 us. ``stats.count_file`` (TF ops) runs once per file.
  """
  blocks = tf.data.TFRecordDataset(path, buffer_size=READ_BUFFER_BYTES).ignore_errors().batch(ACCOUNT_BLOCK_RECORDS)
  # batch() never yields an empty block, so an empty one marks the end of the file; unbatch() then yields nothing.
  marked = blocks.concatenate(tf.data.Dataset.from_tensors(tf.zeros([0], tf.string)))
  zero = tf.constant(0, tf.int64)
  counters = stats.pipeline(pipeline_id)

  def _account(state: Tuple[tf.Tensor, tf.Tensor], block: tf.Tensor) -> Tuple[Tuple[tf.Tensor, tf.Tensor], tf.Tensor]:
    count, consumed = state
    count += tf.size(block, out_type=tf.int64)
    consumed += tf.reduce_sum(tf.cast(tf.strings.length(block), tf.int64) + TFRECORD_FRAMING_BYTES)

    def _report() -> tf.Tensor:
      return stats.count_file(counters, path, count, consumed, size, expected)

    reported = tf.cond(tf.equal(tf.size(block), 0), _report, lambda: tf.constant(False))
    with tf.control_dependencies([reported]):
      return (count, consumed), tf.identity(block)

  return marked.scan((zero, zero), _account).unbatch()


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

  def _pair(position: tf.Tensor, record: tf.Tensor) -> Dict[str, tf.Tensor]:
    global_position = position * count + index
    return {'record': record, 'seed': tf.random.experimental.stateless_fold_in(base, global_position)}

  return records.enumerate().map(_pair)


# ---------------------------------------------------------------------------------------------------------------


class ImageNetInput:
  """ImageNet TFRecords (``<data_dir>/<split>-*``) or synthetic tensors, as an ``input_fn(params)``.

  Keyword arguments: ``split`` defaults to train/validation by ``is_training``; ``num_label_classes`` one more than
  the data's classes (1001 for ImageNet) keeps the stored 1-based labels (class 0 = background), anything else
  subtracts 1; ``dtype`` is the image dtype
  (values stay 0..255); ``pipeline`` 'optimized' | 'basic'; ``num_parallel_calls`` -1 = AUTOTUNE;
  ``synthetic_data`` 'random' | 'constant' applies when data_dir is None, '', 'null' or 'None'; ``augment`` the training
  augmentation; ``include_filename`` makes the features ``{'image', 'filename'}`` (predict); ``seed`` makes the
  input deterministic (see the module docstring); ``num_images`` sizes a synthetic eval; ``fail_on_data_loss``
  makes a damaged shard an error instead of a counted skip. Attributes may be changed after construction;
  ``input_fn`` reads them when called.
  """

  def __init__(self, *, is_training: bool, data_dir: Optional[str] = None, split: Optional[str] = None,
               image_size: int = resnet_preprocessing.IMAGE_SIZE, num_label_classes: int = 1000,
               dtype: tf.DType = tf.float32, pipeline: str = 'optimized', use_cache: bool = False,
               shuffle_buffer_size: int = 1024, num_parallel_calls: int = -1, synthetic_data: str = 'random',
               augment: Optional[resnet_preprocessing.AugmentConfig] = None,
               include_filename: bool = False, seed: Optional[int] = None, num_images: Optional[int] = None,
               fail_on_data_loss: bool = False, fast_decode: bool = False):
    split = split or default_split(is_training)
    if split not in SPLITS:
      raise ValueError('split must be one of %s, got %r' % (SPLITS, split))
    if pipeline not in PIPELINES:
      raise ValueError('pipeline must be one of %s, got %r' % (PIPELINES, pipeline))
    if synthetic_data not in SYNTHETIC_MODES:
      raise ValueError('synthetic_data must be one of %s, got %r' % (SYNTHETIC_MODES, synthetic_data))
    if num_label_classes is None:
      raise ValueError('num_label_classes is unset: set it to the number of classes in labels.txt, or give data_dir '
                       'a summary.json (written by `python -m tools.imagenet_to_gcs`) to take it from.')
    if image_size < 1 or num_label_classes < 1:
      raise ValueError('image_size and num_label_classes must be positive')
    self.is_training = is_training
    self.data_dir = data_dir
    self.split = split
    self.image_size = int(image_size)
    self.num_label_classes = int(num_label_classes)
    self.dtype = tf.as_dtype(dtype)
    self.pipeline = pipeline
    self.use_cache = use_cache
    self.shuffle_buffer_size = int(shuffle_buffer_size)
    self.augment = augment or resnet_preprocessing.AugmentConfig()
    self.num_parallel_calls = int(num_parallel_calls)
    self.synthetic_data = synthetic_data
    self.include_filename = include_filename
    self.seed = seed
    self.num_images = num_images
    self.fast_decode = fast_decode
    # Training repeats forever: all-bad data would spin silently, so fail after a long run of bad records.
    self._stats = InputAccounting('%s input' % split, MAX_CONSECUTIVE_BAD if is_training else None,
                                  fail_on_data_loss=fail_on_data_loss)
    self._info_cache: Optional[Tuple[str, Optional[dataset_info_lib.DatasetInfo]]] = None

  @classmethod
  def from_params(cls, params: Mapping[str, Any], split: str, **overrides: Any) -> 'ImageNetInput':
    """Builds the input for ``split`` ('train' | 'validation' | 'test') from run params (RESNET_CFG keys)."""
    if split not in SPLITS:
      raise ValueError('split must be one of %s, got %r' % (SPLITS, split))
    num_images = {'train': params.get('num_train_images'), 'validation': params.get('num_eval_images'),
                  'test': params.get('num_test_images')}[split]
    kwargs = dict(
        is_training=split == 'train',
        data_dir=params.get('data_dir'),
        split=split,
        image_size=params['image_size'],
        num_label_classes=params['num_label_classes'],
        dtype=tf.as_dtype(params.get('precision', 'float32')),
        pipeline=params.get('input_pipeline', 'optimized'),
        use_cache=bool(params.get('use_cache', False)),
        shuffle_buffer_size=params.get('shuffle_buffer_size', 1024),
        augment=resnet_preprocessing.AugmentConfig.from_params(params),
        num_parallel_calls=params.get('num_parallel_calls', -1),
        synthetic_data=params.get('synthetic_data', 'random'),
        include_filename=split == 'test',
        seed=params.get('random_seed'),
        num_images=num_images,
        fail_on_data_loss=bool(params.get('fail_on_data_loss', False)),
        fast_decode=bool(params.get('fast_jpeg_decode', False)))
    kwargs.update(overrides)
    return cls(**kwargs)

  # --- public state --------------------------------------------------------------------------------------------

  @property
  def skipped_records(self) -> int:
    """Bad records skipped so far by every dataset this object built (read it between training loops)."""
    return self._stats.skipped

  @property
  def skipped_by_reason(self) -> Dict[str, int]:
    return self._stats.by_reason

  @property
  def lost_records(self) -> int:
    """Records lost in damaged shards so far, counted at each read of the shard (every epoch in training).

    Known only where summary.json records the shard's record count; ``damaged_files`` names every damaged shard.
    """
    return self._stats.lost

  @property
  def damaged_files(self) -> Dict[str, Optional[int]]:
    """Damaged shards found while reading: path -> records lost (None when summary.json has no count for it)."""
    return self._stats.damaged

  @property
  def expected_records(self) -> Optional[int]:
    """Records one pass of the last built eval/predict pipeline should read (summary.json), or None if unknown."""
    return self._stats.expected_records

  @property
  def last_read_report(self) -> Optional[ReadReport]:
    """The last finished eval/predict pass: records read vs expected, good, bad, lost. None before the first."""
    return self._stats.last_read

  @property
  def fail_on_data_loss(self) -> bool:
    return self._stats.fail_on_data_loss

  @fail_on_data_loss.setter
  def fail_on_data_loss(self, value: bool) -> None:
    self._stats.fail_on_data_loss = bool(value)

  @property
  def synthetic(self) -> bool:
    return is_synthetic(self.data_dir)

  @property
  def include_background_label(self) -> bool:
    """Stored labels used as they are (class 0 = background): see has_background_class; reads summary.json once."""
    info = self.dataset_info()
    return has_background_class(self.num_label_classes, info.num_classes if info else None)

  @property
  def file_pattern(self) -> str:
    return os.path.join(self.data_dir or '', '%s-*' % self.split)

  def dataset_info(self) -> Optional[dataset_info_lib.DatasetInfo]:
    """data_dir's summary.json (+ labels.txt), read once per data_dir; None without one or for synthetic data."""
    if self.synthetic:
      return None
    if self._info_cache is None or self._info_cache[0] != self.data_dir:
      self._info_cache = (self.data_dir, dataset_info_lib.read_dataset_info(self.data_dir))
    return self._info_cache[1]

  # --- input_fn ------------------------------------------------------------------------------------------------

  def input_fn(self, params: Mapping[str, Any]) -> tf.data.Dataset:
    """A dataset of per-replica batches; reads only params['batch_size'] and the optional params['context']."""
    batch_size = check_batch_size(params)
    context = params.get('context')
    if self.synthetic:
      return self.synthetic_dataset(batch_size, context)
    return self.record_dataset(batch_size, context)

  def list_files(self) -> List[str]:
    """Sorted ``<data_dir>/<split>-*``; a missing dataset is a clear error, not an empty pipeline."""
    pattern = self.file_pattern
    files = sorted(tf.io.gfile.glob(pattern))
    if not files:
      raise FileNotFoundError(
          'No input files match %r. data_dir must hold TFRecord shards named %s-00000-of-NNNNN. Create them with '
          '`python -m tools.imagenet_to_gcs` (real images) or `python -m tools.make_fake_imagenet '
          '--output_dir=DIR` (fake data), or set data_dir=null for synthetic input.' % (pattern, self.split))
    return files

  def decode_config(self, batch_size: int, full_decode: bool = False) -> DecodeConfig:
    return DecodeConfig(
        source=TFRECORD_SOURCE, is_training=self.is_training, image_size=self.image_size, dtype=self.dtype,
        batch_size=batch_size, label_offset=0 if self.include_background_label else 1,
        num_classes=self.num_label_classes, check_labels=self.split != 'test', full_decode=full_decode,
        parallel_iterations=1 if full_decode else DECODE_PARALLEL_ITERATIONS, augment=self.augment,
        deterministic=not self.is_training or self.seed is not None, fast_decode=self.fast_decode)

  def _data_loss(self, message: str) -> None:
    """An up-front finding about damaged or missing shards: an error with fail_on_data_loss, else a warning."""
    if self.fail_on_data_loss:
      raise DataLossError(f'{message} {accounting.REPAIR_HINT}')
    logging.warning('%s %s %s', message, accounting.SKIP_NOTE, accounting.REPAIR_HINT)

  def check_listed_shards(self, files: Sequence[str]) -> None:
    """Compares the split's shard names with summary.json: a listed shard that is missing loses its records."""
    info = self.dataset_info()
    listed = sorted(n for n in (info.shards if info else {}) if n.startswith(self.split + '-'))
    if not listed:
      return
    present = {os.path.basename(f) for f in files}
    missing = [n for n in listed if n not in present]
    if missing:
      records = [info.shards[n].records for n in missing]
      lost = sum(r for r in records if r is not None)
      self._data_loss(f'{self.split} input: {len(missing)} shards listed in {info.summary_path} are missing from '
                      f'{self.data_dir} (e.g. {missing[0]}; {lost} records).')
    extra = sorted(present - set(listed))
    if extra:
      logging.warning('%s input: %d files match %s but are not in %s (e.g. %s): left over from another '
                      'conversion? They are read too.', self.split, len(extra), self.file_pattern, info.summary_path,
                      extra[0])

  def check_shard_sizes(self, files: Sequence[str]) -> List[int]:
    """Each file's size in bytes (one stat per file, concurrent), checked against summary.json when it has them.

    A size that differs from the converter's means a truncated or altered copy: reported before anything is read
    (an error with fail_on_data_loss). The sizes also let the reader tell where a shard stopped early.
    """
    with concurrent.futures.ThreadPoolExecutor(max(1, min(STAT_THREADS, len(files)))) as pool:
      sizes = list(pool.map(lambda f: int(tf.io.gfile.stat(f).length), files))
    info = self.dataset_info()
    if info is None:
      return sizes
    wrong = []
    for path, size in zip(files, sizes):
      shard = info.shard(path)
      if shard is not None and shard.bytes is not None and shard.bytes != size:
        expected = f'{shard.records} records expected' if shard.records is not None else 'record count unknown'
        wrong.append(f'{path} has {size} bytes, {info.summary_path} says {shard.bytes} ({expected})')
    if wrong:
      self._data_loss(f'{self.split} input: {len(wrong)} shards do not have the size the converter wrote: '
                      + '; '.join(wrong[:10]) + (f'; and {len(wrong) - 10} more' if len(wrong) > 10 else '') + '.')
    return sizes

  def expected_file_records(self, files: Sequence[str]) -> List[int]:
    """summary.json's record count of each file, -1 where unknown."""
    info = self.dataset_info()
    counts = []
    for path in files:
      shard = info.shard(path) if info else None
      counts.append(shard.records if shard is not None and shard.records is not None else -1)
    return counts

  def _expected_pass_records(self, counts: Sequence[int], reads_all: bool, first_n: bool, index: int,
                             count: int) -> Optional[int]:
    """Records one pass of this pipeline should yield: its files' per-shard counts (else the split size when it
    reads every file), at most the first N when it reads every file, and its every count-th of those when it
    shards by record."""
    info = self.dataset_info()
    if counts and min(counts) >= 0:
      total = sum(counts)
    elif info is not None and reads_all:
      total = info.split_images(self.split)
    else:
      return None
    if reads_all and first_n:
      total = min(total, self.num_images)
    return len(range(index, total, count)) if reads_all and count > 1 else total

  def read_records(self, files: Sequence[str], context: Optional[tf.distribute.InputContext]) -> tf.data.Dataset:
    """Serialized records for this pipeline: sharded by file (or by record when files are few), then read.

    Each file is read with its end accounted for (``count_file``): damaged shards are counted, logged, or raised.
    """
    index, count, _ = context_ids(context)
    all_files = list(files)
    files, shard_records = shard_files(files, index, count)
    first_n = not self.is_training and bool(self.num_images)  # num_eval/test_images: the first N records
    if count > 1 and first_n and self._takes_first_records():
      # The first N records of the sorted files, each exactly once: every pipeline reads them in the same order
      # and keeps its every count-th (file shards differ in size, so a per-pipeline share would miss records).
      files, shard_records = all_files, True
    if shard_records:
      logging.info('%d %s files for %d input pipelines: every pipeline reads all files and keeps every %d-th '
                   'record (pipeline %d)', len(files), self.split, count, count, index)
    else:
      logging.info('Input pipeline %d of %d reads %d %s files', index, count, len(files), self.split)
    sizes = self.check_shard_sizes(files)
    expected = self.expected_file_records(files)
    reads_all = count <= 1 or shard_records
    self._stats.expected_records = self._expected_pass_records(expected, reads_all, first_n, index, count)
    basic = self.pipeline == 'basic'
    seeded = self.seed is not None
    # Reading order must be the same on every pipeline when records are sharded, and fixed for eval and seeded runs.
    deterministic = shard_records or not self.is_training or seeded
    file_ds = tf.data.Dataset.from_tensor_slices((tf.constant(list(files), tf.string), tf.constant(sizes, tf.int64),
                                                  tf.constant(expected, tf.int64)))
    if self.is_training and not shard_records:
      file_ds = file_ds.shuffle(len(files), seed=self.seed, reshuffle_each_iteration=True)
    stats = self._stats

    def _read(path: tf.Tensor, size: tf.Tensor, expected_records: tf.Tensor) -> tf.data.Dataset:
      return read_accounted(path, size, expected_records, stats, index)

    if basic:
      records = file_ds.flat_map(_read)
    else:
      # The interleave width sets the record order: seeded runs, record sharding and eval (whose first N records
      # every pipeline must agree on) keep it independent of the machine's CPU count.
      width = len(files) if seeded or shard_records or not self.is_training else max(4, num_cpus())
      cycle = max(1, min(len(files), MAX_READ_CYCLE, width))
      records = file_ds.interleave(_read, cycle_length=cycle, block_length=1, num_parallel_calls=AUTOTUNE,
                                   deterministic=deterministic)
    if first_n and reads_all:
      records = records.take(self.num_images)
    if shard_records:
      records = records.shard(count, index)
    return records

  def _takes_first_records(self) -> bool:
    """Eval/predict of the first num_images records, fewer than the split holds (or its size is unknown)."""
    if self.is_training or not self.num_images:
      return False
    info = self.dataset_info()
    total = info.split_images(self.split) if info is not None else None
    return total is None or self.num_images < total

  def record_dataset(self, batch_size: int, context: Optional[tf.distribute.InputContext]) -> tf.data.Dataset:
    files = self.list_files()
    record_check.check_first_records(files[0])
    self.check_listed_shards(files)
    records = self.read_records(files, context)
    if self.use_cache and self.is_training:
      records = cached_in_shuffled_blocks(records, self._cache_blocks(), self.seed)
    if self.is_training:
      # Repeat, then shuffle (as the reference does without cache): the buffer stays full across epochs, so an
      # epoch boundary never drains the decoders while the buffer refills. Each repetition re-reads the files in
      # a new shuffled order (or a new order of the cached blocks).
      records = records.repeat().shuffle(self.shuffle_buffer_size, seed=self.seed, reshuffle_each_iteration=True)
      if self.seed is not None:
        records = with_augment_seeds(records, self.seed, context)
    cfg = self.decode_config(batch_size, full_decode=self.pipeline == 'basic')
    return build_batches(records, cfg, self._stats, self.include_filename, context, pipeline=self.pipeline,
                         num_parallel_calls=self.num_parallel_calls)

  def _cache_blocks(self) -> int:
    """Cached blocks one pass of this pipeline holds (its records from summary.json), or a bound when unknown."""
    records = self._stats.expected_records
    return -(-records // CACHE_BLOCK_RECORDS) if records else MAX_CACHE_BLOCKS

  def synthetic_dataset(self, batch_size: int, context: Optional[tf.distribute.InputContext]) -> tf.data.Dataset:
    """Random (uniform 0..255) or constant (zero) images with uniform labels: one batch, made once, repeated.

    Training repeats forever. Eval/predict yield ceil(num_images / global batch) batches per replica (one when
    num_images is unset), so a synthetic eval ends like a real one.
    """
    shape = (batch_size, self.image_size, self.image_size, 3)
    seed = self.seed

    def _make(_: tf.Tensor) -> Tuple[Any, tf.Tensor]:
      if self.synthetic_data == 'random':
        images = tf.random.uniform(shape, 0.0, 255.0, tf.float32, seed=seed)
      else:
        images = tf.zeros(shape, tf.float32)
      labels = tf.random.uniform([batch_size], 0, self.num_label_classes, tf.int32, seed=seed)
      batch = {'image': tf.cast(images, self.dtype), 'label': labels, 'filename': tf.fill([batch_size], '')}
      return to_outputs(batch, self.include_filename)

    ds = tf.data.Dataset.range(1).map(_make).cache()
    if self.is_training:
      ds = ds.repeat()
    else:
      _, _, per_pipeline = context_ids(context)
      replicas = context.num_replicas_in_sync if context else 1
      steps = math.ceil(self.num_images / (batch_size * replicas)) if self.num_images else 1
      ds = ds.repeat(steps * per_pipeline)
    return ds.prefetch(AUTOTUNE)


def build_batches(records: tf.data.Dataset, cfg: DecodeConfig, stats: InputAccounting, include_filename: bool,
                  context: Optional[tf.distribute.InputContext], pipeline: str = 'optimized',
                  num_parallel_calls: int = -1) -> tf.data.Dataset:
  """Raw records -> decoded, counted, padded output batches (shared by TFRecords and raw image files)."""
  basic = pipeline == 'basic'
  deterministic = cfg.deterministic or not cfg.is_training
  chunks = records.batch(cfg.batch_size, drop_remainder=cfg.is_training)

  def decode(chunk: Any) -> tf.data.Dataset:
    return decode_chunk(chunk, cfg)

  if basic:
    batches = chunks.flat_map(decode)
  else:
    parallel = AUTOTUNE if num_parallel_calls < 0 else max(1, num_parallel_calls)
    cycle = num_cpus() if num_parallel_calls < 0 else max(1, num_parallel_calls)
    batches = chunks.interleave(decode, cycle_length=max(2, cycle), block_length=1, num_parallel_calls=parallel,
                                deterministic=deterministic)
  if not cfg.is_training:
    batches = batches.concatenate(tf.data.Dataset.from_tensors(end_of_data_element(cfg)))
  batches = batches.filter(report_filter(stats, context))
  ds = batches.map(lambda b: to_outputs(b, include_filename))
  if not cfg.is_training:
    _, _, per_pipeline = context_ids(context)
    pad = to_outputs(_pad_to_batch({'image': tf.zeros((0,) + cfg.image_shape, cfg.dtype),
                                    'label': tf.zeros([0], tf.int32), 'filename': tf.zeros([0], tf.string)},
                                   cfg.batch_size), include_filename)
    ds = pad_batch_count(ds, per_pipeline, pad)
  if not basic:
    ds = ds.prefetch(AUTOTUNE)
  return ds.with_options(pipeline_options(basic, deterministic))


def pipeline_options(basic: bool, deterministic: bool) -> tf.data.Options:
  """Basic: no autotuning and no parallelism or prefetching injected by tf.data. Optimized: tf.data defaults.

  ``deterministic`` (eval, seeded training) keeps the element order through every parallel stage.
  """
  options = tf.data.Options()
  options.deterministic = deterministic
  if basic:
    options.autotune.enabled = False
    options.experimental_optimization.map_parallelization = False
    options.experimental_optimization.inject_prefetch = False
    options.experimental_optimization.parallel_batch = False
  return options


class ImageFilesInput:
  """Raw image files (JPEG, PNG, GIF, BMP, WebP) matched by a glob, for predict: eval preprocessing, label -1.

  Same ``input_fn(params)`` contract as ImageNetInput; features are ``{'image', 'filename'}``; the last batch is
  padded (filename ''); undecodable files are skipped, counted and logged.
  """

  def __init__(self, file_pattern: str, image_size: int = resnet_preprocessing.IMAGE_SIZE,
               dtype: tf.DType = tf.float32, num_parallel_calls: int = -1):
    self.file_pattern = file_pattern
    self.image_size = int(image_size)
    self.dtype = tf.as_dtype(dtype)
    self.num_parallel_calls = int(num_parallel_calls)
    self._stats = InputAccounting('image files input')

  @property
  def skipped_records(self) -> int:
    return self._stats.skipped

  @property
  def skipped_by_reason(self) -> Dict[str, int]:
    return self._stats.by_reason

  def list_files(self) -> List[str]:
    files = sorted(f for f in tf.io.gfile.glob(self.file_pattern) if not tf.io.gfile.isdir(f))
    if not files:
      raise FileNotFoundError('No image files match %r: pass a glob such as "photos/*.jpg".' % self.file_pattern)
    return files

  def input_fn(self, params: Mapping[str, Any]) -> tf.data.Dataset:
    batch_size = check_batch_size(params)
    context = params.get('context')
    index, count, _ = context_ids(context)
    files = self.list_files()[index::count]
    cfg = DecodeConfig(source=FILE_SOURCE, is_training=False, image_size=self.image_size, dtype=self.dtype,
                       batch_size=batch_size, label_offset=0, num_classes=1, check_labels=False)
    records = tf.data.Dataset.from_tensor_slices(tf.constant(files, tf.string))
    return build_batches(records, cfg, self._stats, include_filename=True, context=context,
                         num_parallel_calls=self.num_parallel_calls)
