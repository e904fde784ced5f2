"""The machine under the benchmark: what it is (cores, ISA, bf16 and AMX support, a peak from its nominal clock),
and how busy it is (ours vs other processes).

Why here: a timing on a shared machine is only as good as the share of the cores it had; both are read from /proc
(cpuinfo, stat), independent of what is being trained. The rows are rated against measured ceilings
(ceilings.py); the clock-derived peak is printed beside them only, because its clock and pipes are assumptions.
"""
import dataclasses
import os
import re
import resource
import statistics
import time
from typing import Dict, List, NamedTuple, Optional, Tuple


# ------------------------------------------------------------------------------------------------ peak FLOP/s
@dataclasses.dataclass(frozen=True)
class CpuPeak:
  """The machine's assumed peak and how it was derived (printed verbatim under the table)."""
  cores: int
  clock_ghz: float
  clock_source: str
  vendor: str
  family: Optional[int]
  model_name: str
  isa: str
  fp32_flops_per_cycle: int      # per core
  has_bf16: bool
  assumption: str
  has_amx: bool = False    # AMX tiles for bf16 (Sapphire Rapids and later): bf16 matmuls far past 2x fp32

  @property
  def fp32_gflops(self) -> float:
    return self.cores * self.clock_ghz * self.fp32_flops_per_cycle

  @property
  def bf16_gflops(self) -> float:
    return self.fp32_gflops * (2 if self.has_bf16 else 1)

  def describe(self) -> str:
    bf16 = ('bf16 peak = 2 x fp32 peak (AVX512_BF16 VDPBF16PS: 2 bf16 products per fp32 lane per FMA)'
            if self.has_bf16 else 'no AVX512_BF16: bf16 peak taken equal to the fp32 peak')
    text = (f'{self.cores} cores (os.sched_getaffinity) x {self.clock_ghz:.3f} GHz ({self.clock_source}) x '
            f'{self.fp32_flops_per_cycle} fp32 FLOPs/cycle/core ({self.assumption}) = '
            f'{self.fp32_gflops:.1f} GFLOP/s fp32; {bf16} = {self.bf16_gflops:.1f} GFLOP/s. CPU: {self.vendor} '
            f'family {self.family if self.family is not None else "?"} "{self.model_name}", ISA {self.isa}.')
    if self.has_amx:
      text += ' AMX (amx_bf16): the bf16 figure leaves out the AMX tiles, which do far more.'
    return text


def _cpuinfo_fields(text: str) -> Dict[str, List[str]]:
  fields: Dict[str, List[str]] = {}
  for line in text.splitlines():
    if ':' in line:
      key, value = line.split(':', 1)
      fields.setdefault(key.strip().lower(), []).append(value.strip())
  return fields


def fma_pipes(vendor: str, family: Optional[int], model_name: str, avx512: bool) -> Tuple[int, str]:
  """(512-bit-equivalent FMA pipes per core, the stated assumption) for a CPU with AVX-512."""
  if 'AMD' in vendor.upper() or 'AMD' in model_name.upper():
    if family is not None and family >= 26:
      return 2, 'AMD family 26 = Zen 5: 2 full-width 512-bit FMA pipes'
    if family == 25:
      return 1, 'AMD family 25 = Zen 4: AVX-512 double-pumped on 2 x 256-bit FMA pipes = 1 x 512-bit'
    return 1, f'AMD family {family}: assumed 1 x 512-bit FMA equivalent'
  if avx512:
    return 2, 'Intel with AVX-512: assumed 2 x 512-bit FMA units (server parts; some have 1)'
  return 2, 'assumed 2 FMA pipes'


def detect_peak(cpuinfo_text: Optional[str] = None, cores: Optional[int] = None,
                clock_ghz_override: Optional[float] = None) -> CpuPeak:
  """Derives the fp32/bf16 peak from /proc/cpuinfo; ``clock_ghz_override`` replaces the clock read there."""
  if cpuinfo_text is None:
    try:
      with open('/proc/cpuinfo') as f:
        cpuinfo_text = f.read()
    except OSError:
      cpuinfo_text = ''
  fields = _cpuinfo_fields(cpuinfo_text)
  first = lambda key, default='': (fields.get(key) or [default])[0]  # noqa: E731
  cpu_flags = set(first('flags').split())
  vendor = first('vendor_id', '?')
  model_name = first('model name', '?')
  try:
    family: Optional[int] = int(first('cpu family'))
  except ValueError:
    family = None
  if cores is None:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else (os.cpu_count() or 1)
  if clock_ghz_override:
    clock, source = float(clock_ghz_override), '--peak_clock_ghz'
  elif fields.get('cpu mhz'):
    mhz = [float(v) for v in fields['cpu mhz'] if re.match(r'^[0-9.]+$', v)]
    clock, source = statistics.mean(mhz) / 1000.0, "/proc/cpuinfo 'cpu MHz' (nominal; boost not counted)"
  elif fields.get('bogomips'):
    clock, source = float(first('bogomips')) / 2000.0, '/proc/cpuinfo BogoMIPS / 2'
  else:
    clock, source = 2.0, 'unknown, assumed 2.0 GHz (pass --peak_clock_ghz)'
  avx512 = 'avx512f' in cpu_flags
  if avx512:
    pipes, assumption = fma_pipes(vendor, family, model_name, True)
    isa, per_cycle = 'AVX-512', 16 * 2 * pipes
    assumption = f'16 fp32 lanes x 2 (FMA) x {pipes} pipe(s); {assumption}'
  elif 'avx2' in cpu_flags and 'fma' in cpu_flags:
    isa, per_cycle, assumption = 'AVX2+FMA', 8 * 2 * 2, '8 fp32 lanes x 2 (FMA) x 2 pipes'
  elif 'avx' in cpu_flags:
    isa, per_cycle, assumption = 'AVX', 8 * 2, '8 fp32 lanes x (1 add + 1 mul)'
  else:
    isa, per_cycle, assumption = 'SSE/unknown', 4 * 2, '4 fp32 lanes x (1 add + 1 mul)'
  return CpuPeak(cores=cores, clock_ghz=clock, clock_source=source, vendor=vendor, family=family,
                 model_name=model_name, isa=isa, fp32_flops_per_cycle=per_cycle,
                 has_bf16='avx512_bf16' in cpu_flags, assumption=assumption, has_amx='amx_bf16' in cpu_flags)


# ------------------------------------------------------------------------------------------------ load
def _system_busy_seconds() -> float:
  """CPU seconds all processes (and the hypervisor, as steal) took on this machine since boot; NaN if unknown."""
  try:
    with open('/proc/stat') as f:
      fields = [float(v) for v in f.readline().split()[1:]]
  except (OSError, ValueError):
    return float('nan')
  idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle + iowait
  busy = sum(fields[:8]) - idle  # user nice system idle iowait irq softirq steal (guest is inside user)
  return busy / os.sysconf('SC_CLK_TCK')


def _process_cpu_seconds() -> float:
  usage = resource.getrusage(resource.RUSAGE_SELF)
  return usage.ru_utime + usage.ru_stime


class Mark(NamedTuple):
  """A point in time: wall clock, this process's CPU seconds (all threads), the machine's busy CPU seconds."""
  wall: float
  cpu: float
  system: float

  @staticmethod
  def now() -> 'Mark':
    return Mark(time.perf_counter(), _process_cpu_seconds(), _system_busy_seconds())


def window_stats(start: Mark, end: Mark, cores: int) -> Tuple[float, float, float]:
  """(wall seconds, our share of the cores, other processes' share of the cores) between two marks."""
  wall = max(end.wall - start.wall, 1e-9)
  ours = (end.cpu - start.cpu) / (wall * cores)
  others = max(0.0, (end.system - start.system) - (end.cpu - start.cpu)) / (wall * cores)
  return wall, ours, others
