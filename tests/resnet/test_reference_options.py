"""Each reference option turned on in a tiny end-to-end run: train on TFRecords, evaluate, export (in-process)."""
import os

import pytest
import tensorflow as tf

from official_input import imagenet_input
from resnet import wiring
from resnet.export import exporting
from resnet.training import resnet_model_fn
from tests.helpers import cli
from tests.helpers import tiny

pytestmark = pytest.mark.slow  # end to end: whole runs, processes or their shared fixtures

OPTIONS = {
    'lars_ema_randaugment_warmup': dict(enable_lars=True, moving_average_decay=0.9, export_moving_average=True,
                                        augment_name='randaugment', add_warmup_requests=True,
                                        inference_batch_sizes=[1, 2]),
    'resnet_rs_autoaugment': dict(se_ratio=0.25, resnetd_shortcut=True, use_resnetd_stem=True,
                                  replace_stem_max_pool=True, drop_connect_rate=0.2, dropout_rate=0.25,
                                  augment_name='autoaugment'),
    'evonorm_s0': dict(pre_activation=True, norm_act_layer='evonorm_s0'),
    'evonorm_b0': dict(pre_activation=True, norm_act_layer='evonorm_b0'),
}


@pytest.fixture(scope='module')
def data_dir(tmp_path_factory):
  return cli.make_tiny_dataset(str(tmp_path_factory.mktemp('data')))


@pytest.mark.parametrize('name', sorted(OPTIONS))
def test_option_trains_evaluates_and_exports(name, data_dir, tmp_path):
  params = tiny.resnet_params(tmp_path / 'run', data_dir=data_dir, num_label_classes=4, num_train_images=32,
                              train_batch_size=4, eval_batch_size=4, predict_batch_size=4, train_steps=2,
                              export_dir=str(tmp_path / 'export'), **OPTIONS[name])
  estimator = tiny.resnet_estimator(params)
  source = imagenet_input.ImageNetInput.from_params(params, 'train')
  estimator.train(source.input_fn, max_steps=2)
  results = estimator.evaluate(imagenet_input.ImageNetInput.from_params(params, 'validation').input_fn,
                               weights=wiring.eval_weights(estimator))
  assert results['num_examples'] == 16 and results['loss'] == results['loss']  # finite, not NaN
  path = exporting.export(estimator, params)
  assert tf.saved_model.contains_saved_model(path)
  warmup = os.path.join(path, 'assets.extra', 'tf_serving_warmup_requests')
  assert os.path.exists(warmup) == bool(params['add_warmup_requests'])
  if params['enable_lars']:
    assert type(estimator.scope.get(resnet_model_fn.OPTIMIZER)).__name__ == 'LARSMomentum'
  if params['moving_average_decay']:
    assert resnet_model_fn.moving_average(estimator.scope) is not None


def test_predict_reads_the_moving_averages_that_eval_measured(data_dir, tmp_path):
  """A run keeping moving averages: eval measures them, so predict (its CSV and report) answers with them too."""
  import csv  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  from resnet import resnet_main  # pylint: disable=import-outside-toplevel
  output = str(tmp_path / 'predictions.csv')
  params = tiny.resnet_params(tmp_path / 'run', data_dir=data_dir, num_label_classes=4, num_train_images=32,
                              train_batch_size=4, eval_batch_size=4, predict_batch_size=4, train_steps=3,
                              moving_average_decay=0.5, predict_output=output, predict_top_k=1)
  estimator = tiny.resnet_estimator(params)
  estimator.train(imagenet_input.ImageNetInput.from_params(params, 'train').input_fn, max_steps=3)
  resnet_main.predict(estimator, params)
  with open(output) as f:
    written = {row['image']: float(row['top1_probability']) for row in csv.DictReader(f)}
  source = imagenet_input.ImageNetInput.from_params(params, 'validation', include_filename=True)

  def top1(weights):
    return {p['filename'].decode(): float(np.max(p['probabilities']))
            for p in estimator.predict(source.input_fn, weights=weights) if p['filename']}
  averaged, trained = top1(wiring.eval_weights(estimator)), top1(None)
  assert len(written) == 16 and written.keys() == averaged.keys()
  assert all(abs(written[k] - averaged[k]) < 1e-5 for k in written)
  assert any(abs(written[k] - trained[k]) > 1e-3 for k in written)   # the averages are not the weights
