"""resnet/run_dir/hparams.py: each run in TensorBoard's HParams dashboard with its params and metrics, once a run."""
import glob
import json
import os
import subprocess
import sys
import time
import urllib.request

import pytest
import tensorflow as tf

from params import resnet_config
from resnet.run_dir import hparams
from tests.helpers import cli
from tests.helpers import procs


def test_a_run_shows_the_key_params_and_those_it_changed_not_where_it_ran():
  params = dict(resnet_config.RESNET_CFG, model_dir='/runs/a', data_dir='/data', export_dir='/exports',
                crop_area_range=[0.7, 1.0], random_seed=None, mixup_alpha=0.2, tpu='grpc://x')
  shown = hparams.run_hparams(params)
  assert set(hparams.KEY_PARAMS) <= set(shown) and shown['base_learning_rate'] == 0.1   # a default, still shown
  assert shown['mixup_alpha'] == 0.2 and shown['data_dir'] == '/data'
  assert 'random_seed' not in shown   # the default
  for where in ('model_dir', 'export_dir', 'tpu'):
    assert where not in shown
  assert all(isinstance(v, (bool, int, float, str)) for v in shown.values())
  changed = hparams.run_hparams(dict(params, crop_area_range=[0.35, 1.0], label_smoothing=0.1, random_seed=None,
                                     lr_warmup_epochs=None))
  assert changed['crop_area_range'] == '[0.35, 1.0]' and changed['lr_warmup_epochs'] == 'null'
  assert all(name in resnet_config.PARAMS_BY_NAME for name in hparams.KEY_PARAMS + hparams.NOT_COMPARED)


def _events(directory):
  """(tag, plugin, step, value) of every summary in directory's own events files."""
  found = []
  for path in sorted(glob.glob(os.path.join(directory, 'events.*'))):
    for event in tf.compat.v1.train.summary_iterator(path):
      for value in event.summary.value:
        number = float(tf.make_ndarray(value.tensor)) if value.tensor.tensor_shape.dim == [] and \
            value.tensor.dtype == tf.float32.as_datatype_enum else None
        found.append((value.tag, value.metadata.plugin_data.plugin_name, event.step, number))
  return found


def _session_hparams(model_dir):
  from tensorboard.plugins.hparams import metadata  # pylint: disable=import-outside-toplevel
  sessions = []
  for path in sorted(glob.glob(os.path.join(model_dir, 'events.*'))):
    for event in tf.compat.v1.train.summary_iterator(path):
      for value in event.summary.value:
        if value.tag == metadata.SESSION_START_INFO_TAG:
          info = metadata.parse_session_start_info_plugin_data(value.metadata.plugin_data.content)
          sessions.append({k: v.WhichOneof('kind') and getattr(v, v.WhichOneof('kind')) for k, v in
                           info.hparams.items()})
  return sessions


def _train(data_dir, model_dir, *flags):
  result = cli.run_in_process('--mode=train_and_eval', f'--data_dir={data_dir}', f'--model_dir={model_dir}',
                              '--iterations_per_loop=2', '--steps_per_eval=2', '--num_train_images=32', *flags)
  assert result.code == 0, result.log[-3000:]
  return result


def _tensorboard_hparams(logdir, tmp_path, runs=2):
  """TensorBoard's own answer for the hparams plugin (its HTTP data API), as the dashboard asks for it, once it
  lists ``runs`` session groups."""
  port, = procs.free_ports(1)
  log = open(tmp_path / 'tensorboard.log', 'w')
  tb = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), 'tensorboard'), f'--logdir={logdir}',
                         f'--port={port}', '--host=127.0.0.1', '--load_fast=false', '--reload_interval=1'],
                        stdout=log, stderr=subprocess.STDOUT, env=procs.base_env())
  base = f'http://127.0.0.1:{port}/data/plugin/hparams'

  def post(route, body):
    request = urllib.request.Request(f'{base}/{route}', data=json.dumps(body).encode(),
                                     headers={'Content-Type': 'application/json', 'X-TensorBoard-Feature-Flags': '{}'})
    with urllib.request.urlopen(request, timeout=10) as response:
      return json.loads(response.read())
  try:
    deadline = time.time() + 90
    while True:
      try:
        experiment = post('experiment', {'experimentName': ''})
        groups = post('session_groups', {'experimentName': '', 'allowedStatuses': [
            'STATUS_UNKNOWN', 'STATUS_SUCCESS', 'STATUS_FAILURE', 'STATUS_RUNNING'], 'startIndex': 0,
            'sliceSize': 100, 'colParams': []})
        if experiment.get('hparamInfos') and len(groups.get('sessionGroups', [])) >= runs:
          return experiment, groups
      except OSError:
        pass
      if time.time() > deadline or tb.poll() is not None:
        raise AssertionError(f'TensorBoard gave no hparams for {runs} runs:\n{open(tmp_path / "tensorboard.log").read()}')
      time.sleep(1)
  finally:
    tb.terminate()
    tb.wait(30)
    log.close()


@pytest.mark.slow
def test_a_folder_of_runs_shows_each_run_with_its_params_and_metrics_and_a_resumed_run_keeps_its_session(tmp_path):
  data_dir = cli.make_tiny_dataset(str(tmp_path / 'data'))
  runs = tmp_path / 'runs'
  _train(data_dir, runs / 'a', '--train_steps=4')
  logged = _train(data_dir, runs / 'b', '--train_steps=4', '--base_learning_rate=0.01', '--label_smoothing=0.1').log
  assert 'HParams session for TensorBoard' in logged and 'base_learning_rate=0.01' in logged   # what it records
  for name, lr in (('a', 0.1), ('b', 0.01)):
    model_dir = str(runs / name)
    sessions = _session_hparams(model_dir)
    assert len(sessions) == 1 and sessions[0]['base_learning_rate'] == pytest.approx(lr)
    assert sessions[0]['train_steps'] == 4 and 'model_dir' not in sessions[0]
    assert hparams.read_session(model_dir)['hparams']['base_learning_rate'] == pytest.approx(lr)
    evals = _events(os.path.join(model_dir, 'eval'))
    steps = lambda tag: [step for t, plugin, step, _ in evals if t == tag and plugin == 'scalars']
    assert steps('top_1_accuracy') == [2, 4] and steps('loss') == [2, 4] and steps('best/top_1_accuracy') == [4]
    with open(os.path.join(model_dir, 'best', 'eval_results.json')) as f:
      best = json.load(f)['top_1_accuracy']
    assert [v for t, _, _, v in evals if t == 'best/top_1_accuracy'] == [pytest.approx(best)]
  assert 'label_smoothing' in _session_hparams(str(runs / 'b'))[0]

  # Resumed with a longer train_steps: one session still (the first start's), the best written again at its end.
  _train(data_dir, runs / 'a', '--train_steps=6')
  assert len(_session_hparams(str(runs / 'a'))) == 1
  assert [s for t, _, s, _ in _events(str(runs / 'a' / 'eval')) if t == 'best/top_1_accuracy'] == [4, 6]

  experiment, groups = _tensorboard_hparams(str(runs), tmp_path)
  infos = {info['name']: info for info in experiment['hparamInfos']}
  assert infos['base_learning_rate']['domainInterval'] == {'minValue': 0.01, 'maxValue': 0.1}
  assert 'label_smoothing' in infos   # one run changed it: a column for every run
  metrics = {(m['name'].get('group', ''), m['name']['tag']) for m in experiment['metricInfos']}
  assert {('eval', 'top_1_accuracy'), ('eval', 'loss'), ('eval', 'best/top_1_accuracy')} <= metrics
  by_lr = {}
  for group in groups['sessionGroups']:
    session, = group['sessions']
    by_lr[group['hparams']['base_learning_rate']] = (session['name'], {
        m['name']['tag']: m['value'] for m in session['metricValues'] if m['name'].get('group') == 'eval'})
  assert sorted(by_lr) == [0.01, 0.1]
  assert by_lr[0.1][0] == 'a' and by_lr[0.01][0] == 'b'
  for _, values in by_lr.values():
    assert {'top_1_accuracy', 'loss', 'best/top_1_accuracy'} <= set(values)
