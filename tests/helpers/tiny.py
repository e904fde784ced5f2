"""Tiny ResNet runs in-process: complete params (defaults + small sizes) and an Estimator over resnet_model_fn."""
from typing import Any, Mapping, Optional

import pytest
import tensorflow as tf

from params import params_dict
from resnet.run_setup import run_params
from resnet.training import resnet_model_fn
from resnet.estimator.estimator import Estimator
from resnet.estimator.run_config import RunConfig

TINY = dict(resnet_depth=10, image_size=32, num_label_classes=2, precision='float32', train_batch_size=2,
            eval_batch_size=2, predict_batch_size=2, iterations_per_loop=1, skip_train_summaries=True)


def resnet_params(model_dir: str, **overrides: Any) -> params_dict.ParamsDict:
  """``run_params.make_params`` with tiny sizes, then ``overrides``: validated and locked, as the CLI makes them."""
  return run_params.make_params(dict(TINY, model_dir=str(model_dir), **overrides))


def resnet_estimator(params: Mapping[str, Any], strategy: Optional[tf.distribute.Strategy] = None) -> Estimator:
  return Estimator(resnet_model_fn.resnet_model_fn, RunConfig.from_params(params), params, strategy)


def two_replicas() -> tf.distribute.MirroredStrategy:
  """MirroredStrategy over the 2 logical CPU devices conftest sets up (skips without them). Reduction through one
  device, not collectives: collective instance keys are process-global, and another test's strategy in this
  process would clash with this one's."""
  devices = [d.name for d in tf.config.list_logical_devices('CPU')][:2]
  if len(devices) < 2:
    pytest.skip('needs 2 logical CPU devices (set up in conftest before TensorFlow initialises)')
  return tf.distribute.MirroredStrategy(devices, cross_device_ops=tf.distribute.ReductionToOneDevice())


def config(depth: int = 18, classes: int = 10, **options: Any):
  """A ModelConfig: ResNet-``depth`` with ``classes`` classes and any other model options."""
  from params.model_config import ModelConfig  # pylint: disable=import-outside-toplevel
  return ModelConfig(resnet_depth=depth, num_label_classes=classes, **options)


def model(depth: int = 18, classes: int = 10, dtype_policy: Any = None, image_size: Optional[int] = None,
          **options: Any):
  """The one tiny-model helper: ``resnet_model.resnet`` of ``config(depth, classes, **options)``."""
  from resnet.model import resnet_model  # pylint: disable=import-outside-toplevel
  return resnet_model.resnet(config(depth, classes, **options), dtype_policy, image_size)


def strategy(replicas: int) -> Optional[tf.distribute.Strategy]:
  """None (the default strategy, one device) for 1, two_replicas() for 2."""
  return two_replicas() if replicas == 2 else None


def varied_images(n: int, seed: int, size: int = 32):
  """[n, size, size, 3] float32 0..255 of different brightness and contrast per image, so that an untrained net
  does not give every image one class."""
  base = tf.random.stateless_uniform([n, size, size, 3], seed=[seed, 0], maxval=1.0)
  scale = tf.random.stateless_uniform([n, 1, 1, 1], seed=[seed, 1], minval=20.0, maxval=255.0)
  return (base * scale).numpy()
