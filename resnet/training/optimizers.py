"""The reference's optimizer: TF1 ``MomentumOptimizer`` semantics as a Keras 3 optimizer.

TF1 keeps the learning rate out of the accumulator (``accum = m*accum + g``; ``var -= lr*accum``, or with
Nesterov ``var -= lr*(g + m*accum)``). Keras' SGD folds the learning rate into the velocity, which differs from
the reference whenever the learning rate changes (warm-up, decay steps), so we keep TF1's form.

``LARSMomentum`` is TF1 contrib's ``LARSOptimizer`` (the reference's large-batch option, whose import is broken
there under TF 2) with its weight decay and skip list; its learning-rate schedule lives with the others (lr_schedules).

``AdamW`` is ``torch.optim.AdamW`` (timm's and most guides' default for fine-tuning): Adam with the weight decay
decoupled from the gradient, on the variables the L2 term would cover.

``Muon`` is Keller Jordan's Muon (``MuonWithAuxAdam``) for ResNets: the conv kernels orthogonalised as 2-D
matrices, everything else AdamW. Keras 3's ``keras.optimizers.Muon`` is not used: it gives every variable that is not
2-D (every conv kernel) to AdamW, so a ResNet under it would be AdamW with Keras' epsilon.

``clip_then_decay`` is the one home of ``clip_grad_norm``: the loss gradient is clipped, the L2 term's gradient
added after (torchvision and timm clip ``.grad`` and decay in the optimizer's step).
"""
import math
import re
from typing import Callable, List, Optional, Sequence, Union

import keras
from keras import ops
import tensorflow as tf


class ReplicaSumOptimizer(keras.optimizers.Optimizer):
  """An optimizer that can take gradients already summed over replicas (``gradients_summed=True``).

  Keras sums the gradients over replicas inside ``apply_gradients``, after a LossScaleOptimizer has decided on
  each replica's own local gradients whether they are finite. When one replica overflows and another does not,
  the replicas then disagree: MirroredStrategy applies Inf to every weight, and under XLA or several workers the
  replicas take different branches around a collective and hang. A train step that sums the gradients itself, then
  applies them here, gives every replica the same gradients and so the same verdict.
  """

  def __init__(self, *args, gradients_summed: bool = False, **kwargs):
    super().__init__(*args, **kwargs)
    self.gradients_summed = gradients_summed

  def get_config(self):
    return {**super().get_config(), 'gradients_summed': self.gradients_summed}

  def _all_reduce_sum_gradients(self, grads_and_vars):  # Keras' TF-backend hook, called in apply_gradients
    if self.gradients_summed:
      return list(grads_and_vars)
    return super()._all_reduce_sum_gradients(grads_and_vars)


def sum_over_replicas(gradients):
  """The gradients summed over every replica (all workers), the same tensors on each; None entries stay None."""
  context = tf.distribute.get_replica_context()
  present = [g for g in gradients if g is not None]
  if context is None or not present:
    return list(gradients)
  summed = iter(context.all_reduce(tf.distribute.ReduceOp.SUM, present))
  return [None if g is None else next(summed) for g in gradients]


class TF1Momentum(ReplicaSumOptimizer):
  """Momentum SGD with TF1 ``MomentumOptimizer`` update rules (Nesterov optional)."""

  def __init__(self, learning_rate=0.1, momentum: float = 0.9, nesterov: bool = True,
               name: str = 'momentum', **kwargs):
    super().__init__(learning_rate=learning_rate, name=name, **kwargs)
    if not 0.0 <= momentum < 1.0:
      raise ValueError(f'momentum must be in [0, 1), got {momentum}')
    self.momentum = momentum
    self.nesterov = nesterov

  def build(self, variables):
    if self.built:
      return
    super().build(variables)
    self.accumulators = [self.add_variable_from_reference(v, 'momentum') for v in variables]

  def update_step(self, gradient, variable, learning_rate):
    learning_rate = ops.cast(learning_rate, variable.dtype)
    gradient = ops.cast(gradient, variable.dtype)
    accum = self.accumulators[self._get_variable_index(variable)]
    self.assign(accum, ops.add(ops.multiply(accum, self.momentum), gradient))
    if self.nesterov:
      step = ops.add(gradient, ops.multiply(accum, self.momentum))
    else:
      step = accum
    self.assign_sub(variable, ops.multiply(step, learning_rate))

  def get_config(self):
    config = super().get_config()
    config.update(momentum=self.momentum, nesterov=self.nesterov)
    return config


class AdamW(ReplicaSumOptimizer):
  """Adam with decoupled weight decay (Loshchilov & Hutter 2019), step for step ``torch.optim.AdamW``:

    t = updates so far + 1;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
    w -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + epsilon)  +  lr * weight_decay * w   (w before the step)

  the decay only on the variables ``decayed(path)`` names (the L2 set: kernels, and biases unless excluded; never
  normalisation), so the loss has no L2 term. Not Keras' Adam, whose epsilon is added to the uncorrected sqrt(v).
  A step a loss-scale optimizer skips does not count in t.
  """

  def __init__(self, learning_rate=1e-3, beta_1: float = 0.9, beta_2: float = 0.999, epsilon: float = 1e-8,
               weight_decay: float = 0.01, decayed: Callable[[str], bool] = lambda path: True,
               name: str = 'adamw', **kwargs):
    super().__init__(learning_rate=learning_rate, name=name, **kwargs)
    for label, beta in (('beta_1', beta_1), ('beta_2', beta_2)):
      if not 0.0 <= beta < 1.0:
        raise ValueError(f'{label} must be in [0, 1), got {beta}')
    self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon
    self.decoupled_weight_decay = weight_decay  # not Keras' weight_decay: that would decay a second time
    self.decayed = decayed

  def build(self, variables):
    if self.built:
      return
    super().build(variables)
    self.first_moments = [self.add_variable_from_reference(v, 'm') for v in variables]
    self.second_moments = [self.add_variable_from_reference(v, 'v') for v in variables]
    self._decays = [bool(self.decoupled_weight_decay) and self.decayed(_path(v)) for v in variables]

  def decays(self, variable) -> bool:
    """Whether ``variable`` (one the optimizer was built with) gets the decoupled weight decay."""
    return self._decays[self._get_variable_index(variable)]

  def update_step(self, gradient, variable, learning_rate):
    index = self._get_variable_index(variable)
    dtype = variable.dtype
    lr = ops.cast(learning_rate, dtype)
    grad = ops.cast(gradient, dtype)
    t = ops.cast(self.iterations + 1, dtype)
    m, v = self.first_moments[index], self.second_moments[index]
    self.assign(m, ops.add(ops.multiply(m, self.beta_1), ops.multiply(grad, 1.0 - self.beta_1)))
    self.assign(v, ops.add(ops.multiply(v, self.beta_2), ops.multiply(ops.square(grad), 1.0 - self.beta_2)))
    m_hat = ops.divide(m, 1.0 - ops.power(ops.cast(self.beta_1, dtype), t))
    v_hat = ops.divide(v, 1.0 - ops.power(ops.cast(self.beta_2, dtype), t))
    step = ops.divide(m_hat, ops.add(ops.sqrt(v_hat), self.epsilon))
    if self._decays[index]:
      step = ops.add(step, ops.multiply(variable, self.decoupled_weight_decay))
    self.assign_sub(variable, ops.multiply(self._scaled(step, variable, index), lr))

  def _scaled(self, step, variable, index):  # pylint: disable=unused-argument
    """The step as applied (LAMB scales it per layer)."""
    return step

  def get_config(self):
    config = super().get_config()
    config.update(beta_1=self.beta_1, beta_2=self.beta_2, epsilon=self.epsilon,
                  weight_decay=self.decoupled_weight_decay)
    return config


class Lamb(AdamW):
  """LAMB (You et al. 2020) as timm's ``Lamb`` ("ResNet strikes back" A1/A2): AdamW's step ``u`` (bias-corrected,
  decay included), scaled per variable by the trust ratio ``|w| / |u|`` (1 where either norm is 0) on the decayed
  variables; the others (normalisation, and biases with weight_decay_biases=false) take ``u`` as it is, as timm's
  default (``always_adapt=False``). timm's defaults differ from this program's: epsilon 1e-6, the global gradient
  norm clipped at 1.0 and no decay on biases; ``adam_epsilon=1e-6 clip_grad_norm=1.0 weight_decay_biases=false``
  gives timm's Lamb."""

  def __init__(self, *args, name: str = 'lamb', **kwargs):
    super().__init__(*args, name=name, **kwargs)

  def _scaled(self, step, variable, index):
    if not self._decays[index]:
      return step
    w_norm = ops.sqrt(ops.sum(ops.square(variable)))
    u_norm = ops.sqrt(ops.sum(ops.square(step)))
    safe = ops.logical_and(ops.greater(w_norm, 0.0), ops.greater(u_norm, 0.0))
    # where() evaluates both branches: keep the unselected division finite.
    trust = ops.where(safe, ops.divide(w_norm, ops.where(safe, u_norm, ops.ones_like(u_norm))),
                      ops.ones_like(w_norm))
    return ops.multiply(step, trust)


# ------------------------------------------------------------------------------------------------ Muon
# The reference's quintic Newton-Schulz coefficients (Keller Jordan's ``zeropower_via_newtonschulz5``).
NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)


def orthogonalised(matrix, steps: int):
  """The reference's ``zeropower_via_newtonschulz5`` of a 2-D tensor (in float32; the reference runs it in bfloat16):
  the wide orientation (rows <= columns), divided by its Frobenius norm + 1e-7, then ``steps`` times
  X <- a X + (b A + c A A) X with A = X X^T; the original orientation back."""
  a, b, c = NS_COEFFICIENTS
  tall = matrix.shape[0] > matrix.shape[1]
  x = ops.transpose(matrix) if tall else matrix
  x = ops.divide(x, ops.add(ops.sqrt(ops.sum(ops.square(x))), 1e-7))
  for _ in range(steps):
    gram = ops.matmul(x, ops.transpose(x))
    x = ops.add(ops.multiply(x, a), ops.matmul(ops.add(ops.multiply(gram, b), ops.multiply(ops.matmul(gram, gram), c)),
                                              x))
  return ops.transpose(x) if tall else x


def uses_muon(variable) -> bool:
  """Whether Muon (not its AdamW) updates ``variable``: the conv kernels (4-D), a ResNet's hidden matrices. The
  classifier's 2-D kernel is the output layer, which the reference leaves to AdamW with the biases and the
  normalisation parameters."""
  return len(variable.shape) == 4


def muon_scale(shape: Sequence[int]) -> float:
  """The reference's ``update *= max(1, grad.size(-2) / grad.size(-1))**0.5`` (KellerJordan/Muon muon.py,
  ``muon_update``), taken on the gradient as torch holds it, not on the matrix orthogonalised: a conv kernel's
  [out, in, kh, kw] gives sqrt(max(1, kh / kw)), so 1 for every square kernel; a matrix's [out, in] (Keras'
  [in, out]) sqrt(max(1, out / in))."""
  if len(shape) == 4:   # Keras' [kh, kw, in, out]: torch's last two dims are (kh, kw)
    rows, columns = shape[0], shape[1]
  else:                 # Keras' [in, out] is torch's [out, in]
    rows, columns = shape[-1], shape[0]
  return math.sqrt(max(1.0, rows / columns))


class Muon(AdamW):
  """Muon (Keller Jordan, 2024; ``MuonWithAuxAdam``) on the conv kernels, this module's AdamW on the rest.

  A conv kernel ``w`` (Keras' [kh, kw, in, out]) with gradient ``g``, per step:
    m = momentum m + (1 - momentum) g;  u = (1 - momentum) g + momentum m   (Nesterov; without it u = m)
    U = orthogonalised(u as the matrix [out, kh kw in], ns_steps) * muon_scale(w's shape)   (1 for square kernels)
    w <- w (1 - lr weight_decay) - lr U            (the decay where ``decayed``, as AdamW's)
  The reference views torch's [out, in, kh, kw] as [out, in kh kw]; ours orders the columns (kh, kw, in), and the
  iteration commutes with reordering columns, so the update is the same. Every other variable takes AdamW's step at
  ``learning_rate * adamw_lr_ratio`` (the reference's separate Adam learning rate, as a share of the scheduled one,
  so that warm-up and decay move both). A step a loss-scale optimizer skips does not count in AdamW's t.
  """

  def __init__(self, learning_rate=0.02, momentum: float = 0.95, nesterov: bool = True, ns_steps: int = 5,
               adamw_lr_ratio: float = 0.015, name: str = 'muon', **kwargs):
    super().__init__(learning_rate=learning_rate, name=name, **kwargs)
    if not 0.0 <= momentum < 1.0:
      raise ValueError(f'momentum must be in [0, 1), got {momentum}')
    if ns_steps < 1:
      raise ValueError(f'ns_steps must be >= 1, got {ns_steps}')
    if adamw_lr_ratio <= 0.0:
      raise ValueError(f'adamw_lr_ratio must be > 0, got {adamw_lr_ratio}')
    self.momentum, self.nesterov, self.ns_steps, self.adamw_lr_ratio = momentum, nesterov, ns_steps, adamw_lr_ratio

  def build(self, variables):
    if self.built:
      return
    ReplicaSumOptimizer.build(self, variables)
    self._muon = [uses_muon(v) for v in variables]
    # One momentum per Muon kernel, AdamW's two moments for the rest (no slot a variable does not use).
    self.momentums = [self.add_variable_from_reference(v, 'momentum') if muon else None
                      for v, muon in zip(variables, self._muon)]
    self.first_moments = [None if muon else self.add_variable_from_reference(v, 'm')
                          for v, muon in zip(variables, self._muon)]
    self.second_moments = [None if muon else self.add_variable_from_reference(v, 'v')
                           for v, muon in zip(variables, self._muon)]
    self._decays = [bool(self.decoupled_weight_decay) and self.decayed(_path(v)) for v in variables]

  def muon_updates(self, variable) -> bool:
    """Whether ``variable`` (one the optimizer was built with) takes Muon's step (else AdamW's)."""
    return self._muon[self._get_variable_index(variable)]

  def update_step(self, gradient, variable, learning_rate):
    index = self._get_variable_index(variable)
    if not self._muon[index]:
      super().update_step(gradient, variable, ops.multiply(learning_rate, self.adamw_lr_ratio))
      return
    dtype = variable.dtype
    lr = ops.cast(learning_rate, dtype)
    grad = ops.cast(gradient, dtype)
    m = self.momentums[index]
    self.assign(m, ops.add(ops.multiply(m, self.momentum), ops.multiply(grad, 1.0 - self.momentum)))
    u = ops.add(ops.multiply(grad, 1.0 - self.momentum), ops.multiply(m, self.momentum)) if self.nesterov else m
    shape = tuple(variable.shape)
    rows, columns = shape[-1], math.prod(shape[:-1])   # torch's [out, in kh kw], transposed
    update = ops.reshape(orthogonalised(ops.reshape(u, (columns, rows)), self.ns_steps), shape)
    update = ops.multiply(update, muon_scale(shape))
    if self._decays[index]:
      self.assign(variable, ops.multiply(variable, ops.subtract(1.0, ops.multiply(lr, self.decoupled_weight_decay))))
    self.assign_sub(variable, ops.multiply(update, lr))

  def get_config(self):
    config = super().get_config()
    config.update(momentum=self.momentum, nesterov=self.nesterov, ns_steps=self.ns_steps,
                  adamw_lr_ratio=self.adamw_lr_ratio)
    return config


# ------------------------------------------------------------------------------------------------ clipping
def clip_then_decay(gradients: Sequence[Optional[tf.Tensor]], decay_gradients: Sequence[Optional[tf.Tensor]],
                    clip_norm: float, loss_scale=None) -> List[Optional[tf.Tensor]]:
  """``clip_grad_norm``: the loss gradients times min(1, clip_norm / their global norm), then the L2 term's gradients
  added (torchvision's and timm's order: ``clip_grad_norm_`` on ``.grad``, the weight decay in the optimizer's step),
  so clipping never shrinks the decay. ``loss_scale``: float16's dynamic scale, which ``gradients`` carry and the
  L2 gradients do not (the norm is of the unscaled gradients; the L2 gradients are scaled to join them, and the loss
  scaler divides both back). A non-finite norm makes every gradient NaN, Keras' rule, so the loss scaler skips the
  step (and without it the NaN guard stops the run). ``clip_norm`` 0: no clipping, the decay added all the same."""
  gradients = list(gradients)
  if clip_norm:
    present = [tf.cast(g, tf.float32) for g in gradients if g is not None]
    norm = tf.linalg.global_norm(present) if present else tf.constant(0.0)
    if loss_scale is not None:
      norm = norm / tf.cast(loss_scale, tf.float32)
    factor = clip_norm * tf.minimum(1.0 / norm, 1.0 / clip_norm)
    factor += norm - norm   # NaN for an Inf or NaN norm
    gradients = [None if g is None else g * tf.cast(factor, g.dtype) for g in gradients]
  total = []
  for g, d in zip(gradients, decay_gradients):
    if d is not None and loss_scale is not None:
      d = d * tf.cast(loss_scale, d.dtype)
    total.append(d if g is None else g if d is None else g + tf.cast(d, g.dtype))
  return total


# ------------------------------------------------------------------------------------------------ LARS
# Substrings of a variable path that exempt it from LARS scaling and weight decay: batch norm (and EvoNorm)
# parameters and biases, as the reference's skip list. Keras 3 paths look like 'batch_normalization_3/gamma'.
LARS_SKIP_SUBSTRINGS = ('batch_normalization', 'evonorm', 'bias')
_BN_COMPONENT = re.compile(r'(?:^|[/_])bn(?:$|[/_\d])')  # 'bn/gamma', 'conv1_bn/beta', 'bn2/moving_mean'



def default_lars_exclusion(path: str) -> bool:
  """True for variables that get neither LARS scaling nor weight decay: batch norm / EvoNorm and biases."""
  path = path.lower()
  return any(s in path for s in LARS_SKIP_SUBSTRINGS) or bool(_BN_COMPONENT.search(path))


def _exclusion_predicate(exclude) -> Callable[[str], bool]:
  if exclude is None:
    return default_lars_exclusion
  if callable(exclude):
    return exclude
  if isinstance(exclude, str) or not all(isinstance(s, str) for s in exclude):
    raise ValueError(f'exclude_from_layer_adaptation must be a callable on variable paths or a list of '
                     f'substrings such as {list(LARS_SKIP_SUBSTRINGS)}, got {exclude!r}.')
  substrings = tuple(exclude)
  return lambda path: any(s in path for s in substrings)


class LARSMomentum(ReplicaSumOptimizer):
  """Momentum SGD with layer-wise adaptive rate scaling (You, Gitman, Ginsburg 2017), as TF1 contrib's LARS.

  Per variable ``w`` with gradient ``g``, unless ``exclude_from_layer_adaptation(w.path)``:
    trust = eeta * |w| / (|g| + weight_decay * |w| + epsilon)   (1 where |w| or |g| is 0)
    g <- g + weight_decay * w;  lr_w = lr * trust
  excluded variables (batch norm, biases) keep ``lr_w = lr`` and get no weight decay. Then, with the learning rate
  inside the accumulator (TF1 ``apply_momentum`` with the scaled gradient):
    accum = momentum * accum + lr_w * g;  w -= accum            (Nesterov: w -= lr_w * g + momentum * accum)

  Weight decay lives here, so a LARS run's loss must have no L2 term. It is stored as ``lars_weight_decay``, not
  Keras' ``weight_decay`` (Keras would apply a second, decoupled decay). Build the slots eagerly
  (``optimizer.build(variables)``) before a distributed ``tf.function`` runs ``apply_gradients``.
  """

  def __init__(self, learning_rate=0.1, momentum: float = 0.9, weight_decay: float = 1e-4, eeta: float = 0.001,
               epsilon: float = 0.0, nesterov: bool = False,
               exclude_from_layer_adaptation: Union[Callable[[str], bool], Sequence[str], None] = None,
               name: str = 'lars', **kwargs):
    super().__init__(learning_rate=learning_rate, name=name, **kwargs)
    if not 0.0 <= momentum < 1.0:
      raise ValueError(f'momentum must be in [0, 1), got {momentum}')
    if weight_decay < 0.0:
      raise ValueError(f'weight_decay must be >= 0, got {weight_decay}')
    if eeta <= 0.0:
      raise ValueError(f'eeta (the LARS coefficient) must be > 0, got {eeta}; the usual value is 0.001.')
    if epsilon < 0.0:
      raise ValueError(f'epsilon must be >= 0, got {epsilon}')
    self.momentum = momentum
    self.lars_weight_decay = weight_decay
    self.eeta = eeta
    self.epsilon = epsilon
    self.nesterov = nesterov
    self._exclude_spec = exclude_from_layer_adaptation
    self.exclude_from_layer_adaptation = _exclusion_predicate(exclude_from_layer_adaptation)

  def build(self, variables):
    if self.built:
      return
    super().build(variables)
    self.accumulators = [self.add_variable_from_reference(v, 'momentum') for v in variables]
    # Decided once per variable from its path (a Python bool: no per-step string work, no graph branch).
    self._adapted = [not self.exclude_from_layer_adaptation(_path(v)) for v in variables]

  def adapts(self, variable) -> bool:
    """Whether ``variable`` (one the optimizer was built with) gets LARS scaling and weight decay."""
    return self._adapted[self._get_variable_index(variable)]

  def update_step(self, gradient, variable, learning_rate):
    index = self._get_variable_index(variable)
    dtype = variable.dtype
    lr = ops.cast(learning_rate, dtype)
    grad = ops.cast(gradient, dtype)
    if self._adapted[index]:
      w_norm = ops.sqrt(ops.sum(ops.square(variable)))
      g_norm = ops.sqrt(ops.sum(ops.square(grad)))
      ratio = self.eeta * w_norm / (g_norm + self.lars_weight_decay * w_norm + self.epsilon)
      # where() evaluates both branches: keep the unselected division finite (0/0 when both norms are 0).
      safe = ops.logical_and(ops.greater(w_norm, 0.0), ops.greater(g_norm, 0.0))
      trust = ops.where(safe, ratio, ops.ones_like(ratio))
      lr = lr * trust
      grad = grad + self.lars_weight_decay * variable
    accum = self.accumulators[index]
    self.assign(accum, ops.add(ops.multiply(accum, self.momentum), ops.multiply(grad, lr)))
    if self.nesterov:
      self.assign_sub(variable, ops.add(ops.multiply(grad, lr), ops.multiply(accum, self.momentum)))
    else:
      self.assign_sub(variable, accum)

  def get_config(self):
    config = super().get_config()
    config.update(momentum=self.momentum, weight_decay=self.lars_weight_decay, eeta=self.eeta,
                  epsilon=self.epsilon, nesterov=self.nesterov)
    if self._exclude_spec is not None and not callable(self._exclude_spec):
      config['exclude_from_layer_adaptation'] = list(self._exclude_spec)
    return config


def _path(variable) -> str:
  return getattr(variable, 'path', None) or variable.name
