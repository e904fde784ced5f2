"""The one params YAML loader: a config that sets a key twice is refused naming both lines (PyYAML alone keeps the
later value in silence)."""
import pytest

from params import params_yaml
from resnet.run_dir import params_files
from resnet.run_setup import run_params


def test_a_key_set_twice_is_an_error_naming_the_key_and_both_lines():
  text = 'train_steps: 500   # my edit\nimage_size: 64\nlr_schedule: cosine\ntrain_steps: 112590\n'
  with pytest.raises(params_yaml.DuplicateKeyError) as error:
    params_yaml.yaml_mapping(text, "file 'mine.yaml'")
  assert str(error.value) == ("file 'mine.yaml': 'train_steps' is set twice: on line 1 and on line 4. Keep one of "
                              'them.')
  nested = 'a:\n  b: 1\n  b: 2\n'
  with pytest.raises(ValueError, match="'b' is set twice: on line 2 and on line 3"):
    params_yaml.yaml_mapping(nested, 'x')
  assert params_yaml.yaml_mapping('a: {b: 1}\nc: [1, 2]\n', 'x') == {'a': {'b': 1}, 'c': [1, 2]}


def test_a_config_file_that_sets_a_key_twice_is_refused_through_the_cli_path(tmp_path):
  config = tmp_path / 'mine.yaml'
  config.write_text('train_steps: 500\nresnet_depth: 18\ntrain_steps: 900\n')
  with pytest.raises(ValueError, match=f"config file {config}: file '{config}': 'train_steps' is set twice"):
    run_params.make_params(config_files=[str(config)], fill_from_data=False)
  assert params_files.read_text(str(config)).count('train_steps') == 2   # the file is the user's: untouched


def test_a_binary_config_file_is_named_as_not_text(tmp_path):
  config = tmp_path / 'mine.yaml'
  config.write_bytes(b'\xf7\xfe\x00' * 10)
  with pytest.raises(ValueError, match='is not a text file'):
    run_params.make_params(config_files=[str(config)], fill_from_data=False)
