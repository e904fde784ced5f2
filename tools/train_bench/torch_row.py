"""The PyTorch row: torchvision's ResNet trained eagerly as its reference scripts do, timed as our rows are.

Why a child process with its own interpreter: torch is never a dependency (a scratch environment holds it, named
by ``--torch_python``), and TensorFlow and PyTorch in one process would fight over the same cores with two thread
pools. This module imports the standard library, torch and torchvision only (and ``machine`` for the windows'
CPU shares), so any Python with torch can run it: ``python -m tools.train_bench.torch_row SPEC_JSON``.

What it trains, as a PyTorch user on a CPU does: ``torchvision.models.resnet<depth>(weights=None)``, channels_last
model and input, SGD (momentum 0.9, Nesterov, weight decay 1e-4: the same update kind as ours),
``CrossEntropyLoss``, bfloat16 through ``torch.autocast('cpu', torch.bfloat16)`` (float32 weights, as our mixed
policy); one fixed random batch, so no input pipeline is timed; ``torch.set_num_threads(cores)``.

With ``compile`` in the spec, the model is wrapped in ``torch.compile`` (inductor, default mode) as a PyTorch user
turns it on first: forward and backward are compiled graphs (fused elementwise ops, oneDNN convolutions through
inductor's CPU lowering), the optimizer stays eager. Compilation happens in the warm-up steps and is not timed.
"""
import json
import sys
from typing import Any, Dict


def measure(spec: Dict[str, Any]) -> Dict[str, Any]:
  """Times ``repeats`` windows of ``steps`` steps after ``warmup_steps``; returns the row's fields as a dict."""
  import os  # pylint: disable=g-import-not-at-top
  import time  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  import torchvision  # pylint: disable=g-import-not-at-top
  from tools.train_bench.machine import Mark, window_stats  # pylint: disable=g-import-not-at-top

  cores = len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else (os.cpu_count() or 1)
  torch.set_num_threads(cores)
  torch.manual_seed(spec.get('seed', 0))
  depth, size, batch = spec['resnet_depth'], spec['image_size'], spec['batch_size']
  bf16 = spec['precision'] == 'bfloat16'
  model = getattr(torchvision.models, f'resnet{depth}')(weights=None, num_classes=spec['num_classes'])
  model = model.to(memory_format=torch.channels_last).train()
  compiled = bool(spec.get('compile'))
  parameters = sum(p.numel() for p in model.parameters()) + sum(b.numel() for b in model.buffers()
                                                                if b.is_floating_point())
  optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-4)
  loss_fn = torch.nn.CrossEntropyLoss()
  if compiled:
    model = torch.compile(model)
  images = torch.randn(batch, 3, size, size).contiguous(memory_format=torch.channels_last)
  labels = torch.randint(0, spec['num_classes'], (batch,))

  def step() -> float:
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast('cpu', dtype=torch.bfloat16, enabled=bf16):
      loss = loss_fn(model(images), labels)
    loss.backward()
    optimizer.step()
    return loss.detach().item()  # waits for the step

  start = time.perf_counter()
  for _ in range(max(1, spec['warmup_steps'])):
    step()
  row = {'samples': [], 'busy': [], 'others': [], 'compile_s': time.perf_counter() - start,
         'parameters': parameters,
         'note': f'torch {torch.__version__}, torchvision {torchvision.__version__}, {cores} threads'
                 f'{", torch.compile (inductor, default mode)" if compiled else ""}'}
  for _ in range(spec['repeats']):
    begin = Mark.now()
    for _ in range(spec['steps']):
      step()
    wall, ours, others = window_stats(begin, Mark.now(), cores)
    row['samples'].append(spec['steps'] * batch / wall)
    row['busy'].append(ours)
    row['others'].append(others)
  return row


def main(argv) -> int:
  spec = json.loads(argv[1])
  with open(spec['out'], 'w') as f:
    json.dump(measure(spec), f)
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv))
