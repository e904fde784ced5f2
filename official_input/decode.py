"""Decoding batches of records into model inputs, surviving bad records; and the batch stage that uses it.

Records are batched *before* decoding, and a whole batch is decoded in one function call (``tf.map_fn`` over the
batch). Throughput equals a per-record parallel map plus map-and-batch fusion (measured: same CPU per image), and it
gives a cheap, exact way to survive bad data: a batch whose decode fails (corrupt JPEG, garbage bytes, a label out
of range) is re-decoded record by record, the bad records are dropped, counted and logged with their filename and
reason, and the batch is refilled. The common, clean path pays nothing for this.

- Training refills a batch with duplicates of its good records (so shapes stay static and the loss never sees a
  fake label); eval pads with zero images and label -1 instead, so every good record is seen exactly once.
- Eval ends with an end-of-data marker batch (status END_OF_DATA) so the counting filter (``accounting``) closes
  the pass, and whole padding batches are appended so that every replica of a worker gets the same number of
  batches.
"""
import dataclasses
from typing import Any, Callable, Dict, Optional, Tuple

import tensorflow as tf

from official_input import ordering
from official_input import parallelism
from official_input import resnet_preprocessing
from official_input.accounting import (BAD_FORMAT, BAD_LABEL, END_OF_DATA, OK, TOO_MANY_CLASSES, UNDECODABLE,
                                       UNPARSEABLE, InputAccounting)
from official_input import sources
from official_input.sources import RecordSource


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
  crop_fraction: float = resnet_preprocessing.CROP_FRACTION  # eval: share of the short side the centre crop keeps
  multi_label: bool = False    # labels are multi-hot rows [num_classes] (0/1; padding and unknown: all -1)

  @property
  def image_shape(self) -> Tuple[int, int, int]:
    return (self.image_size, self.image_size, 3)

  @property
  def label_shape(self) -> Tuple[int, ...]:
    """One record's label: a class id, or a multi-hot row."""
    return (self.num_classes,) if self.multi_label else ()


def unknown_labels(cfg: DecodeConfig, count: Any = None) -> tf.Tensor:
  """The label of padding and unlabelled records (-1: a class id, or a multi-hot row of -1); ``count`` rows."""
  shape = list(cfg.label_shape) if count is None else tf.concat([[count], tf.constant(cfg.label_shape, tf.int32)], 0)
  return tf.fill(shape, -1)


def _model_ids(stored: tf.Tensor, cfg: DecodeConfig) -> tf.Tensor:
  return tf.cast(stored, tf.int32) - cfg.label_offset


def record_labels(stored: tf.Tensor, cfg: DecodeConfig) -> tf.Tensor:
  """Stored 1-based labels to model labels: minus 1, unless the model has a background class (1001 classes).
  Multi-label: each record's list of them [..., n] (NO_LABEL-padded) to a multi-hot row [..., num_classes]."""
  if cfg.multi_label:
    if not cfg.source.labelled:
      return unknown_labels(cfg, tf.size(stored)) if stored.shape.rank else unknown_labels(cfg)
    ids = tf.where(stored == sources.NO_LABEL, -1, _model_ids(stored, cfg))
    # one_hot of -1 or of an id past the head is a zero row; record_status names the latter.
    return tf.minimum(tf.reduce_sum(tf.one_hot(ids, cfg.num_classes, dtype=tf.int32), axis=-2), 1)
  labels = _model_ids(stored, cfg)
  if not cfg.check_labels:
    return tf.where(labels >= 0, labels, -1)
  return labels


def _label_problems(stored: tf.Tensor, cfg: DecodeConfig) -> Tuple[tf.Tensor, tf.Tensor]:
  """(a label out of range, a label past the head) per record."""
  ids = _model_ids(stored, cfg)
  if cfg.multi_label:  # any of the record's labels; an empty list is a negative, a valid record
    present = stored != sources.NO_LABEL
    return (tf.reduce_any(tf.logical_and(present, ids < 0), axis=-1),
            tf.reduce_any(tf.logical_and(present, ids >= cfg.num_classes), axis=-1))
  return ids < 0, ids >= cfg.num_classes


def record_status(encoded: tf.Tensor, stored: tf.Tensor, cfg: DecodeConfig) -> tf.Tensor:
  """OK, BAD_FORMAT or BAD_LABEL per record, from cheap checks that never raise (works on scalars or vectors)."""
  format_ok = resnet_preprocessing.image_format_ok(encoded)
  status = tf.where(format_ok, OK, BAD_FORMAT)
  if cfg.check_labels:
    below, past = _label_problems(stored, cfg)
    status = tf.where(tf.logical_and(format_ok, tf.logical_or(below, past)), BAD_LABEL, status)
    status = tf.where(tf.logical_and(format_ok, past), TOO_MANY_CLASSES, status)
  return tf.cast(status, tf.int32)


def _preprocess(encoded: tf.Tensor, cfg: DecodeConfig, seed: Optional[tf.Tensor] = None) -> tf.Tensor:
  """One image; ``seed`` (int [2]) makes the training augmentation stateless and reproducible."""
  return resnet_preprocessing.preprocess_image(encoded, cfg.is_training, cfg.image_size, tf.float32,
                                               full_decode=cfg.full_decode, augment=cfg.augment, seed=seed,
                                               fast_decode=cfg.fast_decode, crop_fraction=cfg.crop_fraction)


def _split_chunk(chunk: Any) -> Tuple[tf.Tensor, Optional[tf.Tensor]]:
  """A chunk is a batch of records, or {'record': [k], 'seed': [k, 2]} when the augmentation is seeded."""
  if isinstance(chunk, dict):
    return chunk['record'], chunk['seed']
  return chunk, None


def pad_to_batch(batch: Dict[str, tf.Tensor], batch_size: int) -> Dict[str, tf.Tensor]:
  """Pads the per-record fields to batch_size rows: zero images, label -1, filename ''."""
  pad = batch_size - tf.shape(batch['label'])[0]
  out = dict(batch)
  out['image'] = tf.pad(batch['image'], [[0, pad], [0, 0], [0, 0], [0, 0]])
  out['label'] = tf.pad(batch['label'], [[0, pad]] + [[0, 0]] * (batch['label'].shape.rank - 1), constant_values=-1)
  out['filename'] = tf.concat([batch['filename'], tf.fill([pad], '')], axis=0)
  return out


def _set_batch_shape(batch: Dict[str, tf.Tensor], cfg: DecodeConfig) -> Dict[str, tf.Tensor]:
  out = dict(batch)
  out['image'] = tf.ensure_shape(batch['image'], (cfg.batch_size,) + cfg.image_shape)
  out['label'] = tf.ensure_shape(batch['label'], (cfg.batch_size,) + cfg.label_shape)
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
  status = record_status(encoded, stored, cfg)
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
    batch = pad_to_batch(batch, cfg.batch_size)
  return _set_batch_shape(batch, cfg)


def _record_element(image: tf.Tensor, label: Any, name: tf.Tensor, status) -> Dict[str, tf.Tensor]:
  return {'image': image, 'label': tf.cast(label, tf.int32), 'filename': name,
          'status': tf.constant(status, tf.int32) if isinstance(status, int) else status}


def _decode_one(record: tf.Tensor, cfg: DecodeConfig, seed: Optional[tf.Tensor] = None) -> Dict[str, tf.Tensor]:
  """One record with its status; bad-but-harmless records get a zero image instead of raising."""
  encoded, stored, name = cfg.source.parse_one(record)
  label = record_labels(stored, cfg)
  status = record_status(encoded, stored, cfg)
  image = tf.cond(tf.equal(status, OK), lambda: _preprocess(encoded, cfg, seed),
                  lambda: tf.zeros(cfg.image_shape, tf.float32))
  return _record_element(image, label, name, status)


def _decode_one_or_marker(record: tf.Tensor, cfg: DecodeConfig, seed: Optional[tf.Tensor] = None) -> tf.data.Dataset:
  """Exactly one element per record: the decoded record, or a marker saying why it failed."""
  zeros = tf.zeros(cfg.image_shape, tf.float32)
  decoded = tf.data.Dataset.from_tensors(record).map(
      lambda r: _decode_one(r, cfg, seed)).ignore_errors(log_warning=True)
  undecodable = tf.data.Dataset.from_tensors(record).map(
      lambda r: _record_element(zeros, unknown_labels(cfg), cfg.source.name_of(r), UNDECODABLE)).ignore_errors()
  unparseable = tf.data.Dataset.from_tensors(_record_element(zeros, unknown_labels(cfg), tf.constant(''),
                                                             UNPARSEABLE))
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
    out = pad_to_batch(out, cfg.batch_size)
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
          'label': unknown_labels(cfg, cfg.batch_size),
          'filename': tf.fill([cfg.batch_size], ''),
          'status': tf.constant([END_OF_DATA], tf.int32),
          'record_name': tf.constant([''])}


def report_filter(stats: InputAccounting, context: Optional[tf.distribute.InputContext]
                  ) -> Callable[[Dict[str, tf.Tensor]], tf.Tensor]:
  """A filter predicate that counts each batch's bad records (TF ops) and drops batches without a good record."""
  counters = stats.pipeline(ordering.context_ids(context)[0])

  def _predicate(batch: Dict[str, tf.Tensor]) -> tf.Tensor:
    return stats.count_batch(counters, batch['status'], batch['record_name'])
  return _predicate


def to_outputs(batch: Dict[str, tf.Tensor], include_filename: bool) -> Tuple[Any, tf.Tensor]:
  """(images, labels), or ({'image', 'filename'}, labels) for predict."""
  if include_filename:
    return {'image': batch['image'], 'filename': batch['filename']}, batch['label']
  return batch['image'], batch['label']


def build_batches(records: tf.data.Dataset, cfg: DecodeConfig, stats: InputAccounting, include_filename: bool,
                  context: Optional[tf.distribute.InputContext], execution: parallelism.Execution,
                  num_parallel_calls: int = -1) -> tf.data.Dataset:
  """Raw records -> decoded, counted, padded output batches (shared by TFRecords and raw image files)."""
  deterministic = cfg.deterministic or not cfg.is_training
  # The pipeline's functions are tensor ops (tf.cond, tf.map_fn): AutoGraph converting them (and every function
  # they call) cost ~1-2 s at every start. Inside an unconverted function nothing nested is converted either.
  plain = tf.autograph.experimental.do_not_convert
  chunks = records.batch(cfg.batch_size, drop_remainder=cfg.is_training)
  batches = execution.decode(chunks, plain(lambda chunk: decode_chunk(chunk, cfg)), num_parallel_calls, deterministic)
  if not cfg.is_training:
    batches = batches.concatenate(tf.data.Dataset.from_tensors(end_of_data_element(cfg)))
  batches = batches.filter(plain(report_filter(stats, context)))
  ds = batches.map(plain(lambda b: to_outputs(b, include_filename)))
  if not cfg.is_training:
    _, _, per_pipeline = ordering.context_ids(context)
    pad = to_outputs(pad_to_batch({'image': tf.zeros((0,) + cfg.image_shape, cfg.dtype),
                                   'label': tf.zeros((0,) + cfg.label_shape, tf.int32),
                                   'filename': tf.zeros([0], tf.string)},
                                  cfg.batch_size), include_filename)
    ds = ordering.pad_batch_count(ds, per_pipeline, pad)
  return execution.finish(ds, deterministic)
