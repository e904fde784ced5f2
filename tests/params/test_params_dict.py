"""Tests of params/params_dict.py: access, type-checked overrides, the validator, override syntaxes, YAML I/O."""
import copy
import json
import math
import os
import pickle
import subprocess
import sys

import pytest
import yaml

from params import override_syntax
from params import params_yaml
from resnet.run_dir import params_files
from params.params_dict import ParamsDict
from resnet.run_setup import run_params
from params.resnet_config import RESNET_CFG
from tests.helpers import procs

# The reference doc's measurement base (§2.3).
BASE = {'a': 1, 'b': 2.5, 'c': [3, 4], 'd': 'hello', 'e': False, 'n': {'x': 1, 'y': {'z': 'q'}}, 'none': None}


@pytest.fixture
def params() -> ParamsDict:
  return ParamsDict(BASE)


# --- access ---------------------------------------------------------------------------------------------------------


def test_attribute_and_item_access(params):
  assert params.a == 1 and params['a'] == 1
  assert params.n == {'x': 1, 'y': {'z': 'q'}} and type(params.n) is dict  # pylint: disable=unidiomatic-typecheck
  assert params['n']['y']['z'] == 'q'


def test_a_read_only_mapping_that_dict_copies(params):
  assert dict(params) == BASE and list(params.keys()) == list(BASE)
  assert dict(params, a=5)['a'] == 5 and params.a == 1
  assert dict(params.items()) == BASE


def test_get_and_contains(params):
  assert params.get('a') == 1
  assert params.get('missing') is None
  assert params.get('missing', 7) == 7
  assert 'a' in params and 'missing' not in params


def test_missing_key_is_keyerror_and_attributeerror_with_suggestion(params):
  with pytest.raises(KeyError, match="Unknown param 'nonee'. Did you mean: none"):
    _ = params['nonee']
  with pytest.raises(AttributeError, match='Did you mean: none'):
    _ = params.nonee
  assert not hasattr(params, 'nonee')


def test_as_dict_is_a_deep_plain_copy(params):
  data = params.as_dict()
  assert data == BASE and type(data['n']) is dict  # pylint: disable=unidiomatic-typecheck
  data['c'].append(5)
  data['n']['x'] = 99
  assert params.c == [3, 4] and params.n['x'] == 1


def test_override_stores_a_copy_of_the_given_value(params):
  values = [7, 8]
  params.override({'c': values})
  values.append(9)
  assert params.c == [7, 8]


def test_pickle_and_deepcopy_round_trip_values_and_lock(params):
  params.lock()
  restored = pickle.loads(pickle.dumps(params))
  assert restored == params and restored.is_locked
  with pytest.raises(ValueError, match='locked'):
    restored.a = 2
  clone = copy.deepcopy(ParamsDict(BASE))
  clone.a = 5
  assert clone.a == 5 and ParamsDict(BASE).a == 1


def test_repr_and_str_show_the_values(params):
  assert repr(params).startswith("ParamsDict({'a': 1, 'b': 2.5")
  text = str(params)
  assert 'c: [3, 4]' in text and 'n:\n  x: 1\n' in text


def test_method_names_cannot_be_params_keys():
  with pytest.raises(KeyError, match="'override' is a reserved name"):
    ParamsDict({'override': 1})
  with pytest.raises(KeyError, match='reserved'):
    ParamsDict({'_params': 1})


def test_a_key_never_shadows_a_method(params):
  params.override({'update': 3}, is_strict=False)
  assert params['update'] == 3
  assert callable(params.override)
  with pytest.raises(KeyError, match="'items' is a reserved name"):
    params.override({'items': 3}, is_strict=False)


# --- overrides: keys ------------------------------------------------------------------------------------------------
# ParamsDict(RESNET_CFG) below is on purpose: an unlocked ParamsDict without resnet_config's validator, to test
# ParamsDict's own override checks with real keys (run params come from run_params.make_params).


def test_strict_override_unknown_key_lists_close_keys():
  params = ParamsDict(RESNET_CFG)
  with pytest.raises(KeyError) as info:
    params.override({'train_step': 5})
  message = str(info.value)
  assert message.startswith("Unknown param 'train_step'. Did you mean: train_steps")
  assert 'train_batch_size' in message


def test_unknown_key_without_close_match_lists_valid_keys(params):
  with pytest.raises(KeyError, match='Valid params here: a, b, c, d, e, n, none'):
    params.override({'zzzzzz': 1})


def test_non_strict_override_adds_keys_and_a_dict_replaces_a_dict(params):
  params.override({'new': 3, 'grp': {'k': 'v'}, 'n': {'w': 2}}, is_strict=False)
  assert params.new == 3 and params.grp == {'k': 'v'} and params.n == {'w': 2}


def test_set_of_unknown_key_is_refused(params):
  with pytest.raises(KeyError, match='Unknown param'):
    params.zz = 1
  with pytest.raises(KeyError, match='Unknown param'):
    params['zz'] = 1


# --- overrides: types -----------------------------------------------------------------------------------------------


def test_override_string_for_int_key_names_key_expected_and_given():
  params = ParamsDict(RESNET_CFG)
  with pytest.raises(TypeError) as info:
    params.override({'train_steps': 'abc'})
  message = str(info.value)
  assert "'train_steps'" in message and 'expects int' in message and "str 'abc'" in message
  assert isinstance(info.value, ValueError)  # Callers that catch ValueError see it too.
  assert params.train_steps == 112590


def test_int_for_string_key_is_refused_with_quoting_hint():
  params = ParamsDict(RESNET_CFG)
  with pytest.raises(ValueError, match=r"'dropblock_groups' expects str .* got int 3.*quote"):
    params.override({'dropblock_groups': 3})


@pytest.mark.parametrize('key,value', [('e', 1), ('e', 0), ('a', True), ('b', False)])
def test_bool_and_numbers_do_not_mix(params, key, value):
  with pytest.raises(ValueError, match=f"'{key}' expects"):
    params.override({key: value})


def test_int_for_float_key_becomes_float(params):
  params.b = 3
  assert params.b == 3.0 and isinstance(params.b, float)


def test_float_for_int_key_is_refused(params):
  with pytest.raises(ValueError, match=r"'a' expects int .* got float 2\.0"):
    params.a = 2.0


def test_none_accepts_anything_and_anything_accepts_none(params):
  params.none = 'text'
  assert params.none == 'text'
  params.none = None
  params.none = {'x': 1}
  assert params.none == {'x': 1}
  params.a = None
  assert params.a is None
  params.a = 'now a string'  # The current value is None: any type goes.
  assert params.a == 'now a string'


def test_dict_over_scalar_is_refused_naming_key(params):
  with pytest.raises(ValueError, match=r"'a' is a scalar \(int 1\); cannot override it with a dict"):
    params.override({'a': {'x': 1}})


def test_scalar_over_dict_is_refused_naming_key(params):
  with pytest.raises(ValueError, match=r"'n' expects dict .* got int 5"):
    params.override({'n': 5})


def test_failed_override_changes_nothing(params):
  with pytest.raises(ValueError):
    params.override({'a': 5, 'n': {'x': 6}, 'd': 7})  # 'd' is a str: the whole override is refused.
  assert params.a == 1 and params.n == BASE['n']


# --- lock -----------------------------------------------------------------------------------------------------------


def test_lock_refuses_set_override_and_delete_naming_the_key(params):
  params.lock()
  with pytest.raises(ValueError, match="locked; cannot override 'a'"):
    params.a = 2
  with pytest.raises(ValueError, match="locked; cannot override 'a'"):
    params['a'] = 2
  with pytest.raises(ValueError, match="locked; cannot override 'b'"):
    params.override({'b': 1.0})
  with pytest.raises(ValueError, match="locked; cannot delete 'd'"):
    del params.d
  with pytest.raises(ValueError, match="locked; cannot override 'n'"):
    params.n = {'x': 3}
  with pytest.raises(ValueError, match='locked'):
    override_syntax.override_params_dict(params, 'a=2', is_strict=True)
  assert params.a == 1 and params.n == BASE['n'] and params.d == 'hello'


def test_delete_removes_an_unlocked_key(params):
  del params['d']
  assert 'd' not in params
  with pytest.raises(KeyError):
    del params.d


# --- validator ------------------------------------------------------------------------------------------------------


def _a_below_b(params):
  if params.a >= params.b:
    raise ValueError(f'a = {params.a} must be below b = {params.b}')


def test_constructor_and_validate_run_the_validator():
  with pytest.raises(ValueError, match='a = 3 must be below b = 2'):
    ParamsDict({'a': 3, 'b': 2}, _a_below_b)
  params = ParamsDict({'a': 1, 'b': 2}, _a_below_b)
  params.a = 3  # An override is type-checked only: validate() runs the validator.
  with pytest.raises(ValueError, match='a = 3 must be below b = 2'):
    params.validate()
  ParamsDict({'a': 3, 'b': 2}).validate()  # No validator: nothing to check.


def test_restriction_strings_are_refused():
  with pytest.raises(TypeError, match='restriction strings are not supported'):
    ParamsDict({'a': 1}, ['a > 0'])


def test_the_validator_survives_pickle_and_lock():
  params = ParamsDict({'a': 1, 'b': 2}, _a_below_b).lock()
  restored = pickle.loads(pickle.dumps(params))
  assert restored.is_locked
  object.__getattribute__(restored, '_params')['a'] = 5  # Bypassing the lock, only to see the validator run.
  with pytest.raises(ValueError, match='a = 5 must be below'):
    restored.validate()


# --- CSV overrides --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize('override,key,expected', [
    ('a=2', 'a', 2),
    ('a = 2, b = 3', 'b', 3.0),
    ('b=1e-4', 'b', 1e-4),
    ('b=-1.e-3', 'b', -1e-3),
    ('b=+0.001', 'b', 1e-3),
    ('b=1e3', 'b', 1000.0),
    ('b=.5', 'b', 0.5),
    ("d='hi, there'", 'd', 'hi, there'),
    ('d="x, y"', 'd', 'x, y'),
    ("d='007'", 'd', '007'),
    ("d='it''s'", 'd', "it's"),
    ('c=[1,2,3]', 'c', [1, 2, 3]),
    ('c=[[1,2],[3]]', 'c', [[1, 2], [3]]),
    ("c=['a,b', 'c']", 'c', ['a,b', 'c']),
    ('d=gs://bucket/x', 'd', 'gs://bucket/x'),
    ('d=grpc://10.0.0.2:8470', 'd', 'grpc://10.0.0.2:8470'),
    ('d=a=b', 'd', 'a=b'),
    ('d=2020-01-01', 'd', '2020-01-01'),
    ('e=true', 'e', True),
    ('e=True', 'e', True),
    ('e=yes', 'e', True),
    ('e=off', 'e', False),
    ('d=null', 'd', None),
    ('d=', 'd', None),
    ('none=0x10', 'none', 16),
    ('none=1_000', 'none', 1000),
])
def test_csv_override_syntax(params, override, key, expected):
  override_syntax.override_params_dict(params, override, is_strict=True)
  assert params[key] == expected
  assert type(params[key]) is type(expected)  # pylint: disable=unidiomatic-typecheck


def test_csv_dotted_names_nest_into_a_dict_value(params):
  override_syntax.override_params_dict(params, 'n.x=5,n.y.z=w,a=3', is_strict=True)
  assert params.n == {'x': 5, 'y': {'z': 'w'}} and params.a == 3


def test_nested_csv_str_to_json_str_gives_json():
  text = override_syntax.nested_csv_str_to_json_str("a=1, n.x=1e-4, n.y.z='hi, there', c=[1,2], p=gs://b/x, e=false, d=")
  assert json.loads(text) == {'a': 1, 'n': {'x': 1e-4, 'y': {'z': 'hi, there'}}, 'c': [1, 2], 'p': 'gs://b/x',
                              'e': False, 'd': None}
  assert override_syntax.nested_csv_str_to_json_str('') == ''


@pytest.mark.parametrize('csv,bad_part', [
    ('dropblock_groups=3,4', "'4'"),
    ('a=1,,b=2', 'empty pair'),
    ('a=1,', 'empty pair'),
    ('=1', "'=1'"),
    ('1a=2', "'1a=2'"),
    ('a', "'a'"),
    ('a=[1,2', "unclosed '\\['"),
    ("a='x", 'unterminated quote'),
    ("a='x'y", "unexpected 'y'"),
    ('a=1,a=2', "'a' is given more than once"),
    ('n=1,n.x=2', "'n.x' nests under 'n'"),
])
def test_malformed_csv_names_the_bad_part(csv, bad_part):
  with pytest.raises(ValueError, match=bad_part):
    override_syntax.nested_csv_str_to_json_str(csv)


def test_unquoted_comma_value_error_suggests_quoting():
  params = ParamsDict(RESNET_CFG)
  with pytest.raises(ValueError) as info:
    override_syntax.override_params_dict(params, 'dropblock_groups=3,4', is_strict=True)
  message = str(info.value)
  assert "'4'" in message and "dropblock_groups='3,4'" in message
  assert 'neither valid k=v CSV' in message and 'nor an existing file' in message
  override_syntax.override_params_dict(params, "dropblock_groups='3,4'", is_strict=True)
  assert params.dropblock_groups == '3,4'


def test_csv_override_is_type_checked():
  params = ParamsDict(RESNET_CFG)
  with pytest.raises(ValueError, match=r"'train_steps' expects int .* got str 'abc'"):
    override_syntax.override_params_dict(params, 'train_steps=abc', is_strict=True)
  with pytest.raises(ValueError, match=r"'use_cache' expects bool .* got int 1"):
    override_syntax.override_params_dict(params, 'use_cache=1', is_strict=True)


def test_csv_unknown_key_strict_and_non_strict(params):
  with pytest.raises(KeyError, match="Unknown param 'zz'"):
    override_syntax.override_params_dict(params, 'zz=1', is_strict=True)
  override_syntax.override_params_dict(params, 'zz=1', is_strict=False)
  assert params.zz == 1


# --- YAML / JSON strings and files ----------------------------------------------------------------------------------


def test_yaml_string_override(params):
  override_syntax.override_params_dict(params, 'a: 5\nn:\n  x: 7\nb: 1e-4', is_strict=True)
  assert params.a == 5 and params.n == {'x': 7} and params.b == 1e-4


def test_flow_yaml_and_json_string_overrides(params):
  override_syntax.override_params_dict(params, '{a: 5, n: {x: 7}}', is_strict=True)
  assert params.a == 5 and params.n == {'x': 7}
  override_syntax.override_params_dict(params, '{"a": 6, "d": "j", "none": null}', is_strict=True)
  assert params.a == 6 and params.d == 'j' and params.none is None


def test_yaml_file_override_reads_exponent_floats_as_floats(params, tmp_path):
  path = tmp_path / 'override.yaml'
  path.write_text('b: 1e-4\nn:\n  x: 9\nnone: -1.e-3\n')
  override_syntax.override_params_dict(params, str(path), is_strict=True, read_file=params_files.read_text)
  assert params.b == 1e-4 and isinstance(params.b, float)  # The reference's FullLoader gave the string '1e-4'.
  assert params.n == {'x': 9} and params.none == -1e-3


def test_yaml_file_override_is_strict(params, tmp_path):
  path = tmp_path / 'override.yaml'
  path.write_text('aa: 1\n')
  with pytest.raises(KeyError, match="Unknown param 'aa'. Did you mean: a"):
    override_syntax.override_params_dict(params, str(path), is_strict=True, read_file=params_files.read_text)


def test_missing_file_error_lists_what_the_string_is_not(params):
  with pytest.raises(ValueError, match=r"'/no/such/params\.yaml' is neither valid k=v CSV .*nor a YAML/JSON "
                     r'mapping .*nor an existing file'):
    override_syntax.override_params_dict(params, '/no/such/params.yaml', is_strict=True, read_file=params_files.read_text)


def test_yaml_file_that_is_not_a_mapping_is_refused(params, tmp_path):
  path = tmp_path / 'list.yaml'
  path.write_text('- 1\n- 2\n')
  with pytest.raises(ValueError, match='must hold a mapping'):
    override_syntax.override_params_dict(params, str(path), is_strict=True, read_file=params_files.read_text)


@pytest.mark.parametrize('empty', [None, '', {}, '   '])
def test_empty_override_is_a_no_op(params, empty):
  override_syntax.override_params_dict(params, empty, is_strict=True)
  assert params == BASE


def test_dict_and_params_dict_overrides(params):
  override_syntax.override_params_dict(params, {'a': 2}, is_strict=True)
  override_syntax.override_params_dict(params, ParamsDict({'d': 'p'}), is_strict=True)
  assert params.a == 2 and params.d == 'p'


def test_other_override_types_are_refused(params):
  with pytest.raises(ValueError, match='Cannot override params from a list'):
    override_syntax.override_params_dict(params, [('a', 1)], is_strict=True)


_EVIL = "!!python/object/apply:os.system ['touch {marker}']"


def test_python_object_tag_in_yaml_string_is_refused_without_running(params, tmp_path):
  marker = tmp_path / 'pwned'
  for text in (_EVIL.format(marker=marker), 'a: ' + _EVIL.format(marker=marker),
               'd=' + _EVIL.format(marker=marker)):
    with pytest.raises(ValueError, match='Refusing to read .*python/object/apply:os.system'):
      override_syntax.override_params_dict(params, text, is_strict=True)
  assert not marker.exists()


def test_python_object_tag_in_yaml_file_is_refused_without_running(tmp_path):
  marker = tmp_path / 'pwned'
  path = tmp_path / 'evil.yaml'
  path.write_text('a: ' + _EVIL.format(marker=marker) + '\n')
  with pytest.raises(ValueError, match='Refusing to read file'):
    override_syntax.override_params_dict(ParamsDict(BASE), str(path), is_strict=True, read_file=params_files.read_text)
  with pytest.raises(ValueError, match='Refusing'):
    params_files.read_params(str(path))
  assert not marker.exists()


def test_float_resolver_is_not_registered_globally():
  assert params_yaml.ParamsYamlLoader is not yaml.SafeLoader
  assert yaml.load('a: 1e-4', Loader=params_yaml.ParamsYamlLoader) == {'a': 1e-4}
  assert yaml.safe_load('a: 1e-4') == {'a': '1e-4'}  # PyYAML's own SafeLoader is untouched.


# --- params.yaml round trip -----------------------------------------------------------------------------------------

ROUND_TRIP = {
    'int': 3, 'float': 1e-4, 'small': 1e-5, 'big': 1e20, 'whole': 1.0, 'neg': -0.5, 'inf': math.inf,
    'none': None, 'yes': True, 'no': False, 'str': 'text', 'numeric_str': '1e-4', 'bool_str': 'yes',
    'null_str': 'null', 'zero_str': '007', 'date_str': '2020-01-01', 'empty': '', 'list': [1, 2.5, 'x', None],
    'nested': {'deep': {'k': [0.1, 0.2]}, 'v': 'gs://bucket/x'},
}


def test_save_and_read_round_trip_exactly(tmp_path):
  path = str(tmp_path / 'params.yaml')
  params_files.save_params(ParamsDict(ROUND_TRIP), path)
  restored = params_files.read_params(path).as_dict()
  assert restored == ROUND_TRIP
  assert isinstance(restored['float'], float) and isinstance(restored['whole'], float)
  assert isinstance(restored['numeric_str'], str) and restored['none'] is None


def test_saved_yaml_is_block_style_with_flow_lists(tmp_path):
  path = tmp_path / 'params.yaml'
  params_files.save_params(ParamsDict({'b': 1, 'a': [1, 2], 'n': {'x': 1}}), str(path))
  assert path.read_text() == 'b: 1\na: [1, 2]\nn:\n  x: 1\n'  # Key order kept.


def test_resnet_defaults_round_trip(tmp_path):
  path = str(tmp_path / 'params.yaml')
  params = run_params.make_params(fill_from_data=False)
  params_files.save_params(params, path)
  assert params_files.read_params(path) == params


def test_save_replaces_atomically_and_leaves_no_temp_files(tmp_path):
  path = tmp_path / 'out' / 'params.yaml'  # The directory is created.
  params_files.save_params({'a': 1}, str(path))
  params_files.save_params({'a': 2}, str(path))
  assert params_files.read_params(str(path)).a == 2
  assert os.listdir(path.parent) == ['params.yaml']


def test_failed_save_keeps_the_old_file(tmp_path, monkeypatch):
  path = tmp_path / 'params.yaml'
  params_files.save_params({'a': 1}, str(path))

  def full_disk(fd):
    raise OSError(28, 'No space left on device')

  monkeypatch.setattr(os, 'fsync', full_disk)
  with pytest.raises(OSError, match=r'Could not write .*params\.yaml.*No space left'):
    params_files.save_params({'a': 2}, str(path))
  assert path.read_text() == 'a: 1\n'
  assert os.listdir(tmp_path) == ['params.yaml']


def test_module_import_does_not_import_tensorflow():
  code = 'import sys, params.params_dict; sys.exit(1 if "tensorflow" in sys.modules else 0)'
  root = procs.ROOT
  assert subprocess.run([sys.executable, '-c', code], cwd=root, check=False).returncode == 0
