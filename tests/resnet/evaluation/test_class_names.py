"""Prediction class names follow the same background-class rule as the pipeline's labels, with the data's count."""
import pytest

from official_input import dataset_info

NAMES = ['daisy', 'rose', 'tulip', 'sunflower']


@pytest.mark.parametrize('num_label_classes, first_three', [
    (4, ['daisy', 'rose', 'tulip']),             # the data's 4 classes: labels 1..4 become ids 0..3
    (5, ['background', 'daisy', 'rose']),        # 4 classes + background 0 on your own data (used to shift)
])
def test_class_names_with_and_without_a_background_class(tmp_path, num_label_classes, first_three):
  (tmp_path / 'labels.txt').write_text('\n'.join(NAMES) + '\n')
  names = dataset_info.model_class_names(str(tmp_path / 'labels.txt'), num_label_classes)
  assert names[:3] == first_three and len(names) == num_label_classes


def test_imagenet_1001_classes_keep_background_zero(tmp_path):
  (tmp_path / 'labels.txt').write_text(''.join(f'n{i:08d}\n' for i in range(1000)))
  names = dataset_info.model_class_names(str(tmp_path / 'labels.txt'), 1001)
  assert names[0] == 'background' and names[1] == 'n00000000' and len(names) == 1001
