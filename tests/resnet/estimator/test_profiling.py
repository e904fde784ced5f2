"""Profiling: the capture hook on a fake runner loop, the offline analysis, and the two CLI tools.

The fake runner follows the runner's hook contract (boundaries, before/after_loop, Trace step markers, end in a
finally) and, like the runner should, runs 1-step loops without a while loop (xprof finds no steps in while loops).

How long a real capture's steps take, and what share of them waits on input, depends on the CPU and its load (a
busy core delays the prefetch thread: 8.1% input wait in 9.4 ms steps of 512x512 matmuls in a full-suite run,
"moderately input-bound"; 7% in 0.5 ms steps of 64x64 ones on a quiet core; the op time of that wait is tf.data's
too). So what the analysis concludes (input-bound or not, shares, what dominates) is asserted on profiles whose
timings the test writes (``_write_profile``: the events TensorFlow writes, read by the same xprof converter), and
of real captures only what holds on any machine: they parse into those numbers, and a wait the input itself
sleeps is counted as input.
"""
import contextlib
import glob
import os
import socket
import subprocess
import sys
import time
from typing import Dict, List, Sequence, Set, Tuple

import pytest
import tensorflow as tf
from tensorflow.tsl.profiler.protobuf import xplane_pb2

from resnet.estimator import profile_analysis
from resnet.estimator.profiler_hook import ProfilerHook, parse_profile_steps
from resnet.profiling import make_profiler_hook, start_profiler_server
from tools import capture_profile
from tests.helpers import procs

REPO_ROOT = procs.ROOT
SLOW_INPUT_S = 0.02


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
      # Made inside each step's next(), so every step waits the whole sleep for input: no prefetch, and neither
      # tf.data's parallel map nor its injected prefetch (both would make the next element during the step).
      options = tf.data.Options()
      options.experimental_optimization.map_parallelization = False
      options.experimental_optimization.inject_prefetch = False
      dataset = dataset.map(lambda x: tf.numpy_function(slow, [x], tf.float32, stateful=False)).with_options(options)
    else:
      dataset = dataset.prefetch(1)
    iterator = iter(dataset)
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


def _event_names(xplane_file: str) -> Set[str]:
  space = xplane_pb2.XSpace()
  with open(xplane_file, 'rb') as f:
    space.ParseFromString(f.read())
  return {m.name for plane in space.planes for m in plane.event_metadata.values()}


# A step of a controlled profile: (input wait in ms, ((TF op 'name:type', ms), ...)).
Step = Tuple[float, Tuple[Tuple[str, float], ...]]
_PS_PER_MS = 10 ** 9


def _write_profile(model_dir: str, steps: Sequence[Step]) -> str:
  """Writes a profile whose timings the test sets, as <model_dir>/plugins/profile/run/synthetic.xplane.pb.

  Its events are those a capture of the runner holds (test_real_capture_... checks the names): per step, the step
  marker ``Trace('train', step_num=i, _r=1)`` around the input wait (``IteratorGetNextOp::DoCompute``, TensorFlow's
  GetNext, which xprof counts as waiting for input) and then the TF ops ('name:type'), back to back, with 1 ms
  outside any step between steps. All are on one host thread, where xprof groups them into their step by nesting
  (a capture's other threads are linked to the step by context ids instead).
  """
  space = xplane_pb2.XSpace(hostnames=['synthetic'])
  plane = space.planes.add(id=0, name='/host:CPU')
  ids: Dict[Tuple[str, str], int] = {}

  def metadata_id(kind: str, name: str) -> int:
    if (kind, name) not in ids:
      ids[kind, name] = i = len(ids) + 1
      table = plane.event_metadata if kind == 'event' else plane.stat_metadata
      table[i].id, table[i].name = i, name
    return ids[kind, name]

  line = plane.lines.add(id=1, display_id=1, name='python', display_name='python', timestamp_ns=1000)
  t = 0
  for step_num, (wait_ms, ops) in enumerate(steps):
    spans = ((('IteratorGetNextOp::DoCompute', wait_ms),) if wait_ms else ()) + tuple(ops)
    marker = line.events.add(metadata_id=metadata_id('event', 'train'), offset_ps=t,
                             duration_ps=sum(round(ms * _PS_PER_MS) for _, ms in spans))
    marker.stats.add(metadata_id=metadata_id('stat', 'step_num'), int64_value=step_num)
    marker.stats.add(metadata_id=metadata_id('stat', '_r'), int64_value=1)
    for name, ms in spans:
      line.events.add(metadata_id=metadata_id('event', name), offset_ps=t, duration_ps=round(ms * _PS_PER_MS))
      t += round(ms * _PS_PER_MS)
    t += _PS_PER_MS
  run_dir = os.path.join(model_dir, 'plugins', 'profile', 'run')
  os.makedirs(run_dir)
  path = os.path.join(run_dir, 'synthetic.xplane.pb')
  with open(path, 'wb') as f:
    f.write(space.SerializeToString())
  return path


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
  runner = FakeRunner(model_dir, slow_input_s=SLOW_INPUT_S)
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


@pytest.mark.parametrize('input_percent,expected', [
    (100.0, 'input-bound: 100.0% of step time waits on input'),
    (20.0, 'input-bound: 20.0% of step time waits on input'),
    (19.9, 'moderately input-bound: 19.9% of step time waits on input'),
    (5.0, 'moderately input-bound: 5.0% of step time waits on input'),
    (4.9, 'not input-bound: 4.9% waiting on input - the model compute dominates'),
    (0.0, 'not input-bound: 0.0% waiting on input - the model compute dominates'),
])
def test_verdict_rule_on_both_sides_of_each_cut_off(input_percent, expected):
  breakdown = {'host compute': 100.0 - input_percent, 'input': input_percent}
  assert profile_analysis.verdict(input_percent, breakdown).startswith(expected)


def test_verdict_names_what_dominates_a_step_that_is_not_compute():
  assert profile_analysis.verdict(1.0, {'all others': 60.0, 'host compute': 39.0, 'input': 1.0}) == (
      'not input-bound: 1.0% waiting on input - all others dominates (60.0% of step time)')
  assert 'the model compute dominates' in profile_analysis.verdict(1.0, {'device compute': 60.0, 'all others': 39.0})


@pytest.mark.parametrize('wait_ms,expected', [
    (0.4, 'not input-bound:'),
    (0.6, 'moderately input-bound:'),
    (1.9, 'moderately input-bound:'),
    (2.1, 'input-bound:'),
])
def test_analysis_of_a_controlled_profile_finds_its_input_wait_and_says_so(tmp_path, wait_ms, expected):
  """10 ms steps that wait wait_ms on input and compute the rest: the share is wait_ms / 10 ms on any machine, and
  the verdict is the rule's, each case 1 point from a cut-off (5% and 20%) on either side."""
  _write_profile(str(tmp_path), [(wait_ms, (('MatMul:_MklMatMul', 10.0 - wait_ms),))] * 8)
  report = profile_analysis.analyze_profile(str(tmp_path))
  assert 0 < report.num_steps <= 8
  assert report.step_time_ms == pytest.approx(10.0) and report.step_time_stddev_ms == pytest.approx(0.0, abs=1e-6)
  assert report.input_percent == pytest.approx(10 * wait_ms, abs=0.05)
  assert report.breakdown_percent == pytest.approx({'host compute': 100 - 10 * wait_ms, 'input': 10 * wait_ms},
                                                   abs=1e-3)
  assert report.verdict.startswith(expected), profile_analysis.format_report(report)
  assert report.verdict == profile_analysis.verdict(report.input_percent, report.breakdown_percent)
  assert f'Verdict: {expected}' in profile_analysis.format_report(report)


def test_real_capture_is_parsed_into_the_numbers_the_verdict_reads(tmp_path):
  """The real path (TensorFlow's trace -> xprof -> the report) on a quick input: only what holds on any CPU under
  any load; how the shares fall is the machine's (see the module docstring)."""
  runner = FakeRunner(str(tmp_path))
  runner.train(max_steps=12, hooks=[ProfilerHook(profile_steps='3,11')], iterations_per_loop=4)
  report = profile_analysis.analyze_profile(str(tmp_path))
  assert 0 < report.num_steps <= 8 and report.step_time_ms > 0 and report.step_time_stddev_ms >= 0
  shares = list(report.breakdown_percent.values())
  assert shares == sorted(shares, reverse=True) and abs(sum(shares) - 100.0) < 0.5, report.breakdown_percent
  assert 'host compute' in report.breakdown_percent  # the matmuls
  assert abs(report.input_percent - report.breakdown_percent.get('input', 0.0)) <= 0.1  # xprof's figure, rounded
  assert report.verdict == profile_analysis.verdict(report.input_percent, report.breakdown_percent)
  assert f'Verdict: {report.verdict}' in profile_analysis.format_report(report)
  # The events _write_profile's controlled profiles are made of are the ones a capture holds.
  names = _event_names(report.xplane_files[0])
  assert {'train', 'IteratorGetNextOp::DoCompute'} <= names
  assert any(':' in n and 'MatMul' in n.split(':', 1)[1] for n in names), sorted(names)


def test_analysis_of_slow_input_capture_counts_the_wait_of_every_step_as_input(input_bound_run):
  """Each step's next() makes its element, sleeping SLOW_INPUT_S: every step waits at least that long on input, on
  any CPU under any load (load lengthens only the rest of the step). Whether that makes the run input-bound
  depends on how long the rest took, so the verdict is only checked to be the rule's on these numbers."""
  report = profile_analysis.analyze_profile(input_bound_run['model_dir'])
  text = profile_analysis.format_report(report)
  assert report.num_steps > 0 and report.step_time_ms > 0
  input_ms_per_step = report.breakdown_percent['input'] / 100.0 * report.step_time_ms
  assert input_ms_per_step >= 0.9 * SLOW_INPUT_S * 1000, text  # 0.9: room for the trace's clock, not for load
  assert report.top_input_ops and all(ms >= 0 for _, ms in report.top_input_ops)
  assert report.verdict == profile_analysis.verdict(report.input_percent, report.breakdown_percent)
  assert f'Verdict: {report.verdict}' in text and f'Steps: {report.num_steps}' in text


@pytest.mark.parametrize('matmul_ms,top', [(1.5, 'convolution'), (4.5, 'matmul')])
def test_op_breakdown_says_what_a_controlled_profile_is_made_of(tmp_path, matmul_ms, top):
  """Op self times the test sets: shares are exact, and the largest category is the one that took longest."""
  ops = (('conv/Conv2D:_MklNativeConv2D', 3.0), ('dense/MatMul:_MklMatMul', matmul_ms), ('momentum/Mul:Mul', 1.0),
         ('Mean:Mean', 0.5))
  _write_profile(str(tmp_path), [(0.2, ops)] * 8)
  breakdown = profile_analysis.op_breakdown(str(tmp_path))
  step_ms = 4.5 + matmul_ms
  assert breakdown.total_ms == pytest.approx(8 * step_ms, abs=1e-3)  # every step's ops; the input wait is no op
  assert breakdown.categories == pytest.approx({
      'convolution': 100 * 3.0 / step_ms, 'matmul': 100 * matmul_ms / step_ms, 'optimizer': 100 * 1.0 / step_ms,
      'elementwise and reductions': 100 * 0.5 / step_ms}, abs=1e-3)
  assert next(iter(breakdown.categories)) == top
  assert [(name, round(ms, 3)) for name, ms, _ in breakdown.op_types] == sorted(
      [('_MklNativeConv2D', 24.0), ('_MklMatMul', 8 * matmul_ms), ('Mul', 8.0), ('Mean', 4.0)], key=lambda t: -t[1])
  text = profile_analysis.format_op_breakdown(breakdown)
  assert text.startswith(f'Op time ({8 * step_ms:.0f} ms of op self time')
  assert f'{top} {breakdown.categories[top]:.1f}%' in text and 'Top op types: ' in text


def test_op_breakdown_of_a_real_capture_holds_its_ops(tmp_path):
  """The real path on the fake runner's steps: which category is largest depends on the machine's load (a step's
  input wait is tf.data op time too), so only that the step's ops are there, in shares that add up."""
  runner = FakeRunner(str(tmp_path))
  runner.train(max_steps=12, hooks=[ProfilerHook(profile_steps='3,11')], iterations_per_loop=4)
  breakdown = profile_analysis.op_breakdown(str(tmp_path))
  assert breakdown.total_ms > 0 and abs(sum(breakdown.categories.values()) - 100.0) < 1e-6
  shares = list(breakdown.categories.values())
  assert shares == sorted(shares, reverse=True) and breakdown.categories.get('matmul', 0.0) > 0, breakdown.categories
  assert any('MatMul' in name and ms > 0 for name, ms, _ in breakdown.op_types), breakdown.op_types
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
  report = profile_analysis.analyze_profile(input_bound_run['model_dir'])  # the same files: the same numbers
  assert f'Verdict: {report.verdict}\n' in done.stdout and 'Op time (' in done.stdout

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
