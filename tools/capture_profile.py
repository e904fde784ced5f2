"""Captures a profile from a running job on demand (the role of the reference's ``capture_tpu_profile``).

The job must run TensorFlow's profiler server (resnet_main ``--profiler_port=P``, i.e.
``tf.profiler.experimental.server.start(P)``). Then:

  python -m tools.capture_profile --service_addr=localhost:P --logdir=<model_dir> [--duration_ms=2000]
  python -m tools.capture_profile --tpu=my-tpu --logdir=gs://bucket/model_dir

The PROFILED process writes ``<logdir>/plugins/profile/<run>/<host>.xplane.pb``, so --logdir is a path as seen by
the job, and the job must be able to write there. Unlike the reference (which exited 0 when "No trace event is
collected"), this tool exits 1 when nothing was captured.
"""
import os
import sys
import time

# Hide TensorFlow's C++ INFO lines (gRPC session chatter); set before TensorFlow loads (imported lazily below).
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '1')
from typing import List, Optional, Sequence, Tuple

from absl import app
from absl import flags
from absl import logging

FLAGS = flags.FLAGS

TPU_GRPC_PORT = '8470'
TPU_PROFILER_PORT = '8466'


class CaptureError(RuntimeError):
  """Nothing could be captured, or the target could not be resolved."""


def define_flags() -> None:
  """Defines the flags on first call only, so tools sharing flag names can be imported in one process."""
  if 'service_addr' in FLAGS:
    return
  flags.DEFINE_string('service_addr', None, 'Profiler server address(es) of the job: host:port or grpc://host:port, '
                      'comma-separated for several workers. Wins over --tpu.')
  flags.DEFINE_string('tpu', None, 'A Cloud TPU name (resolved with TPUClusterResolver) or grpc://ip:8470; the '
                      'profiler port 8466 is used instead of 8470.')
  flags.DEFINE_string('tpu_zone', None, 'Zone of --tpu, for the resolver (default: from the metadata server).')
  flags.DEFINE_string('gcp_project', None, 'Project of --tpu, for the resolver (default: from the metadata server).')
  flags.DEFINE_string('logdir', None, 'Where the PROFILED job writes plugins/profile/<run>/ (normally its '
                      'model_dir); a path the job process can write, as seen by the job.')
  flags.DEFINE_integer('duration_ms', 2000, 'How long to trace, in milliseconds.', lower_bound=1)
  flags.DEFINE_integer('num_tracing_attempts', 3, 'Attempts (1 s, 2 s, 4 s apart) when no trace event is '
                       'collected or the server cannot be reached.', lower_bound=1)
  flags.DEFINE_integer('host_tracer_level', 2, 'Host (CPU) trace detail: 1 user TraceMe only, 2 + high-level '
                       'ops, 3 everything. Note: TF 2.21 ignores it (warns "expects an i value") and traces at 2.',
                       lower_bound=0, upper_bound=3)
  flags.DEFINE_string('worker_list', '', 'TPU pods: comma-separated host:port of the workers to profile '
                      '(default for --tpu: every worker of the TPU).')
  flags.mark_flag_as_required('logdir')


def _with_grpc(addr: str) -> str:
  addr = addr.strip()
  return addr if addr.startswith('grpc://') else 'grpc://' + addr


def normalize_service_addr(service_addr: str) -> str:
  """'h1:p1, grpc://h2:p2' -> 'grpc://h1:p1,grpc://h2:p2'."""
  addrs = [_with_grpc(a) for a in service_addr.split(',') if a.strip()]
  if not addrs:
    raise CaptureError('--service_addr is empty')
  return ','.join(addrs)


def to_profiler_port(addr: str) -> str:
  """grpc://ip:8470 (the TPU's gRPC port) -> grpc://ip:8466 (its profiler port), as the reference did."""
  host, sep, port = addr.rpartition(':')
  return f'{host}:{TPU_PROFILER_PORT}' if sep and port == TPU_GRPC_PORT else addr


def resolve_tpu(tpu: str, zone: Optional[str] = None, project: Optional[str] = None) -> Tuple[str, str]:
  """(service_addr, worker_list) for a TPU name or grpc://ip:8470; the resolver is imported only when needed."""
  if tpu.startswith('grpc://'):
    return to_profiler_port(tpu), ''
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  try:
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu, zone=zone, project=project)
    master = resolver.get_master()
    workers = resolver.cluster_spec().as_dict().get('worker', [])
  except Exception as e:  # the resolver raises many kinds (no metadata server, API errors, unknown TPU)
    raise CaptureError(f'could not resolve TPU {tpu!r} (needs the Cloud TPU API or the GCE metadata server; pass '
                       f'--tpu_zone/--gcp_project, or --service_addr=<ip>:{TPU_PROFILER_PORT} instead): {e}') from e
  if not master:
    raise CaptureError(f'TPU {tpu!r} resolved to no address; pass --service_addr=<ip>:{TPU_PROFILER_PORT}')
  worker_list = ','.join(to_profiler_port(w).replace('grpc://', '') for w in workers)
  return to_profiler_port(master), worker_list


def _run_dirs(logdir: str) -> List[str]:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  profile_dir = os.path.join(logdir, 'plugins', 'profile')
  try:
    return sorted(os.path.join(profile_dir, d.rstrip('/')) for d in tf.io.gfile.listdir(profile_dir))
  except tf.errors.OpError:
    return []  # missing, or not visible from this machine


def capture(service_addr: str, logdir: str, duration_ms: int = 2000, worker_list: str = '',
            num_tracing_attempts: int = 3, host_tracer_level: int = 2) -> List[str]:
  """Traces the job at service_addr; returns the new run dirs visible from here (may be [] for a remote logdir).

  Raises CaptureError when every attempt failed.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  # TF 2.21 drops ProfilerOptions with a warning per field; pass them only when asked for a non-default level.
  options = (tf.profiler.experimental.ProfilerOptions(host_tracer_level=host_tracer_level)
             if host_tracer_level != 2 else None)
  before = set(_run_dirs(logdir))
  last_error: Optional[Exception] = None
  for attempt in range(1, num_tracing_attempts + 1):
    try:
      tf.profiler.experimental.client.trace(service_addr, logdir, duration_ms, worker_list=worker_list,
                                            num_tracing_attempts=1, options=options)
      return [d for d in _run_dirs(logdir) if d not in before]
    except (tf.errors.OpError, RuntimeError) as e:  # UNAVAILABLE arrives as RuntimeError in TF 2.21
      last_error = e
      logging.warning('Attempt %d/%d to trace %s failed: %s', attempt, num_tracing_attempts, service_addr, e)
      if attempt < num_tracing_attempts:
        time.sleep(min(2.0 ** (attempt - 1), 8.0))
  raise CaptureError(
      f'no profile captured from {service_addr} after {num_tracing_attempts} attempt(s): {last_error}\n'
      'Check that the job runs a profiler server on that port (resnet_main --profiler_port, or '
      'tf.profiler.experimental.server.start) and that it is busy while tracing (an idle job gives an empty '
      'trace); try a longer --duration_ms or more --num_tracing_attempts.')


def main(argv: Sequence[str]) -> int:
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {list(argv[1:])}')
  try:
    if FLAGS.service_addr:
      service_addr, worker_list = normalize_service_addr(FLAGS.service_addr), FLAGS.worker_list
    elif FLAGS.tpu:
      service_addr, tpu_workers = resolve_tpu(FLAGS.tpu, FLAGS.tpu_zone, FLAGS.gcp_project)
      worker_list = FLAGS.worker_list or tpu_workers
    else:
      raise app.UsageError('pass --service_addr=host:port (or --tpu=<name>)')
    print(f'Tracing {service_addr} for {FLAGS.duration_ms} ms ...', flush=True)
    run_dirs = capture(service_addr, FLAGS.logdir, FLAGS.duration_ms, worker_list, FLAGS.num_tracing_attempts,
                       FLAGS.host_tracer_level)
  except CaptureError as e:
    print(f'capture_profile: {e}', file=sys.stderr)
    return 1
  if run_dirs:
    for run_dir in run_dirs:
      print(f'Profile written to {run_dir}')
    print(f'View: tensorboard --logdir {FLAGS.logdir} (Profile tab), or: '
          f'python -m tools.profile_report --logdir {run_dirs[-1]}')
  else:
    print(f'Profile captured; the job wrote it under {os.path.join(FLAGS.logdir, "plugins", "profile")} '
          '(not visible from this machine).')
  return 0


def run_main() -> None:
  define_flags()
  app.run(main)


if __name__ == '__main__':
  run_main()
