"""The deployed files beside the SavedModel (LiteRT's .tflite, ONNX's .onnx): one routine (``export``) writes,
checks and measures them over a small format interface (``DeployFormat``) that each format implements in its own
module (``tflite_export.TfliteFormat``, ``onnx_export.OnnxFormat``).

The float32 file is converted from a float32 copy of the model holding the exported weights (a bfloat16 graph has
few TFLite or ONNX Runtime kernels). It must agree with those weights within PARITY_TOLERANCE on the same images in
every precision (a conversion fault never hides behind bfloat16 rounding), and with a float32 SavedModel too (a
16-bit SavedModel differs by its own rounding, which is logged); else it is not written.

With the run's images (``Measuring``) every file is measured against the SavedModel (``deploy_report``: score,
agreement of its answers with the SavedModel's, pooled and of its worst class, size, single-image latency), each by
what it outputs: its own decisions where it outputs them (the .onnx files' ``classes`` and multi-label ``labels``),
else its probabilities decided as predict decides them, so a file cannot pass on numbers recomputed outside it.
Each quantized kind is converted, measured, and written only if its pooled agreement is at least
``deploy_min_agreement`` and that of its worst class at least ``deploy_min_class_agreement`` (a pooled share hides a
rare class lost entirely; only classes of answers.CLASS_MIN_IMAGES images or more are judged, counted in the row);
else it is refused (QuantizationError, one message naming the measure and the class) and
the files before it stay. The format's table is written beside the files either way.

What the files output and how answers compare is the ``answers`` object's (``resnet/task/answers.py``: the run's task supplies it): nothing here asks
which task it is.
"""
import abc
import dataclasses
import os
import time
from typing import Callable, Dict, List, Optional, Protocol, Sequence, Tuple

from absl import logging
import keras
import numpy as np
import tensorflow as tf

from resnet.estimator import files
from resnet.task import answers as answers_lib
from resnet.export import deploy_report

SERVING_SIGNATURE = 'serving_images'  # the SavedModel's float-images signature, which every deployed file mirrors
PARITY_TOLERANCE = 1e-4
PARITY_IMAGES = 4


class QuantizationError(RuntimeError):
  """A quantized file could not be made, or answers too differently from the SavedModel: it was not written."""


def file_name(suffix: str, kind: str) -> str:
  """model.tflite (float32), model_int8.tflite, ..."""
  return f'model{suffix}' if kind == 'float32' else f'model_{kind}{suffix}'


def cause(error: BaseException) -> str:
  """An error's message on one line, short enough for the message that quotes it."""
  return ' '.join(str(error).split())[:300] or type(error).__name__


def float32_copy(model: keras.Model, build: Callable[[], keras.Model]) -> keras.Model:
  """``build()`` (the same architecture, float32 policy) holding ``model``'s current weights."""
  copy = build()
  copy.set_weights(model.get_weights())
  return copy


def parity_images(image_size: int, count: int = PARITY_IMAGES, seed: int = 0) -> np.ndarray:
  return np.random.default_rng(seed).uniform(0, 255, (count, image_size, image_size, 3)).astype(np.float32)


def median_ms(call: Callable[[], object], repeats: int) -> float:
  """Median milliseconds of ``call()``, after one warm-up call."""
  call()
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    call()
    times.append((time.perf_counter() - start) * 1e3)
  return float(np.median(times))


class Runner(Protocol):
  """A file loaded in its runtime (``litert_runtime.Model``, ``onnx_runtime.Model``)."""
  runtime: str  # the runtime's name and version, as the table shows it

  def probabilities(self, images: np.ndarray) -> np.ndarray:
    """[N, S, S, 3] images 0..255 -> [N, classes] float32 probabilities."""

  def outputs(self, images: np.ndarray) -> Dict[str, np.ndarray]:
    """Every output the file serves for ``images`` by name (``probabilities``; ``classes``, ``labels``, ...)."""

  def latency_ms(self, image: np.ndarray) -> float:
    """Median milliseconds of one image, batch 1."""


class DeployFormat(abc.ABC):
  """A deployed format: its names, the quantized kinds it makes, how it converts, runs and counts a file. An
  instance holds what its conversions take: the float32 copy of the model, the image size, the answers and the
  format's own options."""
  name = ''                 # in messages and the log: 'TFLite', 'ONNX'
  suffix = ''               # files model<suffix> (float32) and model_<kind><suffix>
  report_name = ''          # its table beside the files: <report_name>.txt and .json
  runtime_name = ''         # what runs its files, in messages
  kinds: Tuple[str, ...] = ()  # the quantized kinds it makes (the choices of quantizations_param)
  export_param = ''         # the param that asks for its float32 file
  quantizations_param = ''  # the param that lists its quantized kinds
  details = ''              # the log's words for its float32 file: batch size, opset, ...

  def __init__(self, model: keras.Model, image_size: int, answers=answers_lib.TopOne()):
    self.model, self.image_size, self.answers = model, image_size, answers

  def file_name(self, kind: str) -> str:
    return file_name(self.suffix, kind)

  @abc.abstractmethod
  def convert(self, kind: str, float32_file: Optional[bytes] = None,
              calibration: Optional[np.ndarray] = None) -> bytes:
    """The file of ``kind`` ('float32' or one of ``kinds``), from the model or from ``float32_file``;
    ``calibration``: [N, S, S, 3] training images 0..255 for the kinds that calibrate. QuantizationError (saying
    what to do) where a quantized kind cannot be made."""

  @abc.abstractmethod
  def load(self, data: bytes) -> Runner:
    """The file in its runtime."""

  @abc.abstractmethod
  def op_count(self, data: bytes) -> int:
    """Its ops (nodes), for the log."""

  @abc.abstractmethod
  def advice(self, kind: str, calibration: Optional[np.ndarray]) -> str:
    """How to keep a ``kind`` file that was refused for its agreement (besides a lower deploy_min_agreement)."""

  def run(self, data: bytes, images: np.ndarray) -> np.ndarray:
    """The file's probabilities on ``images``; its latency and runtime: ``load(data)``."""
    return self.load(data).probabilities(images)


@dataclasses.dataclass(frozen=True)
class Measuring:
  """The run's labelled validation images every file is measured on; the quantized kinds to make, int8's
  calibration images (training images, never those it is measured on), the agreement a quantized file needs,
  pooled (deploy_min_agreement) and of its worst class (deploy_min_class_agreement), and the class names by id
  (the worst class is named; its id alone without them). Quantized kinds are made only where there are images to
  measure them on."""
  images: np.ndarray
  labels: np.ndarray
  kinds: Sequence[str] = ()
  calibration: Optional[np.ndarray] = None
  min_agreement: float = 0.9
  min_class_agreement: float = 0.0  # none unless given (the export gives deploy_min_class_agreement)
  class_names: Sequence[str] = ()


@dataclasses.dataclass(frozen=True)
class Report:
  """What ``export`` wrote: the float32 file, its checks and the measured table of every file (none without
  ``Measuring``)."""
  format: str
  path: str
  bytes: int
  ops: int
  details: str
  max_difference: float  # largest |probability difference| against its float32 weights on PARITY_IMAGES images
  saved_model_difference: float  # the same against the SavedModel (16-bit models: their own rounding)
  measured: Sequence[deploy_report.Row] = ()
  table: str = ''  # the measured table as written beside the files

  def summary(self) -> str:
    return (f'Exported {self.format}: {self.path} ({self.bytes / 1e6:.1f} MB, {self.ops} ops, {self.details}; max '
            f'|probability difference| {self.max_difference:.2g} vs its float32 weights, '
            f'{self.saved_model_difference:.2g} vs the SavedModel)')


class SavedModel:
  """The exported SavedModel through its ``serving_images`` signature: a Runner, the reference of every file."""
  runtime = 'TensorFlow'

  def __init__(self, directory: str):
    self.directory = directory
    self.served = tf.saved_model.load(directory).signatures[SERVING_SIGNATURE]
    self.dtype = self.served.structured_input_signature[1]['images'].dtype

  def probabilities(self, images: np.ndarray, batch_size: int = 32) -> np.ndarray:
    return self.outputs(images, batch_size)['probabilities'].astype(np.float32)

  def outputs(self, images: np.ndarray, batch_size: int = 32) -> Dict[str, np.ndarray]:
    batches = [{k: v.numpy() for k, v in self.served(images=tf.constant(images[i:i + batch_size], self.dtype)).items()}
               for i in range(0, len(images), batch_size)]
    return {name: np.concatenate([b[name] for b in batches]) for name in batches[0]}

  def latency_ms(self, image: np.ndarray, repeats: int = 10) -> float:
    one = tf.constant(image[None], self.dtype)
    return median_ms(lambda: self.served(images=one), repeats)


class Reference:
  """The SavedModel's answers on the measured images (its own decisions: ``answers.decided``), and its row; each
  file's row measured against them by the file's own decisions."""

  def __init__(self, saved: SavedModel, precision: str, measuring: Measuring, answers):
    self.answers, self.images, self.labels = answers, measuring.images, measuring.labels
    self.class_names = measuring.class_names
    outputs = saved.outputs(self.images)
    self.num_classes = int(outputs['probabilities'].shape[-1])
    self.predicted = answers.decided(outputs)
    self.row = deploy_report.Row(
        f'SavedModel ({precision})', 'saved_model', deploy_report.directory_bytes(saved.directory),
        answers.score(self.predicted, self.labels), 1.0, saved.latency_ms(self.images[0]), saved.runtime,
        metric=answers.score_name, agreement_name=answers.agreement_name)

  def measure(self, name: str, kind: str, data: bytes, runner: Runner) -> deploy_report.Row:
    """A file's row from the decisions it outputs on the reference's images (``answers.decided``: its own, else
    those of its probabilities), pooled and per class against the SavedModel's."""
    predicted = self.answers.decided(runner.outputs(self.images))
    per_class = self.answers.per_class(predicted, self.predicted, self.num_classes)
    compared = ~np.isnan(per_class)
    judged = compared & (self.answers.support(predicted, self.predicted, self.num_classes) >=
                         answers_lib.CLASS_MIN_IMAGES)   # fewer images: one flip is 0, too small to judge
    worst = int(np.argmin(np.where(judged, per_class, np.inf))) if judged.any() else None
    too_small = int(np.sum(compared & ~judged))
    if too_small:
      logging.info('%s: %d of the %d classes compared with the SavedModel are decided for fewer than %d images by '
                   'both, too few to judge: not held to deploy_min_class_agreement.', name, too_small,
                   int(compared.sum()), answers_lib.CLASS_MIN_IMAGES)
    return deploy_report.Row(name, kind, len(data), self.answers.score(predicted, self.labels),
                             self.answers.agreement(predicted, self.predicted), runner.latency_ms(self.images[0]),
                             runner.runtime, metric=self.answers.score_name,
                             agreement_name=self.answers.agreement_name,
                             class_agreement=1.0 if worst is None else float(per_class[worst]),
                             worst_class='' if worst is None else self.class_name(worst),
                             classes_too_small=too_small)

  def class_name(self, class_id: int) -> str:
    """'3 (cat)', or '3' without names."""
    names = self.class_names
    return f'{class_id} ({names[class_id]})' if class_id < len(names) and names[class_id] else str(class_id)


def export(fmt: DeployFormat, saved_model_dir: str, precision: str,
           measuring: Optional[Measuring] = None) -> Report:
  """Writes ``fmt``'s float32 file into ``saved_model_dir`` (atomically) once it is checked, then, with
  ``measuring``, each quantized kind measured and written or refused, and the table of every file measured."""
  float32_file = fmt.convert('float32')
  path = os.path.join(saved_model_dir, fmt.file_name('float32'))
  saved = SavedModel(saved_model_dir)
  difference, saved_difference = _check_float32(fmt, float32_file, saved, precision, path)
  rows: List[deploy_report.Row] = []
  if measuring is not None:  # measured before it is written: a file that cannot be measured is not written
    reference = Reference(saved, precision, measuring, fmt.answers)
    rows = [reference.row, reference.measure(fmt.file_name('float32'), 'float32', float32_file,
                                             fmt.load(float32_file))]
  files.atomic_write(path, float32_file)
  report = Report(fmt.name, path, len(float32_file), fmt.op_count(float32_file), fmt.details, difference,
                  saved_difference)
  logging.info('Exported %s: %s (%.1f MB, %d ops, float32, %s); max |probability difference| on %d images: %.2g vs '
               'its float32 weights, %.2g vs the %s SavedModel', fmt.name, path, report.bytes / 1e6, report.ops,
               fmt.details, PARITY_IMAGES, difference, saved_difference, precision)
  if measuring is None:
    return report
  for kind in measuring.kinds:
    _write_quantized(fmt, kind, float32_file, saved_model_dir, measuring, reference, rows)
  return dataclasses.replace(report, measured=tuple(rows), table=_write_table(fmt, saved_model_dir, rows, measuring))


def _check_float32(fmt: DeployFormat, float32_file: bytes, saved: SavedModel, precision: str,
                   path: str) -> Tuple[float, float]:
  """(difference from the float32 weights, from the SavedModel) on PARITY_IMAGES random images; RuntimeError where
  the file cannot run, or differs beyond PARITY_TOLERANCE (from a SavedModel: a float32 one)."""
  images = parity_images(fmt.image_size)
  not_written = (f'{path} was not written (the SavedModel beside it is complete). Export without '
                 f'{fmt.export_param} and {fmt.quantizations_param}')
  try:  # a converter converts what it can and may leave the rest: an op the runtime cannot run fails here
    served = fmt.run(float32_file, images)
  except Exception as e:  # pylint: disable=broad-except  (runtimes' errors have no common public base)
    raise RuntimeError(f'{fmt.runtime_name} cannot run the converted model ({cause(e)}): {not_written}, or report '
                       'the op it names.') from e
  weights = fmt.answers.probabilities(fmt.model(images, training=False)).numpy()
  difference = float(np.max(np.abs(served - weights)))
  if difference > PARITY_TOLERANCE:
    raise RuntimeError(f'The {fmt.name} conversion differs from the float32 weights it was converted from by '
                       f'{difference:.3g} (> {PARITY_TOLERANCE:g}) on the same images: {not_written}, or report '
                       'the ops.')
  saved_difference = float(np.max(np.abs(served - saved.probabilities(images))))
  if precision == 'float32' and saved_difference > PARITY_TOLERANCE:
    raise RuntimeError(f'The {fmt.name} model differs from the SavedModel by {saved_difference:.3g} (> '
                       f'{PARITY_TOLERANCE:g}) on the same images: {not_written}, or report the ops.')
  return difference, saved_difference


def _write_quantized(fmt: DeployFormat, kind: str, float32_file: bytes, saved_model_dir: str, measuring: Measuring,
                     reference: Reference, rows: List[deploy_report.Row]) -> None:
  """The ``kind`` file converted, measured, and written with its row added to ``rows``; or refused
  (QuantizationError) with the table written as it stands."""
  name = fmt.file_name(kind)
  try:
    data = fmt.convert(kind, float32_file, measuring.calibration)
    row = reference.measure(name, kind, data, fmt.load(data))
  except Exception as e:  # pylint: disable=broad-except  (the table of the files before it is still written)
    _write_table(fmt, saved_model_dir, rows, measuring)
    if isinstance(e, QuantizationError):
      raise
    raise QuantizationError(f'{name} could not be made or run ({cause(e)}): it was not written; the files before it '
                            f'are complete. Export without {kind} in {fmt.quantizations_param}.') from e
  pooled = row.agreement < measuring.min_agreement
  if pooled or row.class_agreement < measuring.min_class_agreement:
    kept = ', '.join(['the SavedModel'] + [r.name for r in rows[1:] if r.kept])
    param = 'deploy_min_agreement' if pooled else 'deploy_min_class_agreement'
    rows.append(dataclasses.replace(row, kept=False, refused_by=param))
    _write_table(fmt, saved_model_dir, rows, measuring)
    count = len(measuring.images)
    if pooled:
      measured = (f'{fmt.answers.describe(row.agreement, count)}, below deploy_min_agreement='
                  f'{measuring.min_agreement:g}')
    else:
      measured = (f'agrees with the SavedModel on class {row.worst_class} with a Jaccard index of '
                  f'{row.class_agreement:.4f} (of the images either puts in it, the share both do: its worst class on '
                  f'{count} validation images, of the classes decided for {answers_lib.CLASS_MIN_IMAGES} images or '
                  f'more; {row.classes_too_small} smaller ones not judged), below deploy_min_class_agreement='
                  f'{measuring.min_class_agreement:g}; pooled, it {fmt.answers.describe(row.agreement, count)}')
    raise QuantizationError(
        f'{name} {measured} ({row.metric} {row.top_1:.4f} vs {reference.row.top_1:.4f}): it was not written. To '
        f'keep it: {fmt.advice(kind, measuring.calibration)}; or lower {param}. Complete: {kept}; the table is in '
        f'{os.path.join(saved_model_dir, fmt.report_name)}.txt.')
  files.atomic_write(os.path.join(saved_model_dir, name), data)
  rows.append(row)


def _write_table(fmt: DeployFormat, saved_model_dir: str, rows: Sequence[deploy_report.Row],
                 measuring: Measuring) -> str:
  return deploy_report.write(saved_model_dir, fmt.report_name, rows, len(measuring.images))


def calibration_advice(calibration: Optional[np.ndarray], note: str = '') -> str:
  """The advice for an int8 file refused for its agreement: more calibration images."""
  count = 0 if calibration is None else len(calibration)
  return f'calibrate on more training images (deploy_calibration_images, {count} now{note})'
