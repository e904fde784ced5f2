"""What makes a cleaned image unfit to keep, beyond being unreadable, and what lets a written shard be checked.

A validation or test image that copies a training image (the same bytes, or a re-encode of the same picture) would
measure memory, not generalisation: LeakedImages finds them, across splits only. An image under MIN_IMAGE_SIDE
pixels a side (a spacer, a tracking pixel) cannot be cropped by the trainer. Each shard's size and SHA-256 go into
summary.json, so a copy can be verified without parsing it.
"""
import hashlib
from typing import Any, Dict, List, Optional, Tuple

from absl import logging

from official_input.dataset_layout import MIN_IMAGE_SIDE
from tools.convert import clean_images

_HASH_CHUNK_BYTES = 4 * 1024 * 1024


class LeakedImages:
  """Finds validation and test images whose picture is one of an earlier split's (train, then validation):
  byte-identical files (SHA-256), and near-identical re-encodes (256-bit difference hashes within NEAR_BITS bits,
  found through BANDS bands of 16 bits: two hashes that differ in fewer bits than there are bands share a band).
  Their accuracy would measure memory, not generalisation; ``drop`` leaves them out of their split."""

  NEAR_BITS = 8
  BANDS = 16
  SHOWN = 20
  # A picture with little detail (flat, or a plain background) hashes to few 1 bits (or few 0 bits): two such
  # unrelated pictures fall within NEAR_BITS of each other. They are matched by their bytes only.
  MIN_DETAIL_BITS = 32

  def __init__(self, drop: bool):
    self.drop = drop
    self.by_digest: Dict[str, Tuple[str, str]] = {}               # sha256 -> (split, path)
    self.bands: List[Dict[int, List[Tuple[int, str, str]]]] = [{} for _ in range(self.BANDS)]
    self.found: List[Dict[str, Any]] = []

  def _detailed(self, dhash: int) -> bool:
    return self.MIN_DETAIL_BITS <= bin(dhash).count('1') <= 16 * self.BANDS - self.MIN_DETAIL_BITS

  def _near(self, dhash: int, split: str) -> Optional[Tuple[str, str]]:
    """An image of another split whose hash is within NEAR_BITS (one of this split's would hide it)."""
    for band, index in enumerate(self.bands):
      for other, other_split, path in index.get((dhash >> (16 * band)) & 0xFFFF, ()):
        if other_split != split and bin(dhash ^ other).count('1') <= self.NEAR_BITS:
          return other_split, path
    return None

  def check(self, split: str, path: str, result: clean_images.CleanedImage) -> Optional[str]:
    """Records ``path`` (of ``split``) and returns why it is dropped, or None to keep it."""
    match, kind = None, None
    if split != 'train':
      if result.sha256 and result.sha256 in self.by_digest and self.by_digest[result.sha256][0] != split:
        match, kind = self.by_digest[result.sha256], 'identical'
      elif result.dhash >= 0 and self._detailed(result.dhash):
        near = self._near(result.dhash, split)
        if near is not None:
          match, kind = near, 'near-identical'
    if match is not None:
      self.found.append({'path': path, 'split': split, 'kind': kind, 'same_as': match[1], 'same_as_split': match[0]})
      if self.drop:
        return f'{kind} to an image of {match[0]}: {match[1]} (--drop_leaked_images)'
    if result.sha256:
      self.by_digest.setdefault(result.sha256, (split, path))
    if result.dhash >= 0 and self._detailed(result.dhash):
      for band, index in enumerate(self.bands):
        index.setdefault((result.dhash >> (16 * band)) & 0xFFFF, []).append((result.dhash, split, path))
    return None

  def report(self) -> Dict[str, Any]:
    counts = {f'{f["split"]} {f["kind"]}': 0 for f in self.found}
    for f in self.found:
      counts[f'{f["split"]} {f["kind"]}'] += 1
    return {'count': len(self.found), 'dropped': len(self.found) if self.drop else 0, 'by_split_and_kind': counts,
            'examples': self.found[:self.SHOWN]}

  def log(self) -> None:
    if not self.found:
      return
    counts = ', '.join(f'{n} {k}' for k, n in self.report()['by_split_and_kind'].items())
    shown = '; '.join(f'{f["path"]} = {f["same_as"]}' for f in self.found[:5])
    if self.drop:
      logging.warning('Dropped %d evaluation images that are copies of images of an earlier split (%s), e.g. %s.',
                      len(self.found), counts, shown)
    else:
      logging.warning('%d evaluation images are copies of images of an earlier split (%s), e.g. %s. Their accuracy '
                      'measures memory, not generalisation: --drop_leaked_images leaves them out (summary.json '
                      '"leaked" lists them).', len(self.found), counts, shown)


def too_small(result: clean_images.CleanedImage) -> Optional[str]:
  """Why the image is skipped as too small for the trainer's crop, or None to keep it."""
  if min(result.height, result.width) >= MIN_IMAGE_SIDE:
    return None
  return (f'too small to crop ({result.width}x{result.height} px; the trainer\'s crop needs at least {MIN_IMAGE_SIDE} '
          'px a side: a spacer or a tracking pixel?)')


def file_digest(path: str) -> Tuple[int, str]:
  """(size, SHA-256 hex) of a file that was just written.

  Hashing while writing would mean framing the TFRecords ourselves, which needs a CRC-32C implementation that is
  not among the dependencies; the shard was closed a moment ago, so this read is served from the page cache, not
  from disk: ~0.3 s per 100 MB on a loaded 2-core machine, a few percent of the time its images took to clean.
  """
  digest, size = hashlib.sha256(), 0
  with open(path, 'rb') as f:
    for chunk in iter(lambda: f.read(_HASH_CHUNK_BYTES), b''):
      digest.update(chunk)
      size += len(chunk)
  return size, digest.hexdigest()

