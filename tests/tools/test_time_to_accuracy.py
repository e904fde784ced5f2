"""tools/time_to_accuracy.py: the watcher (times, steps, stops) against a stand-in run, the table, the refusals, and
one tiny real run read through our eval_results.json."""
import json
import os
import subprocess
import sys
import textwrap

from absl import app
import pytest

from tests.helpers import procs
from tools import time_to_accuracy as tta

# A stand-in for resnet_main: writes eval_results.json (atomically, as the estimator) at the given seconds after it
# starts, a progress line before each, then sleeps until END; on SIGTERM it records the last step it wrote and exits
# 0, as resnet_main does (a checkpoint, a clean exit).
_STAND_IN = textwrap.dedent('''
    import json, os, signal, sys, time
    model_dir, schedule, end = sys.argv[1], json.loads(sys.argv[2]), float(sys.argv[3])
    start, last, deaf = time.time(), None, len(sys.argv) > 4   # deaf: the first SIGTERM is lost
    def stop(*_):
      global deaf
      if deaf:
        deaf = False
        return
      with open(os.path.join(model_dir, 'stopped.json'), 'w') as f:
        json.dump({'last_step': last, 'seconds': time.time() - start}, f)
      sys.exit(0)
    signal.signal(signal.SIGTERM, stop)
    for seconds, step, record in schedule:
      time.sleep(max(0.0, start + seconds - time.time()))
      print(f'I1129 estimator.py:359] step {step}/40 loss=1.0 lr=0.1 {10.0 * step:.1f} img/s ETA 0:01', flush=True)
      with open(os.path.join(model_dir, 'tmp.json'), 'w') as f:
        json.dump(dict(record, global_step=step), f)
      last = step
      os.replace(os.path.join(model_dir, 'tmp.json'), os.path.join(model_dir, 'eval_results.json'))
    time.sleep(max(0.0, start + end - time.time()))
''')
# Evaluations at 0.3, 0.8, 1.3 and 4.0 s; top-1 first >= 0.95 at step 30 (1.3 s).
_SCHEDULE = [(0.3, 10, {'top_1_accuracy': 0.5, 'loss': 1.2}), (0.8, 20, {'top_1_accuracy': 0.8, 'loss': 0.7}),
             (1.3, 30, {'top_1_accuracy': 0.96, 'loss': 0.3}), (4.0, 40, {'top_1_accuracy': 0.99, 'loss': 0.1})]


def _watch(tmp_path, target=0.95, end=30.0, metric='top_1_accuracy', goal='max', deaf=False, **kwargs):
  script = tmp_path / 'stand_in.py'
  script.write_text(_STAND_IN)
  model_dir = str(tmp_path / 'run-1')
  os.makedirs(model_dir)
  command = [sys.executable, str(script), model_dir, json.dumps(_SCHEDULE), str(end)] + (['deaf'] if deaf else [])
  run = tta.watch(command, model_dir, model_dir + '.log', metric, target, goal, poll_seconds=0.05, **kwargs)
  stopped = os.path.join(model_dir, 'stopped.json')
  return run, (json.load(open(stopped)) if os.path.exists(stopped) else None)


def test_the_first_evaluation_at_the_target_gives_minutes_and_step_and_stops_the_run(tmp_path):
  run, stopped = _watch(tmp_path, max_minutes=1.0)
  assert run['reached'] and run['step'] == 30 and run['value'] == 0.96 and run['stopped'] == 'target'
  assert 1.3 <= run['minutes'] * 60 < 1.3 + 5.0    # written 1.3 s after the script began; start-up comes first
  assert [e['step'] for e in run['evaluations']] == [10, 20, 30]
  assert stopped is not None and stopped['last_step'] == 30   # SIGTERM right after step 30: 40 never came
  assert stopped['seconds'] < 4.0 and run['exit_code'] == 0 and run['best'] == 0.96
  assert tta.log_images_per_sec(run['log']) == 250.0   # lines 100, 200, 300 img/s: the first (tracing) left out


def test_a_lost_sigterm_is_sent_again(tmp_path, monkeypatch):
  # One that lands before resnet_main handles signals, or where no training loop can honour it, does not stop it.
  monkeypatch.setattr(tta.repeat_runs, 'RESEND_SECONDS', 0.5)
  run, stopped = _watch(tmp_path, max_minutes=1.0, deaf=True)
  assert run['stopped'] == 'target' and run['step'] == 30 and stopped['last_step'] == 30
  assert stopped['seconds'] < 4.0 and run['exit_code'] == 0


def test_stop_at_target_false_lets_the_run_end_and_keeps_the_first_crossing(tmp_path):
  run, stopped = _watch(tmp_path, end=4.3, max_minutes=1.0, stop_at_target=False)
  assert stopped is None and run['stopped'] is None and run['exit_code'] == 0
  assert run['reached'] and run['step'] == 30 and 1.3 <= run['minutes'] * 60 < 4.0
  assert [e['step'] for e in run['evaluations']] == [10, 20, 30, 40] and run['best'] == 0.99


def test_a_run_short_of_the_target_is_stopped_at_the_cap_with_its_best(tmp_path):
  run, stopped = _watch(tmp_path, target=0.999, max_minutes=3.0 / 60)   # between steps 30 (1.3 s) and 40 (4 s)
  assert not run['reached'] and run['minutes'] is None and run['stopped'] == 'cap'
  assert run['best'] == 0.96 and run['best_step'] == 30 and stopped['last_step'] == 30
  assert run['wall_minutes'] * 60 < 15


def test_a_loss_target_counts_downwards(tmp_path):
  run, _ = _watch(tmp_path, target=0.5, metric='loss', goal='min', max_minutes=1.0)
  assert run['reached'] and run['step'] == 30 and run['best'] == 0.3
  assert tta.metric_goal('loss') == 'min' and tta.metric_goal('mAP') == 'max'


def test_a_metric_the_evaluations_lack_is_named_with_the_ones_they_have_and_the_run_stopped(tmp_path):
  with pytest.raises(tta.MetricError, match=r"no number 'mAP'.*global_step, loss, top_1_accuracy"):
    _watch(tmp_path, metric='mAP', max_minutes=1.0)
  stopped = json.load(open(tmp_path / 'run-1' / 'stopped.json'))
  assert stopped['last_step'] == 10


def _run(reached, minutes=None, step=None, best=0.9, rate=100.0, code=0, stopped='target'):
  return {'reached': reached, 'minutes': minutes, 'step': step, 'best': best, 'images_per_sec': rate,
          'exit_code': code, 'stopped': stopped if reached else 'cap'}


def test_the_table_gives_reached_k_of_n_minutes_and_steps_over_the_runs_that_reached():
  results = {'lamb': [_run(True, 2.0, 300, 0.97, 120.0), _run(False, best=0.93, rate=110.0),
                      _run(True, 3.0, 350, 0.96, 130.0)],
             'momentum': [_run(False, best=0.6), _run(False, best=None, rate=None, code=1, stopped=None)]}
  results['momentum'][1].update(stopped=None)
  lines = tta.table(results, 'top_1_accuracy', 0.95, 'max', 20).splitlines()
  assert 'minutes to top_1_accuracy >= 0.95' in lines[0]
  assert lines[2].split() == ['lamb', '2/3', '2.50', '(2.00-3.00)', '325', '0.960', '(0.930-0.970)', '120.0']
  assert lines[3].split()[:2] == ['momentum', '0/2'] and '(1 failed)' in lines[3]
  assert 'not reached in 20 min (1 ended first)' in lines[3] and '0.600 (0.600-0.600)' in lines[3]
  assert lines[4].split() == ['torchvision', '-', 'not', 'run', '(no', '--torch_python)']
  results['torchvision'] = [_run(True, 4.0, 64, 0.97, 90.0)]   # run: a row of its own, no line saying why not
  lines = tta.table(results, 'top_1_accuracy', 0.95, 'max', 20).splitlines()
  assert len(lines) == 5 and lines[4].split()[:4] == ['torchvision', '1/1', '4.00', '(4.00-4.00)']


def test_recipes_are_name_equals_flags_and_bad_ones_are_refused():
  assert tta.parse_recipe("lamb=--param_overrides=optimizer=lamb --train_steps=600") == tta.Recipe(
      'lamb', ('--param_overrides=optimizer=lamb', '--train_steps=600'))
  assert tta.parse_recipe('ours=') == tta.Recipe('ours', ())
  for text, message in (('lamb', 'has no "="'), ('a b=--x', 'must be letters'), ('s=--random_seed=3', 'unseeded'),
                        ('m=--model_dir=x', "this tool's to set")):
    with pytest.raises(app.UsageError, match=message):
      tta.parse_recipe(text)
  with pytest.raises(app.UsageError, match='more than once: a'):
    tta.plan_recipes(['a=', 'a=--train_steps=3'], None)
  # The common flags too (after --): a --model_dir there would win over each run's and make runs 2..N resume run 1.
  for common in (['--data_dir=d', '--model_dir=x'], ['--mode=train']):
    with pytest.raises(app.UsageError, match="this tool's to set"):
      tta.repeat_runs.check_args(common)
  assert [(r.name, r.kind) for r in tta.plan_recipes([], 'ResNet50', torchvision=True)] == [
      ('ours', 'ours'), ('keras-ResNet50', 'keras'), ('torchvision', 'torchvision')]


def test_an_output_dir_with_runs_of_the_plan_is_refused_not_resumed(tmp_path):
  (tmp_path / 'ours-2').mkdir()
  proc = subprocess.run([sys.executable, '-m', 'tools.time_to_accuracy', f'--output_dir={tmp_path}', '--target=0.9',
                         '--runs=2', '--', '--data_dir=nowhere'], capture_output=True, text=True,
                        env=procs.base_env(), cwd=procs.ROOT, timeout=120, check=False)
  assert proc.returncode != 0 and 'ours-2 exist already' in proc.stderr, proc.stderr[-1000:]
  assert 'cannot be resumed' in proc.stderr and not (tmp_path / 'ours-1').exists()


@pytest.mark.slow
def test_a_tiny_real_run_is_timed_from_our_eval_results_and_stopped_at_the_target(records, tmp_path):
  out = tmp_path / 'tta'
  proc = subprocess.run(
      [sys.executable, '-m', 'tools.time_to_accuracy', f'--output_dir={out}', '--target=0.0', '--runs=1',
       '--max_minutes=3', '--recipe=small=--param_overrides=train_steps=40', '--keras_application=ResNet50',
       '--keras_epochs=2', '--', f'--data_dir={records}',
       '--config_file=demo', '--param_overrides=resnet_depth=10,image_size=32,train_batch_size=4,eval_batch_size=4,'
       'train_steps=6,iterations_per_loop=2,steps_per_eval=2'],
      capture_output=True, text=True, env=procs.base_env(), cwd=procs.ROOT, timeout=300, check=False)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  runs = json.load(open(out / 'time_to_accuracy.json'))['runs']
  run, = runs['small']
  # Target 0.0: the first evaluation (step 2) reaches it; the run is stopped there, short of its 40 steps. SIGTERM
  # in training saves and exits 0; in the next evaluation (after its checkpoint) it ends the process (-15).
  assert run['reached'] and run['step'] == 2 and run['stopped'] == 'target' and run['exit_code'] in (0, -15)
  assert 0 < run['minutes'] <= run['wall_minutes'] and run['images_per_sec'] > 0
  assert run['evaluations'][0] == {'minutes': run['minutes'], 'step': 2, 'value': run['value']}
  with open(out / 'small-1' / 'eval_results.json') as f:
    assert json.load(f)['global_step'] < 40
  assert 'step 40/40' not in open(out / 'small-1.log').read() and 'train_steps=40' in ' '.join(run['command'])
  assert 'random_seed=null' in run['command'][-1]
  row = [line for line in proc.stdout.splitlines() if line.startswith('small ')][-1]   # the table's, after the run's
  assert row.split()[1:3] == ['1/1', f'{run["minutes"]:.2f}'] and row.split()[4] == '2'
  assert '$ python -m tools.time_to_accuracy --output_dir=' in proc.stdout and 'torchvision' in proc.stdout
  # The Keras row: keras.applications.ResNet50 at the common flags' 32 px, batch 4 and classes, timed by the same
  # watcher from the validation accuracy its child writes after epoch 1 (global_step = the epoch's batches).
  keras_run, = runs['keras-ResNet50']
  train_images = json.load(open(os.path.join(records, 'summary.json')))['splits']['train']['images']
  assert keras_run['reached'] and keras_run['step'] == -(-train_images // 4) and keras_run['stopped'] == 'target'
  assert len(keras_run['evaluations']) == 1 and keras_run['images_per_sec'] > 0
  assert 'keras.applications.ResNet50(weights=None, input_shape=(32, 32, 3), classes=4)' in open(
      out / 'keras-ResNet50-1.log').read()


def test_a_nan_evaluation_never_becomes_the_best():
  assert not tta.better(float('nan'), None, 'max') and tta.better(0.5, None, 'max')
  assert tta.better(0.6, 0.5, 'max') and not tta.better(float('nan'), 0.5, 'min') and tta.better(0.4, 0.5, 'min')


# ------------------------------------------------------------------------------------------------ the torchvision row
def test_the_torchvision_row_gets_the_records_as_image_files_with_the_models_labels(records, tmp_path):
  import tensorflow as tf   # pylint: disable=import-outside-toplevel
  from official_input import example_schema   # pylint: disable=import-outside-toplevel
  out = str(tmp_path / 'images')
  spec = tta.export_images([f'--data_dir={records}', '--config_file=demo'], out)
  summary = json.load(open(os.path.join(records, 'summary.json')))
  assert spec['images'] == {s: summary['splits'][s]['images'] for s in ('train', 'validation')}
  assert (spec['resnet_depth'], spec['image_size'], spec['batch_size'], spec['num_classes']) == (18, 64, 32, 4)
  stored = {}   # the encoded bytes of every validation record -> its 0-based label
  for record in tf.data.TFRecordDataset(tf.io.gfile.glob(os.path.join(records, 'validation-*'))):
    example = tf.train.Example.FromString(record.numpy()).features.feature
    stored[example[example_schema.ENCODED].bytes_list.value[0]] = example[example_schema.LABEL].int64_list.value[0] - 1
  written = {}
  for label in os.listdir(os.path.join(out, 'validation')):
    for name in os.listdir(os.path.join(out, 'validation', label)):
      written[open(os.path.join(out, 'validation', label, name), 'rb').read()] = int(label)
  assert written == stored and sorted(set(written.values())) == [0, 1, 2, 3]
  # The same records again, at another image size: the images are reused, the spec is the run's.
  stamp = os.stat(os.path.join(out, 'export.json')).st_mtime_ns
  again = tta.export_images([f'--data_dir={records}', '--config_file=demo', '--param_overrides=image_size=32'], out)
  assert again['image_size'] == 32 and again['images'] == spec['images']
  assert os.stat(os.path.join(out, 'export.json')).st_mtime_ns == stamp
  # A half-written export (no export.json) or one of other records is written anew.
  os.remove(os.path.join(out, 'export.json'))
  (tmp_path / 'images' / 'validation' / '0' / 'stale.jpg').write_bytes(b'x')
  assert tta.export_images([f'--data_dir={records}', '--config_file=demo'], out) == spec
  assert not (tmp_path / 'images' / 'validation' / '0' / 'stale.jpg').exists()
  # Classes that contradict the data are refused before anything is written (params' own check, before the
  # export's label check), not written as label folders the recipe never reads.
  with pytest.raises(ValueError, match='num_label_classes=3 but .* lists 4 classes'):
    tta.export_images([f'--data_dir={records}', '--config_file=demo', '--num_label_classes=3'],
                      str(tmp_path / 'other'))
  assert not (tmp_path / 'other').exists()
  # A run that keeps class 0 as background (num_label_classes = classes + 1) reads the stored labels as they are:
  # the folders are the model's classes 1..4, as the run's own input gives them.
  background = tta.export_images([f'--data_dir={records}', '--config_file=demo', '--num_label_classes=5'],
                                 str(tmp_path / 'background'))
  assert background['num_classes'] == 5
  assert sorted(os.listdir(tmp_path / 'background' / 'validation')) == ['1', '2', '3', '4']


def test_the_reference_recipe_scales_its_learning_rate_and_steps_as_torchvision_does(tmp_path):
  from tools import torchvision_recipe as tr   # pylint: disable=import-outside-toplevel
  assert tr.learning_rate({'batch_size': 32}) == pytest.approx(0.0125)   # 0.1 at 256 a step, scaled linearly
  assert tr.learning_rate({'batch_size': 32, 'learning_rate': 0.05}) == 0.05
  # The reference's StepLR(30) over 90 epochs: x0.1 after epochs 30 and 60, never a third drop.
  assert [tr.milestones(e) for e in (90, 31, 7, 4, 2, 1)] == [[30, 60], [10, 21], [2, 5], [1, 3], [1], []]
  assert tr.batches_per_epoch(1024, 32) == 32 and tr.batches_per_epoch(1000, 32) == 32   # the last, smaller batch
  for label in (0, 2, 10):
    (tmp_path / 'train' / str(label)).mkdir(parents=True)
    (tmp_path / 'train' / str(label) / 'a.jpg').write_bytes(b'x')
  (tmp_path / 'train' / '2' / 'notes.txt').write_text('not an image')
  assert tr.list_images(str(tmp_path / 'train')) == [
      (str(tmp_path / 'train' / label / 'a.jpg'), int(label)) for label in ('0', '2', '10')]
  with pytest.raises(FileNotFoundError, match='No exported images in'):
    tr.list_images(str(tmp_path / 'validation'))
  tr.write_result(str(tmp_path), {'global_step': 3, 'top_1_accuracy': 0.5})
  assert json.load(open(tmp_path / 'eval_results.json'))['global_step'] == 3 and sorted(os.listdir(tmp_path)) == [
      'eval_results.json', 'train']


# A stand-in for the torch Python: checks it is handed tools/torchvision_recipe.py and the run's spec, then writes
# two epochs' records (top-1 0.5 then 1.0) as that script does.
_FAKE_TORCH = textwrap.dedent('''\
    #!{python}
    import json, os, sys, time
    if sys.argv[1:2] == ['-c']:   # the check that it imports torch, torchvision and PIL
      sys.exit(0)
    assert os.path.basename(sys.argv[1]) == 'torchvision_recipe.py', sys.argv
    spec = json.loads(sys.argv[2])
    assert os.path.isdir(os.path.join(spec['images_dir'], 'train', '0')), spec
    print('fake torch', json.dumps(spec), flush=True)
    for epoch, top1 in ((1, 0.5), (2, 1.0)):
      time.sleep(0.3)
      with open(os.path.join(spec['model_dir'], 'tmp'), 'w') as f:
        json.dump({{'global_step': epoch * 12, 'top_1_accuracy': top1, 'images_per_sec': 10.0 * epoch}}, f)
      os.replace(os.path.join(spec['model_dir'], 'tmp'), os.path.join(spec['model_dir'], 'eval_results.json'))
''')


def test_the_torchvision_row_runs_in_the_named_python_and_is_timed_by_the_same_watcher(records, tmp_path):
  fake = tmp_path / 'python'
  fake.write_text(_FAKE_TORCH.format(python=sys.executable))
  fake.chmod(0o755)
  out = tmp_path / 'tta'
  common = [f'--data_dir={records}', '--config_file=demo', '--param_overrides=image_size=32,train_batch_size=4']
  proc = subprocess.run(
      [sys.executable, '-m', 'tools.time_to_accuracy', f'--output_dir={out}', '--target=0.9', '--runs=1',
       '--max_minutes=2', f'--torch_python={fake}', '--torchvision_epochs=7', '--recipe=fails=--no_such_flag',
       '--poll_seconds=0.05',
       '--', *common], capture_output=True, text=True, env=procs.base_env(), cwd=procs.ROOT, timeout=300, check=False)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  run, = json.load(open(out / 'time_to_accuracy.json'))['runs']['torchvision']
  # Epoch 2 (step 24, top-1 1.0) reaches 0.9; epoch 1's record may be replaced before a poll on a loaded machine.
  values = [e['value'] for e in run['evaluations']]
  assert run['reached'] and run['step'] == 24 and values[-1] == 1.0 and set(values) <= {0.5, 1.0}
  assert run['images_per_sec'] == 20.0   # the epochs' median, the first (warm-up) left out where there are two
  spec = json.loads(open(out / 'torchvision-1.log').read().split('fake torch ', 1)[1].splitlines()[0])
  assert (spec['resnet_depth'], spec['image_size'], spec['batch_size'], spec['num_classes'], spec['epochs']) == (
      18, 32, 4, 4, 7)
  assert spec['model_dir'] == str(out / 'torchvision-1') and spec['learning_rate'] is None
  row = [line for line in proc.stdout.splitlines() if line.startswith('torchvision ')][-1]
  assert row.split()[1] == '1/1' and 'not run' not in proc.stdout
  # Refusals before any run: a Python that is not there, is a folder or lacks torch; a depth torchvision lacks; a
  # metric it does not report.
  for i, (extra, more, message) in enumerate((
      ([f'--torch_python={tmp_path}/nope'], [], 'is not an executable Python'),
      ([f'--torch_python={tmp_path}'], [], 'is not an executable Python'),
      ([f'--torch_python={sys.executable}'], [], 'cannot import torch'),   # this project's: never torch
      ([f'--torch_python={fake}', '--metric=mAP'], [], 'top_1_accuracy only'),
      ([f'--torch_python={fake}'], ['--resnet_depth=10'], 'torchvision has no ResNet-10'))):
    proc = subprocess.run([sys.executable, '-m', 'tools.time_to_accuracy', f'--output_dir={tmp_path}/x{i}',
                           '--target=0.9', *extra, '--', *common, *more], capture_output=True, text=True,
                          env=procs.base_env(), cwd=procs.ROOT, timeout=300, check=False)
    assert not os.path.exists(f'{tmp_path}/x{i}/ours-1'), message
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get('TORCH_PYTHON'), reason='TORCH_PYTHON (a Python with torch and torchvision, '
                    'never this project\'s) unset: torch is not a dependency')
def test_torchvisions_reference_recipe_really_trains_on_the_exported_images(records, tmp_path):
  out = tmp_path / 'images'
  tta.export_images([f'--data_dir={records}', '--config_file=demo'], str(out))
  model_dir = tmp_path / 'run'
  spec = {'resnet_depth': 18, 'image_size': 32, 'batch_size': 8, 'num_classes': 4, 'epochs': 2,
          'model_dir': str(model_dir), 'images_dir': str(out), 'learning_rate': None, 'workers': 0}
  proc = subprocess.run([os.environ['TORCH_PYTHON'], tta.TORCHVISION_SCRIPT, json.dumps(spec)], capture_output=True,
                        text=True, timeout=300, check=False)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  record = json.load(open(model_dir / 'eval_results.json'))
  train_images = json.load(open(out / 'spec.json'))['images']['train']
  assert record['epoch'] == 2 and record['global_step'] == 2 * -(-train_images // 8)
  assert 0.0 <= record['top_1_accuracy'] <= 1.0 and record['images_per_sec'] > 0
  assert 'lr 0.003125, x0.1 after epochs [1] of 2' in proc.stdout and 'epoch 2/2' in proc.stdout
