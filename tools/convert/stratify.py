"""Iterative stratification (Sechidis, Tsoumakas & Vlahavas 2011): splits multi-label data so that each label's
examples spread over the splits by the ratios, rare labels first, so that they reach validation and test (a random
split of 10 examples at 0.8/0.1/0.1 leaves a label out of validation about a third of the time; this gives 8/1/1).

The algorithm, deterministic for a seed: while examples are left, take the label with the fewest examples left
(ties by name); deal its examples (in a seeded order) each to the split that still wants most of that label (ties:
the split that wants most examples overall, then the earlier split), and count the example against every label it
has. Examples without labels (negatives) are dealt last, each to the split that wants most examples.
"""
import random
from typing import Dict, List, Sequence, Tuple

Labels = Tuple[str, ...]


def iterative_split(examples: Sequence[Tuple[str, Labels]], ratios: Sequence[float],
                    seed: int) -> List[List[str]]:
  """``examples``: (key, its labels); returns the keys of each split, in the order of ``ratios``."""
  if not examples:
    return [[] for _ in ratios]
  total = sum(ratios)
  shares = [r / total for r in ratios]
  order = sorted(examples)
  random.Random(f'{seed}/iterative').shuffle(order)
  wanted = [share * len(order) for share in shares]                   # examples each split still wants
  label_count: Dict[str, int] = {}
  for _, labels in order:
    for label in set(labels):
      label_count[label] = label_count.get(label, 0) + 1
  wanted_label = {label: [share * n for share in shares] for label, n in label_count.items()}
  left = {label: n for label, n in label_count.items()}
  splits: List[List[str]] = [[] for _ in ratios]
  remaining = list(order)
  while any(left.values()):
    label = min((n, name) for name, n in left.items() if n > 0)[1]
    dealt = [example for example in remaining if label in example[1]]
    for key, labels in dealt:
      best = max(range(len(ratios)), key=lambda j: (wanted_label[label][j], wanted[j], -j))
      splits[best].append(key)
      wanted[best] -= 1
      for other in set(labels):
        wanted_label[other][best] -= 1
        left[other] -= 1
    dealt_keys = {key for key, _ in dealt}
    remaining = [example for example in remaining if example[0] not in dealt_keys]
  for key, _ in remaining:   # no labels: negatives
    best = max(range(len(ratios)), key=lambda j: (wanted[j], -j))
    splits[best].append(key)
    wanted[best] -= 1
  return splits
