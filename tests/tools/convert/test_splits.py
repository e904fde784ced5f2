"""tools/convert/splits.py: counts that always add up, and a per-class seeded cut that other classes leave alone."""
from tools.convert.splits import SPLITS, split_class_items, split_counts


def test_split_counts_add_up_to_n():
  for n in range(40):
    assert sum(split_counts(n, (0.8, 0.1, 0.1))) == n
  assert split_counts(10, (0.8, 0.1, 0.1)) == [8, 1, 1]


def test_a_class_keeps_its_split_when_other_classes_come_and_go():
  cats = {'cat': [f'cat/{i}.jpg' for i in range(20)]}
  alone = split_class_items(cats, (0.8, 0.1, 0.1), seed=5)
  with_dogs = split_class_items({**cats, 'dog': [f'dog/{i}.jpg' for i in range(20)]}, (0.8, 0.1, 0.1), seed=5)
  assert [len(alone[s]) for s in SPLITS] == [16, 2, 2]
  assert {s: [p for p in with_dogs[s] if p.startswith('cat/')] for s in SPLITS} == alone
  assert split_class_items(cats, (0.8, 0.1, 0.1), seed=6) != alone
