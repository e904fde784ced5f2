"""The layers ResNet is built from, and the constants they share with the builder and the analytic plan.

Why custom layers: input normalisation runs in float32 on NHWC pixels whatever the layout and precision
(``NormalizeImages``); batch norm runs TF's fused kernel with Keras' semantics (``FusedBatchNormalization``: Keras
3's unfused BN was ~1/3 of a CPU training step); DropBlock, EvoNorm, a one-pixel-border max pool for foreign
weights (``BorderPadding``); and dropout / stochastic depth whose noise differs per replica (``_ReplicaMask``).
DropBlock's keep probability follows a schedule (``scheduled_dropblock_keep_prob``) that the training step assigns
to one model variable; group g then uses 1 - (1 - kp) / 4^(4 - g).
"""
import keras
import tensorflow as tf

from params.architectures import INPUT_NORMALIZATIONS

MEAN_RGB = (0.485 * 255, 0.456 * 255, 0.406 * 255)
STDDEV_RGB = (0.229 * 255, 0.224 * 255, 0.225 * 255)
CAFFE_MEAN_BGR = (103.939, 116.779, 123.68)  # Keras applications' 'caffe' preprocessing, in BGR order

GROUP_FILTERS = (64, 128, 256, 512)
# Each layer's stage (0 stem, 1-4 block groups, 5 head), stamped by resnet(): fine_tuning.py's layer decay.
STAGE_ATTRIBUTE = '_resnet_stage'
GROUP_STRIDES = (1, 2, 2, 2)
STEM_FILTERS = 64
RESNETD_STEM_FILTERS = (32, 32, 64)  # use_resnetd_stem: three 3x3 convs, the first strided
DROPBLOCK_VARIABLE_NAME = 'dropblock_keep_prob'
EVONORM_GROUPS = 32  # EvoNorm-S0 groups, reduced until they divide the channel count


def group_keep_prob(keep_prob, group: int):
  """Per-group DropBlock keep prob, as the reference scales it: later groups drop more, group 4 uses kp itself."""
  if group not in (1, 2, 3, 4):
    raise ValueError(f'DropBlock group must be in 1..4, got {group!r}.')
  return 1.0 - (1.0 - keep_prob) / 4.0 ** (4 - group)


def drop_connect_rate_for_group(drop_connect_rate: float | None, group: int) -> float:
  """Stochastic-depth rate of every block of group g (1..4): ``rate * (g + 1) / 5``, the reference's rule.

  The rate grows linearly with the group's position among the five stages (stem, groups 1-4) and is constant
  within a group: group 1 drops with 0.4 x rate, group 4 with the full rate. None or 0 gives 0 (off).
  """
  if group not in (1, 2, 3, 4):
    raise ValueError(f'Stochastic depth group must be in 1..4, got {group!r}.')
  return float(drop_connect_rate or 0.0) * (group + 1) / 5.0


def se_filters(channels: int, se_ratio: float) -> int:
  """Width of the squeeze-excitation bottleneck: ``max(1, int(channels * se_ratio))`` of the block's output."""
  return max(1, int(channels * se_ratio))


def scheduled_dropblock_keep_prob(step, train_steps, final_keep_prob: float) -> tf.Tensor:
  """Base keep prob kp(t) = 1 - (step / train_steps) * (1 - final): no drop at step 0, ``final`` at the end.

  The training loop assigns this to ``model.dropblock_keep_prob`` every step.
  """
  progress = tf.cast(step, tf.float32) / tf.cast(tf.maximum(train_steps, 1), tf.float32)
  return 1.0 - progress * (1.0 - final_keep_prob)


# --------------------------------------------------------------------------------------------------------------
# Layers without TF1 variables.


@keras.saving.register_keras_serializable(package='resnet')
class NormalizeImages(keras.layers.Layer):
  """NHWC 0..255 RGB pixels -> what the first conv's weights were trained on, in float32 (bf16 cannot hold 0..255
  exactly enough).

  'imagenet': (pixels - MEAN_RGB) / STDDEV_RGB (the reference; torchvision and timm normalise the same way).
  'caffe_bgr': RGB -> BGR, minus CAFFE_MEAN_BGR, unscaled: Keras applications' ResNet ``preprocess_input``. It is
  part of the model, so the exported SavedModel takes the same 0..255 RGB images whatever the weights expect.
  """

  def __init__(self, mode: str = 'imagenet', **kwargs):
    kwargs['dtype'] = 'float32'
    super().__init__(**kwargs)
    if mode not in INPUT_NORMALIZATIONS:
      raise ValueError(f'input_normalization must be one of {list(INPUT_NORMALIZATIONS)}, got {mode!r}.')
    self.mode = mode

  def call(self, images):
    images = tf.cast(images, tf.float32)
    if self.mode == 'caffe_bgr':
      return tf.reverse(images, axis=[-1]) - tf.constant(CAFFE_MEAN_BGR, tf.float32)
    return (images - tf.constant(MEAN_RGB, tf.float32)) / tf.constant(STDDEV_RGB, tf.float32)

  def get_config(self):
    return {**super().get_config(), 'mode': self.mode}


@keras.saving.register_keras_serializable(package='resnet')
class BorderPadding(keras.layers.Layer):
  """Pads the spatial axes by one pixel on every side with -inf, for the symmetric stem max pool.

  Keras applications, torchvision and timm pool the stem over a one-pixel border on both sides; the reference's
  SAME pool pads only the end of an even-sized map, which shifts every pooling window by one pixel against their
  weights. -inf never wins a max, and every 3x3 window holds real pixels (Keras pads zeros after a ReLU: the same).
  """

  def __init__(self, data_format: str, **kwargs):
    super().__init__(**kwargs)
    self.data_format = data_format

  def call(self, x):
    border = ([[0, 0], [1, 1], [1, 1], [0, 0]] if self.data_format == 'channels_last'
              else [[0, 0], [0, 0], [1, 1], [1, 1]])
    return tf.pad(x, border, constant_values=float('-inf'))

  def compute_output_shape(self, input_shape):
    axes = (1, 2) if self.data_format == 'channels_last' else (2, 3)
    return tuple(d + 2 if i in axes and d is not None else d for i, d in enumerate(input_shape))

  def get_config(self):
    return {**super().get_config(), 'data_format': self.data_format}


class DropBlock(keras.layers.Layer):
  """DropBlock (Ghiasi et al. 2018) as in the reference; training only, identity at inference.

  ``keep_prob`` is the model's shared base keep-prob variable; this layer derives its group's keep prob from it at
  call time so a schedule assigned by the training loop takes effect without retracing. The spatial size must be
  static and square when training (the reference's constraint too). Its noise comes from a SeedGenerator
  (``replica_noise``), as stochastic depth's: a state checkpoints keep, so a resumed run drops the blocks the
  uninterrupted run drops (a stateful random op's state lives in its kernel and starts over in a new process).
  """

  def __init__(self, keep_prob: keras.Variable, group: int, block_size: int, data_format: str, **kwargs):
    super().__init__(**kwargs)
    group_keep_prob(1.0, group)  # validates the group
    self.seed_generator = keras.random.SeedGenerator(None, name=f'{self.name}_seed_generator')
    self.keep_prob = keep_prob
    self.group = group
    self.block_size = int(block_size)
    self.data_format = data_format

  def call(self, x, training=None):
    if not training:
      return x
    spatial_axes = (1, 2) if self.data_format == 'channels_last' else (2, 3)
    height, width = (x.shape[a] for a in spatial_axes)
    if width is None or height is None:
      raise ValueError(f'{self.name}: DropBlock needs a static spatial size when training, got shape {x.shape}; '
                       'trace the training step with a fixed image size.')
    if width != height:
      raise ValueError(f'{self.name}: DropBlock needs a square feature map, got {height}x{width}.')
    size = min(self.block_size, width)
    keep_prob = group_keep_prob(tf.cast(self.keep_prob, tf.float32), self.group)
    seed_drop_rate = (1.0 - keep_prob) * width ** 2 / size ** 2 / (width - size + 1) ** 2
    # Block centres only where the whole block fits in the map.
    i, j = tf.meshgrid(tf.range(width), tf.range(width))
    lo, hi = size // 2, width - (size - 1) // 2
    valid = (i >= lo) & (i < hi) & (j >= lo) & (j < hi)
    valid = tf.reshape(tf.cast(valid, tf.float32), [1, width, width, 1] if self.data_format == 'channels_last'
                       else [1, 1, width, width])
    noise = replica_noise(tf.shape(x), self.seed_generator)
    keep = tf.cast((1.0 - valid + (1.0 - seed_drop_rate) + noise) >= 1.0, tf.float32)
    if size == width:
      keep = tf.reduce_min(keep, axis=spatial_axes, keepdims=True)
    else:
      # Min-pool (as -max_pool(-x)) grows each dropped seed to a size x size block.
      keep = -tf.nn.max_pool2d(-keep, size, 1, 'SAME',
                               data_format='NHWC' if self.data_format == 'channels_last' else 'NCHW')
    kept_fraction = tf.reduce_mean(keep)
    return x / tf.cast(kept_fraction, x.dtype) * tf.cast(keep, x.dtype)

  def compute_output_shape(self, input_shape):
    return input_shape


def conv1x1_with_matmul_filter_grad(x: tf.Tensor, kernel: tf.Tensor, stride: int, padding: str) -> tf.Tensor:
  """A 1x1 NHWC convolution whose kernel gradient is one matmul, ``x^T dy`` over every output position.

  The forward convolution and the input gradient are the ops TensorFlow's own gradient runs (Conv2D,
  Conv2DBackpropInput with the same attributes); only dW is computed another way, the same sum in another order.
  A strided 1x1 conv sees every stride-th pixel only, so dW takes those (``x[:, ::s, ::s]``) against dy.
  """
  strides = [1, stride, stride, 1]

  @tf.custom_gradient
  def conv(x, kernel):
    def grad(dy):
      dx = tf.raw_ops.Conv2DBackpropInput(input_sizes=tf.shape(x), filter=kernel, out_backprop=dy, strides=strides,
                                          padding=padding)
      seen = x[:, ::stride, ::stride, :] if stride > 1 else x
      channels_in, channels_out = kernel.shape[2], kernel.shape[3]
      dw = tf.matmul(tf.reshape(seen, [-1, channels_in]), tf.reshape(dy, [-1, channels_out]), transpose_a=True)
      return dx, tf.reshape(dw, tf.shape(kernel))
    return tf.nn.conv2d(x, kernel, strides, padding), grad

  return conv(x, kernel)


@keras.saving.register_keras_serializable(package='resnet')
class Conv2D(keras.layers.Conv2D):
  """keras.layers.Conv2D (same variables, names, forward and input gradient) whose 1x1 NHWC kernels may take their
  weight gradient from a matmul (``matmul_filter_grad``; ``conv1x1_with_matmul_filter_grad``).

  Why: oneDNN's backward-weights convolution in bfloat16 runs far below its forward one on CPUs with AMX (2
  Sapphire Rapids cores, ResNet-50 at 224, batch 32: the 1x1 convs' weight gradients took 0.47 s of a step as
  convolutions, 0.22 s as matmuls), while in float32 the matmuls were slower (0.63 s vs 0.56 s). Two thirds of
  ResNet-50's convs are 1x1. Training only: inference and exports trace Keras' own convolution (no custom gradient
  in a SavedModel).
  """

  def __init__(self, *args, matmul_filter_grad: bool = False, **kwargs):
    super().__init__(*args, **kwargs)
    self.matmul_filter_grad = bool(matmul_filter_grad)

  def _matmul_applies(self) -> bool:
    return (self.matmul_filter_grad and tuple(self.kernel_size) == (1, 1) and self.data_format == 'channels_last'
            and tuple(self.dilation_rate) == (1, 1) and self.groups == 1 and self.strides[0] == self.strides[1])

  def call(self, inputs, training=None):
    if not (training and self._matmul_applies()):
      return super().call(inputs)
    outputs = conv1x1_with_matmul_filter_grad(inputs, tf.cast(self.kernel, inputs.dtype), self.strides[0],
                                              self.padding.upper())
    if self.use_bias:
      outputs = outputs + tf.cast(self.bias, outputs.dtype)  # channels_last: the bias broadcasts over the last axis
    return self.activation(outputs) if self.activation is not None else outputs

  def get_config(self):
    return {**super().get_config(), 'matmul_filter_grad': self.matmul_filter_grad}


@tf.function(jit_compile=True, reduce_retracing=True)  # one trace per dtype, not per block shape
def _xla_add_relu(x, shortcut):
  return tf.nn.relu(x + shortcut)


@keras.saving.register_keras_serializable(package='resnet')
class ResidualAddReLU(keras.layers.Layer):
  """A residual block's end, ``relu(x + shortcut)``, as one XLA-compiled function while training. It takes the
  place of the block's Add layer, and an Identity that of its ReLU, so that the model keeps its layer positions
  (Keras 3 checkpoints key layers by position: ``model/_operations/<j>``).

  Why: TensorFlow runs Add and ReLU as two Eigen kernels, and Eigen's bfloat16 ReLU is not vectorised: on 2
  Sapphire Rapids cores, relu(a + b) on a [32, 56, 56, 256] bfloat16 tensor took 48 ms as the two ops and 23 ms as
  one XLA loop (forward and backward together: 58 vs 41 ms). Only this small function is compiled (XLA's batch norm
  and convolutions are far slower on CPUs than oneDNN's); inference and exports run the plain ops, with the same
  results (a sum and a max are exact in either form).
  """

  def call(self, inputs, training=None):
    x, shortcut = inputs
    if training:
      return _xla_add_relu(x, shortcut)
    return tf.nn.relu(x + shortcut)

  def compute_output_shape(self, input_shape):
    return input_shape[0]


@keras.saving.register_keras_serializable(package='resnet')
class FusedBatchNormalization(keras.layers.BatchNormalization):
  """keras.layers.BatchNormalization computed by TF's fused kernel: same variables, names, results and checkpoints.

  Why: Keras 3's BN (TF backend) is unfused -- upcast to float32, ``tf.nn.moments``, ``tf.nn.batch_normalization``,
  downcast -- a dozen ops per layer forward and backward, ~1/3 of a ResNet-50 training step on CPU.
  ``FusedBatchNormV3`` (oneDNN on CPU, cuDNN on GPU, XLA on TPU) takes the bf16/fp16 activations with float32
  statistics directly; measured on 2 Zen 5 cores, ResNet-50 training at 224 runs 1.6-1.7x faster (fp32 and bf16).
  The kernel's batch variance carries Bessel's correction n/(n-1); it is undone so the moving variance stays Keras'
  (biased) one. Masks, renorm, synchronized BN and non-4D inputs fall back to Keras' implementation.
  """

  # Set by fine_tuning.freeze_batch_norm_statistics: inference mode in training too (gamma and beta still learn).
  frozen_statistics = False

  def call(self, inputs, training=None, mask=None):
    if self.frozen_statistics:
      training = False
    rank = len(inputs.shape)
    axis = (self.axis if isinstance(self.axis, int) else self.axis[0]) % max(rank, 1)
    if (mask is not None or self.renorm or self.synchronized or rank != 4 or axis not in (1, 3)
        or self.compute_dtype == 'float64'):
      return super().call(inputs, training=training, mask=mask)
    x = tf.cast(inputs, self.compute_dtype)
    channels = x.shape[axis]
    gamma = tf.cast(self.gamma, tf.float32) if self.scale else tf.ones([channels], tf.float32)
    beta = tf.cast(self.beta, tf.float32) if self.center else tf.zeros([channels], tf.float32)
    data_format = 'NHWC' if axis == 3 else 'NCHW'
    if training and self.trainable:
      empty = tf.constant([], tf.float32)
      y, mean, variance, _, _, _ = tf.raw_ops.FusedBatchNormV3(
          x=x, scale=gamma, offset=beta, mean=empty, variance=empty, epsilon=self.epsilon,
          exponential_avg_factor=1.0, data_format=data_format, is_training=True)
      count = tf.cast(tf.size(x) // channels, tf.float32)
      variance = variance * (count - 1.0) / tf.maximum(count, 1.0)  # unbiased -> biased, as Keras
      decay = self.momentum
      self.moving_mean.assign(self.moving_mean * decay + mean * (1.0 - decay))
      self.moving_variance.assign(self.moving_variance * decay + variance * (1.0 - decay))
      return y
    y, _, _, _, _, _ = tf.raw_ops.FusedBatchNormV3(
        x=x, scale=gamma, offset=beta, mean=tf.cast(self.moving_mean, tf.float32),
        variance=tf.cast(self.moving_variance, tf.float32), epsilon=self.epsilon, data_format=data_format,
        is_training=False)
    return y


@keras.saving.register_keras_serializable(package='resnet')
class EvoNorm(keras.layers.Layer):
  """EvoNorm-B0 / -S0 (Liu et al. 2020), a normalisation-activation layer replacing BN-ReLU in ResNet v2.

  With ``nonlinearity``: S0 = x * sigmoid(v * x) / group_std(x), B0 = x / max(batch_std(x), v * x +
  instance_std(x)); then ``* gamma + beta`` (only the affine part without ``nonlinearity``). Standard deviations
  are sqrt(biased variance + epsilon); S0 uses ``num_groups`` groups, reduced until they divide the channels; B0
  keeps a ``moving_variance`` (updated with ``momentum`` when training, used at inference).

  Variables are named ``beta``, ``gamma``, ``v`` (, ``moving_variance``) with the reference's shape [1, 1, 1, C]
  whatever the data format (so checkpoints do not depend on the layout), float32 and never autocast: statistics
  and the normalisation run in float32, as Keras' batch norm does; input and output are in the compute dtype.
  """

  def __init__(self, kind: str, nonlinearity: bool = True, data_format: str = 'channels_last',
               momentum: float = 0.9, epsilon: float = 1e-5, num_groups: int = EVONORM_GROUPS,
               zero_gamma: bool = False, **kwargs):
    super().__init__(**kwargs)
    if kind not in ('b0', 's0'):
      raise ValueError(f"EvoNorm kind must be 'b0' or 's0', got {kind!r}.")
    if data_format not in ('channels_last', 'channels_first'):
      raise ValueError(f"data_format must be 'channels_last' or 'channels_first', got {data_format!r}.")
    self.kind = kind
    self.nonlinearity = bool(nonlinearity)
    self.data_format = data_format
    self.momentum = float(momentum)
    self.epsilon = float(epsilon)
    self.num_groups = int(num_groups)
    self.zero_gamma = bool(zero_gamma)

  def build(self, input_shape):
    if len(input_shape) != 4:
      raise ValueError(f'{self.name}: EvoNorm needs 4D inputs, got shape {input_shape}.')
    channels = input_shape[-1 if self.data_format == 'channels_last' else 1]
    if channels is None:
      raise ValueError(f'{self.name}: EvoNorm needs a static channel count, got shape {input_shape}.')
    self.channels = int(channels)
    shape = (1, 1, 1, self.channels)
    self.beta = self.add_weight(shape=shape, initializer='zeros', name='beta', autocast=False)
    self.gamma = self.add_weight(shape=shape, initializer='zeros' if self.zero_gamma else 'ones', name='gamma',
                                 autocast=False)
    if self.nonlinearity:
      self.v = self.add_weight(shape=shape, initializer='ones', name='v', autocast=False)
      if self.kind == 'b0':
        self.moving_variance = self.add_weight(shape=shape, initializer='ones', name='moving_variance',
                                               trainable=False, autocast=False)
    self.groups = self.num_groups
    while self.groups > 1 and self.channels % self.groups:
      self.groups -= 1

  def _param(self, variable) -> tf.Tensor:
    """A [1,1,1,C] variable as float32, broadcastable against the layer's layout."""
    value = tf.cast(variable, tf.float32)
    return value if self.data_format == 'channels_last' else tf.reshape(value, (1, self.channels, 1, 1))

  def _group_std(self, x):
    shape = tf.shape(x)
    if self.data_format == 'channels_last':
      grouped = tf.reshape(x, [shape[0], shape[1], shape[2], self.groups, self.channels // self.groups])
      axes = (1, 2, 4)
    else:
      grouped = tf.reshape(x, [shape[0], self.groups, self.channels // self.groups, shape[2], shape[3]])
      axes = (2, 3, 4)
    _, variance = tf.nn.moments(grouped, axes, keepdims=True)
    std = tf.broadcast_to(tf.sqrt(variance + self.epsilon), tf.shape(grouped))
    return tf.reshape(std, shape)

  def call(self, inputs, training=None):
    x = tf.cast(inputs, tf.float32)
    spatial = (1, 2) if self.data_format == 'channels_last' else (2, 3)
    if self.nonlinearity:
      v = self._param(self.v)
      if self.kind == 's0':
        x = x * tf.sigmoid(v * x) / self._group_std(x)
      else:
        if training:
          _, variance = tf.nn.moments(x, (0,) + spatial, keepdims=True)
          if self.data_format == 'channels_first':
            variance = tf.reshape(variance, (1, 1, 1, self.channels))
          self.moving_variance.assign(self.moving_variance * self.momentum + variance * (1.0 - self.momentum))
          variance = self._param(variance)
        else:
          variance = self._param(self.moving_variance)
        _, instance_variance = tf.nn.moments(x, spatial, keepdims=True)
        batch_std = tf.sqrt(variance + self.epsilon)
        instance_std = tf.sqrt(instance_variance + self.epsilon)
        x = x / tf.maximum(batch_std, v * x + instance_std)
    return tf.cast(x * self._param(self.gamma) + self._param(self.beta), self.compute_dtype)

  def compute_output_shape(self, input_shape):
    return input_shape

  def get_config(self):
    return {**super().get_config(), 'kind': self.kind, 'nonlinearity': self.nonlinearity,
            'data_format': self.data_format, 'momentum': self.momentum, 'epsilon': self.epsilon,
            'num_groups': self.num_groups, 'zero_gamma': self.zero_gamma}


def replica_noise(shape, seed_generator: keras.random.SeedGenerator) -> tf.Tensor:
  """U[0, 1) float32 noise that differs between replicas and workers.

  A Keras SeedGenerator's state is one mirrored variable: every replica would draw the same seed, hence the same
  mask, leaving fewer independent masks than the global batch suggests. The draw folds the seed with the replica's
  global id (``replica_id_in_sync_group``: across workers too), so it stays reproducible with a fixed seed.
  """
  seed = tf.cast(seed_generator.next(), tf.int64)
  context = tf.distribute.get_replica_context()
  replica = context.replica_id_in_sync_group if context is not None else 0
  seed = tf.random.experimental.stateless_fold_in(seed, tf.cast(replica, tf.int64))
  return tf.random.stateless_uniform(shape, seed=seed, dtype=tf.float32)


class _ReplicaMask(keras.layers.Layer):
  """A training-only random mask at ``rate``, drawn per replica (``replica_noise``) from the layer's
  ``seed_generator`` (the attribute Keras' Dropout has, so checkpoints keep their layout)."""

  WHAT = 'mask'

  def __init__(self, rate: float, seed: int | None = None, **kwargs):
    super().__init__(**kwargs)
    if not 0.0 <= float(rate) < 1.0:
      raise ValueError(f'{self.name}: the {self.WHAT} rate must be in [0, 1), got {rate!r}.')
    self.rate = float(rate)
    self.seed = seed
    self.seed_generator = keras.random.SeedGenerator(seed, name=f'{self.name}_seed_generator')

  def call(self, inputs, training=None):
    if not training or self.rate == 0.0:
      return inputs
    return self.masked(inputs)

  def masked(self, inputs):
    raise NotImplementedError

  def compute_output_shape(self, input_shape):
    return input_shape

  def get_config(self):
    return {**super().get_config(), 'rate': self.rate, 'seed': self.seed}


@keras.saving.register_keras_serializable(package='resnet')
class Dropout(_ReplicaMask):
  """Inverted dropout with a mask of its own on each replica; identity at inference (Keras' Dropout draws the same
  mask on every replica)."""

  WHAT = 'dropout'

  def masked(self, inputs):
    keep = tf.cast(replica_noise(tf.shape(inputs), self.seed_generator) >= self.rate, inputs.dtype)
    return inputs * keep / tf.cast(1.0 - self.rate, inputs.dtype)


@keras.saving.register_keras_serializable(package='resnet')
class StochasticDepth(_ReplicaMask):
  """Drop-connect on a residual branch (Huang et al. 2016): training only, identity at inference.

  Each example's branch is kept with probability 1 - rate and then scaled by 1 / (1 - rate):
  ``x / keep * floor(keep + U[0, 1))``. The uniform draw is float32 (a bfloat16 draw would round the keep
  probability) and comes from a Keras SeedGenerator folded with the replica id (``replica_noise``), so
  ``keras.utils.set_random_seed`` before building makes it reproducible, each replica draws its own, and it
  compiles under XLA.
  """

  WHAT = 'stochastic depth'

  def masked(self, inputs):
    keep = 1.0 - self.rate
    shape = [tf.shape(inputs)[0]] + [1] * (len(inputs.shape) - 1)
    scale = tf.floor(keep + replica_noise(shape, self.seed_generator)) / keep
    return inputs * tf.cast(scale, inputs.dtype)
