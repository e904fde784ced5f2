"""Strategy selection: TensorFlow's own distribution strategies, picked by name or detected (``auto``).

``auto``: a TPU if one is named or attached, MultiWorkerMirroredStrategy for a TF_CONFIG of several workers,
MirroredStrategy for several GPUs, else one device (GPU:0 or CPU:0). ``use_tpu=False`` never picks a TPU, even
when a config says ``strategy: tpu``, so a TPU config runs locally for a smoke test.
"""
import json
import os
import socket
from typing import List, Optional, Sequence

from absl import logging
import tensorflow as tf

from resnet.estimator import run_config

STRATEGIES = run_config.STRATEGIES
# Environment variables that say a TPU is attached (Cloud TPU VMs, Colab, GKE).
_TPU_ENV_VARS = ('TPU_NAME', 'COLAB_TPU_ADDR', 'KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS', 'TPU_ACCELERATOR_TYPE')
_TPU_HELP = ('Check the TPU name or address (grpc://host:8470), its zone and project, that the TPU is up and reachable '
             'from this host, or run without a TPU.')
TPU_CONNECT_TIMEOUT_S = 10.0


class TPUUnreachableError(RuntimeError):
  """The TPU named (or the local one asked for) cannot be reached."""


def tf_config_workers() -> int:
  """Workers (chief included) that TF_CONFIG names; 0 when it is unset."""
  cluster = json.loads(os.environ.get('TF_CONFIG') or '{}').get('cluster', {})
  return len(cluster.get('worker', [])) + len(cluster.get('chief', []))


def is_chief_task() -> bool:
  """From TF_CONFIG, before any strategy exists: the chief task, or worker 0 of a cluster without one; True
  without TF_CONFIG (one process)."""
  config = json.loads(os.environ.get('TF_CONFIG') or '{}')
  task = config.get('task', {})
  if not task:
    return True
  return chief_task(task.get('type'), task.get('index', 0), 'chief' in config.get('cluster', {}))


def configure_cluster(worker_hosts: Optional[str], task_index: int) -> int:
  """Writes TF_CONFIG from ``worker_hosts='h1:p,h2:p'`` and ``task_index`` unless TF_CONFIG is already set.

  Returns the number of workers.
  """
  if os.environ.get('TF_CONFIG'):
    return tf_config_workers() or 1
  if not worker_hosts:
    return 1
  workers = [w.strip() for w in worker_hosts.split(',') if w.strip()]
  if not 0 <= task_index < len(workers):
    raise ValueError(f'task_index={task_index} is out of range for the {len(workers)} worker_hosts.')
  os.environ['TF_CONFIG'] = json.dumps(
      {'cluster': {'worker': workers}, 'task': {'type': 'worker', 'index': task_index}})
  return len(workers)


def num_workers(strategy: tf.distribute.Strategy) -> int:
  """Processes that must agree on every step: >1 only for MultiWorkerMirroredStrategy (a TPU pod has one client)."""
  if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
    return 1
  spec = strategy.cluster_resolver.cluster_spec()
  return sum(spec.num_tasks(job) for job in ('chief', 'worker') if job in spec.jobs) or 1


def is_chief(strategy: tf.distribute.Strategy) -> bool:
  """The process that writes checkpoints, summaries and exports: the chief task, or worker 0 of a cluster
  without one (never both: two writers would race on model_dir)."""
  if num_workers(strategy) == 1:
    return True
  resolver = strategy.cluster_resolver
  return chief_task(resolver.task_type, resolver.task_id, 'chief' in resolver.cluster_spec().jobs)


def chief_task(task_type: Optional[str], task_id: Optional[int], cluster_has_chief: bool) -> bool:
  if cluster_has_chief:
    return task_type == 'chief'
  return task_type == 'worker' and int(task_id or 0) == 0


def from_chief(strategy: tf.distribute.Strategy, values: Sequence[float]) -> List[float]:
  """The chief's ``values`` on every worker (a collective: every worker calls it at the same point). One process
  (one device, MirroredStrategy, a TPU's single client) returns ``values`` unchanged."""
  values = [float(v) for v in values]
  if num_workers(strategy) == 1:
    return values
  local, total = len(strategy.extended.worker_devices), strategy.num_replicas_in_sync
  # A mean over all replicas of (the chief's values x total / local) on the chief's replicas and 0 elsewhere
  # (zeros, not values x 0: a NaN of a non-chief must not reach the result).
  mine = (tf.constant(values, tf.float64) * (total / local) if is_chief(strategy)
          else tf.zeros([len(values)], tf.float64))
  per_replica = strategy.experimental_distribute_values_from_function(lambda _: tf.identity(mine))
  return strategy.reduce(tf.distribute.ReduceOp.MEAN, per_replica, axis=None).numpy().tolist()


def any_worker(strategy: tf.distribute.Strategy, flag: bool) -> bool:
  """Whether ``flag`` is true on any worker (a collective with several workers; one process: ``flag``)."""
  if num_workers(strategy) == 1:
    return bool(flag)
  per_replica = strategy.experimental_distribute_values_from_function(
      lambda _: tf.constant(1.0 if flag else 0.0, tf.float64))
  return float(strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None).numpy()) > 0


def _tpu_visible(tpu: Optional[str]) -> bool:
  return bool(tpu) or any(os.environ.get(v) for v in _TPU_ENV_VARS)


def _check_grpc_reachable(address: str, timeout: float = TPU_CONNECT_TIMEOUT_S) -> None:
  """Fails fast when a ``grpc://host:port`` TPU address does not accept TCP connections.

  TF's own connect (experimental_connect_to_cluster / initialize_tpu_system) retries a dead address for
  minutes without a word; a plain TCP connect answers in milliseconds (refused) or ``timeout`` seconds.
  """
  for entry in address.split(','):
    entry = entry.strip()
    if not entry.startswith('grpc://'):
      continue
    host, _, port = entry[len('grpc://'):].rstrip('/').rpartition(':')
    try:
      with socket.create_connection((host.strip('[]'), int(port)), timeout=timeout):
        pass
    except (OSError, ValueError) as e:
      raise TPUUnreachableError(f'Could not reach the TPU {address!r}: TCP connect to {entry} failed within '
                                f'{timeout:g} s ({e}). {_TPU_HELP}') from e


def tpu_cluster_resolver(tpu: Optional[str], zone: Optional[str] = None,
                         project: Optional[str] = None) -> tf.distribute.cluster_resolver.TPUClusterResolver:
  """The resolver for a TPU name or grpc:// address (zone and project find a named TPU in GCP)."""
  address = tpu or os.environ.get('TPU_NAME') or ''
  if not address and os.environ.get('COLAB_TPU_ADDR'):
    address = 'grpc://' + os.environ['COLAB_TPU_ADDR']
  _check_grpc_reachable(address)
  try:
    return tf.distribute.cluster_resolver.TPUClusterResolver(tpu=address, zone=zone, project=project)
  except (ValueError, tf.errors.OpError, RuntimeError) as e:
    raise TPUUnreachableError(f'Could not reach the TPU {address or "(local)"!r}: {e}. {_TPU_HELP}') from e


def _tpu_strategy(tpu: Optional[str], zone: Optional[str], project: Optional[str]) -> tf.distribute.Strategy:
  resolver = tpu_cluster_resolver(tpu, zone, project)
  try:
    if resolver.master() not in ('', 'local'):
      tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
  except (ValueError, tf.errors.OpError, RuntimeError) as e:
    raise TPUUnreachableError(f'Could not reach the TPU {tpu or "(local)"!r}: {e}. {_TPU_HELP}') from e
  return tf.distribute.TPUStrategy(resolver)


def resolve_strategy_name(name: str, tpu: Optional[str] = None, use_tpu: Optional[bool] = None) -> str:
  """The concrete strategy for ``name`` and the machine: never 'auto', and never 'tpu' when use_tpu is False."""
  if name not in STRATEGIES:
    raise ValueError(f'Unknown strategy {name!r}; choose one of {", ".join(STRATEGIES)}.')
  if use_tpu is False and name == 'tpu':
    logging.info('use_tpu=false: running locally instead of on the TPU the config asks for.')
    name = 'auto'
  if name != 'auto':
    return name
  if use_tpu or (use_tpu is None and _tpu_visible(tpu)):
    return 'tpu'
  if tf_config_workers() > 1:
    return 'multi_worker_mirrored'
  # Physical, not logical: listing logical devices initialises TF's context, after which
  # MultiWorkerMirroredStrategy fails ('Collective ops must be configured at program startup').
  if len(tf.config.list_physical_devices('GPU')) > 1 or len(tf.config.list_logical_devices('CPU')) > 1:
    return 'mirrored'
  return 'one_device'


def get_strategy(name: str = 'auto', tpu: Optional[str] = None, use_tpu: Optional[bool] = None,
                 zone: Optional[str] = None, project: Optional[str] = None, num_cores: Optional[int] = None,
                 devices: Optional[Sequence[str]] = None) -> tf.distribute.Strategy:
  """Returns the tf.distribute strategy for ``name`` (one of STRATEGIES); ``num_cores`` is checked on TPUs."""
  name = resolve_strategy_name(name, tpu, use_tpu)
  gpus = tf.config.list_physical_devices('GPU')
  if not gpus and tf.test.is_built_with_cuda():
    logging.warning('This TensorFlow is built for GPUs but sees none: running on CPU. Check CUDA_VISIBLE_DEVICES '
                    'and the CUDA libraries (TF_CPP_MIN_LOG_LEVEL=0 shows which failed to load).')
  if name == 'tpu':
    strategy = _tpu_strategy(tpu, zone, project)
    if num_cores is not None and num_cores != strategy.num_replicas_in_sync:
      raise ValueError(f'num_cores={num_cores} but the TPU has {strategy.num_replicas_in_sync} cores: set '
                       f'num_cores={strategy.num_replicas_in_sync} (and a train_batch_size that divides by it), '
                       f'or leave num_cores unset.')
  elif name == 'multi_worker_mirrored':
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
  elif name == 'mirrored':
    if not devices and not gpus:  # CPU only: MirroredStrategy would take CPU:0 alone, not the logical CPUs
      devices = [d.name for d in tf.config.list_logical_devices('CPU')]
    strategy = tf.distribute.MirroredStrategy(devices=list(devices) if devices else None)
  else:
    strategy = tf.distribute.OneDeviceStrategy('/gpu:0' if gpus else '/cpu:0')
  logging.info('Strategy: %s with %d replica(s)%s.', type(strategy).__name__, strategy.num_replicas_in_sync,
               f' (GPUs: {len(gpus)})' if gpus else ' on CPU')
  return strategy
