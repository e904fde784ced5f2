"""Profiling for this application: the estimator's ProfilerHook made from params, and the on-demand server.

The estimator's hook knows steps and durations; which params set them (``profile_every_n_steps``,
``profile_duration_ms``, ``profile_steps``) and which tool captures from the server are this program's business.
"""
from typing import Any, Mapping, Optional

from absl import logging
import tensorflow as tf

from resnet.estimator.profiler_hook import ProfilerHook, parse_profile_steps


def make_profiler_hook(params: Mapping[str, Any], logdir: Optional[str] = None,
                       records: bool = True) -> Optional[ProfilerHook]:
  """The hook for params (profile_every_n_steps, profile_duration_ms, profile_steps), or None when both are off.

  None means zero cost: the estimator then has no profiling hook and no step markers. ``records``: False on the
  workers other than the chief, which keep the same loops without capturing.
  """
  every_n = int(params.get('profile_every_n_steps') or 0)
  profile_steps = params.get('profile_steps') or None
  if every_n <= 0 and parse_profile_steps(profile_steps) is None:
    return None
  where = logdir or params.get('model_dir')
  if records:
    logging.info('Profiles go to %s/plugins/profile: view them in TensorBoard\'s Profile tab, or as text with '
                 'python -m tools.profile_report --logdir %s', where, where)
  return ProfilerHook(profile_every_n_steps=every_n, duration_ms=int(params.get('profile_duration_ms') or 1000),
                      profile_steps=profile_steps, logdir=logdir, records=records)


def start_profiler_server(port: int) -> bool:
  """Starts TensorFlow's profiler gRPC server for on-demand capture (tools/capture_profile.py); port 0 = off.

  Returns whether a server was started. The server has no authentication and listens on every interface.
  """
  if not port or port <= 0:
    return False
  logging.warning(
      "Starting TensorFlow's profiler server on port %d. It listens on ALL network interfaces with NO "
      'authentication: anyone who can reach the port can trace this job and make it write profile files to a '
      'directory of their choosing. Use it only on a trusted network, or firewall the port.', port)
  tf.profiler.experimental.server.start(port)
  logging.info('Profiler server up; capture with: python -m tools.capture_profile --service_addr=<host>:%d '
               '--logdir=<model_dir>', port)
  return True
