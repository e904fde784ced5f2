"""summary.json: what a conversion did, in the file the trainer reads (official_input/dataset_info.py) and people
read: images per split and class, every re-encoding and skipped file with why, copies across splits, and per shard
its record count, size and SHA-256; and the table the command prints of it.

Its keys are made and filled here only (the shard writer calls in as it writes each image), so the file's shape
has one home.
"""
import re
from typing import Any, Dict, List, Optional, Sequence

from official_input.dataset_layout import SUMMARY_FILE
from tools.convert import clean_images
from tools.convert import labels_csv
from tools.convert.sources import RATIO_LAYOUTS, Plan
from tools.convert.splits import SPLITS

_EXAMPLES = 5  # paths kept per kind of re-encoding


def new_summary(plan: Plan, raw_data_dir: str, output_dir: str, ratios: Sequence[float], seed: int,
                max_image_side: int) -> Dict[str, Any]:
  """The summary before any image is written: the plan's layout, classes and passed-over files, zero counts."""
  loose_reason = 'not named in the labels CSV' if plan.layout.startswith('labels_csv') else 'not inside a class folder'
  return {
      'layout': plan.layout,
      'raw_data_dir': raw_data_dir,
      'output_dir': output_dir,
      'split_ratios': dict(zip(SPLITS, ratios)) if plan.layout in RATIO_LAYOUTS else None,
      'task': plan.task,  # multi_label: per_class counts each image under every label it has; negatives: none
      'seed': seed,
      'jpeg_quality': clean_images.JPEG_QUALITY,
      'num_classes': len(plan.class_names),
      'labels': {name: i + 1 for i, name in enumerate(plan.class_names)},
      'splits': {s: {'images': 0, 'shards': [], 'per_class': {c: 0 for c in plan.class_names},
                     **({'negatives': 0} if plan.task == labels_csv.MULTI_LABEL else {})} for s in SPLITS},
      'num_images': 0,
      'converted': {},  # reason -> {'count': n, 'examples': [paths]}
      'shards': {},  # shard file name -> {'records': n, 'bytes': b, 'sha256': hex digest}
      'skipped': ([{'path': p, 'split': None, 'reason': loose_reason} for p in plan.loose_files]
                  + [{'path': p, 'split': None, 'reason': why} for p, why in plan.link_skips]),
      'max_image_side': max_image_side,
  }


def add_skipped(summary: Dict[str, Any], path: str, split: Optional[str], reason: str) -> None:
  summary['skipped'].append({'path': path, 'split': split, 'reason': reason})


def count_image(summary: Dict[str, Any], split: str, label_names: Sequence[str], path: str,
                converted: Optional[str]) -> None:
  """Counts an image written to ``split``: under each of its classes (none: a negative), and its re-encoding."""
  stats = summary['splits'][split]
  stats['images'] += 1
  for name in label_names:
    stats['per_class'][name] += 1
  if not label_names:
    stats['negatives'] += 1
  summary['num_images'] += 1
  if converted:
    entry = summary['converted'].setdefault(converted, {'count': 0, 'examples': []})
    entry['count'] += 1
    if len(entry['examples']) < _EXAMPLES:
      entry['examples'].append(path)


def add_shard(summary: Dict[str, Any], split: str, name: str, records: int, num_bytes: int, sha256: str) -> None:
  summary['splits'][split]['shards'].append(name)
  summary['shards'][name] = {'records': records, 'bytes': num_bytes, 'sha256': sha256}


def finish(summary: Dict[str, Any], leaked: Dict[str, Any], seconds: float) -> None:
  """Completes the summary once every shard is written: the copies across splits (integrity.LeakedImages.report),
  the skipped files by kind, and the run's time."""
  summary['leaked'] = leaked
  summary['skipped_counts'] = skipped_counts(summary['skipped'])
  summary['seconds'] = round(seconds, 1)


def skipped_counts(skipped: List[Dict[str, Any]]) -> Dict[str, int]:
  """Skipped files by the kind of reason (its words before any detail in parentheses or after a colon)."""
  counts: Dict[str, int] = {}
  for entry in skipped:
    kind = re.split(r' \(|: ', entry['reason'], maxsplit=1)[0]
    counts[kind] = counts.get(kind, 0) + 1
  return counts


def format_summary(summary: Dict[str, Any], max_skipped: int = 20) -> str:
  """A readable table: images per class and split, then conversions and skipped files."""
  splits = [s for s in SPLITS if summary['splits'][s]['shards']]
  width = max([len('class')] + [len(c) for c in summary['labels']])
  lines = [f'Layout: {summary["layout"]}' + (f', split {summary["split_ratios"]} seed {summary["seed"]}'
                                             if summary['split_ratios'] else ''),
           f'{"label":>5}  {"class":<{width}}' + ''.join(f'  {s:>10}' for s in splits) + f'  {"total":>10}']
  for name, label in summary['labels'].items():
    counts = [summary['splits'][s]['per_class'][name] for s in splits]
    lines.append(f'{label:>5}  {name:<{width}}' + ''.join(f'  {n:>10}' for n in counts) + f'  {sum(counts):>10}')
  if summary.get('task') == labels_csv.MULTI_LABEL:   # an image counts under each of its labels: rows overlap
    width = max(width, len('no label'))
    negatives = [summary['splits'][s]['negatives'] for s in splits]
    lines.append(f'{"":>5}  {"no label":<{width}}' + ''.join(f'  {n:>10}' for n in negatives)
                 + f'  {sum(negatives):>10}')
    lines[0] += ' (multi-label: an image counts under each of its labels)'
  totals = [summary['splits'][s]['images'] for s in splits]
  lines.append(f'{"":>5}  {"images":<{width}}' + ''.join(f'  {n:>10}' for n in totals) + f'  {sum(totals):>10}')
  lines.append(f'{"":>5}  {"shards":<{width}}' + ''.join(f'  {len(summary["splits"][s]["shards"]):>10}'
                                                           for s in splits))
  if summary.get('max_image_side'):
    lines.append(f'Images longer than {summary["max_image_side"]} px were resized to that longer side.')
  for reason, entry in sorted(summary['converted'].items()):
    lines.append(f'Re-encoded to RGB JPEG (quality {summary["jpeg_quality"]}): {entry["count"]} x {reason}')
  skipped = summary['skipped']
  lines.append(f'Skipped {len(skipped)} files' + (':' if skipped else '.'))
  for entry in skipped[:max_skipped]:
    lines.append(f'  {entry["path"]}: {entry["reason"]}')
  if len(skipped) > max_skipped:
    lines.append(f'  ... {len(skipped) - max_skipped} more in {SUMMARY_FILE}')
  leaked = summary.get('leaked') or {}
  if leaked.get('count'):
    counts = ', '.join(f'{n} {kind}' for kind, n in leaked['by_split_and_kind'].items())
    lines.append(f'Copies of images of an earlier split: {leaked["count"]} ({counts})'
                 + (', left out (--drop_leaked_images):' if leaked['dropped'] else
                    ': their accuracy measures memory (--drop_leaked_images leaves them out):'))
    for entry in leaked['examples'][:max_skipped]:
      lines.append(f'  {entry["path"]} = {entry["same_as"]} ({entry["kind"]})')
  return '\n'.join(lines)

