"""Tests for tools/input_benchmark.py: the bound's arithmetic, a tiny real run of every row, the large-photo mode."""
import subprocess
import sys

import pytest

from tools import input_benchmark as ib
from tools import make_fake_imagenet
from tests.helpers import procs

REPO = procs.ROOT


def test_bound_is_cores_times_the_single_thread_rate_with_its_two_factors():
  samples = {  # (images, wall s, CPU s, available cores)
      ib.SINGLE: [(100, 0.25, 0.2, 2.0)],              # 2 ms CPU per image
      'optimized': [(100, 0.125, 0.25, 1.9)],          # 800 img/s, 2.5 ms per image, 2 cores busy
      'basic': [(100, 0.5, 0.25, 2.0), (100, 1.0, 0.25, 2.0), (100, 0.25, 0.25, 2.0)],  # medians: 200 img/s
      f'{ib.SINGLE} +randaugment': [(100, 0.5, 0.5, 2.0)],   # 5 ms: 3 ms more than without
      'optimized +randaugment': [(100, 0.5, 1.0, 2.0)],      # 200 img/s against a bound of 400
  }
  out = ib.summarize(samples, cores=2)
  assert out['optimized']['bound_img_s'] == pytest.approx(1000.0)  # 2 cores / 2 ms
  assert out['optimized']['img_s'] == pytest.approx(800.0)
  assert out['optimized']['pct_of_bound'] == pytest.approx(80.0)
  assert out['optimized']['busy_pct'] == pytest.approx(100.0)
  assert out['optimized']['work_pct'] == pytest.approx(80.0)  # 2 ms of work in 2.5 ms of CPU
  assert out['optimized']['avail_cores'] == pytest.approx(1.9)
  assert out['basic']['img_s'] == pytest.approx(200.0) and out['basic']['pct_of_bound'] == pytest.approx(20.0)
  assert out[ib.SINGLE]['pct_of_bound'] == pytest.approx(40.0)  # 400 img/s: one of two cores, 80% busy
  assert out['optimized +randaugment']['bound_img_s'] == pytest.approx(400.0)
  assert out['optimized +randaugment']['pct_of_bound'] == pytest.approx(50.0)
  assert out['optimized +randaugment']['extra_cpu_ms'] == pytest.approx(3.0)
  out['optimized +autoaugment'] = {'error': 'ValueError: broken op'}  # a failed augmentation keeps the report
  table = ib.format_table(out, 100, 2)
  assert 'optimized / bound:     80.0%' in table and 'NOT met' in table
  assert any(line.startswith('optimized +autoaugment ') and line.endswith('skipped: ValueError: broken op')
             for line in table.splitlines())
  assert 'randaugment  extra CPU per image: +3.000 ms' in table


def test_availability_probe_measures_the_cpu_it_gets():
  got = ib.probe_available_cores(1, seconds=0.2)
  assert 0.05 < got <= 1.2  # One busy thread: at most one core (plus timer slack), never idle.


@pytest.fixture(scope='module')
def tiny_records(tmp_path_factory):
  out = str(tmp_path_factory.mktemp('fake'))
  make_fake_imagenet.write_fake_imagenet(out, 8, 0, num_shards=2, num_classes=3, min_size=24, max_size=32)
  return out


@pytest.mark.slow
def test_tiny_run_reports_every_row_against_the_measured_single_thread_cost(tiny_records):
  results = ib.run_benchmark(tiny_records, batch_size=2, image_size=16, num_batches=2, warmup_batches=1,
                             repeats=1, cores=3, probe_seconds=0.05)
  assert list(results) == list(ib.ROWS)
  single_ms = results[ib.SINGLE]['cpu_ms']
  assert single_ms > 0
  for row, r in results.items():
    assert r['img_s'] > 0 and r['cpu_ms'] > 0 and r['avail_cores'] > 0, row
    assert r['bound_img_s'] == pytest.approx(3 * 1000.0 / single_ms)
    assert r['pct_of_bound'] == pytest.approx(100.0 * r['img_s'] / r['bound_img_s'])
  table = ib.format_table(results, 4, 3)
  for row in ib.ROWS:
    line = next(line for line in table.splitlines() if line.startswith(row))
    assert '%.1f%%' % results[row]['pct_of_bound'] in line
  assert 'optimized / bound' in table and 'optimized / basic' in table


@pytest.mark.slow
@pytest.mark.skipif(ib.augment_unsupported_reason() is not None, reason=str(ib.augment_unsupported_reason()))
def test_augment_rows_report_their_extra_cost_per_image(tiny_records):
  results = ib.run_benchmark(tiny_records, batch_size=2, image_size=16, num_batches=2, warmup_batches=1,
                             repeats=1, cores=2, augment_names=('randaugment',), rows=(ib.SINGLE,),
                             probe_seconds=0.05)
  row = results['optimized +randaugment']
  assert row['extra_cpu_ms'] == pytest.approx(results[f'{ib.SINGLE} +randaugment']['cpu_ms'] -
                                               results[ib.SINGLE]['cpu_ms'])
  assert row['bound_img_s'] == pytest.approx(2000.0 / results[f'{ib.SINGLE} +randaugment']['cpu_ms'])


@pytest.mark.slow
def test_large_photo_mode_converts_twice_and_compares_the_pipelines(tmp_path):
  results = ib.run_large_photos(str(tmp_path), num_photos=4, max_image_side=32, width=160, height=120,
                                batch_size=2, image_size=16, num_batches=2, warmup_batches=1, repeats=1, cores=2,
                                num_workers=1, probe_seconds=0.05)
  assert results['full']['max_image_side'] == 0 and results['resized']['max_image_side'] == 32
  assert results['full']['images'] == results['resized']['images'] == 4
  assert results['resized']['records_mb'] < results['full']['records_mb'] / 4  # 160x120 -> 32x24: 1/25 pixels
  for r in results.values():
    assert r['img_s'] > 0 and r['pct_of_bound'] == pytest.approx(100.0 * r['img_s'] / r['bound_img_s'])
  table = ib.format_large_photos(results, 160, 120)
  assert 'resized / full: %.1fx' % (results['resized']['img_s'] / results['full']['img_s']) in table


@pytest.mark.slow
def test_cli_prints_every_row_with_the_percent_of_bound_column():
  out = subprocess.run(
      [sys.executable, '-m', 'tools.input_benchmark', '--num_fake_images=8', '--batch_size=2', '--image_size=16',
       '--num_batches=1', '--warmup_batches=1', '--repeats=1', '--noaugment', '--probe_seconds=0.05'],
      cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
  assert out.returncode == 0, out.stderr[-2000:]
  assert '% bound' in out.stdout
  for row in ib.ROWS:
    assert any(line.startswith(row) and line.count('%') >= 3 for line in out.stdout.splitlines()), row
