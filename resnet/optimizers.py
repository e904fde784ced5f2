"""The reference's optimizer: TF1 ``MomentumOptimizer`` semantics as a Keras 3 optimizer.

TF1 keeps the learning rate out of the accumulator (``accum = m*accum + g``; ``var -= lr*accum``, or with
Nesterov ``var -= lr*(g + m*accum)``). Keras' SGD folds the learning rate into the velocity, which differs from
the reference whenever the learning rate changes (warm-up, decay steps), so we keep TF1's form.
"""
import keras
from keras import ops


class TF1Momentum(keras.optimizers.Optimizer):
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
