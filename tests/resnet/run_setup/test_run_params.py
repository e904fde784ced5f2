"""The run's params from files (resnet/run_setup/run_params.py): balanced class weights from summary.json, the rules on
class weights, the advice for small data trained with the ImageNet recipe."""
import json

import pytest

from official_input import dataset_info
from resnet.run_setup import run_params


def _summary(tmp_path, per_class):
  (tmp_path / 'labels.txt').write_text(''.join(f'{n}\n' for n in per_class))
  (tmp_path / 'summary.json').write_text(json.dumps({
      'num_classes': len(per_class),
      'splits': {'train': {'images': sum(per_class.values()), 'per_class': per_class},
                 'validation': {'images': 8, 'per_class': {n: 2 for n in per_class}}}}))
  return str(tmp_path)


def test_balanced_class_weights_from_summary_json(tmp_path):
  data_dir = _summary(tmp_path, {'cats': 90, 'dogs': 10, 'owls': 20})
  params = run_params.make_params({'data_dir': data_dir, 'class_weights': 'balanced'})
  assert params.num_label_classes == 3
  assert params.class_weights == pytest.approx([120 / (3 * 90), 120 / (3 * 10), 120 / (3 * 20)], rel=1e-5)
  with_background = run_params.make_params({'data_dir': data_dir, 'class_weights': 'balanced',
                                               'num_label_classes': 4})
  assert with_background.class_weights[0] == 1.0 and len(with_background.class_weights) == 4
  info = dataset_info.read_dataset_info(data_dir)
  assert info.train_class_counts == (90, 10, 20)


def test_balanced_class_weights_without_counts_name_the_fix(tmp_path):
  (tmp_path / 'summary.json').write_text(json.dumps({'num_classes': 2}))
  with pytest.raises(ValueError, match='per-class training counts.*class_weights as a list'):
    run_params.make_params({'data_dir': str(tmp_path), 'class_weights': 'balanced'})
  with pytest.raises(ValueError, match='class_weights lists 3 weights for num_label_classes=2'):
    run_params.make_params({'data_dir': str(tmp_path), 'class_weights': [1, 2, 3]})


def test_class_weights_that_cannot_work_are_named(tmp_path, caplog):
  """All-zero weights would train on weight decay alone; balanced weights cannot help a class with no training
  images (it keeps 1 and is never learned): an error and a warning naming the class."""
  with pytest.raises(ValueError, match=r'class_weights=\[0, 0.0\] are all 0: the training loss would be weight decay'):
    run_params.make_params({'num_label_classes': 2, 'class_weights': [0, 0.0]})
  data_dir = _summary(tmp_path, {'cats': 90, 'dogs': 0, 'owls': 20})
  params = run_params.make_params({'data_dir': data_dir, 'class_weights': 'balanced'})
  assert params.class_weights[1] == 1.0
  warnings = [r.getMessage() for r in caplog.records if r.levelname == 'WARNING']
  assert any('no training images of dogs' in w for w in warnings), warnings


def test_small_data_with_the_imagenet_recipe_gets_advice(tmp_path):
  data_dir = _summary(tmp_path, {'cats': 900, 'dogs': 100})
  advice = run_params.recipe_advice(run_params.make_params({'data_dir': data_dir}))
  assert 'small_data' in advice and 'flowers_finetune' in advice and '1000 images' in advice
  small_data = run_params.make_params({'data_dir': data_dir}, config_files=['small_data'])
  assert run_params.recipe_advice(small_data) is None
  fine_tuning = run_params.make_params({'data_dir': data_dir, 'resnet_checkpoint': '/w/ckpt'})
  assert run_params.recipe_advice(fine_tuning) is None
  assert run_params.recipe_advice(run_params.make_params({})) is None   # synthetic / ImageNet
