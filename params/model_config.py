"""The network a ResNet run builds, as one frozen value: the builder (``resnet/model/resnet_model.resnet``), the
analytic plan (``resnet/model/plan``) and the warm start read it, and its ``problems`` are the one home of every
rule between model options.

A field is named as the params key it comes from (``from_params`` fills every field by its name), so a new model
option is a row in ``resnet_config.PARAMS`` (its type, choices and range, which this class applies: the params
validation leaves its keys to it), a field here (with any rule it has with other options) and its use in the
builder. Pure Python, as all of ``params/``.
"""
import dataclasses
from typing import Any, List, Mapping, Optional, Tuple

from params import architectures
from params import validation
from params.resnet_config import PARAMS_BY_NAME


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Depth, classes, layout, normalisation and activation, squeeze-excitation, ResNet-D and stem options, drop
  rates, DropBlock, the Variant of foreign weights and the CPU kernels: what ``resnet()`` builds. Construction
  checks every model rule (``problems``): each option's own (its params row) and those between options."""
  resnet_depth: int = 50
  num_label_classes: int = 1000
  data_format: str = 'channels_last'
  pre_activation: bool = False
  norm_act_layer: str = 'bn_relu'
  se_ratio: Optional[float] = None
  resnetd_shortcut: bool = False
  use_resnetd_stem: bool = False
  replace_stem_max_pool: bool = False
  # The Variant: how other frameworks' pretrained weights compute (architectures.Variant; the reference's v1.5).
  stride_in_1x1: bool = False
  stem_pool_padding: str = 'same'
  input_normalization: str = 'imagenet'
  projection_shortcut: str = 'every_group'
  bn_epsilon: float = 1e-5
  bn_momentum: float = 0.9
  drop_connect_rate: Optional[float] = None
  dropout_rate: Optional[float] = None
  dropblock_groups: Tuple[int, ...] = ()
  dropblock_keep_prob: Optional[float] = None
  dropblock_size: int = 7
  # CPU kernels ('auto' decides by precision and hardware when the model is built: resnet/model/cpu_kernels.py).
  conv1x1_filter_grad: str = 'auto'
  residual_add_relu: str = 'auto'

  def __post_init__(self):
    groups = self.dropblock_groups
    if isinstance(groups, str):  # the params' syntax, '3,4'
      words = [g for g in groups.replace(' ', '').split(',') if g]
      groups = tuple(int(g) if g.lstrip('-').isdigit() else -1 for g in words)
    elif not isinstance(groups, (list, tuple)):
      raise ValueError(f"Invalid model: dropblock_groups must be str (e.g. '3,4'), got {groups!r}.")
    object.__setattr__(self, 'dropblock_groups', tuple(sorted(set(groups))))
    problems = self.problems()
    if problems:
      raise ValueError('Invalid model: ' + '; '.join(problems) + '.')

  @classmethod
  def from_params(cls, params: Mapping[str, Any]) -> 'ModelConfig':
    """The model of a run's params: every field from the params key of its name (the Variant ones, unset before
    the weights say, as the reference's v1.5)."""
    values = {}
    for field in dataclasses.fields(cls):
      value = params[field.name]
      values[field.name] = field.default if value is None and field.name in architectures.VARIANT_PARAMS else value
    return cls(**values)

  @property
  def spec(self) -> architectures.BlockSpec:
    return architectures.architecture(self.resnet_depth)

  @property
  def variant(self) -> architectures.Variant:
    return architectures.Variant(**{k: getattr(self, k) for k in architectures.VARIANT_PARAMS})

  def problems(self) -> List[str]:
    """Every model rule, each with its fix: each option's own (type, choices, range: its params row), then those
    between options."""
    own = [problem for problem in (validation.value_problem(PARAMS_BY_NAME[f.name], getattr(self, f.name))
                                   for f in dataclasses.fields(self) if f.name != 'dropblock_groups') if problem]
    if own:
      return own
    problems = []
    bottleneck = self.spec.kind == 'bottleneck' if self.resnet_depth in architectures.ARCHITECTURES else True
    if self.norm_act_layer != 'bn_relu' and not self.pre_activation:
      problems.append(f"norm_act_layer={self.norm_act_layer!r} needs the pre-activation ResNet (v2), as in the "
                      "reference: set pre_activation=true, or use norm_act_layer='bn_relu'")
    if self.stride_in_1x1 and not bottleneck:
      problems.append(f'stride_in_1x1=true needs a bottleneck depth (50 and up); resnet_depth={self.resnet_depth} has '
                      'basic blocks (two 3x3 convs)')
    if any(g not in (1, 2, 3, 4) for g in self.dropblock_groups):
      problems.append('dropblock_groups must list block groups 1..4 (e.g. 3,4)')
    if self.dropblock_groups and self.dropblock_keep_prob is None:
      problems.append("dropblock_groups is set but dropblock_keep_prob is not: set both (e.g. 0.9), or "
                      "dropblock_groups='' to turn DropBlock off")
    if self.dropblock_groups and not bottleneck:
      problems.append(f'DropBlock (dropblock_groups={",".join(map(str, self.dropblock_groups))}) applies to '
                      f'bottleneck ResNets only (depth >= 50), as in the reference; resnet_depth={self.resnet_depth}')
    return problems


def validate(params: Mapping[str, Any]) -> None:
  """A params validator: the run's model is a valid ModelConfig (ValueError naming each broken rule). It checks its
  keys fully (``validate.keys``), so the params validation does not check them again."""
  try:
    ModelConfig.from_params(params)
  except ValueError as e:
    raise ValueError(str(e).replace('Invalid model: ', '').rstrip('.')) from None


validate.keys = tuple(f.name for f in dataclasses.fields(ModelConfig))
