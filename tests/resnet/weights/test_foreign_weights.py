"""Warm start from Keras applications and torchvision/timm weights: parity with the source framework's own forward
pass, the architecture taken from the file, and the errors (resnet/weights/foreign_weights.py, keras_weights.py,
torch_weights.py, warm_start.py, --mode=export).

No downloads: the Keras weights are seeded numpy values put into keras.applications.ResNet50 itself, whose forward
pass is the reference; the torchvision weights are regenerated from a seed (tests/fixtures/torchvision_parity/
weights.py) and compared with the probabilities torchvision and timm computed for them once
(make_expected.py: torch is never imported here). BN statistics are non-trivial: Keras' are the batch statistics of
calibration images, perturbed; a quarter of each Keras conv's channels is nearly dead (variance below the BN
epsilon), so that the epsilon shows in the outputs.
"""
import importlib.util
import os

import h5py
import keras
import numpy as np
import pytest
import tensorflow as tf
from keras.src.legacy.saving import legacy_h5_format
from safetensors import numpy as safetensors_numpy

from resnet.run_dir import params_files
from resnet.run_setup import run_params
from resnet.weights import foreign_weights as fw
from resnet.training import resnet_model_fn
from resnet.weights import warm_start as ws
from tests.fixtures.torchvision_parity import weights as tv
from tests.helpers import cli
from tests.helpers import procs

SIZE = tv.IMAGE_SIZE
TOLERANCE = 1e-4
EXPECTED = os.path.join(procs.ROOT, 'tests', 'fixtures', 'torchvision_parity',
                        'expected.npz')
KERAS_VARIANT = {'bn_epsilon': 1.001e-5, 'stride_in_1x1': True, 'stem_pool_padding': 'symmetric',
                 'input_normalization': 'caffe_bgr'}


def _params(tmp_path, checkpoint: str, **overrides):
  return run_params.make_params(dict(
      dict(resnet_depth=50, num_label_classes=1000, image_size=SIZE, precision='float32',
           model_dir=str(tmp_path / 'run'), resnet_checkpoint=checkpoint), **overrides), fill_from_data=False)


def _warm_started_probabilities(params, checkpoint: str) -> np.ndarray:
  model = resnet_model_fn.build_model(params)
  ws.warm_start(model, checkpoint)
  return tf.nn.softmax(model(tv.images(), training=False)).numpy()


def _assert_parity(ours: np.ndarray, theirs: np.ndarray) -> None:
  difference = np.abs(ours - theirs).max()
  assert difference <= TOLERANCE, f'max |probability difference| {difference:.3g}'
  np.testing.assert_array_equal(ours.argmax(1), theirs.argmax(1))


# ------------------------------------------------------------------------------------------------ Keras
def _seed_keras_resnet50(model: keras.Model, rng: np.random.Generator) -> None:
  """Seeded weights in Keras' own ResNet50, BN statistics from calibration images (perturbed afterwards)."""
  for layer in model.layers:
    if isinstance(layer, keras.layers.Conv2D):
      kernel_shape = tuple(layer.kernel.shape)
      scale = np.where(rng.uniform(size=kernel_shape[-1]) < 0.25, 1e-3, 1.0)  # nearly dead channels
      kernel = rng.normal(0.0, np.sqrt(2.0 / np.prod(kernel_shape[:-1])), kernel_shape) * scale
      layer.kernel.assign(kernel.astype(np.float32))
      layer.bias.assign((rng.normal(0.0, 0.5, kernel_shape[-1]) * scale).astype(np.float32))
    elif isinstance(layer, keras.layers.BatchNormalization):
      channels = layer.gamma.shape[0]
      last = layer.name.endswith('_3_bn')
      layer.gamma.assign(rng.uniform(*((0.1, 0.4) if last else (0.5, 1.5)), channels).astype(np.float32))
      layer.beta.assign(rng.normal(0.0, 0.2, channels).astype(np.float32))
      layer.momentum = 0.0  # the calibration pass below sets the moving statistics to its batch's
    elif isinstance(layer, keras.layers.Dense):
      kernel = rng.normal(0.0, 1.0, tuple(layer.kernel.shape)) * 8.0 / np.sqrt(layer.kernel.shape[0])
      layer.kernel.assign((kernel - kernel.mean(axis=0)).astype(np.float32))
      layer.bias.assign(rng.normal(0.0, 0.2, layer.bias.shape).astype(np.float32))
  calibration = keras.applications.resnet.preprocess_input(tv.images(seed=7))
  model(calibration, training=True)
  for layer in model.layers:
    if isinstance(layer, keras.layers.BatchNormalization):
      layer.momentum = 0.99
      mean, variance = layer.moving_mean.numpy(), layer.moving_variance.numpy()
      layer.moving_mean.assign(mean + rng.normal(0.0, 0.1, mean.shape) * np.sqrt(variance))
      layer.moving_variance.assign(variance * rng.uniform(0.8, 1.25, variance.shape))


@pytest.fixture(scope='module')
def keras_files(module_tmp):
  """Keras' ResNet50 at 64 px with seeded weights, saved in the three formats, and its own probabilities."""
  directory = module_tmp.mktemp('keras')
  model = keras.applications.ResNet50(weights=None, input_shape=(SIZE, SIZE, 3))
  _seed_keras_resnet50(model, np.random.default_rng(tv.SEED))
  files = {'h5': str(directory / 'resnet50_weights_tf_dim_ordering_tf_kernels.h5'),
           'weights.h5': str(directory / 'resnet50.weights.h5'), 'keras': str(directory / 'resnet50.keras')}
  with h5py.File(files['h5'], 'w') as f:  # what keras.applications downloads: a weights-only legacy HDF5
    legacy_h5_format.save_weights_to_hdf5_group(f, model)
  model.save_weights(files['weights.h5'])
  model.save(files['keras'])
  probabilities = model(keras.applications.resnet.preprocess_input(tv.images()), training=False).numpy()
  assert len(set(probabilities.argmax(1))) > 1, 'the seeded weights should not predict one class for all'
  return files, probabilities


@pytest.mark.slow
def test_keras_h5_exported_through_the_cli_equals_keras(keras_files, tmp_path):
  """--mode=export turns the legacy .h5 into a SavedModel; its probabilities are Keras' own."""
  files, expected = keras_files
  model_dir, export_dir = tmp_path / 'run', tmp_path / 'export'
  result = cli.run_in_process(
      '--mode=export', f'--resnet_checkpoint={files["h5"]}', f'--model_dir={model_dir}', f'--export_dir={export_dir}',
      '--resnet_depth=50', '--num_label_classes=1000', f'--image_size={SIZE}', '--precision=float32',
      '--use_tpu=false', base=())
  assert result.code == 0, result.log[-3000:]
  log = result.log + result.out
  assert 'Keras applications ResNet-50, legacy Keras HDF5 weights (.h5), 1000-class head' in log
  assert '53 conv biases folded into batch-norm moving means' in log
  saved = params_files.read_params(str(model_dir / 'params.yaml'))
  assert {key: saved[key] for key in KERAS_VARIANT} == KERAS_VARIANT
  assert tf.train.latest_checkpoint(str(model_dir)).endswith('model.ckpt-0')
  (version,) = os.listdir(export_dir)
  served = tf.saved_model.load(str(export_dir / version)).signatures['serving_images'](
      images=tf.constant(tv.images()))
  _assert_parity(served['probabilities'].numpy(), expected)

  # Eval, predict, export and resume in that model_dir, and a later warm start from it, compute the same function.
  for params in (run_params.make_params({'model_dir': str(model_dir)}, fill_from_data=False),
                 _params(tmp_path / 'later', str(model_dir))):
    assert {key: params[key] for key in KERAS_VARIANT} == KERAS_VARIANT


@pytest.mark.slow
def test_keras_file_formats_load_the_same_weights(keras_files, tmp_path):
  """.weights.h5 and .keras give exactly the legacy .h5's tensors; the .keras one runs to Keras' probabilities."""
  files, expected = keras_files
  legacy = fw.load(files['h5'])
  assert legacy.folded_biases == 53 and not legacy.unused and legacy.header.depth == 50
  for name in ('weights.h5', 'keras'):
    other = fw.load(files[name])
    assert other.header.variant == legacy.header.variant == KERAS_VARIANT, name
    assert sorted(other.tensors) == sorted(legacy.tensors), name
    for key, value in legacy.tensors.items():
      np.testing.assert_array_equal(other.tensors[key], value, err_msg=f'{name}: {key}')
  _assert_parity(_warm_started_probabilities(_params(tmp_path, files['keras']), files['keras']), expected)


# ------------------------------------------------------------------------------------------------ torchvision
def _safetensors(directory, depth: int, state=None) -> str:
  path = str(directory / f'resnet{depth}.safetensors')
  safetensors_numpy.save_file(state or tv.state_dict(depth), path)
  return path


@pytest.mark.slow
@pytest.mark.parametrize('depth', [18, 50])
def test_torchvision_parity(depth, tmp_path):
  path = _safetensors(tmp_path, depth)
  params = _params(tmp_path, path, resnet_depth=depth)
  assert params.stem_pool_padding == 'symmetric' and not params.stride_in_1x1
  assert params.projection_shortcut == ('shape_change' if depth == 18 else 'every_group')
  _assert_parity(_warm_started_probabilities(params, path), np.load(EXPECTED)[f'resnet{depth}'])


def test_another_class_count_skips_the_head(tmp_path, caplog):
  path = _safetensors(tmp_path, 18)
  model = resnet_model_fn.build_model(_params(tmp_path, path, resnet_depth=18, num_label_classes=5))
  with caplog.at_level('INFO', logger='absl'):
    summary = ws.warm_start(model, path)
  assert summary.skipped == [('dense/kernel', (512, 1000), (512, 5)), ('dense/bias', (1000,), (5,))]
  assert not summary.missing and len(summary.restored) == 100
  assert any('classifier head: checkpoint 1000 classes, model 5' in r.getMessage() for r in caplog.records)


def test_backbone_mismatches_are_errors_naming_them(tmp_path):
  path = _safetensors(tmp_path, 18)
  model = resnet_model_fn.build_model(_params(tmp_path, path, resnet_depth=34))
  with pytest.raises(ws.WarmStartMismatchError, match=r'142 of 182 .*: conv2d_5/kernel \(layer2\.0\.downsample\.0\) '
                     r'model \[3,3,64,64\] checkpoint \[1,1,64,128\];.*holds a torchvision/timm ResNet-18, safetensors.*--resnet_depth=18'):
    ws.warm_start(model, path)

  # timm's ResNet-D (resnet18d): deep stem conv1.0/.1/..., average-pool shortcut downsample.1 (conv), .2 (BN).
  rng = np.random.default_rng(0)
  state = {k: v for k, v in tv.state_dict(18).items() if not k.startswith('conv1.')}
  for key, cin, cout in (('conv1.0', 3, 32), ('conv1.3', 32, 32), ('conv1.6', 32, 64)):
    state[f'{key}.weight'] = rng.normal(size=(cout, cin, 3, 3)).astype(np.float32)
  for key in [k for k in state if '.downsample.' in k]:
    group, index, rest = key.split('.downsample.')[0], int(key.split('.downsample.')[1][0]), key.split('.')[-1]
    state[f'{group}.downsample.{index + 1}.{rest}'] = state.pop(key)
  path_d = str(tmp_path / 'resnet18d.safetensors')
  safetensors_numpy.save_file(state, path_d)
  model = resnet_model_fn.build_model(_params(tmp_path, path_d, resnet_depth=18))
  with pytest.raises(ws.WarmStartMismatchError, match=r'conv2d/kernel model \[7,7,3,64\] checkpoint missing.*'
                     r'ResNet-D layout.*conv1\.0\.weight'):
    ws.warm_start(model, path_d)


def test_an_explicit_param_that_contradicts_the_file_is_an_error(tmp_path):
  path = _safetensors(tmp_path, 18)
  with pytest.raises(ValueError, match=r"stem_pool_padding='same' is set, but .*resnet18.safetensors "
                     r"\(torchvision/timm ResNet-18, safetensors\) needs stem_pool_padding='symmetric'"):
    _params(tmp_path, path, resnet_depth=18, stem_pool_padding='same')
  # A model built without the file's variant (as a library caller might) is refused before anything is copied.
  model = resnet_model_fn.build_model(run_params.make_params(dict(
      resnet_depth=18, num_label_classes=1000, image_size=SIZE, precision='float32'), fill_from_data=False))
  with pytest.raises(ws.WarmStartMismatchError, match=r"stem_pool_padding: the weights need 'symmetric', the model "
                     r"has 'same'; projection_shortcut: the weights need 'shape_change'"):
    ws.warm_start(model, path)


@pytest.mark.skipif(importlib.util.find_spec('torch') is not None, reason='torch is importable: it reads .pth')
def test_a_pth_without_torch_names_the_conversion(tmp_path):
  path = tmp_path / 'resnet50-11ad3fa6.pth'
  path.write_bytes(fw.TORCH_LEGACY_MAGIC + b'\x80\x02}q\x00.')  # torch.save's legacy format, as it starts
  assert fw.detect(str(path)) == fw.TORCH_PICKLE
  with pytest.raises(ValueError, match=r'only torch can read.*s\.save_file\(torch\.load\(.x\.pth.\), '
                     r'.x\.safetensors.\)'):
    run_params.make_params({'resnet_checkpoint': str(path)}, fill_from_data=False)


def test_tf_checkpoints_and_missing_files_are_not_foreign(tmp_path):
  assert fw.detect(str(tmp_path)) is None and fw.detect(str(tmp_path / 'nothing')) is None
  data = tmp_path / 'model.ckpt-5.data-00000-of-00001'  # raw tensor bytes may start like a weights file
  data.write_bytes(fw.HDF5_MAGIC + bytes(64))
  assert fw.detect(str(data)) is None
  params = run_params.make_params({'resnet_checkpoint': str(tmp_path / 'model.ckpt-5')}, fill_from_data=False)
  assert params.stem_pool_padding == 'same' and params.bn_epsilon == 1e-5 and params.stride_in_1x1 is False


def test_export_mode_needs_an_export_dir(tmp_path):
  from resnet import resnet_main  # pylint: disable=import-outside-toplevel
  resnet_main.FLAGS(['resnet_main', '--mode=export', f'--model_dir={tmp_path / "run"}',
                     f'--resnet_checkpoint={_safetensors(tmp_path, 18)}', '--resnet_depth=18'])
  try:
    with pytest.raises(SystemExit, match='--mode=export needs --export_dir'):
      resnet_main.main(None)
  finally:
    resnet_main.FLAGS.unparse_flags()
  assert not (tmp_path / 'run').exists()  # refused before anything is written


def test_tensors_the_model_has_no_place_for_are_an_error_naming_them(tmp_path):
  """A timm SE-ResNet's squeeze-excitation weights would be dropped silently, and the model would compute another
  function than the file's; listed, with what they are, unless allow_partial_warm_start drops them knowingly."""
  rng = np.random.default_rng(0)
  state = dict(tv.state_dict(18))
  state['layer1.0.se.fc1.weight'] = rng.normal(size=(4, 64, 1, 1)).astype(np.float32)
  state['layer1.0.se.fc2.weight'] = rng.normal(size=(64, 4, 1, 1)).astype(np.float32)
  path = str(tmp_path / 'seresnet18.safetensors')
  safetensors_numpy.save_file(state, path)
  model = resnet_model_fn.build_model(_params(tmp_path, path, resnet_depth=18))
  before = [v.numpy().copy() for v in model.weights]
  with pytest.raises(ws.WarmStartMismatchError, match=r'holds 2 tensors that no model variable takes: '
                     r'layer1\.0\.se\.fc1\.weight, layer1\.0\.se\.fc2\.weight \(squeeze-and-excitation.*'
                     r'Nothing was copied.*allow_partial_warm_start=true'):
    ws.warm_start(model, path)
  assert all(np.array_equal(b, v.numpy()) for b, v in zip(before, model.weights))
  summary = ws.warm_start(model, path, allow_partial=True)
  assert len(summary.restored) == 102


def test_damaged_and_unknown_weight_files_name_the_file_what_was_found_and_the_fix(tmp_path):
  full = _safetensors(tmp_path, 18)
  data = open(full, 'rb').read()
  truncated = tmp_path / 'resnet18-partial.safetensors'
  truncated.write_bytes(data[:len(data) // 2])                 # an interrupted download
  with pytest.raises(ValueError, match=r'resnet18-partial\.safetensors starts as safetensors but cannot be read: '
                     r'.*damaged or truncated.*download or save it again\. Read: a TF checkpoint'):
    run_params.make_params({'resnet_checkpoint': str(truncated)}, fill_from_data=False)

  h5 = tmp_path / 'resnet50.h5'
  with h5py.File(h5, 'w') as f:
    f.attrs['layer_names'] = [b'conv1_conv']
    f.create_dataset('conv1_conv/kernel', data=np.ones((7, 7, 3, 64), np.float32))
  h5.write_bytes(h5.read_bytes()[:3000])
  with pytest.raises(ValueError, match=r'resnet50\.h5 starts as an HDF5 file but cannot be read: OSError'):
    run_params.make_params({'resnet_checkpoint': str(h5)}, fill_from_data=False)

  photo = tmp_path / 'weights.bin'
  photo.write_bytes(b'\xff\xd8\xff\xe0' + bytes(100))          # a JPEG, say
  with pytest.raises(ValueError, match=r"weights\.bin is a file in no weights format read here \(it starts with "
                     r"b'\\xff\\xd8\\xff\\xe0.*Read: a TF checkpoint.*Keras applications.*safetensors"):
    run_params.make_params({'resnet_checkpoint': str(photo)}, fill_from_data=False)


def test_keras_resnet_v2_files_are_named_as_unsupported(tmp_path):
  legacy = tmp_path / 'resnet50v2_weights_tf_dim_ordering_tf_kernels_notop.h5'
  names = ('conv1_conv', 'conv2_block1_preact_bn', 'conv2_block1_1_conv', 'post_bn')
  with h5py.File(legacy, 'w') as f:  # the legacy layout, with (some of) ResNet50V2's layer names
    f.attrs['layer_names'] = [n.encode() for n in names]
    for name in names:
      f.create_group(name).attrs['weight_names'] = np.array([], dtype='S8')
  with pytest.raises(ValueError, match=r'holds a Keras applications ResNet50/101/152V2 \(pre-activation.*only '
                     r'keras\.applications ResNet50/101/152 \(v1\)'):
    run_params.make_params({'resnet_checkpoint': str(legacy)}, fill_from_data=False)
  v2 = keras.applications.ResNet50V2(weights=None, include_top=False, input_shape=(32, 32, 3))
  path = str(tmp_path / 'mine.weights.h5')
  v2.save_weights(path)
  with pytest.raises(ValueError, match=r'mine\.weights\.h5 holds a Keras applications ResNet50V2'):
    run_params.make_params({'resnet_checkpoint': path}, fill_from_data=False)
