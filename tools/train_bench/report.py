"""The benchmark's text: the table, how to read it, the targets, and docs/performance.md's markdown table."""
import math
from typing import List, Optional, Sequence

from tools.train_bench import ceilings as ceilings_lib
from tools.train_bench.rows import COUNTED_KINDS, OUR_MODEL_KINDS, Ratio, Results, Row

# The project's performance targets.
TARGET_VS_KERAS = 1.10
TARGET_VS_TORCH = 1.30          # ours over PyTorch eager, each precision, every CPU
TARGET_VS_TORCH_COMPILE = 1.30  # ours over PyTorch under torch.compile (inductor), each precision, every CPU
TARGET_CONV_CEILING = {'float32': 0.85, 'bfloat16': 0.40}  # of the measured conv ceiling; bf16 on AMX CPUs only
TARGET_REAL_VS_SYNTHETIC = 0.95
# The peers ours is rated against, in the targets' order: (row kind, name in the target line, target).
PEER_TARGETS = (('keras', 'Keras fit', TARGET_VS_KERAS), ('torch', 'PyTorch eager', TARGET_VS_TORCH),
                ('torch_compile', 'PyTorch torch.compile', TARGET_VS_TORCH_COMPILE))
NO_ROW = {'keras': 'Keras', 'torch': 'PyTorch', 'torch_compile': 'torch.compile'}
NOISE_OTHERS = 0.10  # other processes using > 10% of the cores during a timed window: a noisy figure


def _pct(x: float) -> str:
  return '-' if x is None or not math.isfinite(x) else f'{100.0 * x:.0f}%'


def _num(x: Optional[float], fmt: str = '{:.2f}') -> str:
  return '-' if x is None or not math.isfinite(x) else fmt.format(x)


def format_ratio(r: Optional[Ratio], with_baseline: bool = False) -> str:
  """'1.42x (1.38-1.47)'; with_baseline adds 'runner: ... vs <baseline>'."""
  if r is None or not math.isfinite(r.value):
    return '-'
  text = f'{r.value:.2f}x'
  if math.isfinite(r.low) and r.low != r.high:  # equal only with a single window on both sides
    text += f' ({r.low:.2f}-{r.high:.2f})'
  if with_baseline:
    text = f'{r.isolates + ": " if r.isolates else ""}{text} vs {r.baseline}'
  return text


def row_gflops(results: Results, row: Row) -> float:
  """Training GFLOP/s of rows running count_flops' FLOPs (ours, torchvision); NaN for keras.applications rows."""
  return row.images_per_sec * results.train_gflop_per_image if row.kind in COUNTED_KINDS else float('nan')


def of_ceiling(results: Results, row: Row, kernel: str = 'conv') -> float:
  """The row's GFLOP/s as a share of the measured ``kernel`` ceiling of its precision."""
  return row_gflops(results, row) / results.ceiling(row.precision, kernel)


def table_rows(results: Results) -> List[List[str]]:
  """The table's cells: one line per measured row, ratios next to the figure they compare."""
  lines = []
  for row in results.rows:
    lines.append([row.name, row.precision, _num(row.images_per_sec), row.spread,
                  format_ratio(results.vs_keras(row)), format_ratio(results.vs_torch(row)),
                  format_ratio(results.vs_torch_compile(row)),
                  format_ratio(results.vs_reference(row), with_baseline=True),
                  _num(row.cpu_normalised), _num(row_gflops(results, row), '{:.0f}'), _pct(of_ceiling(results, row)),
                  _pct(of_ceiling(results, row, 'matmul')), f'{_pct(row.cpu_busy)} / {_pct(row.cpu_others)}',
                  _num(row.compile_s, '{:.0f}')])
  return lines


HEADER = ['row', 'precision', 'img/s', 'min-max', 'vs keras apps', 'vs PyTorch', 'vs torch.compile',
          'vs reference (what differs)',
          'cpu-norm img/s', 'GFLOP/s', '% conv ceiling', '% matmul ceiling', 'cpu us / others', 'warm-up s']


def format_table(header: Sequence[str], lines: Sequence[Sequence[str]]) -> str:
  widths = [max(len(str(c)) for c in col) for col in zip(header, *lines)]
  fmt = lambda cells: '  '.join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
  return '\n'.join([fmt(header), fmt(['-' * w for w in widths])] + [fmt(line) for line in lines])


def is_noisy(results: Results) -> bool:
  others = [r.cpu_others for r in results.rows if math.isfinite(r.cpu_others)]
  return bool(others) and max(others) > NOISE_OTHERS


def target_lines(results: Results) -> List[str]:
  """One line per target: PASS / FAIL / n/a on wall-clock img/s, with the figure behind it (and the CPU-normalised
  figure when other processes competed)."""
  out = []
  mark = lambda ok: 'PASS' if ok else 'FAIL'  # noqa: E731
  noisy = is_noisy(results)

  def cpu_note(a: Row, b: Row, fmt: str) -> str:
    return f' [noisy run; CPU-normalised: {fmt.format(a.cpu_normalised / b.cpu_normalised)}]' if noisy else ''

  for kind, peer_name, target in PEER_TARGETS:
    for p in results.cfg.precisions:
      ours, peer = results.find('ours', p), results.find(kind, p)
      if ours and peer:
        r = results.vs(kind, ours)
        out.append(f'{mark(r.value >= target)}  ours vs {peer_name}, {p}: {format_ratio(r)} '
                   f'(target >= {target:.2f}x){cpu_note(ours, peer, "{:.2f}x")}')
      elif ours:
        out.append(f'n/a   ours vs {peer_name}, {p}: no {NO_ROW[kind]} row')
  for p in results.cfg.precisions:
    ours, target = results.find('ours', p), TARGET_CONV_CEILING[p]
    if not ours:
      continue
    share = of_ceiling(results, ours)
    if not math.isfinite(share):
      out.append(f'n/a   ours, {p}, of the measured conv ceiling: no ceiling measured (--ceilings=false)')
    elif p == 'bfloat16' and not results.peak.has_amx:
      out.append(f'n/a   ours, bfloat16: {share:.0%} of the measured bf16 conv ceiling (the {target:.0%} target is '
                 'for CPUs with AMX; this one has none)')
    else:
      cpu = (f' [noisy run; CPU-normalised: {ours.cpu_normalised / ours.images_per_sec * share:.0%}]'
             if noisy else '')
      out.append(f'{mark(share >= target)}  ours, {p}: {share:.0%} of the measured {p} conv ceiling '
                 f'(target >= {target:.0%}){cpu}')
  real = next((r for r in results.rows if r.data == 'real'), None)
  if real:
    synth = results.find('ours', real.precision)
    r = results.vs_reference(real)
    out.append(f'{mark(r.value >= TARGET_REAL_VS_SYNTHETIC)}  real vs synthetic input, {real.precision}: '
               f'{r.value:.0%} (target >= {TARGET_REAL_VS_SYNTHETIC:.0%}){cpu_note(real, synth, "{:.0%}")}')
  else:
    out.append('n/a   real vs synthetic input: --real_data=false')
  return out


def machine_line(results: Results) -> str:
  """The machine and software the figures come from, and how busy the machine was."""
  peak, v = results.peak, results.versions
  software = ', '.join(f'{k} {v[k]}' for k in ('TensorFlow', 'Keras', 'Python') if k in v)
  return (f'{peak.model_name} ({peak.vendor}, family {peak.family if peak.family is not None else "?"}, '
          f'{peak.isa}{", AVX512_BF16" if peak.has_bf16 else ""}{", AMX" if peak.has_amx else ""}), {peak.cores} cores'
          f'{", " + software if software else ""}; load average {results.load[0]:.2f} at the start, '
          f'{results.load[1]:.2f} at the end{" (NOISY: see the noise warning)" if is_noisy(results) else ""}')


def ceiling_line(results: Results) -> str:
  """The measured ceilings, one clause per kernel: 'conv: float32 290, bfloat16 1,540 GFLOP/s; ...'."""
  if not results.ceilings:
    return 'not measured (--ceilings=false)'
  return '; '.join(f'{kernel} ' + ', '.join(f'{p} {g:,.0f}' for p, g in per.items()) + ' GFLOP/s'
                   for kernel, per in results.ceilings.items()) + f' ({ceilings_lib.describe()})'


def format_markdown(results: Results, command: str) -> str:
  """docs/performance.md's table: every row with its median, range, ratios and share of the measured conv ceiling,
  the machine, the ceilings and the command."""
  cfg = results.cfg
  lines = [f'Training, ResNet-{cfg.resnet_depth} at {cfg.image_size} px, batch {cfg.batch_size}, synthetic batches '
           f'unless noted. img/s: median of {cfg.repeats} timed windows of {cfg.steps} steps (after '
           f'{cfg.warmup_steps} warm-up steps); range: slowest-fastest window. Ratios are of medians, in brackets '
           'from the slowest/fastest to the fastest/slowest window pair.',
           '',
           f'| row | precision | img/s | range | vs Keras `{cfg.application or "-"}` fit | vs PyTorch | '
           'vs torch.compile | vs reference (what differs) | % of conv ceiling |',
           '|---|---|---|---|---|---|---|---|---|']
  for row in results.rows:
    name = row.name
    if row.kind in ('keras', 'keras_xla'):
      name = name.replace(f'Keras {cfg.application} fit', f'Keras `{cfg.application}` fit')
    lines.append(f'| {name} | {row.precision} | {_num(row.images_per_sec, "{:.1f}")} | {row.spread} | '
                 f'{format_ratio(results.vs_keras(row))} | {format_ratio(results.vs_torch(row))} | '
                 f'{format_ratio(results.vs_torch_compile(row))} | '
                 f'{format_ratio(results.vs_reference(row), True)} | {_pct(of_ceiling(results, row))} |')
  torch_note = next((r.note for r in results.rows if r.kind == 'torch'), '')
  lines += ['', f'Machine: {machine_line(results)}.', f'Measured ceilings: {ceiling_line(results)}.']
  if torch_note:
    lines.append(f'PyTorch: {torch_note}.')
  lines.append(f'Command: `{command}`')
  return '\n'.join(lines)


def format_report(results: Results) -> str:
  cfg, peak = results.cfg, results.peak
  parts = [
      f'Training benchmark: ResNet-{cfg.resnet_depth}, {cfg.image_size}x{cfg.image_size}, batch {cfg.batch_size}, '
      f'{cfg.repeats} timed window(s) of {cfg.steps} steps per row after {cfg.warmup_steps} warm-up steps, '
      f'{peak.cores} CPU cores',
      '',
      format_table(HEADER, table_rows(results)),
      '',
      'How to read it:',
      f'- img/s = the median of the {cfg.repeats} timed windows; min-max = the slowest and fastest window. A ratio '
      'is median over median, in brackets the row\'s slowest window over the baseline\'s fastest up to its fastest '
      'over the baseline\'s slowest: a bracket that excludes 1.00 is a difference larger than the noise.',
      f'- vs keras apps = against keras.applications {cfg.application or "(none)"} (weights=None) with compile/fit: '
      'SGD momentum 0.9, sparse CE, jit_compile=False, steps_per_execution=1, on the same synthetic batch (float32).',
      '- vs PyTorch = against torchvision\'s ResNet of the same depth trained eagerly in a child process '
      '(tools/train_bench/torch_row.py: channels_last, SGD Nesterov momentum + weight decay, torch.autocast for '
      'bf16, one fixed random batch, as many threads as cores), measured right after ours. vs torch.compile = '
      'against the same model wrapped in torch.compile (inductor, default mode) in its own child process, '
      'compiled in the warm-up steps.',
      '- vs reference: each row against the row it differs from in one thing. model: Keras fit on our model vs on '
      'keras.applications; runner: our Estimator vs Keras fit on the same model; XLA: jit_compile=True vs not; '
      'determinism: random_seed (deterministic ops) vs not; input: JPEG records vs synthetic batches; mixup/CutMix: '
      'mixup_alpha=0.2 and cutmix_alpha=1.0 vs neither; accumulation: each update as 2 micro-batches of half the '
      'batch vs one batch; BCE, AdamW, LAMB, clipping: loss=binary_cross_entropy (threshold 0.2), optimizer=adamw, '
      'optimizer=lamb, clip_grad_norm=1.0 vs the softmax loss and momentum SGD; 1x1 weight gradients: oneDNN\'s backward-weights convolution (conv1x1_filter_grad=conv) '
      'vs one matmul; add + ReLU: TensorFlow\'s Add and Relu ops (residual_add_relu=ops) vs one XLA function.',
      f'- ours = Estimator + resnet_model_fn (one_device CPU, compiled loop of {cfg.steps} steps, ImageNetInput). '
      'It does a little more per step than the Keras fit on our model: weight decay, Nesterov momentum, the '
      'learning-rate schedule and a label check.',
      '- Keras applications are ResNet v1 (stride in the first 1x1 conv): ~6% fewer FLOPs than our v1.5 at 224, '
      'not credited in the ratio.',
      f'- FLOPs: forward = 2 x multiply-adds of convs + dense (plan.count_flops; BN, ReLU, pooling, adds '
      f'not counted); training = 3 x forward = {results.train_gflop_per_image:.2f} GFLOP/image. '
      'GFLOP/s and % of the ceilings are shown for rows running these FLOPs (ours, torchvision) only.',
      f'- Measured ceilings (TensorFlow\'s kernels on this machine, best of the start and the end of the run): '
      f'{ceiling_line(results)}. % conv ceiling = the row\'s GFLOP/s over the conv ceiling of its precision.',
      f'- For reference only (not used for any figure): a peak from the nominal clock, {peak.describe()}',
  ]
  others = [r.cpu_others for r in results.rows if math.isfinite(r.cpu_others)]
  load = f'load average {results.load[0]:.1f} at start, {results.load[1]:.1f} at end'
  parts.append('- cpu us / others = share of the cores used by this process / by everything else (other '
               'processes, hypervisor steal; from /proc/stat) during the timed windows (worst window for others). '
               'cpu-norm img/s = images per second of this process\'s CPU time x cores: an estimate of the row '
               'with the cores to itself (quiet rows use ~96% of them), robust to other processes within ~5-10%.')
  if is_noisy(results):
    parts.append(f'- NOISE WARNING: other processes took up to {max(others):.0%} of the {peak.cores} cores ({load}); '
                 'rows measured then are low and ratios uncertain. Re-run on a quiet machine, or with more '
                 '--repeats.')
  else:
    parts.append(f'- The machine was quiet during the timed windows ({load}).')
  if cfg.repeats < 3:
    parts.append(f'- Only {cfg.repeats} window(s) per row: the ranges say little; use --repeats=3 or more.')
  parts.append('- warm-up s = wall time of the untimed first steps (tracing, XLA compilation, graph optimisation, '
               'oneDNN primitive creation); ours also builds the model.')
  if any(r.kind == 'ours_det' for r in results.rows):
    where = 'a child process' if cfg.determinism_mode == 'subprocess' else 'this process, after every other row'
    parts.append(f'- The determinism row ran in {where}: deterministic ops, once on, stay on for the process.')
  apps = next((r.parameters for r in results.rows if r.kind in ('keras', 'keras_xla') and r.parameters), 0)
  ours = next((r.parameters for r in results.rows if r.kind in OUR_MODEL_KINDS and r.parameters), 0)
  for torch_row in [r for r in results.rows if r.kind in ('torch', 'torch_compile')][:2]:
    parts.append(f'- {torch_row.name}: {torch_row.note}; {torch_row.parameters / 1e6:.2f}M parameters and buffers.')
  if apps or ours:
    sizes = ([f'keras.applications {cfg.application} {apps / 1e6:.2f}M'] if apps else []) + \
        ([f'our ResNet-{cfg.resnet_depth} {ours / 1e6:.2f}M'] if ours else [])
    parts.append(f'- Parameters (trainable and not): {", ".join(sizes)}.')
  if results.data_note:
    parts.append(f'- Real data: {results.data_note}; optimized ImageNetInput pipeline (decode_and_crop + resize in '
                 'tf.data) on the same cores as training.')
  if results.profile is not None:
    parts.append(f'- Offline profile of the real-data run (resnet/estimator/profiler_hook + profile_analysis, '
                 f'{results.profile.num_steps} steps): {results.profile.input_percent:.1f}% of step time waiting '
                 f'on input; {results.profile.verdict}.')
  parts += [f'- {note}' for note in results.notes]
  parts += ['', 'Targets:'] + target_lines(results)
  return '\n'.join(parts)
