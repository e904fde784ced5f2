"""The model's options have one home: a frozen ModelConfig filled from the params by name, whose construction
checks every rule between options (each option's own type and range is its params row's)."""
import dataclasses

import pytest

from params import resnet_config
from params.model_config import ModelConfig
from resnet.run_setup import run_params


def test_a_new_model_option_is_a_row_a_field_and_its_use(monkeypatch):
  """Every field is a params row of its name, and neither from_params nor the checks need code per field: a new
  option is its row in resnet_config.PARAMS, its field here and its use in the builder (which reads the config)."""
  fields = {f.name for f in dataclasses.fields(ModelConfig)}
  assert fields <= set(resnet_config.PARAMS_BY_NAME)
  assert set(resnet_config.MODEL_PARAMS) <= fields
  row = resnet_config.Param('shiny_option', False, 'A new model option.', model=True)
  monkeypatch.setitem(resnet_config.PARAMS_BY_NAME, row.name, row)

  @dataclasses.dataclass(frozen=True)
  class WithOption(ModelConfig):
    shiny_option: bool = False

  params = dict(resnet_config.RESNET_CFG, num_label_classes=10, shiny_option=True)
  assert WithOption.from_params(params).shiny_option is True
  with pytest.raises(ValueError, match="shiny_option must be bool, got str 'yes'"):   # its row's rule applies
    WithOption.from_params(dict(params, shiny_option='yes'))


def test_the_rules_between_options_are_checked_once_at_construction_with_their_fix():
  with pytest.raises(ValueError, match='needs the pre-activation ResNet'):
    ModelConfig(norm_act_layer='evonorm_b0')
  with pytest.raises(ValueError, match='needs a bottleneck depth'):
    ModelConfig(resnet_depth=18, stride_in_1x1=True)
  with pytest.raises(ValueError, match='dropblock_keep_prob is not'):
    ModelConfig(dropblock_groups=(3, 4))
  with pytest.raises(ValueError, match='bottleneck ResNets only'):
    ModelConfig(resnet_depth=34, dropblock_groups='4', dropblock_keep_prob=0.9)
  with pytest.raises(ValueError, match='must list block groups 1..4'):
    ModelConfig(dropblock_groups='3,x', dropblock_keep_prob=0.9)
  assert ModelConfig(dropblock_groups='4, 3', dropblock_keep_prob=0.9).dropblock_groups == (3, 4)


def test_the_run_params_are_checked_through_the_model_config():
  with pytest.raises(ValueError, match='Invalid params: .*needs the pre-activation ResNet'):
    run_params.make_params({'norm_act_layer': 'evonorm_s0'}, fill_from_data=False)
  params = run_params.make_params({'resnet_depth': 18, 'se_ratio': 0.25}, fill_from_data=False)
  config = ModelConfig.from_params(params)
  assert (config.resnet_depth, config.se_ratio, config.stem_pool_padding) == (18, 0.25, 'same')
