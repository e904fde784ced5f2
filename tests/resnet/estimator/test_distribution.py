"""Strategy selection, cluster configuration, and the TPU path failing fast and clearly when there is no TPU.

The reference crashed on a machine without a TPU (`--use_tpu=false` -> TPUClusterResolver error, tpu#160) and TF's
own TPU connect retries a dead address for minutes; here both are checked with real processes. The only address
ever contacted is 127.0.0.1 on a port with nothing listening.
"""
import json
import os
import socket
import time

import pytest
import tensorflow as tf

from resnet.estimator import distribution
from tests.helpers import cli
from tests.helpers import procs

TPU_ENV_VARS = ('TPU_NAME', 'COLAB_TPU_ADDR', 'KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS', 'TPU_ACCELERATOR_TYPE')


@pytest.fixture
def no_cluster_env(monkeypatch):
  for var in TPU_ENV_VARS + ('TF_CONFIG',):
    monkeypatch.delenv(var, raising=False)
  yield monkeypatch
  # configure_cluster writes TF_CONFIG itself, not through monkeypatch: left set, every later resnet_main
  # subprocess of this test process would wait for a cluster that does not exist.
  os.environ.pop('TF_CONFIG', None)


# ------------------------------------------------------------------------------------------------ selection
def test_unknown_strategy_name_is_a_clear_error(no_cluster_env):
  with pytest.raises(ValueError, match=r"Unknown strategy 'mirored'.*one_device, mirrored, multi_worker_mirrored"):
    distribution.get_strategy('mirored')


@pytest.mark.parametrize('kwargs', [{}, {'use_tpu': False}, {'use_tpu': False, 'tpu': ''}, {'tpu': None}])
def test_auto_without_tpu_uses_every_local_device(no_cluster_env, kwargs):
  """One device when there is one; MirroredStrategy over all of them when there are several (here: the suite's
  two logical CPUs)."""
  strategy = distribution.get_strategy('auto', **kwargs)
  devices = tf.config.list_logical_devices('CPU')
  if len(devices) > 1:
    assert isinstance(strategy, tf.distribute.MirroredStrategy)
    assert strategy.num_replicas_in_sync == len(devices)
    return
  assert isinstance(strategy, tf.distribute.OneDeviceStrategy)
  assert strategy.num_replicas_in_sync == 1
  expected = 'GPU:0' if tf.config.list_physical_devices('GPU') else 'CPU:0'
  assert expected in strategy.extended.worker_devices[0]


def test_auto_picks_multi_worker_only_for_a_multi_worker_tf_config(no_cluster_env):
  no_cluster_env.setenv('TF_CONFIG', json.dumps({'cluster': {'worker': ['127.0.0.1:1']},
                                                 'task': {'type': 'worker', 'index': 0}}))
  assert distribution.tf_config_workers() == 1  # one worker: stays local
  assert distribution.resolve_strategy_name('auto') in ('one_device', 'mirrored')
  no_cluster_env.setenv('TF_CONFIG', json.dumps({'cluster': {'chief': ['127.0.0.1:1'], 'worker': ['127.0.0.1:2']},
                                                 'task': {'type': 'chief', 'index': 0}}))
  assert distribution.tf_config_workers() == 2  # chief + worker: auto would pick multi_worker_mirrored
  # (creating it needs a fresh process: tests/resnet/estimator/test_multi_worker.py runs --strategy=auto with a TF_CONFIG)


# ------------------------------------------------------------------------------------------------ cluster
def test_configure_cluster_writes_tf_config_from_worker_hosts(no_cluster_env):
  assert distribution.configure_cluster('127.0.0.1:2222, 127.0.0.1:2223', 1) == 2
  assert json.loads(os.environ['TF_CONFIG']) == {
      'cluster': {'worker': ['127.0.0.1:2222', '127.0.0.1:2223']}, 'task': {'type': 'worker', 'index': 1}}


def test_configure_cluster_without_worker_hosts_is_single_worker(no_cluster_env):
  assert distribution.configure_cluster(None, 0) == 1
  assert distribution.configure_cluster('', 0) == 1
  assert 'TF_CONFIG' not in os.environ


def test_configure_cluster_respects_an_existing_tf_config(no_cluster_env):
  existing = json.dumps({'cluster': {'chief': ['h0:1'], 'worker': ['h1:1', 'h2:1']},
                         'task': {'type': 'worker', 'index': 0}})
  no_cluster_env.setenv('TF_CONFIG', existing)
  assert distribution.configure_cluster('127.0.0.1:2222,127.0.0.1:2223', 1) == 3
  assert os.environ['TF_CONFIG'] == existing


@pytest.mark.parametrize('task_index', [2, 5, -1])
def test_configure_cluster_rejects_an_out_of_range_task_index(no_cluster_env, task_index):
  with pytest.raises(ValueError, match=rf'task_index={task_index} is out of range for the 2 worker_hosts'):
    distribution.configure_cluster('127.0.0.1:2222,127.0.0.1:2223', task_index)
  assert 'TF_CONFIG' not in os.environ


# ------------------------------------------------------------------------------------------------ TPU
def test_unreachable_tpu_address_fails_fast_naming_address_and_fix(no_cluster_env):
  address = f'grpc://127.0.0.1:{procs.closed_port()}'
  start = time.time()
  with pytest.raises(RuntimeError) as raised:
    distribution.get_strategy('tpu', tpu=address)
  assert time.time() - start < 15
  message = str(raised.value)
  assert address in message and 'Connection refused' in message
  assert 'TPU name or address' in message and 'run without a TPU' in message  # resnet_main adds its flags


def test_tpu_preflight_passes_a_listening_address_and_skips_tpu_names():
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
    server.bind(('127.0.0.1', 0))
    server.listen(1)
    distribution._check_grpc_reachable(f'grpc://127.0.0.1:{server.getsockname()[1]}', timeout=5)
  distribution._check_grpc_reachable('my-tpu-name')  # a name is resolved by TF's resolver, not pre-checked
  distribution._check_grpc_reachable('')


def test_use_tpu_false_overrides_a_config_strategy_tpu(no_cluster_env):
  assert distribution.resolve_strategy_name('tpu', tpu='my-tpu', use_tpu=False) != 'tpu'
  assert distribution.resolve_strategy_name('tpu', use_tpu=None) == 'tpu'
  assert distribution.resolve_strategy_name('auto', tpu='my-tpu') == 'tpu'


def test_tpu_zone_and_project_reach_the_cluster_resolver(no_cluster_env):
  seen = {}

  class FakeResolver:
    def __init__(self, **kwargs):
      seen.update(kwargs)

  no_cluster_env.setattr(tf.distribute.cluster_resolver, 'TPUClusterResolver', FakeResolver)
  distribution.tpu_cluster_resolver('my-tpu', zone='us-central1-b', project='my-project')
  assert seen == {'tpu': 'my-tpu', 'zone': 'us-central1-b', 'project': 'my-project'}


def test_num_cores_is_checked_against_the_tpu_replicas(no_cluster_env):
  class EightCores:
    num_replicas_in_sync = 8

  no_cluster_env.setattr(distribution, '_tpu_strategy', lambda *args: EightCores())
  assert distribution.get_strategy('tpu', tpu='t', num_cores=8).num_replicas_in_sync == 8
  with pytest.raises(ValueError, match='num_cores=4 but the TPU has 8 cores'):
    distribution.get_strategy('tpu', tpu='t', num_cores=4)


def test_use_tpu_without_any_tpu_is_a_clear_error_not_a_crash(no_cluster_env):
  with pytest.raises(RuntimeError, match=r"Could not reach the TPU '\(local\)'.*run without a TPU"):
    distribution.get_strategy('auto', use_tpu=True)


@pytest.mark.slow
def test_cli_with_an_unreachable_tpu_exits_within_a_minute_with_the_message(tmp_path):
  address = f'grpc://127.0.0.1:{procs.closed_port()}'
  start = time.time()
  proc = procs.run(cli.main_args('--mode=train', '--strategy=tpu', '--use_tpu=true', f'--tpu={address}',
                                 f'--model_dir={tmp_path / "model"}', '--train_steps=1'),
                   str(tmp_path / 'tpu.log'), timeout=120)
  elapsed = time.time() - start
  assert proc.popen.returncode not in (0, None), proc.tail()
  assert elapsed < 60, f'took {elapsed:.0f} s'
  log = proc.log()
  assert f'Could not reach the TPU {address!r}' in log and '--use_tpu=false runs locally' in log, proc.tail()
  assert '--tpu, --tpu_zone, --gcp_project' in log
  assert not tf.io.gfile.glob(str(tmp_path / 'model' / 'model.ckpt-*'))


@pytest.mark.slow
def test_cli_with_use_tpu_false_and_auto_trains_on_cpu():
  model_dir, _, log = cli.shared_trained_run()  # --use_tpu=false, strategy auto (the default), CPU only
  assert 'Strategy: OneDeviceStrategy with 1 replica(s) on CPU' in log
  assert cli.latest_step(model_dir) == 5


@pytest.mark.parametrize('task_type,task_id,has_chief,expected', [
    ('chief', 0, True, True), ('worker', 0, True, False), ('worker', 0, False, True), ('worker', 1, False, False),
    ('evaluator', 0, False, False)])
def test_one_chief_per_cluster(task_type, task_id, has_chief, expected):
  """With a chief job, worker 0 is not a second chief (before: two writers on model_dir and best/)."""
  from resnet.estimator import distribution  # pylint: disable=g-import-not-at-top
  assert distribution.chief_task(task_type, task_id, has_chief) is expected
