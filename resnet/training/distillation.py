"""Knowledge distillation (Hinton et al. 2015; timm's --kd-model-name, big_vision's distill): the student learns
from a teacher's softened class probabilities as well as from the labels.

Each example's loss is ``(1 - a) * task + a * w * T^2 * KL(softmax(t / T) || softmax(s / T))``: a =
``distill_weight``, T = ``distill_temperature``, t and s the teacher's and student's logits, w the example's class
weight (1 without class weights, so weighting covers the whole loss), task the ``loss`` param's loss. T^2 keeps the
soft term's gradient, ``a * w * T * (softmax(s / T) - softmax(t / T))``, at the labels' scale as T changes.

The teacher is any ResNet that ``--resnet_checkpoint`` reads (a finished run of this program, a reference TF1
checkpoint, Keras / torchvision / timm weights), at any depth, with the student's classes. It sees the student's
training images (after mixup/CutMix) in inference mode and never trains: its variables are no trainable variables
of the step, the optimizer never sees them, and checkpoints do not hold them (the teacher is read from
``teacher_checkpoint`` at every start, a resume too). A teacher given as a directory (a run, which may still be
training) is read from the checkpoint it resolved to at the student's first start, pinned in the student's
``run_start.json`` (``teacher_path``): a resume reads the same teacher, not that run's newest checkpoint.
"""
import os
from typing import Any, Dict, Mapping, Tuple

from absl import logging
import keras
import tensorflow as tf

from params import architectures
from params import resnet_config
from params.model_config import ModelConfig
from resnet.estimator import checkpoints as checkpoints_lib
from resnet.run_dir import model_dir as model_dir_lib
from resnet.run_dir import run_start
from resnet.model import resnet_model
from resnet.task import tasks
from resnet.weights import foreign_weights
from resnet.weights import warm_start

TEACHER = 'teacher'
PINNED = 'teacher'   # run_start.json's entry: the teacher_checkpoint given and the checkpoint it was pinned to


def enabled(params: Mapping[str, Any]) -> bool:
  return bool(params['teacher_checkpoint'])


def teacher_path(params: Mapping[str, Any], resolve: bool = False) -> str:
  """Where the teacher's weights are read: ``teacher_checkpoint`` as given when it names a file; a directory's
  checkpoint as pinned in the run's run_start.json when it was given the same directory, unless ``resolve`` (a
  run's first start: its latest checkpoint now, which the chief then records). A pinned checkpoint that is gone is
  an error naming it and the fix (a newer one is never taken silently)."""
  given = params['teacher_checkpoint']
  if not foreign_weights.is_directory(given):
    return given
  pinned = (run_start.read(params['model_dir']).get(PINNED) or {}) if not resolve else {}
  if pinned.get('given') != given:
    try:
      return checkpoints_lib.resolve(given)
    except FileNotFoundError as e:
      raise FileNotFoundError(f'teacher_checkpoint: {e}') from None
  path = pinned['checkpoint']
  if not checkpoints_lib.is_complete(path):
    raise FileNotFoundError(
        f'teacher_checkpoint={given}: this run\'s teacher is {path}, the checkpoint that directory held at the run\'s '
        f'first start (kept in {run_start.path_of(params["model_dir"])} so that every resume learns from the same '
        f'teacher), and it is gone (keep_checkpoint_max of a run still training?). Restore it, point '
        f'--teacher_checkpoint at that checkpoint where it is now, or name another teacher checkpoint explicitly.')
  try:
    latest = checkpoints_lib.latest(given)
  except Exception:  # pylint: disable=broad-except  (only for the log line below)
    latest = None
  if latest and latest != path:
    logging.info('Distillation teacher: %s, pinned at this run\'s first start; %s holds a newer one (%s), which this '
                 'run does not take.', path, given, latest)
  return path


def teacher_config(params: Mapping[str, Any]) -> Tuple[ModelConfig, str, bool]:
  """(the teacher's model, where its options came from, whether to read its moving averages): a finished run's
  params.yaml, a foreign file's header, or (a reference TF1 checkpoint) ``teacher_resnet_depth`` with the
  reference's v1.5. The layout follows the student's; the classes must be the student's."""
  path, depth = params['teacher_checkpoint'], params['teacher_resnet_depth']
  values: Dict[str, Any] = {}
  moving_average = False
  header = foreign_weights.inspect(path)
  if header is not None:
    source = f'{path} ({header.title()})'
    values = {**header.variant, 'resnet_depth': header.depth, 'num_label_classes': header.num_classes}
  else:
    try:
      warm_start.resolve_checkpoint(path)
    except FileNotFoundError as e:  # moved or deleted since the run started: resuming needs it again
      raise FileNotFoundError(f'teacher_checkpoint: {e} The teacher is read from there at every start of training '
                              '(it is not saved with the student): restore it, or point --teacher_checkpoint at '
                              'where it is now.') from None
    directory = path if foreign_weights.is_directory(path) else os.path.dirname(path)
    recorded = model_dir_lib.recorded_params(directory) or {}
    if recorded:
      source = f'the run of {path} ({os.path.join(directory, model_dir_lib.PARAMS_FILE)})'
      refusal = tasks.for_params(recorded).teacher_refusal
      if refusal:
        raise ValueError(f'teacher_checkpoint: {source} is {refusal}.')
      values = {key: recorded[key] for key in resnet_config.MODEL_PARAMS if recorded.get(key) is not None}
      moving_average = bool(recorded.get('moving_average_decay'))   # what that run's eval read
    else:
      source = f'{path} (no params.yaml beside it: the reference v1.5 ResNet)'
  if depth is not None and values.get('resnet_depth') not in (None, depth):
    raise ValueError(f'teacher_resnet_depth={depth}, but {source} holds a ResNet-{values["resnet_depth"]}: leave '
                     'teacher_resnet_depth unset (it is read from there) or name another teacher.')
  values['resnet_depth'] = values.get('resnet_depth') or depth
  if values['resnet_depth'] is None:
    raise ValueError(f'The teacher {source} does not say its depth: set teacher_resnet_depth (e.g. 50).')
  if header is not None and header.num_classes is None:
    raise ValueError(f'The teacher {source} has no classifier head: a teacher must predict the student\'s classes.')
  classes = values.setdefault('num_label_classes', params['num_label_classes'])
  if classes != params['num_label_classes']:
    raise _other_classes(source, classes, params['num_label_classes'])
  values['data_format'] = params['data_format']
  config = ModelConfig(**{key: value for key, value in values.items()
                          if key in ModelConfig.__dataclass_fields__ and value is not None})
  return config, source, moving_average


def _other_classes(source: str, teacher: int, student: int) -> ValueError:
  return ValueError(f'The teacher {source} predicts {teacher} classes, the student num_label_classes={student}: '
                    'distillation needs the same classes in the same order. Fine-tune the teacher on this data '
                    'first (--resnet_checkpoint=TEACHER, then --teacher_checkpoint=that run).')


def build_teacher(params: Mapping[str, Any], dtype_policy: str) -> keras.Model:
  """The teacher with its weights, all of them (the head included: another head would teach noise), frozen."""
  config, source, moving_average = teacher_config(params)
  teacher = resnet_model.resnet(config, dtype_policy)
  path = teacher_path(params)
  summary = warm_start.warm_start(teacher, path, use_moving_average=moving_average)
  head = [(ckpt[-1], model[-1]) for name, ckpt, model in summary.skipped if name == 'dense/bias']
  if head:   # a checkpoint whose classes nothing else said (a reference TF1 one)
    raise _other_classes(source, *head[0])
  if summary.skipped or summary.missing:  # allow_partial is off: only the head can be left out
    raise warm_start.WarmStartMismatchError(f'The teacher {source} has no classifier head: a teacher must predict '
                                            "the student's classes.")
  teacher.trainable = False
  variant = ', '.join(f'{k}={getattr(config, k)!r}' for k in architectures.VARIANT_PARAMS)
  logging.info('Distillation teacher: ResNet-%d, %d classes, %s%s, from %s%s; weight %g, temperature %g.',
               config.resnet_depth, config.num_label_classes, variant,
               ', its moving averages' if moving_average else '', source,
               f' (checkpoint {path})' if path != params['teacher_checkpoint'] else '', params['distill_weight'],
               params['distill_temperature'])
  return teacher


def soft_loss(student_logits: tf.Tensor, teacher_logits: tf.Tensor, temperature: float) -> tf.Tensor:
  """Per example ``T^2 * KL(softmax(t / T) || softmax(s / T))`` (the teacher's logits are constants)."""
  teacher_log_p = tf.nn.log_softmax(tf.stop_gradient(tf.cast(teacher_logits, tf.float32)) / temperature)
  student_log_p = tf.nn.log_softmax(tf.cast(student_logits, tf.float32) / temperature)
  kl = tf.reduce_sum(tf.exp(teacher_log_p) * (teacher_log_p - student_log_p), axis=-1)
  return temperature ** 2 * kl


def combine(task: tf.Tensor, soft: tf.Tensor, example_weight: tf.Tensor, params: Mapping[str, Any]) -> tf.Tensor:
  weight = params['distill_weight']
  return (1.0 - weight) * task + weight * example_weight * soft


def teacher_logits(teacher: keras.Model, images: tf.Tensor) -> tf.Tensor:
  return tf.stop_gradient(tf.cast(teacher(images, training=False), tf.float32))
