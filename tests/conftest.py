"""Test-session set-up: quiet TensorFlow logs and two logical CPU devices for MirroredStrategy tests."""
import os
import shutil
import sys

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '1')  # the kernels resnet_main runs (it says why); CLI children inherit it
# One compute thread a process: `make test` runs two test files at a time on 2 cores, and some start 2-3 worker
# processes; each with a thread per core, they spin and thrash (a test measured 4 s alone took 124 s beside them).
# Results do not depend on it; users' runs keep TensorFlow's default.
os.environ.setdefault('TF_NUM_INTRAOP_THREADS', '1')
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)

import tensorflow as tf  # pylint: disable=g-import-not-at-top

try:
  _cpu = tf.config.list_physical_devices('CPU')[0]
  tf.config.set_logical_device_configuration(
      _cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()])
except RuntimeError:  # devices already initialised by an earlier import; mirrored tests skip themselves
  pass

import pytest  # pylint: disable=g-import-not-at-top,wrong-import-order

from resnet import determinism  # pylint: disable=g-import-not-at-top
from tensorflow.python.data.ops import dataset_ops  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import


def _without_autotune_thread(apply_debug_options):
  """tf.data's autotuning thread can hold up the destruction of its iterator for up to a minute: cancelling wakes
  it before the cancelled flag is set, and it sleeps out its optimisation period (which doubles to 60 s while the
  iterator lives). A test process destroys hundreds of iterators, often when garbage collection finds an earlier
  test's, holding the GIL; measured on 2 cores (gdb: ~RootDataset::Iterator waiting on Model::OptimizeLoop): 3-4
  such stalls of 40-130 s a suite run, a quarter of its wall time. Autotuning picks parallelism and buffer sizes,
  never values or (deterministic) order, so the tests here run without it; every iterator is made through this
  hook (iterators, multi-device and distributed ones). Programs the tests start in their own processes keep it."""
  def apply(self):
    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset_ops._OptionsDataset(apply_debug_options(self), options)  # pylint: disable=protected-access
  return apply


dataset_ops.DatasetV2._apply_debug_options = _without_autotune_thread(  # pylint: disable=protected-access
    dataset_ops.DatasetV2._apply_debug_options)  # pylint: disable=protected-access

# The suite runs in the mode users run: TensorFlow's default, nondeterministic kernels. tests/test_kernel_modes.py
# runs the numeric claims again in a subprocess with this variable set, where deterministic ops (what every
# random_seed turns on) swap kernels.
DETERMINISTIC_OPS = os.environ.get('RESNET_TEST_DETERMINISTIC_OPS') == '1'
if DETERMINISTIC_OPS:
  tf.config.experimental.enable_op_determinism()


@pytest.fixture(autouse=True)
def _kernel_mode_is_kept():
  """Deterministic ops cannot be turned off: a test that turns them on in a shared test process would silently
  move every later test to the other kernels. Such a test must run its program in a subprocess."""
  yield
  if determinism.op_determinism_enabled() != DETERMINISTIC_OPS:
    pytest.fail('This test turned on deterministic ops in the shared test process; run that code in a subprocess '
                '(the rest of the suite must keep the default kernels users run).')


class _ModuleTmp:
  def __init__(self, factory):
    self._factory, self.paths = factory, []

  def mktemp(self, name: str):
    path = self._factory.mktemp(name)
    self.paths.append(path)
    return path


@pytest.fixture(scope='module')
def module_tmp(tmp_path_factory):
  """Directories for one module's shared fixtures (``module_tmp.mktemp(name)``), removed when the module ends: a
  tiny ResNet's checkpoints are ~90 MB each, and kept to the session's end they took the suite past 2 GB."""
  tmp = _ModuleTmp(tmp_path_factory)
  yield tmp
  for path in tmp.paths:
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope='session')
def records(tmp_path_factory):
  """A small converted dataset, as a user makes one (drawn shapes, 4 classes x 12 images, the converter), shared by
  the tests of the whole session that only read it: <dir>/records, and the images beside it in <dir>/images."""
  from tools import imagenet_to_gcs, make_demo_dataset  # pylint: disable=import-outside-toplevel
  root = tmp_path_factory.mktemp('data')
  make_demo_dataset.make_demo_dataset(str(root / 'images'), num_classes=4, images_per_class=12,
                                      image_size=(40, 56), seed=0)
  imagenet_to_gcs.convert_dataset(str(root / 'images'), str(root / 'records'), num_workers=1, seed=0)
  return str(root / 'records')


# The kernel-modes rerun (one long test) first, then the longest files, longest to shortest (pytest-xdist keeps this
# order under `--dist loadfile --no-loadscope-reorder`, which the Makefile passes), so the suite ends on short files
# on both workers instead of one long file running alone. Seconds a file took in `make test` on 2 cores (from its
# first start to its last end); the rest (each under ~25 s) keep their collection order.
LONGEST_FIRST = (
    'tests/resnet/test_resume.py',                       # 330: 4 runs a test, compared tensor by tensor
    'tests/test_kernel_modes.py',                        # 120: a nested pytest of the numeric claims
    'tests/resnet/estimator/test_multi_worker.py',       # 280: 2-3 processes a test
    'tests/resnet/training/test_loss_gradients.py',      # 115
    'tests/resnet/test_resnet_main.py',                  # 105
    'tests/params/test_configs.py',                      # 80
    'tests/resnet/model/test_resnet_model.py',           # 70
    'tests/official_input/test_imagenet_input.py',       # 60
    'tests/resnet/estimator/test_preemption.py',         # 55
    'tests/resnet/training/test_recipe.py',              # 50
    'tests/resnet/test_reference_options.py',            # 45
    'tests/resnet/training/test_fine_tuning.py',         # 45
    'tests/resnet/test_multi_label_run.py',              # 45
    'tests/tools/test_sweep.py',                         # 55: a sweep of 3 trials
    'tests/official_input/test_ordering.py',             # 45
    'tests/tools/test_train_benchmark.py',               # 40
    'tests/resnet/test_accelerator_paths.py',            # 40
    'tests/resnet/export/test_quantized_export.py',      # 40
    'tests/resnet/weights/test_foreign_weights.py',      # 35
    'tests/resnet/test_determinism.py',                  # 35
    'tests/resnet/model/test_cpu_kernels.py',            # 30
    'tests/tools/test_input_benchmark.py',               # 30
    'tests/tools/test_compare_keras_fit.py',             # 30
    'tests/resnet/training/test_distillation.py',        # 30
    'tests/resnet/weights/test_warm_start.py',           # 30
    'tests/resnet/run_setup/test_finished_run.py',       # 25
    'tests/resnet/test_bad_input.py',                    # 25
    'tests/resnet/run_dir/test_hparams.py',              # 20
    'tests/tools/convert/test_archive_sources.py',       # 20
)


def pytest_collection_modifyitems(config, items):  # pylint: disable=unused-argument
  missing = [path for path in LONGEST_FIRST if not os.path.isfile(os.path.join(ROOT, path))]
  if missing:  # a moved file would silently lose its place
    raise pytest.UsageError(f'tests/conftest.py LONGEST_FIRST names files that are not there: {missing}')
  rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
  items.sort(key=lambda item: rank.get(item.nodeid.split('::')[0], len(LONGEST_FIRST)))  # stable: the rest in order
