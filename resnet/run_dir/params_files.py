"""Params files: the program's reading and writing of them, so that ``params/`` stays pure (it reads no files).

Config files (``--config_file``: a path, or a name in ``params/configs/``), override strings that name a YAML file,
and a run's ``model_dir/params.yaml``: local paths, or ``gs://`` and other URLs through tf.io.gfile. Writing is
atomic, so a killed run never leaves half a params.yaml. TensorFlow is imported only for URLs and writing: flags
and params come before it (its import takes seconds).
"""
import os
from typing import Optional

from absl import logging

from params import params_dict
from params import params_yaml
from params import resnet_config
from resnet.estimator import files


def read_text(path: str) -> Optional[str]:
  """The file's text, or None when there is no such file (a ``override_syntax.ReadFile``)."""
  if files.is_url(path):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    if not tf.io.gfile.exists(path) or tf.io.gfile.isdir(path):
      return None
    with tf.io.gfile.GFile(path, 'r') as f:
      return f.read()
  if not os.path.isfile(path):
    return None
  with open(path, 'rb') as f:
    data = f.read()
  try:
    return data.decode('utf-8')
  except UnicodeDecodeError:
    raise ValueError(f'{path} is not a text file ({len(data)} bytes of binary data): a params file is YAML '
                     'text.') from None


def read_params(path: str) -> params_dict.ParamsDict:
  """A YAML params file (e.g. ``model_dir/params.yaml``) as an unlocked ParamsDict without a validator."""
  text = read_text(path)
  if text is None:
    raise FileNotFoundError(f'No params file at {path}.')
  return params_dict.ParamsDict(params_yaml.yaml_mapping(text, f'file {path!r}'))


def save_params(params, path: str) -> None:
  """Writes ``params`` as YAML atomically (temp file, then rename)."""
  files.atomic_write(path, params_yaml.params_to_yaml_string(params))
  logging.info('Wrote params to %s', path)


def resolve_config_file(name: str) -> str:
  """``name`` itself when it is a URL or an existing file, else the matching file in params/configs/."""
  if files.is_url(name) or os.path.isfile(name):
    return name
  directory = resnet_config.CONFIG_DIR
  for candidate in (os.path.join(directory, name), os.path.join(directory, name + '.yaml')):
    if os.path.isfile(candidate):
      return candidate
  available = ', '.join(sorted(f[:-5] for f in os.listdir(directory) if f.endswith('.yaml')))
  raise ValueError(f'{name!r} is no file, nor a config in {directory} (available there: {available}).')
