"""Pretrained ResNet weights of other frameworks (``--resnet_checkpoint``): which file it is, what it computes, and
its tensors under this model's TF1 names, so warm_start.py copies and checks them as it does a TF1 checkpoint.

Read here: Keras applications ResNet50/101/152 (legacy ``.h5`` as keras.applications downloads it, Keras 3
``.weights.h5`` and ``.keras``: resnet/weights/keras_weights.py) and torchvision / timm ResNet-18..152 state dicts
(safetensors, or a torch ``.pth`` when torch is importable: resnet/weights/torch_weights.py). The format comes from the
file's first bytes, never its name; anything else (a directory, a checkpoint prefix, a TF checkpoint file) is left
to the TF checkpoint reader.

The file also says how its framework computes (``Header.variant``: stride placement, stem pool padding, BN
epsilon, input normalisation, group-1 projection), which the run takes as params (run_params.variant_defaults)
before the model is built; nothing is approximated. Conv biases (Keras) fold into the next batch norm's moving mean
(``fold_into_tf1``), exactly: see there.
"""
import contextlib
import dataclasses
import os
import re
import shutil
import struct
import tempfile
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from resnet.estimator import files
from resnet.weights.foreign_layers import KERAS_ZIP, SAFETENSORS, TORCH_PICKLE, Header, Layer

HDF5_MAGIC = b'\x89HDF\r\n\x1a\n'
ZIP_MAGIC = b'PK\x03\x04'
# torch.save's legacy (pre-zip) format opens with its magic number 0x1950a86a20f9469cfc6c, pickled (protocol 2).
TORCH_LEGACY_MAGIC = b'\x80\x02\x8a\nl\xfc\x9cF\xf9 j\xa8P\x19.'
# Files of a TF checkpoint, whose raw tensor bytes could start like anything: left to the TF reader.
_TF_CHECKPOINT_FILE = re.compile(r'(\.data-\d{5}-of-\d{5}|\.index|\.meta|(^|/)checkpoint)$')
_HEAD_BYTES = 4096


@dataclasses.dataclass
class ForeignWeights:
  """A weights file read for the warm start: what warm_start.py reads from a TF checkpoint, by TF1 name."""
  header: Header
  tensors: Dict[str, np.ndarray]       # TF1 name (conv2d_3/kernel) -> value, conv biases folded
  sources: Dict[str, str]              # TF1 name -> the file's layer name
  unused: List[str]                    # tensors of the file that map to no TF1 name
  folded_biases: int = 0


# ------------------------------------------------------------------------------------------------ detection
def is_directory(path: str) -> bool:
  if files.is_url(path):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    return tf.io.gfile.isdir(path)
  return os.path.isdir(path)


def _head(path: str) -> bytes:
  if files.is_url(path):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    if tf.io.gfile.isdir(path) or not tf.io.gfile.exists(path):
      return b''
    with tf.io.gfile.GFile(path, 'rb') as f:
      return f.read(_HEAD_BYTES)
  if not os.path.isfile(path):
    return b''
  with open(path, 'rb') as f:
    return f.read(_HEAD_BYTES)


def _is_safetensors(head: bytes) -> bool:
  """An 8-byte little-endian header length, then that JSON header: ``{"__metadata__"`` or a tensor name."""
  if len(head) < 10:
    return False
  (length,) = struct.unpack('<Q', head[:8])
  return 2 <= length < (1 << 30) and head[8:9] == b'{' and head[9:10] in (b'"', b' ', b'}', b'\n')


FORMATS_READ = ('a TF checkpoint (its prefix, its directory or one of its files), Keras applications ResNet '
                '.h5 / .weights.h5 / .keras, torchvision/timm ResNet .safetensors (or .pth where torch is installed)')


def _is_file(path: str) -> bool:
  if files.is_url(path):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    return tf.io.gfile.exists(path) and not tf.io.gfile.isdir(path)
  return os.path.isfile(path)


def detect(path: str) -> Optional[str]:
  """The foreign format of the file at ``path``, or None (a TF checkpoint, a directory, no such file). A file in
  no format read here, or one too damaged to tell, is a ValueError naming what was found and what is read."""
  if _TF_CHECKPOINT_FILE.search(path):
    return None
  head = _head(path)
  try:
    file_format = _format(path, head)
  except _READ_ERRORS as e:  # h5py, zipfile: a damaged container
    raise ValueError(damaged(path, 'an HDF5 file' if head.startswith(HDF5_MAGIC) else 'a zip archive', e)) from e
  if file_format is None and _is_file(path):
    found = f'it starts with {head[:16]!r}' if head else 'it is empty'
    raise ValueError(f'{path} is a file in no weights format read here ({found}). Read: {FORMATS_READ}. Pass one '
                     'of those (a checkpoint prefix is model.ckpt-N, without .index).')
  return file_format


def damaged(path: str, file_format: str, error: Exception) -> str:
  return (f'{path} starts as {file_format} but cannot be read: {type(error).__name__}: {error}. The file is damaged '
          'or truncated (an interrupted download or copy?): download or save it again. Read: ' + FORMATS_READ + '.')


def _format(path: str, head: bytes) -> Optional[str]:
  if head.startswith(HDF5_MAGIC):
    from resnet.weights import keras_weights  # pylint: disable=g-import-not-at-top
    with local_copy(path) as local:
      return keras_weights.h5_format(local)
  if head.startswith(ZIP_MAGIC):
    import zipfile  # pylint: disable=g-import-not-at-top
    with local_copy(path) as local, zipfile.ZipFile(local) as archive:
      names = archive.namelist()
    if 'config.json' in names and 'model.weights.h5' in names:
      return KERAS_ZIP
    if any(name.endswith('data.pkl') for name in names):
      return TORCH_PICKLE
    raise ValueError(f'{path} is a zip archive, but neither a Keras .keras model (config.json + model.weights.h5) '
                     f'nor a torch .pth (*/data.pkl); it holds {names[:5]}.')
  if _is_safetensors(head):
    return SAFETENSORS
  if head.startswith(TORCH_LEGACY_MAGIC):
    return TORCH_PICKLE
  return None


@contextlib.contextmanager
def local_copy(path: str) -> Iterator[str]:
  """``path`` itself, or a temporary local copy of a ``gs://`` (or other URL) file: h5py and safetensors read
  local files."""
  if not files.is_url(path):
    yield path
    return
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  directory = tempfile.mkdtemp(prefix='foreign-weights-')
  try:
    local = os.path.join(directory, os.path.basename(path))
    tf.io.gfile.copy(path, local)
    yield local
  finally:
    shutil.rmtree(directory, ignore_errors=True)


def _reader(path: str):
  file_format = detect(path)
  if file_format is None:
    return None, None
  if file_format in (SAFETENSORS, TORCH_PICKLE):
    from resnet.weights import torch_weights  # pylint: disable=g-import-not-at-top
    return file_format, torch_weights
  from resnet.weights import keras_weights  # pylint: disable=g-import-not-at-top
  return file_format, keras_weights


def _read_errors() -> Tuple[type, ...]:
  """What the reader libraries raise on a damaged or truncated file (not storage errors: TensorFlow's OpError
  from a gs:// copy passes, as do this module's own ValueErrors)."""
  import pickle  # pylint: disable=g-import-not-at-top
  import zipfile  # pylint: disable=g-import-not-at-top
  errors = [OSError, EOFError, KeyError, struct.error, zipfile.BadZipFile, pickle.UnpicklingError]
  with contextlib.suppress(ImportError):
    from safetensors import SafetensorError  # pylint: disable=g-import-not-at-top
    errors.append(SafetensorError)
  return tuple(errors)


_READ_ERRORS = _read_errors()


@contextlib.contextmanager
def _reading(path: str, file_format: str) -> Iterator[None]:
  try:
    yield
  except _READ_ERRORS as e:
    raise ValueError(damaged(path, file_format, e)) from e


def inspect(path: str) -> Optional[Header]:
  """The file's Header, or None when ``path`` is no foreign weights file (then it is a TF checkpoint, if any)."""
  file_format, reader = _reader(path)
  if reader is None:
    return None
  with local_copy(path) as local, _reading(path, file_format):
    header = reader.inspect(local, file_format)
  header.path = path
  return header


def load(path: str) -> Optional[ForeignWeights]:
  """The file's tensors under this model's TF1 names, or None when ``path`` is no foreign weights file."""
  file_format, reader = _reader(path)
  if reader is None:
    return None
  with local_copy(path) as local, _reading(path, file_format):
    header, layers, unused = reader.load(local, file_format)
  header.path = path
  tensors, sources, folded = fold_into_tf1(layers)
  return ForeignWeights(header, tensors, sources, unused, folded)


# ------------------------------------------------------------------------------------------------ TF1 names
def _tf1_name(base: str, index: int) -> str:
  return base if index == 0 else f'{base}_{index}'


def fold_into_tf1(layers: Sequence[Layer]) -> Tuple[Dict[str, np.ndarray], Dict[str, str], int]:
  """TF1 names for ``layers`` (given in this model's creation order), with every conv bias folded into the batch
  norm that follows it.

  Why folding is exact: BN(conv(x) + b) = gamma * (conv(x) + b - mean) / sqrt(var + eps) + beta, which is
  BN(conv(x)) with moving mean ``mean - b``: the same function in inference. In training-mode batch norm the batch
  mean of conv(x) + b is batchmean(conv(x)) + b, so b cancels from the output and gets no gradient (it never
  changes: no bias parameter is lost), and the moving mean then tracks E[conv(x)] = E[conv(x) + b] - b, i.e. stays
  the folded one. So a model without conv biases computes what the source computes, before and during fine-tuning.
  Returns (tensors, sources, number of biases folded).
  """
  tensors: Dict[str, np.ndarray] = {}
  sources: Dict[str, str] = {}
  counts = {'conv': 0, 'bn': 0}
  pending: Optional[Tuple[str, np.ndarray]] = None
  folded = 0
  for layer in layers:
    if layer.kind == 'dense':
      name = 'dense'
    else:
      base = 'conv2d' if layer.kind == 'conv' else 'batch_normalization'
      name = _tf1_name(base, counts[layer.kind])
      counts[layer.kind] += 1
    values = dict(layer.tensors)
    if layer.kind == 'conv':
      if pending is not None:
        raise ValueError(f'Conv {pending[0]} has a bias and no batch norm after it to fold it into.')
      bias = values.pop('bias', None)
      pending = (layer.source, bias) if bias is not None else None
    elif layer.kind == 'bn' and pending is not None:
      if 'moving_mean' in values:
        values['moving_mean'] = values['moving_mean'] - pending[1]
        folded += 1
      pending = None
    for variable, value in values.items():
      tensors[f'{name}/{variable}'] = np.asarray(value, np.float32)
      sources[f'{name}/{variable}'] = layer.source
  if pending is not None:
    raise ValueError(f'Conv {pending[0]} has a bias and no batch norm after it to fold it into.')
  return tensors, sources, folded
