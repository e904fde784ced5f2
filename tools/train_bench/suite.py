"""One benchmark run: every row of the table in an order that keeps each ratio's two rows neighbours in time."""
import os
import platform
import shutil
import tempfile
import time
from typing import Dict

from absl import logging

from tools.train_bench import ceilings
from tools.train_bench import child
from tools.train_bench import measure
from tools.train_bench.machine import CpuPeak, detect_peak
from tools.train_bench.rows import (KERAS_APPLICATIONS, KERNEL_OVERRIDES, RECIPE_OVERRIDES, TRAIN_FLOPS_MULTIPLIER,
                                    BenchConfig, Results, row_name, validate)


def real_data_precision(cfg: BenchConfig, peak: CpuPeak) -> str:
  """The precision of the real-data row: bf16 where the CPU has native bf16 (the faster one), else the first."""
  return 'bfloat16' if 'bfloat16' in cfg.precisions and peak.has_bf16 else cfg.precisions[0]


def versions() -> Dict[str, str]:
  import keras  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return {'TensorFlow': tf.__version__, 'Keras': keras.__version__, 'Python': platform.python_version()}


def run_benchmark(cfg: BenchConfig) -> Results:
  """Measures every row of the table (see tools/train_benchmark's docstring); logs progress through absl logging.

  Order per precision: Keras applications fit (and its XLA variant), Keras fit on our model, ours, PyTorch, ours
  with XLA, the recipe and kernel rows, ours on real data (one precision), so each ratio compares neighbours in
  time. The determinism rows come last. The ceilings are measured first and last, and the higher figure is kept.
  """
  from resnet import determinism  # pylint: disable=g-import-not-at-top,g-multiple-import
  from params.model_config import ModelConfig
  from resnet.model import plan
  validate(cfg)
  if determinism.op_determinism_enabled():
    raise RuntimeError('Deterministic ops are already on in this process, so every row would measure them: run the '
                       'benchmark in a fresh process.')
  peak = detect_peak(clock_ghz_override=cfg.peak_clock_ghz)
  torch_python, why_not = child.find_torch_python(cfg)
  load_start = os.getloadavg()[0]
  results = Results(cfg=cfg, peak=peak, rows=[], ceilings={}, load=(load_start, float('nan')), versions=versions(),
                    train_gflop_per_image=TRAIN_FLOPS_MULTIPLIER * plan.count_flops(ModelConfig(
                        resnet_depth=cfg.resnet_depth, num_label_classes=cfg.num_classes), cfg.image_size) / 1e9)
  if why_not:
    results.notes.append(why_not)
  if cfg.ceilings:
    logging.info('Measuring the matmul and conv ceilings...')
    results.ceilings = ceilings.measure_ceilings(cfg.batch_size)
  keras_ok = cfg.keras and cfg.application is not None
  if cfg.keras and not keras_ok:
    results.notes.append(f'No keras.applications row: it has ResNet {sorted(KERAS_APPLICATIONS)} only, not '
                         f'{cfg.resnet_depth} (--keras_application picks another).')
  real_precision = real_data_precision(cfg, peak) if cfg.real_data else None
  data_dir, generated = cfg.data_dir, None
  profile_dir = tempfile.mkdtemp(prefix='train-benchmark-profile-') if cfg.profile else None
  try:
    if cfg.real_data and not data_dir:
      logging.info('Writing fake ImageNet records...')
      start = time.perf_counter()
      data_dir, count = measure.make_fake_records(cfg)
      generated = data_dir
      results.data_note = (f'{count} fake ImageNet JPEGs (tools/make_fake_imagenet, sides 375..500 px) in 8 '
                           f'shards, written in {time.perf_counter() - start:.0f} s')
    elif cfg.real_data:
      results.data_note = f'records from {data_dir}'
    for precision in cfg.precisions:
      if keras_ok or cfg.keras_ours:
        batch = measure.synthetic_batch(cfg, precision)
        if keras_ok:
          logging.info('Measuring Keras %s fit, %s...', cfg.application, precision)
          results.rows.append(measure.bench_keras(cfg, precision, batch))
          if cfg.keras_xla:
            logging.info('Measuring Keras %s fit with jit_compile=True, %s...', cfg.application, precision)
            results.rows.append(measure.bench_keras(cfg, precision, batch, jit_compile=True))
        if cfg.keras_ours:
          logging.info('Measuring Keras fit on our model, %s...', precision)
          results.rows.append(measure.bench_keras(cfg, precision, batch, model='ours'))
        del batch
      logging.info('Measuring our Estimator, %s, synthetic data...', precision)
      results.rows.append(measure.bench_ours(cfg, precision)[0])
      for compiled in ((False, True) if cfg.torch_compile else (False,)) if torch_python else ():
        logging.info('Measuring PyTorch%s (%s), %s...', ' under torch.compile' if compiled else '', torch_python,
                     precision)
        try:   # a peer's failure (e.g. inductor without a C++ compiler) costs its row, not the rows measured
          results.rows.append(child.torch_row_in_subprocess(cfg, precision, torch_python, compiled=compiled))
        except RuntimeError as e:
          logging.warning('%s', e)
          results.notes.append(f'No {"torch.compile" if compiled else "PyTorch eager"} {precision} row: it failed '
                               f'in its child process ({str(e).splitlines()[0]}); the log has its stderr.')
      if precision in cfg.xla_precisions:
        logging.info('Measuring our Estimator with jit_compile=True, %s...', precision)
        results.rows.append(measure.bench_ours(cfg, precision, jit_compile=True)[0])
      variants = ((list(RECIPE_OVERRIDES) if precision in cfg.recipe_precisions else []) +
                  (list(KERNEL_OVERRIDES) if precision in cfg.kernel_precisions else []))
      for recipe in variants:
        logging.info('Measuring our Estimator, %s, %s...', row_name(cfg, recipe), precision)
        results.rows.append(measure.bench_ours(cfg, precision, recipe=recipe)[0])
      if precision == real_precision:
        logging.info('Measuring our Estimator, %s, real data...', precision)
        row, results.profile = measure.bench_ours(cfg, precision, data_dir=data_dir, profile_dir=profile_dir)
        results.rows.append(row)
  finally:
    if generated:
      shutil.rmtree(generated, ignore_errors=True)
    if profile_dir:
      shutil.rmtree(profile_dir, ignore_errors=True)
  if cfg.ceilings:
    results.ceilings = ceilings.best_of(results.ceilings, ceilings.measure_ceilings(cfg.batch_size))
  for precision in cfg.determinism_precisions:
    logging.info('Measuring our Estimator with random_seed (deterministic ops), %s, %s...', precision,
                 cfg.determinism_mode)
    if cfg.determinism_mode == 'subprocess':  # deterministic ops cannot be turned off: keep them in a child
      results.rows.append(child.bench_ours_in_subprocess(cfg, precision, deterministic=True))
    else:
      results.rows.append(measure.bench_ours(cfg, precision, deterministic=True)[0])
  if cfg.determinism_precisions and cfg.determinism_mode == 'in_process':
    results.notes.append('Deterministic ops were turned on in this process for the last row(s) and stay on.')
  results.load = (load_start, os.getloadavg()[0])
  return results
