"""tools/train_benchmark and its parts (tools/train_bench): every row and ratio, medians and ranges over repeated
windows, the markdown table; never a timing assertion."""
import dataclasses
import math
import os
import sys

from absl import flags
import pytest

from resnet import determinism
from tests.helpers import cli
from tools import train_benchmark as tb
from tools.train_bench import ceilings, child, machine, measure, report, suite
from tools.train_bench import rows as rows_lib

ZEN5_CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 26
model\t\t: 2
model name\t: AMD EPYC
cpu MHz\t\t: 2596.120
flags\t\t: fpu sse sse2 avx avx2 fma avx512f avx512bw avx512_bf16 avx512_vnni
bogomips\t: 5192.24

processor\t: 1
vendor_id\t: AuthenticAMD
cpu family\t: 26
model name\t: AMD EPYC
cpu MHz\t\t: 2596.120
flags\t\t: fpu sse sse2 avx avx2 fma avx512f avx512bw avx512_bf16 avx512_vnni
"""


def test_peak_from_cpuinfo_zen5_zen4_and_overrides():
  zen5 = machine.detect_peak(ZEN5_CPUINFO, cores=2)
  assert zen5.fp32_flops_per_cycle == 64 and zen5.has_bf16
  assert zen5.fp32_gflops == pytest.approx(2 * 2.59612 * 64)
  assert zen5.bf16_gflops == pytest.approx(2 * zen5.fp32_gflops)
  assert 'Zen 5' in zen5.describe() and 'cpu MHz' in zen5.describe()
  zen4 = machine.detect_peak(ZEN5_CPUINFO.replace('cpu family\t: 26', 'cpu family\t: 25'), cores=4,
                             clock_ghz_override=3.0)
  assert zen4.fp32_flops_per_cycle == 32 and zen4.fp32_gflops == pytest.approx(4 * 3.0 * 32)
  assert '--peak_clock_ghz' in zen4.describe()
  no_mhz = machine.detect_peak('flags\t: avx2 fma\nbogomips\t: 4000.00\n', cores=1)
  assert no_mhz.isa == 'AVX2+FMA' and no_mhz.clock_ghz == pytest.approx(2.0) and not no_mhz.has_bf16


def test_amx_is_read_from_cpuinfo_and_the_clock_peak_is_for_reference_only():
  sapphire = machine.detect_peak(ZEN5_CPUINFO.replace('avx512_vnni', 'avx512_vnni amx_bf16 amx_tile amx_int8'),
                                 cores=2)
  assert sapphire.has_amx and 'AMX' in sapphire.describe()
  assert not machine.detect_peak(ZEN5_CPUINFO, cores=2).has_amx


def _row(kind, precision, samples, data='synthetic', name=None):
  row = rows_lib.Row(name=name or rows_lib.row_name(rows_lib.BenchConfig(), kind, data), kind=kind,
                     precision=precision, data=data, compile_s=12.0)
  row.samples, row.busy, row.others = list(samples), [0.97] * len(samples), [0.01] * len(samples)
  return row


CEILINGS = {'matmul': {'float32': 300.0, 'bfloat16': 1300.0}, 'conv': {'float32': 280.0, 'bfloat16': 1550.0}}


def _results(rows, **cfg):
  return rows_lib.Results(cfg=rows_lib.BenchConfig(**cfg), peak=machine.detect_peak(ZEN5_CPUINFO, cores=2),
                          rows=rows, train_gflop_per_image=24.5, load=(0.5, 0.7), ceilings=CEILINGS,
                          data_note='fake records',
                          versions={'TensorFlow': '2.21.0', 'Keras': '3.9', 'Python': '3.11.7'})


def test_a_row_is_the_median_window_and_a_ratio_spans_the_window_pairs():
  row, base = _row('ours', 'float32', [10.0, 12.0, 11.0]), _row('keras', 'float32', [5.0, 8.0, 6.0])
  assert (row.images_per_sec, row.low, row.high, row.spread) == (11.0, 10.0, 12.0, '10.00-12.00')
  r = rows_lib.ratio(row, base, 'runner')
  assert r.value == pytest.approx(11.0 / 6.0)   # medians
  assert r.low == pytest.approx(10.0 / 8.0)     # slowest of the row over the fastest of the baseline
  assert r.high == pytest.approx(12.0 / 5.0)
  assert (r.baseline, r.isolates) == (base.name, 'runner')
  assert report.format_ratio(r) == '1.83x (1.25-2.40)'


# One run's rows, fp32 and bf16: medians 6, 7, 8, 3, 12 (fp32); 9, 10, 13, 12.4 (bf16); 7.5 (fp32 det).
ROWS = [('keras', 'float32', [5.0, 6.0, 7.0]), ('keras_ours', 'float32', [7.0, 7.0, 7.0]),
        ('ours', 'float32', [8.0, 8.0, 8.0]), ('ours_xla', 'float32', [3.0, 2.0, 4.0]),
        ('keras', 'bfloat16', [9.0, 9.0, 9.0]), ('keras_ours', 'bfloat16', [10.0, 10.0, 10.0]),
        ('ours', 'bfloat16', [13.0, 13.0, 13.0]), ('ours', 'bfloat16', [12.4, 12.4, 12.4], 'real'),
        ('ours_det', 'float32', [7.5, 7.0, 8.0])]


def _run_rows():
  return [_row(*spec) for spec in ROWS]


def test_every_row_is_compared_with_keras_applications_and_with_its_one_difference():
  rows = _run_rows()
  results = _results(rows)
  keras32, fit32, ours32, xla32, keras16, fit16, ours16, real16, det32 = rows
  expected = [  # row, vs keras.applications, vs reference, its baseline, what differs
      (fit32, 7 / 6, 7 / 6, keras32, 'model'),
      (ours32, 8 / 6, 8 / 7, fit32, 'runner'),
      (xla32, 3 / 6, 3 / 8, ours32, 'XLA'),
      (fit16, 10 / 9, 10 / 9, keras16, 'model'),
      (ours16, 13 / 9, 13 / 10, fit16, 'runner'),
      (real16, 12.4 / 9, 12.4 / 13, ours16, 'input'),
      (det32, 7.5 / 6, 7.5 / 8, ours32, 'determinism'),
  ]
  for row, vs_keras, vs_ref, baseline, isolates in expected:
    assert results.vs_keras(row).value == pytest.approx(vs_keras), row.name
    ref = results.vs_reference(row)
    assert (ref.value, ref.baseline, ref.isolates) == (pytest.approx(vs_ref), baseline.name, isolates), row.name
  assert results.vs_keras(keras32) is None and results.vs_reference(keras32) is None
  assert results.vs_reference(xla32).low == pytest.approx(2 / 8) and results.vs_reference(xla32).high == 0.5
  # The same figures in the table and the targets.
  lines = report.table_rows(results)
  vs_keras, vs_ref = report.HEADER.index('vs keras apps'), report.HEADER.index('vs reference (what differs)')
  assert lines[3][vs_keras] == '0.50x (0.29-0.80)' and lines[3][vs_ref].startswith('XLA: 0.38x (0.25-0.50) vs ')
  assert lines[8][vs_ref].startswith('determinism: 0.94x (0.88-1.00) vs ')
  # vs Keras fp32/bf16, vs PyTorch eager and torch.compile (no rows), of the conv ceiling (fp32 70%; bf16 on a CPU
  # without AMX), real data.
  assert [t.split()[0] for t in report.target_lines(results)] == ['PASS', 'PASS', 'n/a', 'n/a', 'n/a', 'n/a', 'FAIL',
                                                                  'n/a', 'PASS']


def test_report_shows_medians_ranges_gflops_and_noise():
  results = _results(_run_rows(), repeats=3)
  text = report.format_report(results)
  print(text)
  lines = report.table_rows(results)
  img, rng, conv, matmul = (report.HEADER.index(c) for c in ('img/s', 'min-max', '% conv ceiling',
                                                               '% matmul ceiling'))
  assert (lines[0][img], lines[0][rng]) == ('6.00', '5.00-7.00')
  assert lines[0][conv] == '-'  # keras.applications: a different FLOP count
  assert (lines[2][conv], lines[2][matmul]) == (f'{8 * 24.5 / 280:.0%}', f'{8 * 24.5 / 300:.0%}')
  assert lines[6][conv] == f'{13 * 24.5 / 1550:.0%}'  # bf16 rows against the bf16 ceiling
  assert lines[1][conv] != '-'  # Keras fit on our model runs our FLOPs
  assert 'conv float32 280, bfloat16 1,550 GFLOP/s' in text and 'For reference only' in text
  assert 'quiet' in text and 'NOISE' not in text
  results.rows[1].others = [0.5]
  noisy = report.format_report(results)
  assert 'NOISE WARNING' in noisy and 'CPU-normalised' in noisy
  assert 'Only 1 window' in report.format_report(_results(_run_rows(), repeats=1))


def test_markdown_has_every_row_the_machine_and_the_command():
  results = _results(_run_rows(), steps=10)
  text = report.format_markdown(results,
                                tb.command_line(['train_benchmark.py', '--markdown', '--precisions=float32']))
  print(text)
  table = [line for line in text.splitlines() if line.startswith('| ') and not line.startswith('| row')]
  assert len(table) == len(ROWS)
  assert table[0].startswith('| Keras `ResNet50` fit | float32 | 6.0 | 5.00-7.00 | - | - | - | - |')
  assert '| runner: 1.14x vs Keras fit on our ResNet-50 |' in table[2]
  assert table[2].endswith(f'| {8.0 * 24.5 / 280:.0%} |')
  assert 'Measured ceilings: matmul float32 300, bfloat16 1,300 GFLOP/s; conv float32 280' in text
  assert 'XLA: 0.38x (0.25-0.50)' in table[3] and 'determinism: 0.94x (0.88-1.00)' in table[8]
  assert 'median of 3 timed windows of 10 steps' in text
  assert 'Machine: AMD EPYC' in text and '2 cores' in text and 'TensorFlow 2.21.0' in text
  assert 'Command: `python -m tools.train_benchmark --markdown --precisions=float32`' in text


def test_pytorch_rows_are_compared_with_ours_and_rated_against_the_targets():
  rows = [_row('ours', 'float32', [8.0, 8.0, 8.0]), _row('torch', 'float32', [5.0, 6.0, 7.0]),
          _row('torch_compile', 'float32', [6.0, 6.4, 7.0]),
          _row('ours', 'bfloat16', [26.0, 26.0, 26.0]), _row('torch', 'bfloat16', [20.0, 21.0, 22.0])]
  rows[1].note = 'torch 2.14.1, torchvision 0.29.1, 2 threads'
  results = _results(rows, precisions=('float32', 'bfloat16'), real_data=False, keras=False)
  assert results.vs_torch(rows[0]).value == pytest.approx(8 / 6) and results.vs_torch(rows[1]) is None
  assert results.vs_torch(rows[3]).value == pytest.approx(26 / 21)
  assert results.vs_torch_compile(rows[0]).value == pytest.approx(8 / 6.4)
  assert results.vs_torch_compile(rows[2]) is None and results.vs_torch_compile(rows[3]) is None
  lines = report.table_rows(results)
  torch_col, conv = report.HEADER.index('vs PyTorch'), report.HEADER.index('% conv ceiling')
  compile_col = report.HEADER.index('vs torch.compile')
  assert lines[0][torch_col] == '1.33x (1.14-1.60)' and lines[1][torch_col] == '-'
  assert lines[0][compile_col] == '1.25x (1.14-1.33)' and lines[3][compile_col] == '-'
  assert lines[1][conv] == f'{6 * 24.5 / 280:.0%}'  # torchvision's ResNet-50 does our FLOPs (v1.5)
  assert lines[2][conv] == f'{6.4 * 24.5 / 280:.0%}'
  targets = report.target_lines(results)
  assert targets[2].startswith('PASS  ours vs PyTorch eager, float32: 1.33x')
  assert targets[3].startswith('FAIL  ours vs PyTorch eager, bfloat16: 1.24x')
  assert targets[4].startswith('FAIL  ours vs PyTorch torch.compile, float32: 1.25x (1.14-1.33) (target >= 1.30x)')
  assert targets[5] == 'n/a   ours vs PyTorch torch.compile, bfloat16: no torch.compile row'
  assert targets[7].startswith('n/a   ours, bfloat16: 41% of the measured bf16 conv ceiling')  # no AMX here
  amx = dataclasses.replace(results.peak, has_amx=True)
  targets = report.target_lines(dataclasses.replace(results, peak=amx))
  assert targets[7].startswith('PASS  ours, bfloat16: 41% of the measured bfloat16 conv ceiling (target >= 40%)')
  markdown = report.format_markdown(results, 'cmd')
  assert '| ours (Estimator) | bfloat16 | 26.0 | 26.00-26.00 | - | 1.24x (1.18-1.30) | - |' in markdown
  assert '| ours (Estimator) | float32 | 8.0 | 8.00-8.00 | - | 1.33x (1.14-1.60) | 1.25x (1.14-1.33) |' in markdown
  assert 'PyTorch: torch 2.14.1, torchvision 0.29.1, 2 threads.' in markdown


def test_the_pytorch_row_runs_in_the_named_python_and_is_refused_with_the_fix(tmp_path, monkeypatch):
  cfg = rows_lib.BenchConfig(resnet_depth=18, image_size=32, batch_size=2, steps=2, warmup_steps=1, repeats=2)
  assert child.find_torch_python(dataclasses.replace(cfg, torch=False))[0] is None
  python, why = child.find_torch_python(dataclasses.replace(cfg, resnet_depth=10, torch_python=sys.executable))
  assert python is None and 'torchvision has no ResNet-10' in why
  with pytest.raises(ValueError, match='not an executable Python'):
    child.find_torch_python(dataclasses.replace(cfg, torch_python=str(tmp_path / 'nope')))
  monkeypatch.setattr(child.importlib.util, 'find_spec', lambda name: None)
  python, why = child.find_torch_python(cfg)
  assert python is None and '--torch_python=' in why
  # A stand-in interpreter: checks the spec it is given and answers as torch_row.main does.
  fake = tmp_path / 'python'
  fake.write_text(f"""#!{sys.executable}
import json, sys
assert sys.argv[1:3] == ['-m', 'tools.train_bench.torch_row'], sys.argv
spec = json.loads(sys.argv[3])
assert (spec['resnet_depth'], spec['image_size'], spec['batch_size'], spec['precision']) == (18, 32, 2, 'bfloat16')
json.dump({{'samples': [3.0, 4.0], 'busy': [0.9, 0.9], 'others': [0.0, 0.0], 'compile_s': 1.0,
           'parameters': 11689512, 'note': f"torch x{{' compiled' if spec['compile'] else ''}}"}}, open(spec['out'], 'w'))
""")
  fake.chmod(0o755)
  row = child.torch_row_in_subprocess(cfg, 'bfloat16', str(fake))
  assert (row.kind, row.name, row.samples, row.note) == ('torch', 'PyTorch torchvision ResNet-18, eager', [3.0, 4.0],
                                                        'torch x')
  row = child.torch_row_in_subprocess(cfg, 'bfloat16', str(fake), compiled=True)
  assert (row.kind, row.name, row.note) == ('torch_compile', 'PyTorch torchvision ResNet-18, torch.compile',
                                           'torch x compiled')
  broken = tmp_path / 'broken'
  broken.write_text(f'#!{sys.executable}\nimport sys; sys.exit("no module named torch")\n')
  broken.chmod(0o755)
  with pytest.raises(RuntimeError, match='no module named torch'):
    child.torch_row_in_subprocess(cfg, 'float32', str(broken))


def test_torch_row_and_machine_import_neither_tensorflow_nor_the_project():
  """The PyTorch row runs in another Python that has torch, not this project's dependencies."""
  import ast  # pylint: disable=g-import-not-at-top
  for module in ('tools/train_bench/torch_row.py', 'tools/train_bench/machine.py'):
    tree = ast.parse(open(os.path.join(child.ROOT, module)).read())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert names <= {'json', 'sys', 'os', 'time', 'torch', 'torchvision', 'typing', 'tools.train_bench.machine',
                     'dataclasses', 're', 'resource', 'statistics'}, (module, names)


@pytest.mark.slow
def test_ceilings_are_measured_for_both_precisions():
  measured = ceilings.measure_ceilings(batch_size=2)
  assert set(measured) == {'matmul', 'conv'}
  for per in measured.values():
    assert set(per) == {'float32', 'bfloat16'} and all(math.isfinite(g) and g > 0 for g in per.values()), per
  assert ceilings.best_of({'conv': {'float32': 1.0}}, {'conv': {'float32': 2.0}}) == {'conv': {'float32': 2.0}}


def test_flags_defaults_and_quick_mode():
  fv = flags.FlagValues()
  tb.define_flags(fv)
  fv(['prog'])
  cfg = tb.config_from_flags(fv)
  assert (cfg.resnet_depth, cfg.image_size, cfg.batch_size, cfg.repeats) == (50, 224, 32, 3)
  assert cfg.keras_ours and cfg.xla_precisions == ('float32',) and cfg.determinism_precisions == ('bfloat16',)
  assert cfg.kernel_precisions == ('bfloat16',) and cfg.ceilings and cfg.torch and not cfg.torch_python
  fv = flags.FlagValues()
  tb.define_flags(fv)
  fv(['prog', '--quick', '--steps=7', '--precisions=bfloat16', '--xla_precisions=', '--determinism_precisions=',
      '--markdown'])
  cfg = tb.config_from_flags(fv)
  assert (cfg.image_size, cfg.steps, cfg.warmup_steps, cfg.precisions) == (128, 7, 2, ('bfloat16',))
  assert cfg.xla_precisions == () and cfg.determinism_precisions == () and fv.markdown


def test_bad_configs_are_refused_with_the_fix():
  with pytest.raises(ValueError, match='steps'):
    suite.run_benchmark(rows_lib.BenchConfig(steps=1, ceilings=False, torch=False))
  with pytest.raises(ValueError, match=r"xla_precisions=\['bfloat16'\].*Add them to --precisions"):
    rows_lib.validate(rows_lib.BenchConfig(precisions=('float32',), xla_precisions=('bfloat16',),
                                           recipe_precisions=(), kernel_precisions=()))
  with pytest.raises(ValueError, match='determinism_precisions'):
    rows_lib.validate(rows_lib.BenchConfig(precisions=('float32',), determinism_precisions=('bfloat16',),
                                           recipe_precisions=(), kernel_precisions=()))
  with pytest.raises(ValueError, match=r"recipe_precisions=\['bfloat16'\].*Add them to --precisions"):
    rows_lib.validate(rows_lib.BenchConfig(precisions=('float32',), determinism_precisions=()))
  with pytest.raises(ValueError, match=r"kernel_precisions=\['bfloat16'\].*Add them to --precisions"):
    rows_lib.validate(rows_lib.BenchConfig(precisions=('float32',), determinism_precisions=(), recipe_precisions=()))
  with pytest.raises(ValueError, match='determinism_mode'):
    rows_lib.validate(rows_lib.BenchConfig(determinism_mode='thread'))
  with pytest.raises(ValueError, match='keras.applications has no'):
    rows_lib.validate(rows_lib.BenchConfig(keras_application='ResNet18'))


def test_a_process_already_deterministic_is_refused(monkeypatch):
  monkeypatch.setattr(determinism, 'op_determinism_enabled', lambda: True)
  with pytest.raises(RuntimeError, match='fresh process'):
    suite.run_benchmark(rows_lib.BenchConfig(ceilings=False, torch=False, real_data=False))


def _fake_benchmarks(monkeypatch, calls):
  def ours(cfg, precision, data_dir=None, profile_dir=None, jit_compile=False, deterministic=False, recipe=None):
    kind = recipe or ('ours_det' if deterministic else 'ours_xla' if jit_compile else 'ours')
    calls.append((kind, precision, 'real' if data_dir else 'synthetic'))
    return _row(kind, precision, [5.0], 'real' if data_dir else 'synthetic'), None

  def keras(cfg, precision, batch, jit_compile=False, model='application'):
    kind = 'keras_ours' if model == 'ours' else 'keras_xla' if jit_compile else 'keras'
    calls.append((kind, precision, 'synthetic'))
    return _row(kind, precision, [4.0])

  def in_child(cfg, precision, deterministic=True):
    calls.append(('ours_det child', precision, 'synthetic'))
    return _row('ours_det', precision, [4.5])

  monkeypatch.setattr(measure, 'bench_ours', ours)
  monkeypatch.setattr(measure, 'bench_keras', keras)
  monkeypatch.setattr(child, 'bench_ours_in_subprocess', in_child)
  monkeypatch.setattr(measure, 'synthetic_batch', lambda cfg, precision: None)


def test_rows_run_in_order_with_determinism_last(monkeypatch):
  calls = []
  _fake_benchmarks(monkeypatch, calls)
  cfg = rows_lib.BenchConfig(precisions=('float32', 'bfloat16'), xla_precisions=('float32', 'bfloat16'),
                             determinism_precisions=('bfloat16',), real_data=False, ceilings=False, torch=False)
  suite.run_benchmark(cfg)
  assert calls == [('keras', 'float32', 'synthetic'), ('keras_ours', 'float32', 'synthetic'),
                   ('ours', 'float32', 'synthetic'), ('ours_xla', 'float32', 'synthetic'),
                   ('keras', 'bfloat16', 'synthetic'), ('keras_ours', 'bfloat16', 'synthetic'),
                   ('ours', 'bfloat16', 'synthetic'), ('ours_xla', 'bfloat16', 'synthetic'),
                   ('ours_mix', 'bfloat16', 'synthetic'), ('ours_accum', 'bfloat16', 'synthetic'),
                   ('ours_bce', 'bfloat16', 'synthetic'), ('ours_adamw', 'bfloat16', 'synthetic'),
                   ('ours_lamb', 'bfloat16', 'synthetic'), ('ours_clip', 'bfloat16', 'synthetic'),
                   ('ours_conv_dw', 'bfloat16', 'synthetic'), ('ours_ops_add', 'bfloat16', 'synthetic'),
                   ('ours_tf_kernels', 'bfloat16', 'synthetic'),
                   ('ours_det child', 'bfloat16', 'synthetic')]
  calls.clear()
  suite.run_benchmark(dataclasses.replace(cfg, precisions=('float32',), xla_precisions=(), recipe_precisions=(),
                                          kernel_precisions=(), determinism_precisions=('float32',),
                                          determinism_mode='in_process'))
  assert calls[-1] == ('ours_det', 'float32', 'synthetic') and len(calls) == 4


def test_the_pytorch_rows_follow_ours_and_a_failed_one_costs_only_its_row(monkeypatch):
  calls = []
  _fake_benchmarks(monkeypatch, calls)

  def torch_row(cfg, precision, python, compiled=False):
    calls.append(('torch_compile' if compiled else 'torch', precision, python))
    if compiled:
      raise RuntimeError('The PyTorch torch.compile row failed: no C++ compiler\nmore stderr')
    return _row('torch', precision, [3.0])

  monkeypatch.setattr(child, 'torch_row_in_subprocess', torch_row)
  cfg = rows_lib.BenchConfig(precisions=('float32',), xla_precisions=(), recipe_precisions=(), kernel_precisions=(),
                             determinism_precisions=(), real_data=False, ceilings=False, keras=False,
                             keras_ours=False, torch_python=sys.executable)
  results = suite.run_benchmark(cfg)
  assert calls == [('ours', 'float32', 'synthetic'), ('torch', 'float32', sys.executable),
                   ('torch_compile', 'float32', sys.executable)]
  assert [r.kind for r in results.rows] == ['ours', 'torch']
  assert any('No torch.compile float32 row' in n and 'no C++ compiler' in n for n in results.notes)
  assert 'n/a   ours vs PyTorch torch.compile, float32: no torch.compile row' in report.format_report(results)
  calls.clear()
  suite.run_benchmark(dataclasses.replace(cfg, torch_compile=False))
  assert [c[0] for c in calls] == ['ours', 'torch']


def test_depth_without_keras_application_says_so(monkeypatch):
  calls = []
  _fake_benchmarks(monkeypatch, calls)
  cfg = rows_lib.BenchConfig(resnet_depth=18, image_size=32, precisions=('float32',), recipe_precisions=(),
                             kernel_precisions=(), determinism_precisions=('float32',), real_data=False,
                             ceilings=False, torch=False)
  results = suite.run_benchmark(cfg)
  text = report.format_report(results)
  assert 'keras' not in [c[0] for c in calls] and ('keras_ours', 'float32', 'synthetic') in calls
  assert 'No keras.applications row' in text and 'n/a   ours vs Keras fit' in text


@pytest.mark.slow
def test_tiny_run_measures_every_row_three_times(tmp_path):
  """ResNet-10 at 32 px, each row over 3 windows; the determinism row runs in a child process. The baseline is
  keras.applications' MobileNet, the cheapest to build and trace (there is no ResNet-10 there). The XLA and recipe
  rows are left out here (each a build and trace more; their order is checked with fakes above, their steps in
  test_accelerator_paths and test_recipe)."""
  data_dir = cli.make_tiny_dataset(str(tmp_path / 'data'), num_train=16, num_validation=0)
  cfg = rows_lib.BenchConfig(resnet_depth=10, image_size=32, batch_size=4, steps=2, warmup_steps=2, repeats=3,
                             precisions=('float32',), xla_precisions=(),
                             determinism_precisions=('float32',), recipe_precisions=(), kernel_precisions=(),
                             keras_application='MobileNet', data_dir=data_dir, ceilings=False, torch=False)
  results = suite.run_benchmark(cfg)
  text = report.format_report(results)
  print(text)
  print(report.format_markdown(results, tb.command_line(['prog'])))
  assert [(r.kind, r.data) for r in results.rows] == [
      ('keras', 'synthetic'), ('keras_ours', 'synthetic'), ('ours', 'synthetic'), ('ours', 'real'),
      ('ours_det', 'synthetic')]
  for row in results.rows:
    assert len(row.samples) == 3 and all(math.isfinite(s) and s > 0 for s in row.samples), row.name
    assert row.low <= row.images_per_sec <= row.high
  keras_apps, fit_ours, ours, real, det = results.rows
  # The control trains our ResNet-10 (5.4M parameters with 1000 classes), not the keras.applications model (4.3M).
  assert 5e6 < fit_ours.parameters == ours.parameters < 6e6 and keras_apps.parameters < 5e6
  # Deterministic ops were on in the child process only.
  assert det.note == 'deterministic ops on' and ours.note == '' and not determinism.op_determinism_enabled()
  assert results.vs_reference(fit_ours).baseline == keras_apps.name
  assert results.vs_reference(ours).baseline == fit_ours.name
  assert results.vs_reference(det).baseline == ours.name
  assert results.vs_reference(real).baseline == ours.name and results.vs_reference(real).isolates == 'input'
  for name in ('Keras MobileNet fit', 'Keras fit on our ResNet-10', 'ours (Estimator)', 'JPEG records',
               'random_seed (deterministic ops)', 'Targets:', 'For reference only', 'child process'):
    assert name in text
