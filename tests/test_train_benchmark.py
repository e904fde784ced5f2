"""Smoke tests of tools/train_benchmark: the table has every row and every ratio; never a timing assertion."""
import math
import statistics

from absl import flags
import pytest

from tools import train_benchmark as tb

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
  zen5 = tb.detect_peak(ZEN5_CPUINFO, cores=2)
  assert zen5.fp32_flops_per_cycle == 64 and zen5.has_bf16
  assert zen5.fp32_gflops == pytest.approx(2 * 2.59612 * 64)
  assert zen5.bf16_gflops == pytest.approx(2 * zen5.fp32_gflops)
  assert 'Zen 5' in zen5.describe() and 'cpu MHz' in zen5.describe()
  zen4 = tb.detect_peak(ZEN5_CPUINFO.replace('cpu family\t: 26', 'cpu family\t: 25'), cores=4, clock_ghz_override=3.0)
  assert zen4.fp32_flops_per_cycle == 32 and zen4.fp32_gflops == pytest.approx(4 * 3.0 * 32)
  assert '--peak_clock_ghz' in zen4.describe()
  no_mhz = tb.detect_peak('flags\t: avx2 fma\nbogomips\t: 4000.00\n', cores=1)
  assert no_mhz.isa == 'AVX2+FMA' and no_mhz.clock_ghz == pytest.approx(2.0) and not no_mhz.has_bf16



def test_clock_is_raised_when_a_matmul_beats_the_nominal_peak():
  nominal = tb.detect_peak(ZEN5_CPUINFO, cores=2)  # 332 GFLOP/s fp32 at 2.596 GHz
  assert tb.raise_clock_to_gemm(nominal, {'float32': 300.0}) is nominal
  raised = tb.raise_clock_to_gemm(nominal, {'float32': 467.0, 'bfloat16': 890.0})
  assert raised.clock_ghz == pytest.approx(467.0 / 128) and raised.nominal_clock_ghz == pytest.approx(2.59612)
  assert 'upper bounds' in raised.describe()
  fixed = tb.detect_peak(ZEN5_CPUINFO, cores=2, clock_ghz_override=2.0)
  assert tb.raise_clock_to_gemm(fixed, {'float32': 467.0}) is fixed

def _row(kind, precision, data, ips, name=None):
  row = tb.Row(name=name or f'{kind} {data}', kind=kind, precision=precision, data=data, compile_s=12.0)
  row.samples, row.busy, row.others = [ips, ips * 1.02], [0.97, 0.98], [0.01, 0.02]
  return row


def test_report_has_every_row_ratio_and_target():
  cfg = tb.BenchConfig(repeats=2)
  rows = [_row('ours', 'float32', 'synthetic', 7.0), _row('keras', 'float32', 'synthetic', 6.0, 'keras fit'),
          _row('ours', 'bfloat16', 'synthetic', 11.0), _row('keras', 'bfloat16', 'synthetic', 9.0, 'keras fit'),
          _row('keras_xla', 'bfloat16', 'synthetic', 4.5, 'keras fit xla'), _row('ours', 'bfloat16', 'real', 10.8)]
  results = tb.Results(cfg=cfg, peak=tb.detect_peak(ZEN5_CPUINFO, cores=2), rows=rows, train_gflop_per_image=24.5,
                       gemm={'float32': 250.0}, load=(0.5, 0.7), data_note='fake records')
  text = tb.format_report(results)
  print(text)
  lines = tb.table_rows(results)
  assert len(lines) == len(rows)
  ratio, fp32, bf16, norm = (tb.HEADER.index(c) for c in ('ratio', '% fp32 peak', '% bf16 peak', 'cpu-norm img/s'))
  assert lines[0][ratio] == f'{7.0 / 6.0:.2f}x keras' and lines[2][ratio] == f'{11.0 / 9.0:.2f}x keras'
  assert lines[4][ratio] == '0.50x keras' and lines[5][ratio] == f'{10.8 / 11.0:.0%} of synth'
  assert lines[0][fp32] == f'{7.0 * 24.5 / results.peak.fp32_gflops:.0%}' and lines[2][bf16] != '-'
  assert lines[0][norm] == f'{statistics.median([7.0 / 0.97, 7.0 * 1.02 / 0.98]):.2f}'
  targets = tb.target_lines(results)
  assert [t.split()[0] for t in targets] == ['PASS', 'PASS', 'FAIL', 'PASS', 'PASS']
  assert 'quiet' in text and 'NOISE' not in text
  rows[1].others = [0.5]
  noisy = tb.format_report(results)
  assert 'NOISE WARNING' in noisy and 'CPU-normalised' in noisy


def test_flags_and_quick_mode():
  fv = flags.FlagValues()
  tb.define_flags(fv)
  fv(['prog', '--quick', '--steps=7', '--precisions=bfloat16'])
  cfg = tb.config_from_flags(fv)
  assert (cfg.image_size, cfg.steps, cfg.warmup_steps, cfg.precisions) == (128, 7, 2, ('bfloat16',))


def test_tiny_run_prints_all_rows_and_ratios():
  cfg = tb.BenchConfig(resnet_depth=50, image_size=32, batch_size=2, steps=2, warmup_steps=2,
                       precisions=('float32',), real_data=True, gemm_check=False)
  results = tb.run_benchmark(cfg)
  text = tb.format_report(results)
  print(text)
  assert [(r.kind, r.data) for r in results.rows] == [('keras', 'synthetic'), ('ours', 'synthetic'),
                                                      ('ours', 'real')]
  assert all(math.isfinite(r.images_per_sec) and r.images_per_sec > 0 for r in results.rows)
  lines = tb.table_rows(results)
  ratio = tb.HEADER.index('ratio')
  assert lines[1][ratio].endswith('x keras') and lines[2][ratio].endswith('of synth')
  for name in ('ours synthetic', 'keras fit', 'ours real', 'Targets:', 'Peak:'):
    assert name in text
  assert len(tb.target_lines(results)) == 3


def test_a_one_step_window_is_refused():
  with pytest.raises(ValueError, match='steps'):
    tb.run_benchmark(tb.BenchConfig(steps=1, gemm_check=False))


def test_depth_without_keras_application_says_so(monkeypatch):
  calls = []
  monkeypatch.setattr(tb, 'bench_ours', lambda cfg, precision, **kw: (calls.append(precision) or
                                                                     _row('ours', precision, 'synthetic', 5.0), None))
  cfg = tb.BenchConfig(resnet_depth=18, image_size=32, precisions=('float32',), real_data=False, gemm_check=False)
  results = tb.run_benchmark(cfg)
  text = tb.format_report(results)
  assert calls == ['float32'] and 'No Keras row' in text and 'n/a   ours vs Keras fit' in text
