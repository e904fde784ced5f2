"""What a training run fixes at its first start and keeps at every resume: ``model_dir/run_start.json``.

Some of a run's choices come from params that may change on resume, or from files that change under it: the steps
at which progressive resizing changes size (equal shares of ``train_steps``, which a resume may raise or lower),
and the checkpoint a teacher given as a run directory resolves to (that run's latest, which moves while it trains).
Recomputed at every start, a longer resumed run would fall back to a smaller image size and a teacher could change
silently between resumes. The chief records each choice here when it makes it; later starts read it back (the
owners decide what a record means: ``wiring.size_stages``, ``distillation.teacher_path``). Entries are keyed by
what they answer, so that a run records each on its own.

A missing record (a run started before it was kept) reads as empty; a damaged one is a warning and reads as empty
too (the choices are then made again and recorded).
"""
import json
import os
from typing import Any, Dict

from absl import logging

from resnet.estimator import files

FILE = 'run_start.json'
_warned = set()


def path_of(model_dir: str) -> str:
  return os.path.join(model_dir, FILE)


def read(model_dir: str) -> Dict[str, Any]:
  """The run's record ({} when it has none, or a damaged one: a warning)."""
  record = files.read_json_record(path_of(model_dir), 'run start record')
  if record.damaged:
    if record.path not in _warned:
      _warned.add(record.path)
      logging.warning('%s: its choices (size stages, the teacher\'s checkpoint) are made again and recorded anew.',
                      record.problem)
    return {}
  return record.value if isinstance(record.value, dict) else {}


def record(model_dir: str, **entries: Any) -> None:
  """Sets ``entries`` in the run's record (the others kept), written atomically; nothing written when unchanged."""
  current = read(model_dir)
  updated = {**current, **entries}
  if updated != current:
    files.atomic_write(path_of(model_dir), json.dumps(updated, indent=2, sort_keys=True) + '\n')
