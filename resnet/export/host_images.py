"""The run's own images on the host, preprocessed as eval does, for the measured exports (.tflite, .onnx): training
images calibrate full-integer int8 (never the images it is then measured on) and validation images measure every
file."""
from typing import Any, Mapping, Tuple

import numpy as np
import tensorflow as tf

from official_input import dataset_info
from official_input import imagenet_input
from official_input import resnet_preprocessing

BATCH = 32


class NoImagesError(ValueError):
  """The split that should supply images supplied none (or the run has no records at all)."""


def host_images(params: Mapping[str, Any], split: str, count: int) -> Tuple[np.ndarray, np.ndarray]:
  """Up to ``count`` images [N, S, S, 3] float32 0..255 of ``split`` (eval preprocessing) and their model class
  ids (multi-label: multi-hot rows [N, K]), spread over the records the split's pass reads (the first
  ``num_eval_images`` of the validation split when it is set; converted splits are in class order, so the first
  ``count`` could cover a few classes only): every k-th record, chosen before decoding, so the others cost a read
  and nothing more."""
  if dataset_info.is_synthetic(params['data_dir']):  # params validation refuses the exports that need records
    raise NoImagesError(f'There are no {split} records to read: data_dir is unset (synthetic data).')
  source = imagenet_input.ImageNetInput.from_params(
      params, split=split, is_training=False, dtype=tf.float32, include_filename=False,
      image_size=resnet_preprocessing.image_size(params, training=False),
      crop_fraction=resnet_preprocessing.CROP_FRACTION)  # what the exported file serves, whatever tta is
  info = source.dataset_info()
  available = info.split_images(split) if info is not None else None
  if source.num_images:  # the pass reads only the first num_images records
    available = min(available, source.num_images) if available else source.num_images
  source.every_nth = max(1, int(available) // count) if available else 1
  images, labels, total = [], [], 0
  try:
    for batch_images, batch_labels in source.input_fn({'batch_size': BATCH}):
      batch_labels = batch_labels.numpy()
      keep = (batch_labels if batch_labels.ndim == 1 else batch_labels[:, 0]) >= 0  # padding: -1 (rows of -1)
      images.append(batch_images.numpy()[keep])
      labels.append(batch_labels[keep])
      total += int(keep.sum())
      if total >= count:
        break
  except (tf.errors.OpError, OSError, ValueError) as e:
    raise NoImagesError(f'Could not read the {split} images for the measured exports (.tflite, .onnx) from '
                        f'{params["data_dir"]}: {e}') from e
  if not total:
    raise NoImagesError(f'{params["data_dir"]} has no {split} images for the measured exports (.tflite, .onnx; the '
                        f'{split}-* records are missing or empty): convert the dataset with that split, or export '
                        'without tflite_quantizations, export_onnx and onnx_quantizations.')
  return np.concatenate(images)[:count].astype(np.float32), np.concatenate(labels)[:count].astype(np.int64)
