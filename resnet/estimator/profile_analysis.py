"""Offline profile analysis: "is this run input-bound?" from a captured ``*.xplane.pb``, without TensorBoard.

Uses xprof's converter (``xprof.convert.raw_to_tool_data.xspace_to_tool_data``, xprof 2.24), the code behind
TensorBoard's profile tab: ``input_pipeline_analyzer`` yields gviz DataTables (JSON) holding the per-step time
breakdown (the same table as ``overview_page``), host-side tf.data op times and diagnostics. This module does not
import TensorFlow, so the report tool starts in a fraction of a second.

The converter writes cache files (``ALL_HOSTS.op_stats_v2.pb``, ...) next to the xplane it reads; by default the
xplanes are symlinked into a temporary directory, so a profile directory is left as the capture wrote it.

Verdict thresholds on the share of step time spent waiting for input (xprof's own wording uses the same cut-offs):
>= 20% input-bound, 5-20% moderately input-bound, < 5% not input-bound.
"""
import dataclasses
import glob
import json
import math
import os
import re
import shutil
import tempfile
from typing import Any, Dict, List, Optional, Sequence, Tuple

HIGHLY_INPUT_BOUND_PERCENT = 20.0
MODERATELY_INPUT_BOUND_PERCENT = 5.0

_XPLANE_SUFFIX = '.xplane.pb'
# Step-table columns (gviz ids) -> report names; 'input' is the time the step waited for input.
_CATEGORIES = (
    ('infeedTimeMs', 'input'),
    ('hostComputeTimeMs', 'host compute'),
    ('deviceComputeTimeMs', 'device compute'),
    ('kernelLaunchTimeMs', 'kernel launch'),
    ('compileTimeMs', 'compilation'),
    ('outfeedTimeMs', 'output'),
    ('deviceToDeviceTimeMs', 'device to device'),
    ('deviceCollectivesTimeMs', 'device collectives'),
    ('otherTimeMs', 'all others'),
)
_COMPUTE = ('host compute', 'device compute')


class ProfileAnalysisError(Exception):
  """The profile could not be found, read or converted."""


class NoStepsError(ProfileAnalysisError):
  """The profile has no steps, so there is no step time to break down."""


class XprofNotInstalledError(ProfileAnalysisError, ImportError):
  """xprof (pip package tensorboard-plugin-profile) is missing."""


@dataclasses.dataclass(frozen=True)
class ProfileReport:
  """Step-time summary of one profile run; percentages are shares of the total step time."""
  run_dir: str
  xplane_files: Tuple[str, ...]
  num_steps: int
  step_time_ms: float
  step_time_stddev_ms: float
  input_percent: float
  breakdown_percent: Dict[str, float]  # category -> % of step time, largest first, zeros left out
  hardware_type: str
  xprof_conclusion: str
  top_input_ops: Tuple[Tuple[str, float], ...]  # (tf.data op, self time in ms over the capture), slowest first
  verdict: str


def _import_converter() -> Any:
  try:
    from xprof.convert import raw_to_tool_data  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise XprofNotInstalledError(
        f'profile analysis needs xprof: pip install tensorboard-plugin-profile (import failed: {e})') from e
  return raw_to_tool_data


def require_xprof() -> None:
  """Raises XprofNotInstalledError without xprof: a caller can skip a capture that nothing could analyse."""
  _import_converter()


def _xplanes_in(directory: str) -> List[str]:
  return sorted(glob.glob(os.path.join(directory, '*' + _XPLANE_SUFFIX)))


def _profile_dirs(path: str) -> List[str]:
  """``plugins/profile`` directories at path: itself, path/plugins/profile, or path/*/plugins/profile (Keras)."""
  if os.path.basename(os.path.normpath(path)) == 'profile':
    return [path]
  direct = os.path.join(path, 'plugins', 'profile')
  if os.path.isdir(direct):
    return [direct]
  return sorted(glob.glob(os.path.join(path, '*', 'plugins', 'profile')))


def list_runs(path: str) -> List[str]:
  """Run directories holding xplane files under a model_dir or a plugins/profile dir, oldest first."""
  runs = [d for p in _profile_dirs(path) for d in glob.glob(os.path.join(p, '*')) if _xplanes_in(d)]
  # TF names runs by timestamp (YYYY_MM_DD_HH_MM_SS), so name order is time order.
  return sorted(runs, key=lambda d: (os.path.basename(d), d))


def find_xplane_files(path: str, run: Optional[str] = None) -> Tuple[str, List[str]]:
  """(run_dir, xplane files) for an xplane file, a run dir, a plugins/profile dir or a model_dir.

  A directory with several runs gives the newest, or the one named ``run``.
  """
  if not os.path.exists(path):
    raise ProfileAnalysisError(f'{path} does not exist')
  if os.path.isfile(path):
    if not path.endswith(_XPLANE_SUFFIX):
      raise ProfileAnalysisError(f'{path} is not an {_XPLANE_SUFFIX} file')
    return os.path.dirname(os.path.abspath(path)), [path]
  if _xplanes_in(path) and run is None:
    return path, _xplanes_in(path)
  runs = list_runs(path)
  if not runs:
    raise ProfileAnalysisError(f'no profile runs under {path} (expected <model_dir>/plugins/profile/<run>/'
                               f'<host>{_XPLANE_SUFFIX})')
  if run is None:
    return runs[-1], _xplanes_in(runs[-1])
  chosen = [d for d in runs if os.path.basename(d) == run]
  if not chosen:
    names = ', '.join(os.path.basename(d) for d in runs)
    raise ProfileAnalysisError(f'no run {run!r} under {path}; runs: {names}')
  return chosen[-1], _xplanes_in(chosen[-1])


def convert_tool(xplane_files: Sequence[str], tool: str, keep_cache: bool = False) -> List[Dict[str, Any]]:
  """xprof tool data ('overview_page', 'input_pipeline_analyzer', ...) as a list of gviz DataTable dicts.

  keep_cache=False converts symlinks in a temporary directory, so no cache files are written next to the profile.
  """
  converter = _import_converter()
  if keep_cache:
    return _convert(converter, list(xplane_files), tool)
  with tempfile.TemporaryDirectory(prefix='xprof_') as tmp:
    links = []
    for i, src in enumerate(xplane_files):
      dst = os.path.join(tmp, f'{i}_{os.path.basename(src)}' if len(xplane_files) > 1 else os.path.basename(src))
      try:
        os.symlink(os.path.abspath(src), dst)
      except OSError:
        shutil.copyfile(src, dst)
      links.append(dst)
    return _convert(converter, links, tool)


def _convert(converter: Any, paths: List[str], tool: str) -> List[Dict[str, Any]]:
  try:
    data, _ = converter.xspace_to_tool_data(paths, tool, {'use_saved_result': False})
  except Exception as e:  # the C library raises RuntimeError/ValueError on unreadable files
    raise ProfileAnalysisError(f'xprof could not convert {paths} to {tool}: {e}') from e
  if not data:
    raise ProfileAnalysisError(f'xprof returned no {tool} data for {paths}')
  tables = json.loads(data)
  return tables if isinstance(tables, list) else [tables]


def _find_table(tables: Sequence[Dict[str, Any]], column: str) -> Optional[Dict[str, Any]]:
  for table in tables:
    if any(c.get('id') == column for c in table.get('cols', [])):
      return table
  return None


def _rows(table: Optional[Dict[str, Any]]) -> List[Dict[str, Any]]:
  """A DataTable's rows as {column id: value}."""
  if not table:
    return []
  ids = [c.get('id') for c in table.get('cols', [])]
  return [{i: (cell or {}).get('v') for i, cell in zip(ids, row.get('c', []))} for row in table.get('rows', [])]


def _mean_std(values: Sequence[float]) -> Tuple[float, float]:
  mean = sum(values) / len(values)
  return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def _diagnostics(tables: Sequence[Dict[str, Any]]) -> List[str]:
  return [str(r.get('message')) for r in _rows(_find_table(tables, 'severity')) if r.get('message')]


def _xprof_input_percent(conclusion: str) -> Optional[float]:
  match = re.search(r'([0-9.]+)% of the total step time sampled is waiting for input', conclusion)
  return float(match.group(1)) if match else None


def _top_input_ops(tables: Sequence[Dict[str, Any]], limit: int = 3) -> Tuple[Tuple[str, float], ...]:
  ops = [(str(r['opName']), float(r.get('selfTimeInMs') or 0.0))
         for r in _rows(_find_table(tables, 'opName')) if r.get('opName')]
  return tuple(sorted(ops, key=lambda o: -o[1])[:limit])


def verdict(input_percent: float, breakdown_percent: Dict[str, float]) -> str:
  """One line: is the run input-bound, and what to try first. A pure function of the measured shares (the
  report's ``input_percent`` and ``breakdown_percent``): input-bound from HIGHLY_INPUT_BOUND_PERCENT up, moderately
  from MODERATELY_INPUT_BOUND_PERCENT up, else not, naming the largest other category."""
  if input_percent >= HIGHLY_INPUT_BOUND_PERCENT:
    return (f'input-bound: {input_percent:.1f}% of step time waits on input - first try: input_pipeline=optimized, '
            'num_parallel_calls=-1 (AUTOTUNE), use_cache=true if the data fits in RAM')
  if input_percent >= MODERATELY_INPUT_BOUND_PERCENT:
    return (f'moderately input-bound: {input_percent:.1f}% of step time waits on input - try: '
            'input_pipeline=optimized, more num_parallel_calls, a deeper prefetch')
  others = {k: v for k, v in breakdown_percent.items() if k != 'input'}
  top = max(others, key=others.get) if others else 'host compute'
  if top in _COMPUTE:
    return (f'not input-bound: {input_percent:.1f}% waiting on input - the model compute dominates; next: '
            'precision=bfloat16 / a larger batch')
  return (f'not input-bound: {input_percent:.1f}% waiting on input - {top} dominates '
          f'({others.get(top, 0.0):.1f}% of step time)')


def analyze_profile(path: str, run: Optional[str] = None, keep_cache: bool = False) -> ProfileReport:
  """Summarises a profile run (see find_xplane_files for what path may be).

  Raises NoStepsError when the profile has no steps, ProfileAnalysisError when it cannot be read,
  XprofNotInstalledError without xprof.
  """
  run_dir, files = find_xplane_files(path, run)
  tables = convert_tool(files, 'input_pipeline_analyzer', keep_cache=keep_cache)
  step_table = _find_table(tables, 'stepTimeMs')
  steps = [r for r in _rows(step_table) if (r.get('stepTimeMs') or 0) > 0]
  if not steps:
    details = ' '.join(_diagnostics(tables)) or 'xprof measured no step time.'
    raise NoStepsError(
        f'no steps found in {run_dir}: was the run marked with step markers (Trace(..., _r=1))? Steps inside a '
        f'tf.while_loop are not counted either: profile 1-step loops. xprof says: {details}')
  step_times = [float(r['stepTimeMs']) for r in steps]
  total = sum(step_times)
  breakdown = {name: 100.0 * sum(float(r.get(col) or 0.0) for r in steps) / total for col, name in _CATEGORIES}
  props = (step_table or {}).get('p', {})
  conclusion = str(props.get('input_conclusion', ''))
  input_percent = _xprof_input_percent(conclusion)
  if input_percent is None:
    input_percent = breakdown['input']
  mean, std = _mean_std(step_times)
  shown = dict(sorted(((k, v) for k, v in breakdown.items() if v >= 0.05), key=lambda kv: -kv[1]))
  return ProfileReport(
      run_dir=run_dir, xplane_files=tuple(files), num_steps=len(steps), step_time_ms=mean,
      step_time_stddev_ms=std, input_percent=input_percent, breakdown_percent=shown,
      hardware_type=str(props.get('hardware_type', '')), xprof_conclusion=conclusion,
      top_input_ops=_top_input_ops(tables), verdict=verdict(input_percent, shown))


analyze = analyze_profile  # short alias (resnet_main calls profile_analysis.analyze)


# Op categories of the breakdown, by TensorFlow op type (oneDNN's _MklNative* / _MklFused* names included), checked
# in order; an op whose name lies under an optimizer's scope is 'optimizer' whatever its type.
_OP_CATEGORIES = (
    ('convolution', ('Conv2D', 'Conv3D', 'DepthwiseConv')),
    ('matmul', ('MatMul', 'Einsum')),
    ('batch norm', ('FusedBatchNorm',)),
    ('activation', ('Relu', 'Sigmoid', 'Tanh', 'Elu', 'Gelu', 'Swish')),
    ('pooling', ('Pool',)),
    ('cast', ('Cast',)),
    ('layout and copies', ('Transpose', 'Pad', 'Slice', 'Concat', 'Tile', 'Reshape', 'Identity', 'Copy', 'Reorder',
                           'Pack', 'Gather', 'Select')),
    ('input', ('Dataset', 'Iterator')),
    ('elementwise and reductions', ('Add', 'Sub', 'Mul', 'Div', 'Square', 'Sqrt', 'Rsqrt', 'Sum', 'Mean', 'Max',
                                    'Min', 'Neg', 'L2Loss', 'Exp', 'Log', 'Softmax', 'Xent', 'Floor', 'Greater',
                                    'Less', 'Equal', 'Minimum', 'Maximum')),
)
OPTIMIZER_SCOPES = ('momentum', 'lars', 'SGD', 'sgd', 'adam', 'loss_scale_optimizer')


def op_category(op_type: str, op_name: str, optimizer_scopes: Sequence[str] = OPTIMIZER_SCOPES) -> str:
  """The breakdown category of one op ('other' when none fits)."""
  if op_name.split('/', 1)[0] in optimizer_scopes or 'ApplyGradient' in op_type or op_type.startswith('ResourceApply'):
    return 'optimizer'
  for category, markers in _OP_CATEGORIES:
    if any(m in op_type for m in markers):
      return category
  return 'other'


@dataclasses.dataclass(frozen=True)
class OpBreakdown:
  """Where a profile's op time went: host + device self time of every op, idle time left out."""
  total_ms: float
  categories: Dict[str, float]           # category -> % of the op time, largest first
  op_types: Tuple[Tuple[str, float, float], ...]  # (op type, ms, % of the op time), largest first


def op_breakdown(path: str, run: Optional[str] = None, keep_cache: bool = False,
                 optimizer_scopes: Sequence[str] = OPTIMIZER_SCOPES) -> OpBreakdown:
  """Op self times of a profile run by category and by op type (xprof's framework_op_stats, the table behind
  TensorBoard's 'TensorFlow Stats'). Shares are of all ops' self time, which on a CPU is the time the cores
  computed; they tell what a step is made of, not how long it took. Functions compiled by XLA inside the step
  (jit_compile, residual_add_relu=xla) are not in that table on CPUs, so their time is missing here."""
  _, files = find_xplane_files(path, run)
  tables = convert_tool(files, 'framework_op_stats', keep_cache=keep_cache)
  rows = [r for r in _rows(_find_table(tables, 'total_self_time'))
          if r.get('type') and r.get('type') != 'IDLE' and (r.get('total_self_time') or 0) > 0]
  if not rows:
    raise ProfileAnalysisError(f'the profile in {path} has no op times (framework_op_stats is empty)')
  by_type: Dict[str, float] = {}
  by_category: Dict[str, float] = {}
  for r in rows:
    us = float(r['total_self_time'])
    by_type[str(r['type'])] = by_type.get(str(r['type']), 0.0) + us
    category = op_category(str(r['type']), str(r.get('operation') or ''), optimizer_scopes)
    by_category[category] = by_category.get(category, 0.0) + us
  total = sum(by_type.values())
  categories = dict(sorted(((k, 100.0 * v / total) for k, v in by_category.items()), key=lambda kv: -kv[1]))
  op_types = tuple(sorted(((k, v / 1000.0, 100.0 * v / total) for k, v in by_type.items()), key=lambda t: -t[1]))
  return OpBreakdown(total_ms=total / 1000.0, categories=categories, op_types=op_types)


def format_op_breakdown(breakdown: OpBreakdown, top: int = 12) -> str:
  categories = ', '.join(f'{name} {share:.1f}%' for name, share in breakdown.categories.items())
  types = ', '.join(f'{name} {share:.1f}%' for name, _, share in breakdown.op_types[:top])
  return (f'Op time ({breakdown.total_ms:.0f} ms of op self time; XLA-compiled functions not counted): '
          f'{categories}\n'
          f'Top op types: {types}')


def format_report(report: ProfileReport) -> str:
  """A short multi-line text for logs and the report tool."""
  breakdown = ', '.join(f'{name} {share:.1f}%' for name, share in report.breakdown_percent.items())
  lines = [
      f'Profile: {report.run_dir} ({len(report.xplane_files)} host file(s), {report.hardware_type or "?"})',
      f'Steps: {report.num_steps}, step time {report.step_time_ms:.2f} ms +- {report.step_time_stddev_ms:.2f} ms',
      f'Waiting on input: {report.input_percent:.1f}% of step time',
      f'Breakdown: {breakdown or "-"}',
  ]
  if report.top_input_ops:
    ops = ', '.join(f'{name} {ms:.2f} ms' for name, ms in report.top_input_ops)
    lines.append(f'Slowest input ops (self time): {ops}')
  lines.append(f'Verdict: {report.verdict}')
  return '\n'.join(lines)
