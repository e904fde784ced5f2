"""Profiling: the capture hook on a fake runner loop, the offline analysis, and the two CLI tools.

The fake runner follows the runner's hook contract (boundaries, before/after_loop, Trace step markers, end in a
finally) and, like the runner should, runs 1-step loops without a while loop (xprof finds no steps in while loops).
"""
import contextlib
import glob
import os
import socket
import subprocess
import sys
import time
from typing import Dict, List, Sequence, Tuple

import pytest
import tensorflow as tf

from resnet.estimator import profile_analysis
from resnet.estimator.profiler_hook import ProfilerHook, parse_profile_steps
from resnet.profiling import make_profiler_hook, start_profiler_server
from tools import capture_profile
from tests.helpers import procs

REPO_ROOT = procs.ROOT


class FakeRunner:
  """A few matmuls per step over a tf.data iterator; next() inside the compiled loop, as in the real runner."""

  def __init__(self, model_dir: str, slow_input_s: float = 0.0, size: int = 64):
    self.model_dir = model_dir
    self.global_step = 0
    self.loops: List[Tuple[int, int]] = []  # (first step, num_steps)
    dataset = tf.data.Dataset.from_tensors(tf.ones([size, size])).repeat()
    if slow_input_s:
      def slow(x):
        time.sleep(slow_input_s)
        return x
      dataset = dataset.map(lambda x: tf.numpy_function(slow, [x], tf.float32, stateful=False))
    iterator = iter(dataset.prefetch(1))
    w = tf.Variable(tf.eye(size))

    def body() -> tf.Tensor:
      y = tf.reshape(next(iterator), [size, size])
      for _ in range(8):
        y = tf.linalg.matmul(y, w)
      w.assign_add(1e-9 * tf.reduce_mean(y) * tf.ones_like(w))
      return tf.reduce_mean(y)

    @tf.function
    def one_step() -> tf.Tensor:
      return body()

    @tf.function
    def loop(n: tf.Tensor) -> tf.Tensor:
      loss = tf.constant(0.0)
      for _ in tf.range(n):
        loss = body()
      return loss

    self.one_step, self.loop = one_step, loop

  def run_loop(self, num_steps: int) -> tf.Tensor:
    return self.one_step() if num_steps == 1 else self.loop(tf.constant(num_steps))

  def train(self, max_steps: int, hooks: Sequence[ProfilerHook], iterations_per_loop: int) -> None:
    step = self.global_step
    for hook in hooks:
      hook.begin(self, step)
    try:
      while step < max_steps:
        bounds = [step + iterations_per_loop, max_steps] + [b for b in (h.next_boundary(step) for h in hooks)
                                                           if b is not None]
        num_steps = min(bounds) - step
        for hook in hooks:
          hook.before_loop(step, num_steps)
        marked = any(h.step_markers for h in hooks)
        with (tf.profiler.experimental.Trace('train', step_num=step, _r=1) if marked
              else contextlib.nullcontext()):
          loss = self.run_loop(num_steps)
        self.loops.append((step, num_steps))
        step = self.global_step = step + num_steps
        for hook in hooks:
          hook.after_loop(step, {'loss': float(loss)})
    finally:
      for hook in hooks:
        hook.end(step)


def _runs(model_dir: str) -> List[str]:
  return sorted(glob.glob(os.path.join(model_dir, 'plugins', 'profile', '*')))


def _xplanes(run_dir: str) -> List[str]:
  return glob.glob(os.path.join(run_dir, '*.xplane.pb'))


def _loop_sizes_in(runner: FakeRunner, start: int, stop: int) -> List[int]:
  return [n for first, n in runner.loops if start <= first < stop]


def _capture_unmarked(model_dir: str, loop_steps: int, marked: bool) -> None:
  runner = FakeRunner(model_dir)
  runner.run_loop(loop_steps)  # trace outside the capture
  tf.profiler.experimental.start(model_dir)
  try:
    for step in range(6):
      with (tf.profiler.experimental.Trace('train', step_num=step, _r=1) if marked else contextlib.nullcontext()):
        runner.run_loop(loop_steps)
  finally:
    tf.profiler.experimental.stop()


@pytest.fixture(scope='module')
def input_bound_run(tmp_path_factory) -> Dict[str, object]:
  model_dir = str(tmp_path_factory.mktemp('input_bound'))
  runner = FakeRunner(model_dir, slow_input_s=0.02)
  hook = ProfilerHook(profile_steps='5,15')
  runner.train(max_steps=20, hooks=[hook], iterations_per_loop=4)
  return {'model_dir': model_dir, 'runner': runner, 'hook': hook}


def test_make_profiler_hook_returns_none_when_profiling_is_off():
  assert make_profiler_hook({'profile_every_n_steps': 0, 'profile_duration_ms': 1000, 'profile_steps': ''}) is None
  hook = make_profiler_hook({'profile_every_n_steps': 100, 'profile_duration_ms': 500, 'profile_steps': ''})
  assert isinstance(hook, ProfilerHook) and hook.step_markers
  assert start_profiler_server(0) is False


def test_profile_steps_parse_as_half_open_window_and_reject_bad_values():
  assert parse_profile_steps('10, 20') == (10, 20)
  assert parse_profile_steps((3, 4)) == (3, 4)
  assert parse_profile_steps('') is None and parse_profile_steps(None) is None
  for bad in ('5', '5,5', '9,3', 'a,b', '-1,3'):
    with pytest.raises(ValueError):
      parse_profile_steps(bad)
  with pytest.raises(ValueError):
    ProfilerHook(profile_every_n_steps=0, profile_steps='')


@pytest.mark.slow
def test_periodic_captures_land_under_model_dir_every_n_steps_without_overlap(tmp_path):
  runner = FakeRunner(str(tmp_path))
  hook = ProfilerHook(profile_every_n_steps=4, duration_ms=1)
  runner.train(max_steps=21, hooks=[hook], iterations_per_loop=3)

  # Captures start on the schedule; one still running when the next is due (each run dir needs its own
  # second, so a capture can outlast a few fast steps) is skipped, never overlapped.
  starts = [c.start_step for c in hook.captures]
  assert starts[0] == 4 and set(starts) <= {4, 8, 12, 16, 20} and len(starts) >= 2, starts
  for earlier, later in zip(hook.captures, hook.captures[1:]):
    assert earlier.end_step <= later.start_step
  runs = _runs(str(tmp_path))
  assert len(runs) == len(starts) and all(_xplanes(r) for r in runs)
  assert sorted(c.run_dir for c in hook.captures) == runs
  for capture in hook.captures:  # 1-step loops while capturing, and a 1-step warm-up loop right before
    assert _loop_sizes_in(runner, capture.start_step - 1, capture.end_step) == [1] * (
        capture.end_step - capture.start_step + 1)


def test_periodic_capture_due_while_previous_runs_is_skipped_and_end_stops_it(tmp_path):
  runner = FakeRunner(str(tmp_path))
  hook = ProfilerHook(profile_every_n_steps=2, duration_ms=600_000)
  runner.train(max_steps=9, hooks=[hook], iterations_per_loop=4)

  assert [(c.start_step, c.end_step) for c in hook.captures] == [(2, 9)]
  assert hook.skipped_steps == [4, 6, 8]
  assert len(_runs(str(tmp_path))) == 1
  tf.profiler.experimental.start(str(tmp_path / 'after'))  # end() left no session behind
  tf.profiler.experimental.stop(save=False)


def test_periodic_schedule_carries_over_to_the_next_train_call_with_the_same_hook(tmp_path):
  runner = FakeRunner(str(tmp_path))
  hook = ProfilerHook(profile_every_n_steps=4, duration_ms=1)
  runner.train(max_steps=4, hooks=[hook], iterations_per_loop=4)  # train_and_eval: train to 4, evaluate, ...
  assert hook.captures == []
  runner.train(max_steps=6, hooks=[hook], iterations_per_loop=4)  # ... resume at 4, where a capture is due
  assert [c.start_step for c in hook.captures] == [4]


def test_profile_steps_window_writes_exactly_one_run_of_one_step_loops(input_bound_run):
  hook, runner = input_bound_run['hook'], input_bound_run['runner']
  assert [(c.start_step, c.end_step) for c in hook.captures] == [(5, 15)]
  runs = _runs(input_bound_run['model_dir'])
  assert len(runs) == 1 and _xplanes(runs[0])
  assert _loop_sizes_in(runner, 4, 15) == [1] * 11
  assert runner.loops[0] == (0, 4)


def test_analysis_of_slow_input_capture_counts_steps_and_says_input_bound(input_bound_run):
  report = profile_analysis.analyze_profile(input_bound_run['model_dir'])
  assert report.num_steps > 0 and report.step_time_ms > 0
  assert report.input_percent >= profile_analysis.HIGHLY_INPUT_BOUND_PERCENT
  assert report.verdict.startswith('input-bound:')
  text = profile_analysis.format_report(report)
  assert 'Verdict: input-bound' in text and f'Steps: {report.num_steps}' in text


def test_analysis_of_fast_input_capture_says_not_input_bound(tmp_path):
  # Steps of ~40 ms (512x512 matmuls): at 256 (5 ms) the prefetch's scheduling delay alone passed 5% on 2 busy cores.
  runner = FakeRunner(str(tmp_path), size=512)
  runner.train(max_steps=12, hooks=[ProfilerHook(profile_steps='3,11')], iterations_per_loop=4)
  report = profile_analysis.analyze_profile(str(tmp_path))
  assert report.num_steps > 0
  assert report.verdict.startswith('not input-bound:'), profile_analysis.format_report(report)


def test_op_breakdown_says_what_the_step_is_made_of(tmp_path):
  runner = FakeRunner(str(tmp_path), size=256)  # eight 256x256 matmuls per step
  runner.train(max_steps=12, hooks=[ProfilerHook(profile_steps='3,11')], iterations_per_loop=4)
  breakdown = profile_analysis.op_breakdown(str(tmp_path))
  assert next(iter(breakdown.categories)) == 'matmul', breakdown.categories
  assert abs(sum(breakdown.categories.values()) - 100.0) < 1e-6 and breakdown.total_ms > 0
  assert 'MatMul' in breakdown.op_types[0][0]
  text = profile_analysis.format_op_breakdown(breakdown)
  assert text.startswith('Op time (') and 'matmul' in text and 'Top op types:' in text


@pytest.mark.parametrize('op_type,name,category', [
    ('_MklNativeConv2DBackpropFilter', 'gradient_tape/resnet/conv2d_4/Conv2DBackpropFilter', 'convolution'),
    ('_MklNativeFusedBatchNormGradV3', 'gradient_tape/bn/FusedBatchNormGradV3', 'batch norm'),
    ('ReluGrad', 'gradient_tape/block_out/ReluGrad', 'activation'),
    ('Mul', 'momentum/Mul_12', 'optimizer'),
    ('AddN', 'AddN_3', 'elementwise and reductions'),
    ('StridedSlice', 'strided_slice_1', 'layout and copies'),
    ('_MklMatMul', 'gradient_tape/MatMul', 'matmul'),
    ('SomethingNew', 'x', 'other'),
])
def test_op_categories(op_type, name, category):
  assert profile_analysis.op_category(op_type, name) == category


def test_analysis_leaves_no_cache_files_next_to_the_profile(input_bound_run):
  run_dir = _runs(input_bound_run['model_dir'])[0]
  before = sorted(os.listdir(run_dir))
  profile_analysis.analyze_profile(run_dir)
  assert sorted(os.listdir(run_dir)) == before


def test_find_xplane_files_accepts_model_dir_profile_dir_run_dir_and_file(input_bound_run):
  model_dir = input_bound_run['model_dir']
  run_dir = _runs(model_dir)[0]
  xplane = _xplanes(run_dir)[0]
  for path in (model_dir, os.path.join(model_dir, 'plugins', 'profile'), run_dir):
    assert profile_analysis.find_xplane_files(path) == (run_dir, [xplane])
  assert profile_analysis.find_xplane_files(model_dir, run=os.path.basename(run_dir))[0] == run_dir
  assert profile_analysis.find_xplane_files(xplane)[1] == [xplane]
  with pytest.raises(profile_analysis.ProfileAnalysisError, match='runs: '):
    profile_analysis.find_xplane_files(model_dir, run='no_such_run')


def test_profile_without_step_markers_raises_no_steps_error(tmp_path):
  _capture_unmarked(str(tmp_path), loop_steps=1, marked=False)
  with pytest.raises(profile_analysis.NoStepsError, match=r'no steps found in .*step markers'):
    profile_analysis.analyze_profile(str(tmp_path))


def test_marked_multi_step_while_loops_have_no_steps_so_the_hook_needs_one_step_loops(tmp_path):
  _capture_unmarked(str(tmp_path), loop_steps=3, marked=True)
  with pytest.raises(profile_analysis.NoStepsError):
    profile_analysis.analyze_profile(str(tmp_path))


def _run_tool(args: Sequence[str], timeout: float) -> subprocess.CompletedProcess:
  env = dict(os.environ, PYTHONPATH=REPO_ROOT)
  return subprocess.run([sys.executable, '-m', *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                        timeout=timeout, check=False)


def test_profile_report_tool_prints_verdict_and_exits_1_without_steps(input_bound_run, tmp_path):
  done = _run_tool(['tools.profile_report', f'--logdir={input_bound_run["model_dir"]}'], timeout=60)
  assert done.returncode == 0, done.stderr
  assert 'Verdict: input-bound' in done.stdout and 'Op time (' in done.stdout

  _capture_unmarked(str(tmp_path), loop_steps=1, marked=False)
  done = _run_tool(['tools.profile_report', f'--logdir={tmp_path}'], timeout=60)
  assert done.returncode == 1
  assert 'no steps found in' in done.stderr and 'Trace(..., _r=1)' in done.stderr


def test_tpu_grpc_address_maps_to_the_profiler_port():
  assert capture_profile.resolve_tpu('grpc://10.0.0.2:8470') == ('grpc://10.0.0.2:8466', '')
  assert capture_profile.normalize_service_addr('h1:6009, grpc://h2:6009') == 'grpc://h1:6009,grpc://h2:6009'


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(('localhost', 0))
    return s.getsockname()[1]


def test_capture_raises_clear_error_when_nothing_listens(tmp_path):
  with pytest.raises(capture_profile.CaptureError, match='no profile captured from'):
    capture_profile.capture(f'grpc://localhost:{_free_port()}', str(tmp_path), duration_ms=100,
                            num_tracing_attempts=1)


_BUSY_JOB = '''
import sys, time
import tensorflow as tf
from resnet.profiling import start_profiler_server
start_profiler_server(int(sys.argv[1]))
w = tf.Variable(tf.eye(128))
@tf.function
def step():
  y = w
  for _ in range(8):
    y = tf.linalg.matmul(y, w)
  return tf.reduce_sum(y)
step()
print('READY', flush=True)
deadline, i = time.time() + float(sys.argv[2]), 0
while time.time() < deadline:
  with tf.profiler.experimental.Trace('train', step_num=i, _r=1):
    step()
  i += 1
'''


@pytest.mark.slow
def test_capture_tool_captures_from_a_live_process_on_localhost(tmp_path):
  port = _free_port()
  job_out = tmp_path / 'job.out'
  logdir = tmp_path / 'model_dir'
  env = dict(os.environ, PYTHONPATH=REPO_ROOT)
  with open(job_out, 'w') as out:
    job = subprocess.Popen([sys.executable, '-c', _BUSY_JOB, str(port), '90'], cwd=REPO_ROOT, env=env,
                           stdout=out, stderr=subprocess.STDOUT)
  try:
    deadline = time.time() + 60
    while 'READY' not in job_out.read_text() and job.poll() is None and time.time() < deadline:
      time.sleep(0.2)
    assert 'READY' in job_out.read_text(), job_out.read_text()[-2000:]
    assert 'ALL network interfaces' in job_out.read_text()

    done = _run_tool(['tools.capture_profile', f'--service_addr=localhost:{port}', f'--logdir={logdir}',
                      '--duration_ms=500'], timeout=90)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = _runs(str(logdir))
    assert len(runs) == 1 and _xplanes(runs[0])
    assert f'Profile written to {runs[0]}' in done.stdout
    assert profile_analysis.analyze_profile(str(logdir)).num_steps > 0
  finally:
    job.kill()
    job.wait(timeout=30)
