"""Knowledge distillation: the step's gradient is the formula's (teacher of another depth, class weights, mixup, one
device and two replicas), the teacher never trains and is never saved, a resumed student reads it again, teachers
come from a finished run or a torchvision file, and teachers that cannot teach are refused naming why."""
import os
import shutil

import keras
import numpy as np
import pytest
from safetensors import numpy as safetensors_numpy
import tensorflow as tf

from resnet.run_dir import model_dir as model_dir_lib
from resnet.model import tf1_names
from resnet.training import distillation
from resnet.training import mixing
from resnet.training import resnet_model_fn
from tests.fixtures.torchvision_parity import weights as tv
from tests.helpers import tiny

CLASSES = 3
BATCH = 8
LABELS = np.array([0, 1, 2, 0, 1, 1, 2, 0], np.int32)
IMAGES = np.random.default_rng(5).uniform(0, 255, (BATCH, 32, 32, 3)).astype(np.float32)
WEIGHTS = [1.0, 3.0, 0.5]


def _softmax(z: np.ndarray) -> np.ndarray:
  e = np.exp(z - z.max(axis=1, keepdims=True))
  return e / e.sum(axis=1, keepdims=True)


def test_the_soft_term_and_its_gradient_are_the_formulas():
  """T^2 KL(p_t || p_s) at temperature T, and its gradient T (softmax(s/T) - softmax(t/T)) (unseeded values)."""
  rng = np.random.default_rng()
  s, t, temperature = rng.normal(size=(4, 5)) * 3, rng.normal(size=(4, 5)) * 3, 2.5
  student = tf.Variable(s, dtype=tf.float32)
  with tf.GradientTape() as tape:
    loss = distillation.soft_loss(student, tf.constant(t, tf.float32), temperature)
  p_t, p_s = _softmax(t / temperature), _softmax(s / temperature)
  np.testing.assert_allclose(loss.numpy(), temperature ** 2 * np.sum(p_t * np.log(p_t / p_s), axis=1), rtol=1e-4)
  np.testing.assert_allclose(tape.gradient(loss, student).numpy(), temperature * (p_s - p_t), atol=1e-5)


def _teacher_run(root, depth: int = 18, classes: int = CLASSES) -> str:
  """A finished run of another depth: a checkpoint of random weights and its params.yaml."""
  params = tiny.resnet_params(root, resnet_depth=depth, num_label_classes=classes)
  keras.utils.set_random_seed(11)
  estimator = tiny.resnet_estimator(params)
  estimator.build('train')
  model = estimator.scope.get(resnet_model_fn.MODEL)
  # Spread the head so the teacher's answers differ from a uniform guess.
  model.trainable_variables[-2].assign(tf.random.stateless_normal(model.trainable_variables[-2].shape, [1, 2]))
  estimator.save()
  model_dir_lib.check_and_record(params, record=True)
  return str(root)


@pytest.fixture(scope='module')
def teacher_dir(tmp_path_factory):
  return _teacher_run(tmp_path_factory.mktemp('teacher'))


def _student(tmp_path, teacher: str, strategy=None, **overrides):
  params = tiny.resnet_params(tmp_path / 'student', **{**dict(
      num_label_classes=CLASSES, train_batch_size=BATCH, num_train_images=64, weight_decay=0.0, momentum=0.0,
      lr_warmup_epochs=0.0, train_steps=1, base_learning_rate=2.0, teacher_checkpoint=teacher, distill_weight=0.7,
      distill_temperature=2.0, class_weights=WEIGHTS, mixup_alpha=1.0, label_smoothing=0.1), **overrides})
  keras.utils.set_random_seed(4)
  estimator = tiny.resnet_estimator(params, strategy)
  estimator.build('train')
  return params, estimator


def _input_once(params):
  return tf.data.Dataset.from_tensor_slices((IMAGES, LABELS)).batch(params['batch_size'])


def _input(params):
  return tf.data.Dataset.from_tensor_slices((IMAGES, LABELS)).repeat().batch(params['batch_size'], drop_remainder=True)


@pytest.mark.slow
@pytest.mark.parametrize('replicas', [1, 2])
def test_one_step_gradient_is_the_distillation_formula(tmp_path, teacher_dir, replicas):
  strategy = tiny.strategy(replicas)
  params, estimator = _student(tmp_path, teacher_dir, strategy)
  model, teacher = (estimator.scope.get(name) for name in (resnet_model_fn.MODEL, distillation.TEACHER))
  assert len(teacher.layers) > len(model.layers)   # a ResNet-18 teaching a ResNet-10
  teacher_before = [v.numpy().copy() for v in teacher.variables]
  before = [v.numpy().copy() for v in model.trainable_variables]
  a, temperature = params['distill_weight'], params['distill_temperature']
  seeds = ([mixing.mix_seed(tf.constant(0, tf.int64), params['random_seed'])] if strategy is None else
           list(strategy.experimental_local_results(strategy.run(
               lambda: mixing.mix_seed(tf.constant(0, tf.int64), params['random_seed'])))))
  expected = None
  for part, seed in zip(np.split(np.arange(BATCH), replicas), seeds):
    targets = np.eye(CLASSES)[LABELS[part]] * 0.9 + 0.1 / CLASSES
    targets *= np.asarray(WEIGHTS)[LABELS[part]][:, None]
    images, targets = mixing.mix(tf.constant(IMAGES[part]), tf.constant(targets, tf.float32),
                                 mixing.MixConfig.from_params(params), seed)
    t = targets.numpy().astype(np.float64)
    zt = teacher(images, training=False).numpy().astype(np.float64)
    with tf.GradientTape() as tape:
      logits = model(images, training=True)
    z = logits.numpy().astype(np.float64)
    w = t.sum(axis=1, keepdims=True)
    d_logits = ((1 - a) * (w * _softmax(z) - t)
                + a * w * temperature * (_softmax(z / temperature) - _softmax(zt / temperature))) / BATCH
    grads = tape.gradient(logits, model.trainable_variables, output_gradients=tf.constant(d_logits, tf.float32))
    expected = grads if expected is None else [e + g for e, g in zip(expected, grads)]
  logs = estimator.train(_input, max_steps=1)
  real = [(b - v.numpy()) / logs['learning_rate'] for b, v in zip(before, model.trainable_variables)]
  total = np.sqrt(sum(np.sum(np.asarray(e) ** 2) for e in expected))
  for r, e in zip(real, expected):
    assert np.linalg.norm(r - e) <= 2e-3 * max(np.linalg.norm(e), 1e-3 * total)
  for b, v in zip(teacher_before, teacher.variables):   # batch-norm statistics included: inference mode
    np.testing.assert_array_equal(b, v.numpy())
  optimized = {id(v) for v in model.trainable_variables}
  assert not any(id(v) in optimized for v in teacher.variables)


@pytest.mark.slow
def test_eval_predict_and_export_of_a_distilled_run_do_not_need_the_teacher(tmp_path, teacher_dir):
  teacher = shutil.copytree(teacher_dir, tmp_path / 'teacher')
  params, estimator = _student(tmp_path, str(teacher))
  estimator.train(_input, max_steps=1)
  shutil.rmtree(teacher)   # moved or deleted after training
  later = tiny.resnet_estimator(params)   # the run's folder, days later
  assert later.evaluate(_input_once)['global_step'] == 1
  assert len(list(later.predict(lambda p: tf.data.Dataset.from_tensor_slices(IMAGES).batch(p['batch_size'])))) == 8
  exported = later.export_saved_model(str(tmp_path / 'export'), resnet_model_fn.serving_inputs(params))
  served = tf.saved_model.load(exported).signatures['serving_images'](images=tf.constant(IMAGES))
  assert served['probabilities'].shape == (8, CLASSES)
  assert later.scope.get(distillation.TEACHER) is None


@pytest.mark.slow
def test_the_teacher_is_not_saved_and_a_resumed_student_reads_it_again(tmp_path, teacher_dir):
  params, estimator = _student(tmp_path, teacher_dir, gradient_accumulation_steps=2, train_steps=2)
  logs = estimator.train(_input, max_steps=1)
  assert np.isfinite(logs['loss']) and logs['loss'] != logs[resnet_model_fn.CROSS_ENTROPY]
  estimator.save()
  keys = [name for name, _ in tf.train.list_variables(estimator.latest_checkpoint())]
  assert not any(name.startswith('teacher') for name in keys) and any(name.startswith('model/') for name in keys)
  resumed = tiny.resnet_estimator(params)
  logs = resumed.train(_input, max_steps=2)   # restores the student, reads the teacher from its run again
  assert int(resumed.global_step.numpy()) == 2 and np.isfinite(logs['loss'])
  teacher = resumed.scope.get(distillation.TEACHER)
  reference = tiny.resnet_params(tmp_path / 'ref', resnet_depth=18, num_label_classes=CLASSES,
                                 resnet_checkpoint=teacher_dir)
  from resnet.weights import warm_start  # pylint: disable=import-outside-toplevel
  expected = resnet_model_fn.build_model(reference)
  warm_start.warm_start(expected, teacher_dir)
  np.testing.assert_allclose(teacher(IMAGES, training=False).numpy(), expected(IMAGES, training=False).numpy(),
                             rtol=1e-5, atol=1e-5)


def test_a_torchvision_file_teaches_with_its_own_variant(tmp_path):
  state = tv.state_dict(18)
  rng = np.random.default_rng(3)
  state['fc.weight'] = rng.normal(size=(CLASSES, 512)).astype(np.float32)
  state['fc.bias'] = rng.normal(size=(CLASSES,)).astype(np.float32)
  path = str(tmp_path / 'teacher.safetensors')
  safetensors_numpy.save_file(state, path)
  params = tiny.resnet_params(tmp_path / 's', num_label_classes=CLASSES, teacher_checkpoint=path)
  config, source, moving_average = distillation.teacher_config(params)
  assert (config.resnet_depth, config.num_label_classes, config.stem_pool_padding) == (18, CLASSES, 'symmetric')
  assert params['stem_pool_padding'] == 'same' and 'torchvision/timm ResNet-18' in source and not moving_average
  teacher = distillation.build_teacher(params, 'float32')
  np.testing.assert_allclose(tf1_names.tf1_variable_map(teacher)['dense/kernel'].numpy(), state['fc.weight'].T)
  assert not teacher.trainable_weights


def test_teachers_that_cannot_teach_are_refused_naming_why(tmp_path, teacher_dir):
  with pytest.raises(ValueError, match=r'predicts 3 classes, the student num_label_classes=5'):
    distillation.teacher_config(tiny.resnet_params(tmp_path / 'a', num_label_classes=5,
                                                   teacher_checkpoint=teacher_dir))
  with pytest.raises(ValueError, match=r'teacher_resnet_depth=50, but .* holds a ResNet-18'):
    distillation.teacher_config(tiny.resnet_params(tmp_path / 'b', num_label_classes=CLASSES,
                                                   teacher_checkpoint=teacher_dir, teacher_resnet_depth=50))
  state = {k: v for k, v in tv.state_dict(18).items() if not k.startswith('fc.')}
  headless = str(tmp_path / 'headless.safetensors')
  safetensors_numpy.save_file(state, headless)
  with pytest.raises(ValueError, match='no classifier head'):
    distillation.teacher_config(tiny.resnet_params(tmp_path / 'c', num_label_classes=CLASSES,
                                                   teacher_checkpoint=headless))
  # A checkpoint without params.yaml (a reference TF1 one): the depth must be given, and its head must fit.
  bare = tmp_path / 'bare'
  bare.mkdir()
  for name in os.listdir(teacher_dir):
    if name != model_dir_lib.PARAMS_FILE and os.path.isfile(os.path.join(teacher_dir, name)):
      os.link(os.path.join(teacher_dir, name), bare / name)
  with pytest.raises(ValueError, match='set teacher_resnet_depth'):
    distillation.teacher_config(tiny.resnet_params(tmp_path / 'd', num_label_classes=CLASSES,
                                                   teacher_checkpoint=str(bare)))
  with pytest.raises(ValueError, match=r'predicts 3 classes, the student num_label_classes=4'):
    distillation.build_teacher(tiny.resnet_params(tmp_path / 'e', num_label_classes=4, teacher_checkpoint=str(bare),
                                                  teacher_resnet_depth=18), 'float32')
  with pytest.raises(FileNotFoundError, match=r'teacher_checkpoint: .*not found.* at every start of training'):
    distillation.teacher_config(tiny.resnet_params(tmp_path / 'h', num_label_classes=CLASSES,
                                                   teacher_checkpoint=str(tmp_path / 'moved')))
  with pytest.raises(ValueError, match='distill_weight'):
    tiny.resnet_params(tmp_path / 'f', distill_weight=1.5)
  with pytest.raises(ValueError, match='teacher_resnet_depth=50 is the depth of a distillation teacher, but '
                                       'teacher_checkpoint is unset'):
    tiny.resnet_params(tmp_path / 'g', teacher_resnet_depth=50)


def test_a_teacher_run_directory_is_pinned_to_its_checkpoint_at_the_students_first_start(tmp_path, caplog):
  """The teacher run trains on (a newer checkpoint appears): a resumed student keeps the checkpoint its first start
  resolved (run_start.json), says so, and refuses to go on when that checkpoint is gone; a new student takes the
  newest."""
  from resnet import wiring  # pylint: disable=import-outside-toplevel
  from resnet.weights import warm_start  # pylint: disable=import-outside-toplevel
  teacher_dir = _teacher_run(tmp_path / 'teacher')
  first = os.path.join(teacher_dir, 'model.ckpt-0')
  params = tiny.resnet_params(tmp_path / 'student', num_label_classes=CLASSES, teacher_checkpoint=teacher_dir)
  wiring.record_run_start(params)   # the student's first start (the chief's record)
  tf.train.Checkpoint(v=tf.Variable(1.0)).write(str(tmp_path / 'student' / 'model.ckpt-1'))   # it trained a step
  teacher = tiny.resnet_estimator(tiny.resnet_params(teacher_dir, resnet_depth=18, num_label_classes=CLASSES))
  teacher.build('train')
  teacher.restore(first)
  model = teacher.scope.get(resnet_model_fn.MODEL)
  model.trainable_variables[-2].assign(model.trainable_variables[-2] * 3.0)   # the teacher run trains on
  teacher.global_step.assign(5)
  newer = teacher.save()
  assert distillation.teacher_path(params, resolve=True) == newer
  with caplog.at_level('INFO', logger='absl'):
    assert distillation.teacher_path(params) == first
  assert 'pinned at this run\'s first start' in caplog.text and newer in caplog.text
  built = distillation.build_teacher(params, 'float32')
  expected = resnet_model_fn.build_model(tiny.resnet_params(tmp_path / 'ref', resnet_depth=18,
                                                            num_label_classes=CLASSES))
  warm_start.warm_start(expected, first)
  np.testing.assert_allclose(built(IMAGES, training=False).numpy(), expected(IMAGES, training=False).numpy(),
                             rtol=1e-5, atol=1e-5)
  fresh = tiny.resnet_params(tmp_path / 'new_student', num_label_classes=CLASSES, teacher_checkpoint=teacher_dir)
  assert distillation.teacher_path(fresh) == newer
  for name in os.listdir(teacher_dir):
    if name.startswith('model.ckpt-0.'):
      os.remove(os.path.join(teacher_dir, name))
  with pytest.raises(FileNotFoundError, match=r'this run\'s teacher is .*model.ckpt-0, the checkpoint that directory '
                                              r'held at the run\'s first start .* and it is gone'):
    wiring.check_resume(params)
