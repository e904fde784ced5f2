"""tools/sweep.py: the space it takes, the trials it runs as ordinary runs, prunes, resumes, and the best recipe."""
import json
import os
import shutil
import sys

import optuna
import pytest

from resnet.run_dir import hparams
from tests.helpers import cli
from tools import sweep

SPACE = """
metric: top_1_accuracy
params:
  base_learning_rate: {low: 0.01, high: 1.0, log: true}
  optimizer: [momentum, adamw]
  crop_area_range: [[0.35, 1.0], [0.7, 1.0]]
  train_batch_size: {low: 8, high: 32, step: 8}
"""


def test_a_space_takes_choices_and_ranges_of_the_params_and_names_each_mistake():
  space = sweep.parse_space(SPACE, 'space.yaml')
  assert space.metric == 'top_1_accuracy' and space.goal == 'max'
  assert sweep.parse_space('metric: loss\nparams: {weight_decay: [0.0001]}', 's').goal == 'min'   # best/'s rule
  by_name = {d.name: d for d in space.dimensions}
  assert by_name['base_learning_rate'].log and by_name['optimizer'].choices == ('momentum', 'adamw')
  study = optuna.create_study()
  trial = study.ask()
  values = {d.name: d.suggest(trial) for d in space.dimensions}
  assert values['crop_area_range'] in ([0.35, 1.0], [0.7, 1.0]) and values['train_batch_size'] in (8, 16, 24, 32)
  assert 0.01 <= values['base_learning_rate'] <= 1.0 and isinstance(values['train_batch_size'], int)
  for text, message in (
      ('params: {base_learning_rat: [0.1]}', "'base_learning_rat' is not a param \\(did you mean base_learning_rate"),
      ('params: {optimizer: [momentum, sgd]}', "optimizer must be one of .* got 'sgd'"),
      ('params: {weight_decay: {low: 0, high: 0.1, log: true}}', 'log-scale range needs low > 0'),
      ('params: {weight_decay: {low: 0.1, high: 0.01}}', r'low \(0.1\) must be below high'),
      ('params: {train_batch_size: {low: 8, high: 20.5}}', 'int param: low, high and step must be whole'),
      ('params: {optimizer: {low: 1, high: 2}}', 'str param: give it choices'),
      ('params: {label_smoothing: {low: 0.0, high: 1.5}}', 'label_smoothing must be >= 0 and < 1, got 1.5'),
      ('params: {weight_decay: {min: 0.1}}', r"unknown keys \['min'\]"),
      ('params: {model_dir: [a]}', "model_dir is the sweep's to set"),
      ('params: {}', 'at least one param'),
      ('metric: top_1_accuracy\ngoal: up\nparams: {weight_decay: [0.1]}', "best_metric_goal must be one of")):
    with pytest.raises(sweep.SweepError, match=message):
      sweep.parse_space(text, 'space.yaml')


def test_the_trial_command_leaves_the_searched_params_and_the_run_folder_to_the_sweep():
  space = sweep.parse_space(SPACE, 'space.yaml')
  for arg in ('--base_learning_rate=0.3', '--model_dir=x', '--mode=train', '--best_metric=loss',
              '--crop_area_range=0.5,1.0'):
    with pytest.raises(sweep.SweepError, match='remove it'):
      sweep.check_args(['--config_file=demo', arg], space)
  sweep.check_args(['--config_file=demo', '--train_steps=5', '--nouse_tpu'], space)
  command = sweep.trial_command(['--train_steps=5'], 'out/trial-000', {'base_learning_rate': 0.3}, space)
  assert command[-1] == ('--param_overrides={"base_learning_rate": 0.3, "best_metric": "top_1_accuracy", '
                         '"best_metric_goal": "max", "keep_best_checkpoint": true}')
  assert '--mode=train_and_eval' in command and '--model_dir=out/trial-000' in command
  keys = sweep.given_keys(['--config_file=demo', '--param_overrides=train_steps=50,random_seed=null',
                           '--data_dir=d', '--nouse_tpu', '--skip_host_call=true'])
  assert {'resnet_depth', 'base_learning_rate', 'train_steps', 'random_seed', 'data_dir', 'use_tpu',
          'skip_train_summaries'} <= set(keys)   # demo.yaml's keys, the overrides', the flags' (aliases resolved)
  with pytest.raises(ValueError, match='no file, nor a config'):
    sweep.given_keys(['--config_file=no_such_config'])


def test_a_sweep_needs_a_budget_local_storage_and_keeps_its_space(tmp_path, monkeypatch):
  with pytest.raises(sweep.SweepError, match='SQLite file, which needs a local disk'):
    sweep.open_study('gs://bucket/sweep', SPACE, [])
  with pytest.raises(sweep.SweepError, match='holds no sweep yet: give --space'):
    sweep.open_study(str(tmp_path / 'new'), None, [])
  study, space, args = sweep.open_study(str(tmp_path), SPACE, ['--train_steps=5'])
  with pytest.raises(sweep.SweepError, match='Give a budget'):
    sweep.run_sweep(study, space, args, str(tmp_path), None, None)
  assert sweep.open_study(str(tmp_path), None, [])[1:] == (space, ['--train_steps=5'])   # a second worker joins
  with pytest.raises(sweep.SweepError, match='another space'):
    sweep.open_study(str(tmp_path), 'params: {weight_decay: [0.1]}', ['--train_steps=5'])
  with pytest.raises(sweep.SweepError, match='another trial command'):
    sweep.open_study(str(tmp_path), SPACE, ['--train_steps=6'])
  monkeypatch.setitem(sys.modules, 'optuna', None)   # not installed
  with pytest.raises(sweep.SweepError, match=r"needs Optuna.*pip install -e '\.\[sweep\]'"):
    sweep.open_study(str(tmp_path), None, [])


def _tiny_args(data_dir):
  return [*cli.TINY, f'--data_dir={data_dir}', '--num_train_images=32', '--train_steps=40', '--steps_per_eval=10',
          '--iterations_per_loop=5', '--param_overrides=random_seed=null']


def _trials(study):
  return {t.number: t for t in study.get_trials()}


@pytest.mark.slow
def test_trials_are_ordinary_runs_pruned_from_their_evaluations_resumed_and_the_best_becomes_a_config(tmp_path):
  data_dir = cli.make_tiny_dataset(str(tmp_path / 'data'))
  out = str(tmp_path / 'sweep')
  space_text = 'params:\n  base_learning_rate: [0.05, 0.2]\n'
  lines = []
  study, space, args = sweep.open_study(out, space_text, _tiny_args(data_dir), pruner=optuna.pruners.NopPruner())
  # Polled every 3 s, longer than a trial's evaluations are apart: the final one is read after the process ends.
  sweep.run_sweep(study, space, args, out, trials=2, minutes=None, poll_seconds=3, say=lines.append)
  trials = _trials(study)
  assert [t.state.name for t in trials.values()] == ['COMPLETE', 'COMPLETE'], lines
  for t in trials.values():
    model_dir = t.user_attrs['model_dir']
    assert model_dir == os.path.join(out, f'trial-{t.number:03d}')
    with open(os.path.join(model_dir, 'best', 'eval_results.json')) as f:
      assert t.value == json.load(f)['top_1_accuracy']   # best/'s value: the checkpoint the run keeps
    # The evaluations, read as they appeared (a fast one may be overwritten before a look), the final one always.
    assert 40 in t.intermediate_values and set(t.intermediate_values) <= {10, 20, 30, 40}
    assert hparams.read_session(model_dir)['hparams']['base_learning_rate'] == t.params['base_learning_rate']
    assert cli.latest_step(model_dir) == 40
  best = study.best_trial
  with open(os.path.join(out, 'best.yaml')) as f:
    text = f.read()
  from params import params_yaml  # pylint: disable=import-outside-toplevel
  keys = params_yaml.yaml_mapping(text, 'best.yaml')
  assert f'trial {best.number}' in text and 'model_dir' not in keys and 'data_dir' not in keys
  from resnet.run_setup import run_params  # pylint: disable=import-outside-toplevel
  recipe = run_params.make_params({'data_dir': data_dir}, config_files=[('best', os.path.join(out, 'best.yaml'))])
  assert recipe.base_learning_rate == best.params['base_learning_rate']
  assert (recipe.resnet_depth, recipe.image_size, recipe.train_steps, recipe.random_seed) == (10, 32, 40, None)

  # Another worker joins with a pruner that gives up on anything: its trial stops at its first evaluation, with a
  # checkpoint (a resumable run), and is not the best.
  study, space, args = sweep.open_study(out, None, [], pruner=optuna.pruners.ThresholdPruner(lower=2.0))
  sweep.run_sweep(study, space, args, out, trials=3, minutes=None, poll_seconds=0.2, say=lines.append)
  pruned = _trials(study)[2]
  assert pruned.state.name == 'PRUNED' and 'pruned at step' in pruned.user_attrs['detail'], lines
  assert len(pruned.intermediate_values) == 2   # judged from its second evaluation on (prune_from_eval=2)
  stopped_at = cli.latest_step(pruned.user_attrs['model_dir'])
  assert 20 <= stopped_at < 40 and 'trial 2' not in open(f'{out}/best.yaml').read()

  # A trial the budget stopped is resumed from its checkpoint by the next run of the sweep, in its own model_dir.
  stopped_dir = os.path.join(out, 'trial-stopped')
  shutil.copytree(pruned.user_attrs['model_dir'], stopped_dir)
  trial = study.ask({'base_learning_rate': optuna.distributions.CategoricalDistribution([0.05, 0.2])})
  trial.set_user_attr('model_dir', stopped_dir)
  trial.set_user_attr('outcome', sweep.BUDGET)
  study.tell(trial, state=optuna.trial.TrialState.FAIL)
  study, space, args = sweep.open_study(out, None, [], pruner=optuna.pruners.NopPruner())
  sweep.run_sweep(study, space, args, out, trials=4, minutes=None, poll_seconds=0.2, say=lines.append)
  resumed = _trials(study)[4]
  assert resumed.state.name == 'COMPLETE' and resumed.user_attrs == dict(
      resumed.user_attrs, resumes=trial.number, model_dir=stopped_dir), lines
  assert cli.restored_steps(open(stopped_dir + '.log').read()) == [stopped_at] and cli.latest_step(stopped_dir) == 40
  assert len(study.get_trials()) == 5   # resumed once, and the budget counts the resumption, not the stopped one
