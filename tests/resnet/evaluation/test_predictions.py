"""resnet/evaluation/predictions.py: the labelled multi-label report predict writes beside its CSV."""
import json

import numpy as np

from resnet.evaluation import label_metrics
from resnet.evaluation import predictions
from tests.helpers import tiny


def test_the_multi_label_report_bins_in_chunks_what_eval_bins_at_once(tmp_path, monkeypatch):
  """Memory stays one chunk whatever the number of images; the numbers are those of all scores binned together,
  padding rows (-1) counted nowhere."""
  (tmp_path / 'data').mkdir()
  (tmp_path / 'data' / 'labels.txt').write_text('a\nb\nc\n')
  params = tiny.resnet_params(tmp_path / 'run', data_dir=str(tmp_path / 'data'), num_label_classes=3,
                              task='multi_label')
  rng = np.random.default_rng(0)
  labels = (rng.uniform(size=[23, 3]) < 0.4).astype(np.int64)
  probabilities = rng.uniform(0.01, 0.99, size=[23, 3]).astype(np.float32)
  report = predictions.LabelledMultiLabel(params, [0.3, 0.5, 0.7])
  monkeypatch.setattr(report, 'CHUNK', 5)
  for label, p in zip(labels, probabilities):
    report.add(label, p)
    report.add(np.full([3], -1), p)   # an eval padding row
  path = report.write(str(tmp_path / 'predictions.csv'))
  written = json.load(open(path))
  p = probabilities.astype(np.float64)
  whole = label_metrics.report(label_metrics.histograms(np.log(p / (1 - p)), labels, 3), ['a', 'b', 'c'],
                               [0.3, 0.5, 0.7])
  assert written['num_examples'] == 23
  for key in ('mAP', 'micro_f1', 'micro_f1_tuned', 'macro_f1'):
    assert written[key] == whole[key], key
  assert predictions.LabelledMultiLabel(params, [0.5] * 3).write(str(tmp_path / 'none.csv')) is None
