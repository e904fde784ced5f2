"""Designed training data under which 2 workers x B/2 images and 1 process x B images train the same network.

Why: batch norm normalises with the statistics of each replica's own batch (the reference has no cross-replica
BN), so a 2-worker run and a single-process run of the same global batch only compute the same gradients when
every replica's batch has the statistics of the global batch. Here, at every step, worker 1 gets a PERMUTATION of
worker 0's images with DIFFERENT labels: the workers' (image, label) pairs differ, so their gradients differ and
only the all-reduce makes them agree, yet the mean and variance over each replica's batch equal those over the
global batch that the single process sees (the same images twice). Everything else -- loss scaled by the global
batch, weight decay split over replicas, optimizer, LR schedule, global step -- must then match to float rounding.
"""
from typing import Any, Callable, List, Mapping, Tuple

import numpy as np
import tensorflow as tf

from official_input import contract

NUM_WORKERS = 2


def per_worker_batches(seed: int, steps: int, global_batch: int, image_size: int,
                       num_classes: int) -> List[Tuple[np.ndarray, np.ndarray]]:
  """[(images [steps, B/2, S, S, 3] float32 0..255, labels [steps, B/2] int32)] for worker 0 and worker 1."""
  rng = np.random.default_rng(seed)
  half = global_batch // NUM_WORKERS
  images = rng.uniform(0, 255, size=(steps, half, image_size, image_size, 3)).astype(np.float32)
  perms = [rng.permutation(half) for _ in range(steps)]
  labels0 = rng.integers(0, num_classes, size=(steps, half)).astype(np.int32)
  # Worker 1's labels: shifted by 1..C-1 classes per image, so no (image, label) pair of worker 0 repeats.
  shift = rng.integers(1, num_classes, size=(steps, half)).astype(np.int32)
  images1 = np.stack([images[s][perms[s]] for s in range(steps)])
  labels1 = np.stack([(labels0[s][perms[s]] + shift[s]) % num_classes for s in range(steps)])
  return [(images, labels0), (images1, labels1)]


def make_input_fn(seed: int, steps: int, global_batch: int, image_size: int,
                  num_classes: int) -> Callable[[Mapping[str, Any]], tf.data.Dataset]:
  """An input_fn for the Runner: this worker's share under 2 workers, both shares side by side in 1 process."""
  shares = per_worker_batches(seed, steps, global_batch, image_size, num_classes)

  def input_fn(params: Mapping[str, Any]) -> tf.data.Dataset:
    context = contract.input_context(params)
    pipelines = context.num_input_pipelines if context is not None else 1
    if pipelines == NUM_WORKERS:
      images, labels = shares[context.input_pipeline_id]
    elif pipelines == 1:
      images = np.concatenate([s[0] for s in shares], axis=1)
      labels = np.concatenate([s[1] for s in shares], axis=1)
    else:
      raise ValueError(f'designed data is for 1 or {NUM_WORKERS} input pipelines, got {pipelines}')
    if images.shape[1] != params['batch_size']:
      raise ValueError(f'designed batch {images.shape[1]} != per-replica batch {params["batch_size"]}')
    return tf.data.Dataset.from_tensor_slices((images, labels)).repeat()

  return input_fn
