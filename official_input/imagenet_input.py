"""The ImageNet input pipeline: TFRecord shards (or synthetic tensors) to batches for one replica.

``ImageNetInput(...).input_fn(params)`` returns a ``tf.data.Dataset`` of ``(images [B, S, S, 3], labels int32 [B])``
(multi-label data: multi-hot labels [B, K]) for a per-replica batch ``B = params['batch_size']`` and the input context the Estimator gives (``params.context``,
``resnet.estimator.spec``), so it plugs into ``strategy.distribute_datasets_from_function`` through the Estimator.

``ImageNetInput.record_dataset`` is the whole pipeline, top to bottom; each stage lives in a module of one job:

- ``shards``: the split's files, checked against summary.json, each read with its end accounted (damaged shards).
- ``ordering``: which files or records this pipeline reads and in what order: shards, shuffles, the block cache,
  per-record augmentation seeds (determinism).
- ``decode``: batches of records decoded, bad records dropped, counted and refilled, eval padded.
- ``accounting``: the skip and loss counters, kept in TF ops so the dataset holds no Python (TPU input hosts).
- ``parallelism`` / ``basic_pipeline``: how the read and decode stages run (parallel, or sequential for comparison).
- ``sources`` (TFRecords or raw files as records), ``synthetic`` (data_dir unset), ``image_files`` (predict on a
  glob of images).

Counts of skipped and lost records are read between training loops through the properties below.
``fail_on_data_loss=True`` turns a damaged shard into an error naming the file and the fix instead of a skip.
"""
import random
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from absl import logging
import tensorflow as tf

from official_input import accounting
from official_input import basic_pipeline
from official_input import contract
from official_input import dataset_info as dataset_info_lib
from official_input import decode
from official_input import ordering
from official_input import parallelism
from official_input import record_check
from official_input import resnet_preprocessing
from official_input import shards
from official_input import sources
from official_input import synthetic
# The pipeline's public names, importable from here as before the split.
from official_input.accounting import DataLossError, InputAccounting, ReadReport  # pylint: disable=unused-import
from official_input.dataset_info import has_background_class, is_synthetic  # pylint: disable=unused-import
from official_input.decode import DecodeConfig, decode_batch  # pylint: disable=unused-import
from official_input.image_files import ImageFilesInput  # pylint: disable=unused-import
from official_input.shards import READ_BUFFER_BYTES  # pylint: disable=unused-import

SPLITS = ('train', 'validation', 'test')
EXECUTIONS = {e.name: e for e in (parallelism.PARALLEL, basic_pipeline.SEQUENTIAL)}
PIPELINES = tuple(EXECUTIONS)
SYNTHETIC_MODES = synthetic.MODES
# Training: fail instead of spinning forever when this many records in a row are bad (wrong data or config).
MAX_CONSECUTIVE_BAD = 1000
# ImageNetInput's constructor arguments read from run params by from_params (argument <- params key); the
# constructor's defaults are the params' defaults (tests/official_input/test_imagenet_input.py holds them equal).
PARAM_ARGS = {'data_dir': 'data_dir', 'image_size': 'image_size', 'num_label_classes': 'num_label_classes',
              'pipeline': 'input_pipeline', 'use_cache': 'use_cache', 'shuffle_buffer_size': 'shuffle_buffer_size',
              'num_parallel_calls': 'num_parallel_calls', 'synthetic_data': 'synthetic_data', 'seed': 'random_seed',
              'fail_on_data_loss': 'fail_on_data_loss', 'fast_decode': 'fast_jpeg_decode', 'task': 'task'}
SPLIT_SIZE_PARAMS = {'train': 'num_train_images', 'validation': 'num_eval_images', 'test': 'num_test_images'}


def default_split(is_training: bool) -> str:
  return 'train' if is_training else 'validation'


class ImageNetInput(accounting.ReportsSkips):
  """ImageNet TFRecords (``<data_dir>/<split>-*``) or synthetic tensors, as an ``input_fn(params)``.

  Keyword arguments: ``split`` defaults to train/validation by ``is_training``; ``num_label_classes`` one more than
  the data's classes (1001 for ImageNet) keeps the stored 1-based labels (class 0 = background), anything else
  subtracts 1; ``dtype`` is the image dtype (values stay 0..255); ``pipeline`` 'optimized' | 'basic';
  ``num_parallel_calls`` -1 = AUTOTUNE; ``synthetic_data`` 'random' | 'constant' applies when data_dir is None, '',
  'null' or 'None'; ``augment`` the training augmentation; ``include_filename`` makes the features
  ``{'image', 'filename'}`` (predict); ``seed`` makes the input deterministic (``ordering``); ``num_images`` reads
  the first N records in eval/predict and sizes a synthetic eval; ``every_nth`` keeps every n-th of the records an
  eval/predict pass reads, before any is decoded (a sample spread over the split); ``fail_on_data_loss``
  makes a damaged shard an error instead of a counted skip. Attributes may be changed after construction;
  ``input_fn`` reads them when called.
  """

  def __init__(self, *, is_training: bool, data_dir: Optional[str] = None, split: Optional[str] = None,
               image_size: int = resnet_preprocessing.IMAGE_SIZE, num_label_classes: int = 1000,
               dtype: tf.DType = tf.float32, pipeline: str = 'optimized', use_cache: bool = False,
               shuffle_buffer_size: int = 1024, num_parallel_calls: int = -1, synthetic_data: str = 'random',
               augment: Optional[resnet_preprocessing.AugmentConfig] = None,
               include_filename: bool = False, seed: Optional[int] = None, num_images: Optional[int] = None,
               fail_on_data_loss: bool = False, fast_decode: bool = False, every_nth: int = 1,
               crop_fraction: float = resnet_preprocessing.CROP_FRACTION, task: Optional[str] = None,
               augment_seed: Optional[int] = None):
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
    self.crop_fraction = float(crop_fraction)  # eval: share of the short side the centre crop keeps
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
    # The seed of the per-record augmentation draws, when it differs from the order's (``seed``): progressive
    # resizing's stages read one order, each with its own draws (resnet/wiring.py).
    self.augment_seed = seed if augment_seed is None else augment_seed
    self.num_images = num_images
    self.fast_decode = fast_decode
    if every_nth < 1 or (every_nth > 1 and is_training):
      raise ValueError(f'every_nth={every_nth}: a positive sampling stride, for eval and predict inputs only')
    self.every_nth = int(every_nth)
    if task not in (None,) + dataset_info_lib.TASKS:
      raise ValueError(f'task must be one of {dataset_info_lib.TASKS} (or None: the data\'s), got {task!r}')
    self.task = task
    # Training repeats forever: all-bad data would spin silently, so fail after a long run of bad records.
    self._stats = InputAccounting('%s input' % split, MAX_CONSECUTIVE_BAD if is_training else None,
                                  fail_on_data_loss=fail_on_data_loss)
    self._info_cache: Optional[Tuple[str, Optional[dataset_info_lib.DatasetInfo]]] = None
    self._drawn_seed: Optional[int] = None

  @classmethod
  def from_params(cls, params: Mapping[str, Any], split: str, **overrides: Any) -> 'ImageNetInput':
    """Builds the input for ``split`` ('train' | 'validation' | 'test') from complete run params (every PARAMS key)."""
    if split not in SPLITS:
      raise ValueError('split must be one of %s, got %r' % (SPLITS, split))
    kwargs = {arg: params[key] for arg, key in PARAM_ARGS.items()}
    size, crop_fraction = ((resnet_preprocessing.image_size(params, training=True), resnet_preprocessing.CROP_FRACTION)
                           if split == 'train' else resnet_preprocessing.eval_view(params))
    kwargs.update(is_training=split == 'train', split=split, dtype=tf.as_dtype(params['precision']),
                  image_size=size, crop_fraction=crop_fraction,
                  augment=resnet_preprocessing.AugmentConfig.from_params(params), include_filename=split == 'test',
                  num_images=params[SPLIT_SIZE_PARAMS[split]])
    kwargs.update(overrides)
    return cls(**kwargs)

  # --- public state (skipped_records, skipped_by_reason: accounting.ReportsSkips) ---------------------------

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
    return shards.file_pattern(self.data_dir, self.split)

  @property
  def multi_label(self) -> bool:
    """Labels are multi-hot rows [B, num_label_classes] (padding: rows of -1): the task given, else the data's."""
    info = self.dataset_info()
    return (self.task or (info.task if info else 'single_label')) == 'multi_label'

  def dataset_info(self) -> Optional[dataset_info_lib.DatasetInfo]:
    """data_dir's summary.json (+ labels.txt), read once per data_dir; None without one or for synthetic data."""
    if self.synthetic:
      return None
    if self._info_cache is None or self._info_cache[0] != self.data_dir:
      self._info_cache = (self.data_dir, dataset_info_lib.read_dataset_info(self.data_dir))
    return self._info_cache[1]

  @property
  def execution(self) -> parallelism.Execution:
    return EXECUTIONS[self.pipeline]

  # --- input_fn ------------------------------------------------------------------------------------------------

  def input_fn(self, params: Mapping[str, Any]) -> tf.data.Dataset:
    """A dataset of per-replica batches; reads params['batch_size'] and the Estimator's input context."""
    batch_size = contract.check_batch_size(params)
    context = contract.input_context(params)
    if self.synthetic:
      return synthetic.synthetic_dataset(
          batch_size=batch_size, image_size=self.image_size, num_classes=self.num_label_classes, dtype=self.dtype,
          mode=self.synthetic_data, seed=self.seed, is_training=self.is_training, num_images=self.num_images,
          include_filename=self.include_filename, context=context, multi_label=self.multi_label)
    return self.record_dataset(batch_size, context, contract.start_step(params), contract.input_seed(params))

  def record_dataset(self, batch_size: int, context: Optional[tf.distribute.InputContext], start_step: int = 0,
                     input_seed: Optional[int] = None) -> tf.data.Dataset:
    """The whole pipeline: files, checks, records in order (training: endless epochs from ``start_step``'s place,
    ``training_records``), seeds, decoded batches."""
    files = self.list_files()
    record_check.check_first_records(files[0])
    self._data_loss(shards.missing_shards(files, self.dataset_info(), self.data_dir, self.split))
    if self.is_training:
      _, _, per_pipeline = ordering.context_ids(context)
      start = start_step * batch_size * per_pipeline  # each step takes a batch of each replica this pipeline feeds
      records = self.training_records(files, context, start, input_seed)
      if self.seed is not None:
        records = ordering.with_augment_seeds(records, self.augment_seed, context, start)
    else:
      records = self.read_records(files, context)
    return decode.build_batches(records, self.decode_config(batch_size), self._stats, self.include_filename,
                                context, execution=self.execution, num_parallel_calls=self.num_parallel_calls)

  def list_files(self) -> List[str]:
    return shards.list_files(self.data_dir, self.split)

  def _checked_files(self, files: Sequence[str], index: int, count: int, first_n: Optional[int]
                     ) -> Tuple[List[str], bool, List[int], List[int]]:
    """This pipeline's files (and whether it shards by record), their sizes checked against summary.json, their
    expected record counts (-1 unknown), and the records the pass should give (``_stats.expected_records``)."""
    files, shard_records = self._pipeline_files(files, index, count)
    info = self.dataset_info()
    sizes = shards.file_sizes(files)
    self._data_loss(shards.wrong_sizes(files, sizes, info, self.split))
    expected = shards.file_records(files, info)
    self._stats.expected_records = shards.pass_records(
        expected, info.split_images(self.split) if info else None, count <= 1 or shard_records, first_n, index,
        count)
    return files, shard_records, sizes, expected

  def read_records(self, files: Sequence[str], context: Optional[tf.distribute.InputContext]) -> tf.data.Dataset:
    """Serialized records for this pipeline: sharded by file (or by record when files are few), then read.

    Each file is read with its end accounted for (``count_file``): damaged shards are counted, logged, or raised.
    """
    index, count, _ = ordering.context_ids(context)
    first_n = self.num_images if self._first_records() else None
    files, shard_records, sizes, expected = self._checked_files(files, index, count, first_n)
    reads_all = count <= 1 or shard_records
    # Reading order must be the same on every pipeline when records are sharded, and fixed for eval and seeded runs.
    fixed_order = shard_records or not self.is_training or self.seed is not None
    file_ds = tf.data.Dataset.from_tensor_slices((tf.constant(list(files), tf.string), tf.constant(sizes, tf.int64),
                                                  tf.constant(expected, tf.int64)))
    if self.is_training and not shard_records:
      file_ds = file_ds.shuffle(len(files), seed=self.seed, reshuffle_each_iteration=True)
    stats = self._stats

    @tf.autograph.experimental.do_not_convert  # the pipeline's functions are tensor ops: see decode.build_batches
    def _read(path: tf.Tensor, size: tf.Tensor, expected_records: tf.Tensor) -> tf.data.Dataset:
      return shards.read_accounted(path, size, expected_records, stats, index)

    records = self.execution.read(file_ds, _read, ordering.read_width(len(files), fixed_order), fixed_order)
    if first_n and reads_all:
      records = records.take(first_n)
    if shard_records:
      records = records.shard(count, index)
    if self.every_nth > 1:  # a sample: the other records are never decoded
      records = records.shard(self.every_nth, 0)
    return records

  def training_records(self, files: Sequence[str], context: Optional[tf.distribute.InputContext], start: int = 0,
                       input_seed: Optional[int] = None) -> tf.data.Dataset:
    """This pipeline's endless training records from position ``start`` (the records it gave before a resume).

    Every training run reads in a fixed order, a function of the seed (random_seed, else the run's saved
    ``input_seed``, else one drawn for this object) and the epoch (``ordering.training_records``), so that a
    resumed run goes on where it stopped: an interrupted epoch is finished, not started over, and each record is
    read once an epoch whatever the resumes.
    """
    index, count, _ = ordering.context_ids(context)
    files, shard_records, sizes, expected = self._checked_files(files, index, count, None)
    stats = self._stats

    @tf.autograph.experimental.do_not_convert
    def _read(path: tf.Tensor, size: tf.Tensor, expected_records: tf.Tensor, skip: tf.Tensor) -> tf.data.Dataset:
      return shards.read_accounted(path, size, expected_records, stats, index, skip)

    execution = self.execution
    order = ordering.TrainingOrder(
        seed=self.order_seed(input_seed), window=self.shuffle_buffer_size,
        width=execution.read_width(ordering.read_width(len(files), fixed_order=True)),
        shard=(count, index) if shard_records else (1, 0),
        cache_blocks=ordering.cache_blocks(self._stats.expected_records) if self.use_cache else None)
    counts = None
    if start and min(expected, default=0) < 0:   # a resume without summary.json's counts: the headers give them
      counts, damaged = shards.record_counts(files, expected)
      for problem in damaged:
        self._data_loss(f'{self.split} input, counting records to resume: {problem}.')
    records, how = ordering.training_records(
        (files, sizes, expected), _read, lambda ds, fn, width: execution.read(ds, fn, width, True), order, start,
        counts)
    logging.info('Training input pipeline %d of %d: %s.', index, count, how)
    return records

  def order_seed(self, input_seed: Optional[int] = None) -> int:
    """The seed of the training order: random_seed, else the run's (``input_seed``), else one drawn once here."""
    if self.seed is not None:
      return int(self.seed)
    if input_seed is not None:
      return int(input_seed)
    if self._drawn_seed is None:
      self._drawn_seed = random.SystemRandom().randrange(1, 2 ** 31)
    return self._drawn_seed

  def _pipeline_files(self, files: Sequence[str], index: int, count: int) -> Tuple[List[str], bool]:
    """This pipeline's files, and whether it keeps every count-th record of them instead of whole files."""
    if count > 1 and self._first_records() and self._fewer_than_the_split():
      # The first N records of the sorted files, each exactly once: every pipeline reads them in the same order
      # and keeps its every count-th (file shards differ in size, so a per-pipeline share would miss records).
      mine, shard_records = list(files), True
    else:
      mine, shard_records = ordering.shard_files(files, index, count)
    if shard_records:
      logging.info('%d %s files for %d input pipelines: every pipeline reads all files and keeps every %d-th '
                   'record (pipeline %d)', len(mine), self.split, count, count, index)
    else:
      logging.info('Input pipeline %d of %d reads %d %s files', index, count, len(mine), self.split)
    return mine, shard_records

  def _first_records(self) -> bool:
    """num_eval_images / num_test_images: eval and predict read the first N records."""
    return not self.is_training and bool(self.num_images)

  def _fewer_than_the_split(self) -> bool:
    info = self.dataset_info()
    total = info.split_images(self.split) if info is not None else None
    return total is None or self.num_images < total

  def decode_config(self, batch_size: int) -> decode.DecodeConfig:
    execution = self.execution
    multi_label = self.multi_label
    return decode.DecodeConfig(
        source=sources.MULTI_LABEL_TFRECORD_SOURCE if multi_label else sources.TFRECORD_SOURCE,
        multi_label=multi_label, is_training=self.is_training, image_size=self.image_size, dtype=self.dtype,
        batch_size=batch_size, label_offset=0 if self.include_background_label else 1,
        num_classes=self.num_label_classes, check_labels=self.split != 'test', full_decode=execution.full_decode,
        parallel_iterations=execution.decode_parallel_iterations, augment=self.augment,
        # Batches leave in the order their records were read, seeded or not: the batches a run trained on are then
        # the first ones of its order, which a resumed run skips exactly (a reordered decode would repeat some and
        # lose others at each resume).
        deterministic=True, fast_decode=self.fast_decode,
        crop_fraction=self.crop_fraction)

  def _data_loss(self, message: Optional[str]) -> None:
    """An up-front finding about damaged or missing shards: an error with fail_on_data_loss, else a warning."""
    if message is None:
      return
    if self.fail_on_data_loss:
      raise DataLossError(f'{message} {accounting.REPAIR_HINT}')
    logging.warning('%s %s %s', message, accounting.SKIP_NOTE, accounting.REPAIR_HINT)
