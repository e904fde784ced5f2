"""Counting what the input pipeline skipped or lost, in TensorFlow ops only (no Python inside the dataset).

A TPU host, a Colab TPU or a pod's other hosts run the dataset where no Python interpreter exists (a
``tf.numpy_function`` there fails with "No registered 'PyFunc' OpKernel"), and a Python call per batch also costs
input throughput. So the dataset graph keeps its counts in resource variables (created on the input pipeline's
own device), prints warnings to stderr with ``tf.print`` (a C++ kernel), and stops a run with an
assertion whose message names the record, the shard and the fix. Python reads the variables between loops.

Per input pipeline: skipped records by reason, the current run of consecutive bad records (training fails after
too many: wrong data or config), records lost in damaged shards with the shards' names, and for each finite pass
(eval, predict) records read, good, bad and lost, logged at the pass's end against what summary.json expects.
"""
import dataclasses
import sys
from typing import Dict, List, Optional

import tensorflow as tf

# Per-record status codes.
OK = 0
BAD_FORMAT = 1    # empty, or not JPEG/PNG/GIF/BMP/WebP bytes
BAD_LABEL = 2     # label missing or outside [0, num_label_classes)
UNDECODABLE = 3   # the decoder failed (truncated or corrupt image)
UNPARSEABLE = 4   # not a tf.train.Example, or an unreadable file
END_OF_DATA = 5   # eval/predict sentinel: the data is exhausted, log the pass's summary
TOO_MANY_CLASSES = 6  # label >= num_label_classes: a config mismatch, not a bad record -> an error, never a skip
REASONS = {BAD_FORMAT: 'not an image', BAD_LABEL: 'label out of range', UNDECODABLE: 'undecodable image',
           UNPARSEABLE: 'unparseable record'}
_REASON_TABLE = [REASONS.get(code, '') for code in range(TOO_MANY_CLASSES + 1)]

# Each bad record is logged with its filename, the first LOG_FIRST_BAD of them, then every LOG_BAD_EVERY-th.
LOG_FIRST_BAD = 100
LOG_BAD_EVERY = 1000
REPAIR_HINT = 'Re-copy the shard from its source, or re-convert it with `python -m tools.imagenet_to_gcs`.'
SKIP_NOTE = 'Skipping the lost records (fail_on_data_loss=True makes this an error).'
LABEL_FIX = ('the data has more classes than the model. Set num_label_classes to the number of classes in '
             'labels.txt (stored labels are 1-based; 1001 keeps a background class 0).')


class DataLossError(ValueError):
  """A shard is damaged (truncated, corrupt or not the size summary.json recorded) and fail_on_data_loss is set."""


@dataclasses.dataclass(frozen=True)
class ReadReport:
  """One finished eval/predict pass: records read vs summary.json's count, and what was dropped."""
  read: int
  expected: Optional[int]   # None when summary.json does not record the split's shards or size
  good: int
  bad: int                  # skipped bad records (undecodable, not an image, label out of range, unparseable)
  lost: int                 # records lost in damaged shards (known only with summary.json's per-shard counts)

  def __str__(self) -> str:
    expected = f' of {self.expected} expected (summary.json)' if self.expected is not None else ''
    return (f'read {self.read} records{expected}: {self.good} good, {self.bad} bad skipped, '
            f'{self.lost} lost in damaged shards')


def _warn(message: tf.Tensor) -> tf.Operation:
  """A warning from inside the dataset: straight to the process's stderr (C++, so TPU hosts can run it too; not
  subject to TF_CPP_MIN_LOG_LEVEL, which would hide data loss)."""
  return tf.print(tf.strings.join(['WARNING input: ', message]), output_stream=sys.stderr)


def _count(value: int, dtype=tf.int64, shape=None) -> tf.Variable:
  return tf.Variable(value, dtype=dtype, trainable=False, shape=shape)


class _PipelineCounters:
  """The variables of one input pipeline, on the device its dataset runs on."""

  def __init__(self):
    self.by_reason = _count([0] * len(_REASON_TABLE))
    self.consecutive_bad = _count(0)
    self.lost = _count(0)
    # Damaged shard -> records lost (-1 unknown): a table, whose inserts are atomic (readers run in parallel).
    self.damaged = tf.lookup.experimental.MutableHashTable(tf.string, tf.int64, default_value=-2)
    self.pass_counts = _count([0, 0, 0])       # good, bad, lost in the current pass
    self.last_pass = _count([0, 0, 0, 0])      # finished (0/1), good, bad, lost of the last finished pass


class InputAccounting:
  """Counts of one input (a split) over all its pipelines; the dataset functions call ``count_batch`` and
  ``count_file``; the run reads the properties between loops."""

  def __init__(self, name: str = 'input', fail_after_consecutive_bad: Optional[int] = None,
               fail_on_data_loss: bool = False):
    self.name = name
    self.fail_after = fail_after_consecutive_bad
    self.fail_on_data_loss = fail_on_data_loss
    self.expected_records: Optional[int] = None  # one pass's records (summary.json), set when a pipeline is built
    self._pipelines: Dict[int, _PipelineCounters] = {}

  def pipeline(self, pipeline_id: int = 0) -> _PipelineCounters:
    """This pipeline's counters, created (eagerly, on the current device) when it is first built."""
    if pipeline_id not in self._pipelines:
      with tf.init_scope():
        self._pipelines[pipeline_id] = _PipelineCounters()
    return self._pipelines[pipeline_id]

  # --- read between loops -------------------------------------------------------------------------------------
  def _total(self, read) -> List[int]:
    values = [read(c).numpy().tolist() for c in self._pipelines.values()]
    return [sum(column) for column in zip(*values)] if values else []

  @property
  def by_reason(self) -> Dict[str, int]:
    counts = self._total(lambda c: c.by_reason) or [0] * len(_REASON_TABLE)
    return {REASONS[code]: counts[code] for code in REASONS}

  @property
  def skipped(self) -> int:
    return sum(self.by_reason.values())

  @property
  def lost(self) -> int:
    return sum(int(c.lost.numpy()) for c in self._pipelines.values())

  @property
  def damaged(self) -> Dict[str, Optional[int]]:
    out = {}
    for c in self._pipelines.values():
      names, losts = c.damaged.export()
      for name, lost in zip(names.numpy(), losts.numpy()):
        out[name.decode('utf-8', 'replace')] = None if lost < 0 else int(lost)
    return out

  @property
  def last_read(self) -> Optional[ReadReport]:
    finished = [c.last_pass.numpy().tolist() for c in self._pipelines.values()]
    finished = [f for f in finished if f[0]]
    if not finished:
      return None
    good, bad, lost = (sum(f[i] for f in finished) for i in (1, 2, 3))
    return ReadReport(read=good + bad, expected=self.expected_records, good=good, bad=bad, lost=lost)

  # --- inside the dataset -------------------------------------------------------------------------------------
  def count_batch(self, counters: _PipelineCounters, status: tf.Tensor, names: tf.Tensor) -> tf.Tensor:
    """Counts one decoded batch's records by status and logs the bad ones; True keeps the batch (it has a good
    record). An END_OF_DATA sentinel closes the pass (logged, kept as the last pass) and is dropped."""
    status = tf.reshape(status, [-1])
    end = tf.logical_and(tf.equal(tf.size(status), 1), tf.equal(status[0], END_OF_DATA))
    clean = tf.reduce_all(tf.equal(status, OK))

    def count_clean() -> tf.Tensor:  # the common case, kept to two variable updates
      good = tf.size(status, out_type=tf.int64)
      with tf.control_dependencies([counters.consecutive_bad.assign(0),
                                    counters.pass_counts.assign_add(tf.stack([good, 0, 0]))]):
        return tf.constant(True)

    return tf.case([(end, lambda: self._end_pass(counters)), (clean, count_clean)],
                   default=lambda: self._count_records(counters, status, names), exclusive=False)

  def _count_records(self, counters: _PipelineCounters, status: tf.Tensor, names: tf.Tensor) -> tf.Tensor:
    too_many = tf.equal(status, TOO_MANY_CLASSES)
    first = tf.gather(names, tf.argmax(tf.cast(too_many, tf.int32)))
    check = tf.debugging.Assert(tf.logical_not(tf.reduce_any(too_many)), [tf.strings.join(
        [f'{self.name}: record ', first, f' has a label >= num_label_classes: {LABEL_FIX}'])])
    bad = tf.not_equal(status, OK)
    num_bad = tf.reduce_sum(tf.cast(bad, tf.int64))
    num_good = tf.size(status, out_type=tf.int64) - num_bad
    histogram = tf.math.bincount(status, minlength=len(_REASON_TABLE), maxlength=len(_REASON_TABLE),
                                 dtype=tf.int64)
    histogram = histogram * tf.constant([0] + [1] * (len(_REASON_TABLE) - 1), tf.int64)  # OK is no skip
    with tf.control_dependencies([check]):
      before = tf.reduce_sum(counters.by_reason.read_value())
    with tf.control_dependencies([before]):  # read before the update: the running count of each bad record
      updates = [counters.by_reason.assign_add(histogram),
                 counters.pass_counts.assign_add(tf.stack([num_good, num_bad, tf.constant(0, tf.int64)]))]
      consecutive = counters.consecutive_bad.assign(
          tf.where(num_good > 0, tf.constant(0, tf.int64), counters.consecutive_bad + num_bad))
    updates.append(self._log_bad(status, names, before))
    if self.fail_after:
      updates.append(tf.debugging.Assert(consecutive < self.fail_after, [tf.strings.join([
          f'{self.name}: the last ', tf.strings.as_string(consecutive), ' records were all bad. Check data_dir '
          'and num_label_classes (stored labels are 1-based; 1000 classes means labels 1..1000), and that the '
          'records are tf.train.Examples with an image/encoded feature (tools/imagenet_to_gcs writes them).'])]))
    with tf.control_dependencies(updates):
      return num_good > 0

  def _log_bad(self, status: tf.Tensor, names: tf.Tensor, before: tf.Tensor) -> tf.Operation:
    bad = tf.reshape(tf.where(tf.not_equal(status, OK)), [-1])
    number = before + tf.range(1, tf.size(bad, out_type=tf.int64) + 1)  # each bad record's running count
    logged = tf.logical_or(number <= LOG_FIRST_BAD, tf.equal(number % LOG_BAD_EVERY, 0))
    index, number = tf.boolean_mask(bad, logged), tf.boolean_mask(number, logged)
    record_names = tf.gather(names, tf.minimum(index, tf.cast(tf.size(names) - 1, tf.int64)))
    reasons = tf.gather(tf.constant(_REASON_TABLE), tf.gather(status, index))
    later = tf.where(number >= LOG_FIRST_BAD, f'; logging every {LOG_BAD_EVERY}-th from now', '')
    lines = tf.strings.join([f'{self.name}: skipping record \'', record_names, '\': ', reasons, ' (',
                             tf.strings.as_string(number), ' skipped so far', later, ')'])
    return tf.cond(tf.size(lines) > 0, lambda: _warn(tf.strings.reduce_join(lines, separator='\n')), tf.no_op)

  def _end_pass(self, counters: _PipelineCounters) -> tf.Tensor:
    counts = counters.pass_counts.read_value()
    good, bad, lost = counts[0], counts[1], counts[2]
    expected = self.expected_records
    short = tf.constant(False) if expected is None else tf.not_equal(good + bad, expected)
    text = tf.strings.join([
        f'{self.name}: finished the data: read ', tf.strings.as_string(good + bad), ' records',
        '' if expected is None else f' of {expected} expected (summary.json)', ': ', tf.strings.as_string(good),
        ' good, ', tf.strings.as_string(bad), ' bad skipped, ', tf.strings.as_string(lost),
        ' lost in damaged shards'])
    log = tf.cond(tf.reduce_any(tf.stack([bad > 0, lost > 0, short])), lambda: _warn(text), tf.no_op)
    with tf.control_dependencies([log]):
      saved = counters.last_pass.assign(tf.concat([[1], counts], axis=0))
    with tf.control_dependencies([saved]):
      reset = counters.pass_counts.assign(tf.zeros([3], tf.int64))
    with tf.control_dependencies([reset]):
      return tf.constant(False)

  def count_file(self, counters: _PipelineCounters, path: tf.Tensor, count: tf.Tensor, consumed: tf.Tensor,
                 size: tf.Tensor, expected: tf.Tensor) -> tf.Tensor:
    """At a shard's end: records read, bytes they span, file size, records expected (-1 unknown).

    Damaged when the reader stopped before the last byte, or read fewer records than summary.json recorded:
    logged and counted, or (fail_on_data_loss) an error naming the shard and the fix. Returns False.
    """
    stopped_early = consumed < size
    known = expected >= 0
    lost = tf.where(known, tf.maximum(expected - count, 0), -1)
    damaged = tf.logical_or(stopped_early, lost > 0)
    s = tf.strings.as_string
    why = tf.where(stopped_early,
                   tf.strings.join(['reading stopped at byte ', s(consumed), ' of ', s(size), ' at a record with a '
                                    'bad length or checksum (a truncated copy or corrupt data)']),
                   tf.strings.join(['the file ends cleanly after ', s(count), ' records but summary.json says ',
                                    s(expected)]))
    what = tf.where(known, tf.strings.join([s(lost), ' of ', s(expected), ' records lost']),
                    'records after that point were lost (how many is unknown: summary.json has no count for '
                    'this shard)')
    message = tf.strings.join([f'{self.name}: damaged shard ', path, ': ', why, '; read ', s(count), ' records, ',
                               what, '.'])
    ops = [tf.cond(tf.logical_and(tf.logical_and(known, count > expected), tf.logical_not(stopped_early)),
                   lambda: _warn(tf.strings.join([
                       f'{self.name}: ', path, ' holds ', s(count), ' records but summary.json says ', s(expected),
                       ': summary.json belongs to another conversion; re-copy it with the shards.'])), tf.no_op)]
    if self.fail_on_data_loss:
      ops.append(tf.debugging.Assert(tf.logical_not(damaged), [tf.strings.join([message, ' ', REPAIR_HINT])]))

    def record_damage():
      lost_or_zero = tf.maximum(lost, 0)
      return tf.group(counters.lost.assign_add(lost_or_zero),
                      counters.pass_counts.assign_add(tf.stack([tf.constant(0, tf.int64), 0, lost_or_zero])),
                      counters.damaged.insert(tf.reshape(path, [1]), tf.reshape(lost, [1])),
                      _warn(tf.strings.join([message, f' {SKIP_NOTE} {REPAIR_HINT}'])))
    with tf.control_dependencies(ops):
      done = tf.cond(damaged, record_damage, tf.no_op)
    with tf.control_dependencies([done]):
      return tf.constant(False)


class ReportsSkips:
  """Base of inputs that count bad records in ``self._stats``: the counts their users read between loops."""
  _stats: InputAccounting

  @property
  def skipped_records(self) -> int:
    """Bad records skipped so far by every dataset this object built (read it between training loops)."""
    return self._stats.skipped

  @property
  def skipped_by_reason(self) -> Dict[str, int]:
    return self._stats.by_reason
