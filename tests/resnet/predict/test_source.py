"""resnet/predict/source.py: image files are predicted as the run's records were converted."""
import json
import logging

from resnet.predict import source


def test_files_are_shrunk_as_the_runs_records_were_and_full_size_where_nothing_is_recorded(tmp_path, caplog):
  data = tmp_path / 'records'
  data.mkdir()
  params = {'data_dir': str(data), 'labels_file': None}
  with caplog.at_level(logging.INFO, logger='absl'):
    assert source._max_image_side(params) == 0   # pylint: disable=protected-access  # no summary.json: said
    (data / 'summary.json').write_text(json.dumps({'num_classes': 2, 'max_image_side': 40}))
    assert source._max_image_side(params) == 40   # pylint: disable=protected-access
  log = '\n'.join(r.getMessage() for r in caplog.records)
  assert 'at their full size' in log and 'has no summary.json' in log and 'max_image_side=40' in log
  (data / 'summary.json').write_text('{not json')
  assert source._max_image_side(params) == 0   # pylint: disable=protected-access  # damaged: said, full size
  assert source._max_image_side({'data_dir': None, 'labels_file': None}) == 0   # pylint: disable=protected-access
