"""Tests for official_input/dataset_info.py: summary.json + labels.txt parsing and reconciling params with them."""
import json
import os

import pytest

from official_input import dataset_info as di

# What the converter writes (trimmed): three splits and per-shard integrity data.
SUMMARY = {
    'layout': 'class_folders',
    'num_classes': 3,
    'labels': {'daisy': 1, 'rose': 2, 'tulip': 3},
    'splits': {'train': {'images': 40, 'shards': ['train-00000-of-00002', 'train-00001-of-00002']},
               'validation': {'images': 6, 'shards': ['validation-00000-of-00001']},
               'test': {'images': 5, 'shards': ['test-00000-of-00001']}},
    'shards': {'train-00000-of-00002': {'records': 20, 'bytes': 40960, 'sha256': 'ab' * 32},
               'train-00001-of-00002': {'records': 20, 'bytes': 40000, 'sha256': 'cd' * 32},
               'validation-00000-of-00001': {'records': 6, 'bytes': 12000, 'sha256': 'ef' * 32}},
    'max_image_side': 512,
}


def _data_dir(tmp_path, summary=SUMMARY, labels='daisy\nrose\ntulip\n') -> str:
  if summary is not None:
    (tmp_path / 'summary.json').write_text(summary if isinstance(summary, str) else json.dumps(summary))
  if labels is not None:
    (tmp_path / 'labels.txt').write_text(labels)
  return str(tmp_path)


def test_reads_class_names_split_sizes_and_shards(tmp_path):
  info = di.read_dataset_info(_data_dir(tmp_path))
  assert info.num_classes == 3 and info.class_names == ('daisy', 'rose', 'tulip')
  assert (info.num_train_images, info.num_eval_images, info.num_test_images) == (40, 6, 5)
  assert info.max_image_side == 512
  assert info.shard(os.path.join(str(tmp_path), 'train-00001-of-00002')) == di.ShardInfo(20, 40000, 'cd' * 32)
  assert info.shard('/elsewhere/test-00000-of-00001') is None  # not recorded
  assert info.split_images('validation') == 6


def test_an_older_summary_without_shards_or_max_side_still_reads(tmp_path):
  summary = {k: v for k, v in SUMMARY.items() if k not in ('shards', 'max_image_side')}
  summary['splits'] = {'train': {'images': 40}}
  info = di.read_dataset_info(_data_dir(tmp_path, summary))
  assert info.shards == {} and info.max_image_side is None
  assert (info.num_train_images, info.num_eval_images, info.num_test_images) == (40, None, None)


def test_class_names_fall_back_to_summary_labels_in_label_order(tmp_path):
  summary = dict(SUMMARY, labels={'zebra': 1, 'apple': 2, 'mango': 3})
  info = di.read_dataset_info(_data_dir(tmp_path, summary, labels=None))
  assert info.class_names == ('zebra', 'apple', 'mango') and info.num_classes == 3


def test_no_summary_json_gives_none(tmp_path):
  assert di.read_dataset_info(_data_dir(tmp_path, summary=None)) is None
  assert di.read_dataset_info(None) is None and di.read_dataset_info('null') is None


def test_malformed_json_is_a_value_error_naming_the_file(tmp_path):
  data_dir = _data_dir(tmp_path, summary='{"splits": {"train": ')
  with pytest.raises(ValueError, match=r'summary\.json is not valid JSON.*imagenet_to_gcs') as error:
    di.read_dataset_info(data_dir)
  assert os.path.join(data_dir, 'summary.json') in str(error.value)


@pytest.mark.parametrize('damage', ['binary', 'a directory', 'binary labels'])
def test_a_damaged_summary_or_labels_file_is_a_value_error_naming_it_and_the_fix(tmp_path, damage):
  """Not only bad JSON: whatever the damage, one message naming the file and what to do (no UnicodeDecodeError)."""
  data_dir = _data_dir(tmp_path, summary='{}')
  name = 'labels.txt' if damage == 'binary labels' else 'summary.json'
  path = os.path.join(data_dir, name)
  os.remove(path) if os.path.exists(path) else None
  if damage == 'a directory':
    os.mkdir(path)
  else:
    with open(path, 'wb') as f:
      f.write(b'\xf7\xfe\x00' * 20)
    if name == 'labels.txt':
      with open(os.path.join(data_dir, 'summary.json'), 'w') as f:
        f.write('{"num_classes": 2}')
  with pytest.raises(ValueError) as error:
    di.read_dataset_info(data_dir)
  assert path in str(error.value) and 'imagenet_to_gcs' in str(error.value)
  assert ('is a directory' if damage == 'a directory' else 'is not text') in str(error.value)


def test_a_wrongly_typed_count_is_a_value_error_naming_the_key(tmp_path):
  summary = dict(SUMMARY, splits={'train': {'images': 'forty'}})
  with pytest.raises(ValueError, match=r"summary\.json: splits\['train'\]\.images must be a non-negative integer"):
    di.read_dataset_info(_data_dir(tmp_path, summary))


def test_labels_txt_and_summary_disagreeing_on_classes_is_an_error(tmp_path):
  with pytest.raises(ValueError, match=r'labels\.txt lists 2 classes but .*num_classes=3'):
    di.read_dataset_info(_data_dir(tmp_path, labels='daisy\nrose\n'))


@pytest.fixture
def info(tmp_path):
  return di.read_dataset_info(_data_dir(tmp_path))


UNSET = {'num_label_classes': None, 'num_train_images': None, 'num_eval_images': None, 'num_test_images': None}


def test_unset_params_are_filled_from_the_data(info):
  filled, warnings, errors = di.check_params_against(info, UNSET, explicitly_set=set())
  assert filled == {'num_label_classes': 3, 'num_train_images': 40, 'num_eval_images': 6, 'num_test_images': 5}
  assert warnings == [] and errors == []


def test_matching_set_params_change_nothing(info):
  values = {'num_label_classes': 3, 'num_train_images': 40, 'num_eval_images': 6, 'num_test_images': 5}
  assert di.check_params_against(info, values, set(values)) == ({}, [], [])


def test_an_explicit_class_count_that_disagrees_is_an_error_with_both_values_and_the_fix(info):
  filled, warnings, errors = di.check_params_against(info, dict(UNSET, num_label_classes=1000),
                                                     {'num_label_classes'})
  assert 'num_label_classes' not in filled and warnings == []
  assert len(errors) == 1
  assert 'num_label_classes=1000' in errors[0] and 'lists 3 classes' in errors[0]
  assert 'set num_label_classes=3' in errors[0] and 'labels.txt' in errors[0]


def test_an_explicit_train_size_that_disagrees_is_an_error(info):
  _, _, errors = di.check_params_against(info, dict(UNSET, num_train_images=1281167), {'num_train_images'})
  assert len(errors) == 1
  assert 'num_train_images=1281167' in errors[0] and 'counts 40 train images' in errors[0]
  assert 'set num_train_images=40' in errors[0]


def test_one_more_class_than_the_data_is_a_background_class_warning(info):
  filled, warnings, errors = di.check_params_against(info, dict(UNSET, num_label_classes=4), {'num_label_classes'})
  assert errors == [] and 'num_label_classes' not in filled
  assert len(warnings) == 1 and 'background class' in warnings[0]


def test_evaluating_fewer_or_more_images_than_the_split_is_a_warning(info):
  filled, warnings, errors = di.check_params_against(info, dict(UNSET, num_eval_images=4), {'num_eval_images'})
  assert errors == [] and 'num_eval_images' not in filled
  assert len(warnings) == 1 and 'evaluating the first 4' in warnings[0]
  _, warnings, errors = di.check_params_against(info, dict(UNSET, num_eval_images=7), {'num_eval_images'})
  assert errors == [] and 'evaluating all 6' in warnings[0]  # a config's count for a bigger dataset
  _, warnings, errors = di.check_params_against(info, dict(UNSET, num_test_images=7), {'num_test_images'})
  assert len(errors) == 1 and 'num_test_images=7' in errors[0]


def test_a_default_that_disagrees_is_replaced_by_the_data_with_a_warning(info):
  filled, warnings, errors = di.check_params_against(info, dict(UNSET, num_train_images=1281167), set())
  assert filled['num_train_images'] == 40 and errors == []
  assert any('1281167 replaced by 40' in w for w in warnings)


def test_keys_absent_from_params_and_counts_absent_from_the_data_are_left_alone(tmp_path):
  summary = dict(SUMMARY, splits={'train': {'images': 40}})
  info = di.read_dataset_info(_data_dir(tmp_path, summary))
  filled, warnings, errors = di.check_params_against(info, {'num_eval_images': None, 'num_train_images': None},
                                                     set())
  assert filled == {'num_train_images': 40} and warnings == [] and errors == []


def test_a_split_of_zero_images_leaves_its_param_unset(tmp_path):
  """Converted from train/ and validation/ without a test/ folder: summary.json counts 0 test images, which must
  not become num_test_images=0 (refused by its '> 0' check in every mode, so nothing could be trained)."""
  summary = json.loads(json.dumps(SUMMARY))
  summary['splits']['test'] = {'images': 0, 'shards': []}
  info = di.read_dataset_info(_data_dir(tmp_path, summary))
  filled, warnings, errors = di.check_params_against(info, UNSET, explicitly_set=set())
  assert filled == {'num_label_classes': 3, 'num_train_images': 40, 'num_eval_images': 6}
  assert warnings == [] and errors == []
