"""tools/convert/stratify.py: iterative stratification deals a rare label's examples to every split by the
ratios, each example once, decided by the seed."""
from tools.convert import stratify


def test_iterative_stratification_deals_rare_labels_to_every_split_by_the_ratios():
  examples = [(f'a{i}', ('common',) + (('rare',) if i < 10 else ())) for i in range(100)]
  examples += [(f'n{i}', ()) for i in range(20)]
  splits = stratify.iterative_split(examples, (0.8, 0.1, 0.1), seed=3)
  assert [len(s) for s in splits] == [96, 12, 12]
  assert [sum(k in {f'a{i}' for i in range(10)} for k in s) for s in splits] == [8, 1, 1]
  assert sorted(k for s in splits for k in s) == sorted(k for k, _ in examples)   # each example once
  assert stratify.iterative_split(examples, (0.8, 0.1, 0.1), seed=3) == splits     # the seed decides
  assert stratify.iterative_split(examples, (0.8, 0.1, 0.1), seed=4) != splits
