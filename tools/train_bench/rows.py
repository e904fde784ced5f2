"""What the benchmark measures: its configuration, one row per measured configuration, ratios between rows.

Every row is compared with a neighbour that differs in one thing (REFERENCES); the rows and the results are plain
data, so that the report can be built (and tested) without training anything.
"""
import dataclasses
import json
import statistics
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

from tools.train_bench.machine import CpuPeak, Mark, window_stats

KERAS_APPLICATIONS = {50: 'ResNet50', 101: 'ResNet101', 152: 'ResNet152'}
PRECISIONS = ('float32', 'bfloat16')
KERAS_POLICIES = {'float32': 'float32', 'bfloat16': 'mixed_bfloat16'}
DETERMINISM_MODES = ('subprocess', 'in_process')
TRAIN_FLOPS_MULTIPLIER = 3  # training = forward + backward (2 x forward: input grads + weight grads)


# ------------------------------------------------------------------------------------------------ rows
# kind -> (the kind it is compared with, what that comparison isolates). The real-data row is kind 'ours' with
# data 'real', compared with 'ours' on synthetic batches.
REFERENCES = {
    'keras_xla': ('keras', 'XLA'),
    'keras_ours': ('keras', 'model'),
    'ours': ('keras_ours', 'runner'),
    'ours_xla': ('ours', 'XLA'),
    'ours_det': ('ours', 'determinism'),
    'ours_mix': ('ours', 'mixup/CutMix'),
    'ours_accum': ('ours', 'accumulation'),
    'ours_bce': ('ours', 'BCE'),
    'ours_adamw': ('ours', 'AdamW'),
    'ours_lamb': ('ours', 'LAMB'),
    'ours_clip': ('ours', 'clipping'),
    'ours_conv_dw': ('ours', '1x1 weight gradients'),
    'ours_ops_add': ('ours', 'add + ReLU'),
    'ours_tf_kernels': ('ours', 'both kernels'),
}
OUR_MODEL_KINDS = ('keras_ours', 'ours', 'ours_xla', 'ours_det', 'ours_mix', 'ours_accum', 'ours_bce', 'ours_adamw',
                   'ours_lamb', 'ours_clip', 'ours_conv_dw',
                   'ours_ops_add', 'ours_tf_kernels')
# Rows whose model does plan.count_flops' FLOPs: ours, and torchvision's ResNet (v1.5 too: stride on the 3x3).
COUNTED_KINDS = OUR_MODEL_KINDS + ('torch', 'torch_compile')
# The params each recipe row adds to ours (same images per update: accumulation splits the batch in two).
RECIPE_OVERRIDES = {'ours_mix': {'mixup_alpha': 0.2, 'cutmix_alpha': 1.0},
                    'ours_accum': {'gradient_accumulation_steps': 2},
                    'ours_bce': {'loss': 'binary_cross_entropy', 'bce_target_threshold': 0.2},
                    'ours_adamw': {'optimizer': 'adamw'},
                    'ours_lamb': {'optimizer': 'lamb'},
                    'ours_clip': {'clip_grad_norm': 1.0}}
# The params each kernel row sets on ours: one of bfloat16's CPU kernels back to TensorFlow's own (what it buys).
KERNEL_OVERRIDES = {'ours_conv_dw': {'conv1x1_filter_grad': 'conv'},
                    'ours_ops_add': {'residual_add_relu': 'ops'},
                    'ours_tf_kernels': {'conv1x1_filter_grad': 'conv', 'residual_add_relu': 'ops'}}
VARIANT_OVERRIDES = {**RECIPE_OVERRIDES, **KERNEL_OVERRIDES}


@dataclasses.dataclass
class Row:
  """One measured configuration; ``samples`` are images/s of each timed window."""
  name: str
  kind: str            # 'keras' | 'keras_xla' | 'keras_ours' | 'ours' | 'ours_xla' | 'ours_det' | 'torch' |
  #                      'torch_compile' |
  #                      a VARIANT_OVERRIDES kind
  precision: str
  data: str            # 'synthetic' | 'real'
  samples: List[float] = dataclasses.field(default_factory=list)
  busy: List[float] = dataclasses.field(default_factory=list)     # our share of the cores, per window
  others: List[float] = dataclasses.field(default_factory=list)   # other processes' share of the cores, per window
  compile_s: float = float('nan')   # warm-up wall time (tracing + first steps)
  parameters: int = 0               # of the model it trained
  note: str = ''                    # 'deterministic ops on' when they were; the torch row: versions

  @property
  def images_per_sec(self) -> float:
    """The median window."""
    return statistics.median(self.samples) if self.samples else float('nan')

  @property
  def low(self) -> float:
    return min(self.samples) if self.samples else float('nan')

  @property
  def high(self) -> float:
    return max(self.samples) if self.samples else float('nan')

  @property
  def spread(self) -> str:
    """The range of the windows, slowest..fastest ('-' with a single window)."""
    if len(self.samples) < 2:
      return '-'
    return f'{self.low:.2f}-{self.high:.2f}'

  @property
  def cpu_busy(self) -> float:
    return statistics.mean(self.busy) if self.busy else float('nan')

  @property
  def cpu_others(self) -> float:
    return max(self.others) if self.others else float('nan')

  @property
  def cpu_normalised(self) -> float:
    """img/s per this process's CPU time x cores: what the row would do with the cores to itself (it uses ~96% of
    them when the machine is quiet), and far less sensitive to other processes than wall time."""
    rates = [s / b for s, b in zip(self.samples, self.busy) if b > 0]
    return statistics.median(rates) if rates else float('nan')

  def add_window(self, start: Mark, end: Mark, images: int, cores: int) -> None:
    wall, ours, others = window_stats(start, end, cores)
    self.samples.append(images / wall)
    self.busy.append(ours)
    self.others.append(others)


class Ratio(NamedTuple):
  """A row's speed over a baseline's, both from the same run."""
  value: float      # median window / median window
  low: float        # the row's slowest window / the baseline's fastest
  high: float       # the row's fastest window / the baseline's slowest
  baseline: str     # the baseline row's name
  isolates: str     # what differs between the two rows ('' for a plain comparison)


def ratio(row: Row, baseline: Row, isolates: str = '') -> Ratio:
  return Ratio(row.images_per_sec / baseline.images_per_sec, row.low / baseline.high, row.high / baseline.low,
               baseline.name, isolates)


@dataclasses.dataclass
class BenchConfig:
  """One benchmark run; the CLI flags of the same names set it."""
  resnet_depth: int = 50
  image_size: int = 224
  batch_size: int = 32
  steps: int = 6            # x 3 windows: ~10 min for every row at ResNet-50 224 batch 32 on 2 cores
  warmup_steps: int = 3
  repeats: int = 3
  precisions: Tuple[str, ...] = PRECISIONS
  keras: bool = True
  keras_application: Optional[str] = None       # None: keras.applications' ResNet of the same depth
  keras_xla: bool = False
  keras_ours: bool = True
  xla_precisions: Tuple[str, ...] = ('float32',)
  determinism_precisions: Tuple[str, ...] = ('bfloat16',)   # the default training precision
  determinism_mode: str = 'subprocess'
  recipe_precisions: Tuple[str, ...] = ('bfloat16',)  # rows with RECIPE_OVERRIDES (mixup/CutMix, accumulation, ...)
  kernel_precisions: Tuple[str, ...] = ('bfloat16',)  # rows with one of bf16's CPU kernels back to TensorFlow's
  real_data: bool = True
  data_dir: Optional[str] = None
  profile: bool = False
  num_classes: int = 1000
  peak_clock_ghz: Optional[float] = None
  ceilings: bool = True     # measure matmul and conv ceilings (tools/train_bench/ceilings.py)
  torch: bool = True        # PyTorch rows where a Python with torch and torchvision is found
  torch_python: str = ''    # that Python ('' = this one, if it can import both)
  torch_compile: bool = True  # beside the eager PyTorch row, the same model under torch.compile (inductor)
  seed: int = 0

  @property
  def application(self) -> Optional[str]:
    """The keras.applications class of the baseline row, or None when there is none for this depth."""
    return self.keras_application or KERAS_APPLICATIONS.get(self.resnet_depth)

  def to_json(self) -> str:
    return json.dumps(dataclasses.asdict(self))

  @classmethod
  def from_json(cls, text: str) -> 'BenchConfig':
    values = json.loads(text)
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})


def row_name(cfg: BenchConfig, kind: str, data: str = 'synthetic') -> str:
  if kind == 'ours' and data == 'real':
    return 'ours, JPEG records'
  return {
      'keras': f'Keras {cfg.application} fit',
      'keras_xla': f'Keras {cfg.application} fit, jit_compile=True',
      'keras_ours': f'Keras fit on our ResNet-{cfg.resnet_depth}',
      'ours': 'ours (Estimator)',
      'ours_xla': 'ours, jit_compile=True (XLA)',
      'ours_det': 'ours, random_seed (deterministic ops)',
      'ours_mix': 'ours, mixup 0.2 + CutMix 1.0',
      'ours_accum': 'ours, gradient_accumulation_steps=2',
      'ours_bce': 'ours, loss=binary_cross_entropy + threshold 0.2',
      'ours_adamw': 'ours, optimizer=adamw',
      'ours_lamb': 'ours, optimizer=lamb',
      'ours_clip': 'ours, clip_grad_norm=1.0',
      'ours_conv_dw': 'ours, conv1x1_filter_grad=conv',
      'ours_ops_add': 'ours, residual_add_relu=ops',
      'ours_tf_kernels': 'ours, conv1x1_filter_grad=conv + residual_add_relu=ops',
      'torch': f'PyTorch torchvision ResNet-{cfg.resnet_depth}, eager',
      'torch_compile': f'PyTorch torchvision ResNet-{cfg.resnet_depth}, torch.compile',
  }[kind]


def validate(cfg: BenchConfig) -> None:
  """Refuses a configuration whose rows could not be measured or compared, naming the fix."""
  if not cfg.precisions:
    raise ValueError('no precision to measure: pass --precisions=float32,bfloat16 (or one of them)')
  for p in cfg.precisions:
    if p not in PRECISIONS:
      raise ValueError(f'precision {p!r} is not one of {PRECISIONS}')
  for name in ('xla_precisions', 'determinism_precisions', 'recipe_precisions', 'kernel_precisions'):
    extra = [p for p in getattr(cfg, name) if p not in cfg.precisions]
    if extra:
      raise ValueError(f'{name}={list(getattr(cfg, name))} includes {extra}, which --precisions={list(cfg.precisions)} '
                       f'does not measure: their rows need the plain row of the same precision to compare with. Add '
                       f'them to --precisions or drop them from --{name}.')
  if cfg.determinism_mode not in DETERMINISM_MODES:
    raise ValueError(f'determinism_mode must be one of {DETERMINISM_MODES}, got {cfg.determinism_mode!r}')
  if cfg.steps < 2 or cfg.repeats < 1:
    # The runner runs a 1-step loop with a different compiled function (for profiling), which would be traced
    # inside the timed window.
    raise ValueError(f'steps must be >= 2 and repeats >= 1, got steps={cfg.steps}, repeats={cfg.repeats}')
  if cfg.keras_application is not None:
    import keras  # pylint: disable=g-import-not-at-top
    if not callable(getattr(keras.applications, cfg.keras_application, None)):
      raise ValueError(f'keras.applications has no {cfg.keras_application!r}; use e.g. ResNet50 or ResNet50V2.')


@dataclasses.dataclass
class Results:
  """Everything one run measured: the report is built from it alone."""
  cfg: BenchConfig
  peak: CpuPeak
  rows: List[Row]
  train_gflop_per_image: float
  ceilings: Dict[str, Dict[str, float]]   # {'matmul' | 'conv': {precision: GFLOP/s}} (ceilings.py)
  load: Tuple[float, float]
  data_note: str = ''
  profile: Any = None
  notes: List[str] = dataclasses.field(default_factory=list)
  versions: Dict[str, str] = dataclasses.field(default_factory=dict)   # TensorFlow, Keras, Python

  def find(self, kind: str, precision: str, data: str = 'synthetic') -> Optional[Row]:
    for row in self.rows:
      if row.kind == kind and row.precision == precision and row.data == data:
        return row
    return None

  def vs(self, kind: str, row: Row) -> Optional[Ratio]:
    """The row against the ``kind`` row of the same precision (keras: keras.applications fit; torch: PyTorch eager;
    torch_compile: PyTorch under torch.compile); None for that row itself, or without one."""
    peer = self.find(kind, row.precision)
    return ratio(row, peer) if peer is not None and row is not peer else None

  def vs_keras(self, row: Row) -> Optional[Ratio]:
    return self.vs('keras', row)

  def vs_torch(self, row: Row) -> Optional[Ratio]:
    return self.vs('torch', row)

  def vs_torch_compile(self, row: Row) -> Optional[Ratio]:
    return self.vs('torch_compile', row)

  def ceiling(self, precision: str, kernel: str = 'conv') -> float:
    """The measured GFLOP/s of ``kernel`` in ``precision``; NaN when not measured."""
    return self.ceilings.get(kernel, {}).get(precision, float('nan'))

  def vs_reference(self, row: Row) -> Optional[Ratio]:
    """The row against the row it differs from by one thing (REFERENCES; real data: ours on synthetic batches)."""
    if row.data == 'real':
      base, isolates = self.find('ours', row.precision), 'input'
    elif row.kind in REFERENCES:
      kind, isolates = REFERENCES[row.kind]
      base = self.find(kind, row.precision)
    else:
      return None
    return ratio(row, base, isolates) if base is not None else None
