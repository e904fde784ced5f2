"""Loop, checkpoint and summary settings: TPUEstimator's RunConfig, trimmed to what TF2 needs."""
import dataclasses
from typing import Any, Mapping, Optional

# The tf.distribute strategies a run can ask for (distribution.get_strategy): here, in a module without TensorFlow,
# so that params can offer them as choices before TensorFlow loads.
STRATEGIES = ('auto', 'one_device', 'mirrored', 'multi_worker_mirrored', 'tpu')

@dataclasses.dataclass
class RunConfig:
  """Field names are params keys, so ``from_params`` is the one mapping from a run's params."""
  model_dir: str
  train_batch_size: int = 32                     # global
  eval_batch_size: int = 32                      # global
  predict_batch_size: int = 32                   # global
  iterations_per_loop: int = 100
  save_checkpoints_steps: Optional[int] = None   # None = max(5000, iterations_per_loop)
  keep_checkpoint_max: int = 5
  skip_train_summaries: bool = False             # True: no per-loop TensorBoard scalars
  jit_compile: bool = False                      # XLA on each replica step (never on the loop or iterator)

  def __post_init__(self):
    if self.save_checkpoints_steps is None:
      self.save_checkpoints_steps = max(5000, self.iterations_per_loop)
    for name in ('train_batch_size', 'eval_batch_size', 'predict_batch_size', 'iterations_per_loop',
                 'save_checkpoints_steps', 'keep_checkpoint_max'):
      if getattr(self, name) <= 0:
        raise ValueError(f'{name} must be > 0, got {getattr(self, name)}')

  @classmethod
  def from_params(cls, params: Mapping[str, Any]) -> 'RunConfig':
    return cls(**{f.name: params[f.name] for f in dataclasses.fields(cls) if f.name in params})
