"""The splits a dataset is cut into, and the cut of single-label data: each class by the ratios, in a seeded order.

Its own module because every part of the converter names the splits, and class folders and a labels CSV without a
split column share one cut (the same images, labels and seed give the same shards by either route). Multi-label
data is cut by iterative stratification (stratify.py), since one image counts for several classes.
"""
import random
from typing import Dict, List, Sequence, TypeVar

SPLITS = ('train', 'validation', 'test')
# Every word a data set names a split with (folder names, file names, split columns, label files' names), to the
# split it names: valid/ is Roboflow's, training/ and testing/ are common on Kaggle, dev is the NLP habit.
SPLIT_WORDS = {'train': 'train', 'training': 'train', 'val': 'validation', 'valid': 'validation',
               'validation': 'validation', 'dev': 'validation', 'test': 'test', 'testing': 'test'}

ItemT = TypeVar('ItemT')  # sources.Item; sortable


def split_counts(n: int, ratios: Sequence[float]) -> List[int]:
  """Splits n items by ratios with cumulative rounding, so the counts always add up to n."""
  bounds, total = [], 0.0
  for r in ratios[:-1]:
    total += r
    bounds.append(min(n, int(n * total + 0.5)))
  edges = [0] + bounds + [n]
  return [max(0, edges[i + 1] - edges[i]) for i in range(len(ratios))]


def split_class_items(by_class: Dict[str, List[ItemT]], ratios: Sequence[float],
                      seed: int) -> Dict[str, List[ItemT]]:
  """Stratified, deterministic split: each class is shuffled with (seed, class name), then cut by the ratios.

  Seeding per class keeps a class's split unchanged when other classes are added or removed.
  """
  splits: Dict[str, List[ItemT]] = {s: [] for s in SPLITS}
  for class_name in sorted(by_class):
    items = sorted(by_class[class_name])
    random.Random(f'{seed}/{class_name}').shuffle(items)
    start = 0
    for split, count in zip(SPLITS, split_counts(len(items), ratios)):
      splits[split].extend(items[start:start + count])
      start += count
  return {split: sorted(items) for split, items in splits.items()}  # Validation/test stay in path order.
