"""What ``--webdataset`` and ``--parquet`` name, as files with their splits: paths, shell globs and brace ranges as
WebDataset users write them (``train-{000000..000009}.tar``, ``{a,b}``), folders, several of these separated by
commas, each optionally prefixed by its split (``train=...``, ``validation=...``).

A file's split is the prefix it was named under, else the split its name says (``train-00000-of-00004.parquet``,
``imagenet-val-000001.tar``, or its folder: ``train/data-00000-of-00001.arrow``); when no file says one, the ratios
split the samples, and a mix of files with and without a split is refused (which split would the others be?). Pure
Python: the converter's planning imports no TensorFlow. Remote paths are refused with the fix: the image-cleaning
workers read the files at random offsets, which needs local files.
"""
import glob
import os
import re
from typing import Dict, List, Optional, Sequence

from official_input import file_walk
from tools.convert.splits import SPLIT_WORDS

_RANGE = re.compile(r'^(-?\d+)\.\.(-?\d+)$')


def split_commas(spec: str) -> List[str]:
  """The comma-separated items of ``spec``, leaving commas inside braces (``{a,b}``) alone."""
  items, depth, current = [], 0, ''
  for char in spec:
    depth += {'{': 1, '}': -1}.get(char, 0)
    if char == ',' and depth == 0:
      items.append(current)
      current = ''
    else:
      current += char
  return [item.strip() for item in items + [current] if item.strip()]


def expand_braces(pattern: str) -> List[str]:
  """Brace expansion as WebDataset's braceexpand does it: ``{000..009}`` (zero-padded to the first bound's width),
  ``{a,b}``, nested and several per pattern."""
  start = pattern.find('{')
  if start < 0:
    return [pattern]
  depth = 0
  for end in range(start, len(pattern)):
    depth += {'{': 1, '}': -1}.get(pattern[end], 0)
    if depth == 0:
      break
  else:
    raise ValueError(f'{pattern!r}: a "{{" without its "}}".')
  inner, head, tail = pattern[start + 1:end], pattern[:start], pattern[end + 1:]
  ranged = _RANGE.match(inner)
  if ranged:
    first, last = ranged.group(1), ranged.group(2)
    width = len(first.lstrip('-')) if first.lstrip('-').startswith('0') else 0
    step = 1 if int(last) >= int(first) else -1
    choices = [str(i).zfill(width) for i in range(int(first), int(last) + step, step)]
  else:
    choices = [c for part in split_commas(inner) for c in expand_braces(part)] if ',' in inner else ['{' + inner + '}']
  return [head + choice + rest for choice in choices for rest in expand_braces(tail)]


def split_of_name(path: str) -> Optional[str]:
  """The split a file's name says (a word of its name: ``imagenet-val-000001.tar``), else its folder's when the
  folder is named for a split (``train/data-00000-of-00001.arrow``; not ``my_train_set/``), or None."""
  words = [SPLIT_WORDS[w] for w in re.split(r'[^a-z]+', os.path.basename(path).lower()) if w in SPLIT_WORDS]
  if words:
    return words[0]
  return SPLIT_WORDS.get(os.path.basename(os.path.dirname(path)).lower())  # a folder named for its split only


def expand(spec: str, flag: str, suffixes: Sequence[str]) -> Dict[str, Optional[str]]:
  """{file: its split or None}, in the order named (each file once). A folder stands for the files under it whose
  names end in one of ``suffixes``. ValueError for a remote path, a pattern matching nothing, an unknown split
  prefix, and a mix of files with and without a split."""
  found: Dict[str, Optional[str]] = {}
  for item in split_commas(spec):
    split, pattern = None, item
    prefix = None if os.path.exists(item) else re.match(r'^([A-Za-z_]+)=(.*)$', item)
    if prefix:
      split = SPLIT_WORDS.get(prefix.group(1).lower())
      if split is None:
        raise ValueError(f'{flag}: {prefix.group(1)!r} in {item!r} is not a split (one of '
                         f'{", ".join(w + "=" for w in SPLIT_WORDS)}).')
      pattern = prefix.group(2)
    if re.match(r'^[a-z][a-z0-9+.-]*:', pattern) and not os.path.exists(pattern):
      raise ValueError(f'{flag}: {pattern!r} is not a local path: the converter reads the files at random offsets, '
                       'so copy them to a local disk first (gsutil -m cp, aws s3 cp, huggingface-cli download).')
    matched = []
    for path in expand_braces(pattern):
      if os.path.isdir(path):
        matched.extend(p for p in file_walk.Walker().files(path) if p.lower().endswith(tuple(suffixes)))
      elif any(c in path for c in '*?['):
        matched.extend(p for p in sorted(glob.glob(path)) if os.path.isfile(p))
      elif os.path.isfile(path):
        matched.append(path)
      else:
        raise ValueError(f'{flag}: {path!r} (from {item!r}) is not a file, a folder or a glob that matches one.')
    if not matched:
      raise ValueError(f'{flag}: {item!r} matches no {" or ".join(suffixes)} file.')
    for path in matched:
      found.setdefault(path, split or split_of_name(path))
  named = [path for path, split in found.items() if split]
  if named and len(named) < len(found):
    unnamed = [path for path, split in found.items() if not split]
    raise ValueError(f'{flag}: {len(named)} files have a split and {len(unnamed)} have none (e.g. {unnamed[0]}): '
                     'prefix each pattern with its split (train=PATTERN,validation=PATTERN), or name none so the '
                     'ratios split the samples.')
  return found


def display_path(container: str, inner: str) -> str:
  """How a sample inside an archive is named in summary.json, the log and its record (its basename)."""
  return container.rstrip('/') + '/' + inner

