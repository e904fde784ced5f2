"""The converter's output folder: how many shards a split gets and what they are called, which files are the
converter's, and the writing of each shard and text file under a ``.tmp-`` name renamed when complete.

Writing runs in the parent process only, fed in plan order by the cleaning workers (clean_images.py); TensorFlow
(the TFRecord writer) is imported when the first shard is written, so that ``--help``, planning and the workers
never load it. A run that fails leaves no complete-looking shard, and a rerun removes what an interrupted one left.
"""
import os
import re
import time
from typing import Any, Dict, Iterator, List, Optional, Tuple

from absl import logging

from official_input.dataset_layout import LABELS_FILE, SUMMARY_FILE
from tools.convert import clean_images
from tools.convert import integrity
from tools.convert import summary as summary_lib
from tools.convert.sources import Item, Plan
from tools.convert.splits import SPLITS

# Auto shard count: about one shard per this many source bytes, capped like the reference (1024/128) and at the
# image count, so ImageNet gets 1024 train shards and a 200 MB folder gets one or two per split.
TARGET_SHARD_BYTES = 100 * 1024 * 1024
MAX_AUTO_SHARDS = {'train': 1024, 'validation': 128, 'test': 128}
TMP_PREFIX = '.tmp-'
_SHARD_RE = re.compile(r'^(train|validation|test)-\d{5}-of-\d{5}$')

Shard = Tuple[str, int, int, List[Item]]  # (split, index, num_shards, items)


def default_num_shards(split: str, num_images: int, num_bytes: int) -> int:
  """About one shard per TARGET_SHARD_BYTES of source data, at least 1, capped by MAX_AUTO_SHARDS and num_images."""
  if num_images == 0:
    return 0
  return max(1, min(MAX_AUTO_SHARDS[split], num_images, num_bytes // TARGET_SHARD_BYTES))


def shard_name(split: str, index: int, num_shards: int) -> str:
  return f'{split}-{index:05d}-of-{num_shards:05d}'


def is_output(name: str) -> bool:
  """Whether a file name is one the converter writes: a shard, labels.txt or summary.json."""
  return bool(_SHARD_RE.match(name)) or name in (LABELS_FILE, SUMMARY_FILE)


def output_files(output_dir: str) -> List[str]:
  """The converter's outputs in upload order: shards, labels.txt, then summary.json (completion marker) last."""
  names = sorted(n for n in os.listdir(output_dir) if _SHARD_RE.match(n))
  return names + [n for n in (LABELS_FILE, SUMMARY_FILE) if os.path.exists(os.path.join(output_dir, n))]


def prepare_output_dir(output_dir: str, overwrite: bool) -> None:
  """Removes leftover .tmp- files; refuses other content unless overwrite, which removes only our own outputs."""
  os.makedirs(output_dir, exist_ok=True)
  for name in os.listdir(output_dir):
    if name.startswith(TMP_PREFIX):
      logging.info('Removing %s left by an interrupted run.', name)
      os.remove(os.path.join(output_dir, name))
  existing = sorted(os.listdir(output_dir))
  if not existing:
    return
  if not overwrite:
    raise FileExistsError(f'Output dir {output_dir} is not empty ({", ".join(existing[:5])}...): pass --overwrite '
                          '(replaces the shards, labels.txt and summary.json) or choose an empty dir.')
  for name in existing:
    if is_output(name):
      os.remove(os.path.join(output_dir, name))
    else:
      logging.warning('--overwrite keeps %s in %s (not a converter output).', name, output_dir)


def atomic_write_text(output_dir: str, name: str, text: str) -> None:
  tmp = os.path.join(output_dir, TMP_PREFIX + name)
  with open(tmp, 'w') as f:
    f.write(text)
  os.replace(tmp, os.path.join(output_dir, name))


def shard_plan(plan: Plan, shards: Dict[str, Optional[int]]) -> List[Shard]:
  """(split, index, num_shards, items) per shard; items are spread evenly so no auto shard is empty."""
  out = []
  for split in SPLITS:
    items = plan.splits[split]
    if not items:
      continue
    num = shards.get(split)
    if num is None:
      num = default_num_shards(split, len(items), sum(i.size for i in items))
    elif num > len(items):
      logging.warning('%s: %d shards for %d images: some shards will be empty.', split, num, len(items))
    for index in range(num):
      out.append((split, index, num, items[index * len(items) // num:(index + 1) * len(items) // num]))
  return out


def write_shards(shards: List[Shard], output_dir: str, labels: Dict[str, int], num_workers: int,
                 apply_exif_orientation: bool, summary: Dict[str, Any], max_image_side: int = 0,
                 leaks: Optional[integrity.LeakedImages] = None) -> None:
  """Streams cleaned images from the workers into the shards, in plan order."""
  paths = [item.source for _, _, _, items in shards for item in items]  # a file, or a sample in an archive
  with clean_images.cleaned_images(paths, apply_exif_orientation, num_workers, max_image_side) as results:
    import tensorflow as tf  # pylint: disable=g-import-not-at-top,unused-import  # Lazy, while the workers boot.
    done, last_log, start = 0, time.time(), time.time()
    for split, index, num, items in shards:
      _write_shard(os.path.join(output_dir, shard_name(split, index, num)), split, items, results, labels, summary,
                   leaks or integrity.LeakedImages(False))
      done += len(items)
      if time.time() - last_log > 10 or index == num - 1:
        last_log = time.time()
        logging.info('%s: %d/%d shards; %d/%d files processed (%.0f files/s).', split, index + 1, num, done,
                     len(paths), done / max(1e-9, time.time() - start))


def _write_shard(path: str, split: str, items: List[Item], results: Iterator[clean_images.CleanedImage],
                 labels: Dict[str, int], summary: Dict[str, Any], leaks: integrity.LeakedImages) -> None:
  """Writes one shard under a .tmp- name and renames it when complete; a failure leaves no shard behind."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top  # Lazy: keeps --help and the workers TF-free.
  from official_input import example_schema  # pylint: disable=g-import-not-at-top
  tmp = os.path.join(os.path.dirname(path), TMP_PREFIX + os.path.basename(path))
  records = 0
  try:
    with tf.io.TFRecordWriter(tmp) as writer:
      for item in items:
        result = next(results)
        reason = result.error or integrity.too_small(result) or leaks.check(split, item.path, result)
        if reason:
          summary_lib.add_skipped(summary, item.path, split, reason)
          continue
        names = item.label_names
        example = example_schema.make_example(result.encoded, 'JPEG', [labels[n] for n in names], ' '.join(names),
                                              result.height, result.width, os.path.basename(item.path))
        writer.write(example.SerializeToString())
        records += 1
        summary_lib.count_image(summary, split, names, item.path, result.converted)
    num_bytes, digest = integrity.file_digest(tmp)
    os.replace(tmp, path)
  finally:
    if os.path.exists(tmp):
      os.remove(tmp)
  summary_lib.add_shard(summary, split, os.path.basename(path), records, num_bytes, digest)
