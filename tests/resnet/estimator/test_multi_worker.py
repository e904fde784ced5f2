"""Multi-worker training: 2 real worker processes on 127.0.0.1 (MultiWorkerMirroredStrategy) through resnet_main.

What is shown, and why this way:
- Two workers end with bit-identical trainable weights, and equal (rtol 1e-4) to a single process training the same
  global batch on the same data. Batch norm normalises per replica (as in the reference: no cross-replica BN), so
  the data is designed (tests/helpers/designed_data.py) for every replica's batch statistics to equal the global
  batch's while the workers' (image, label) pairs differ; see that module for the argument.
- With real TFRecords, each worker reads its own files (BN moving means differ between the workers, which proves
  different data) while the trainable weights stay identical; only the chief writes to the shared model_dir.
- BN moving statistics are per worker and never all-reduced (Keras BN variables have aggregation 'none'); the
  chief's go into the checkpoint, as the reference's TPUEstimator kept core 0's.

model_dir: all workers get the SAME model_dir (shared storage such as GCS in a real cluster). The chief writes
checkpoints, summaries, params.yaml and exports there; the others only read it to resume (so they must see it) and
write their throw-away checkpoint copies to a private temp dir, which is deleted at exit.
"""
import glob
import json
import os
import re
import time

import numpy as np
import pytest

from tests.helpers import cli
from tests.helpers import designed_data
from tests.helpers import procs

pytestmark = pytest.mark.slow  # end to end: whole runs, processes or their shared fixtures

TIMEOUT = 300  # for all processes of a test together; typically 30-60 s on 2 busy cores
STEPS = 4
# MultiWorkerMirroredStrategy's class is named CollectiveAllReduceStrategy.
MWMS_LOG = re.compile(r'Strategy: (MultiWorkerMirrored|CollectiveAllReduce)Strategy with 2 replica\(s\)')
# New interpreters, each with its own string-hash seed and address layout (forked ones share the fork server's):
# the workers agree bit for bit even where set or dict orders could differ between processes. The other tests
# fork their processes (tests/helpers/forkserver.py).
FRESH = {procs.NO_FORKSERVER: '1'}


def _load(path: str) -> dict:
  with np.load(path) as data:
    return {k: data[k] for k in data.files}


def _weights(dump: dict, prefix: str = 'w:') -> dict:
  return {k[len(prefix):]: v for k, v in dump.items() if k.startswith(prefix)}


def _is_moving_stat(name: str) -> bool:
  return 'moving_mean' in name or 'moving_variance' in name


def _max_abs_diff(a: dict, b: dict, keys) -> float:
  return max(float(np.max(np.abs(a[k] - b[k]))) for k in keys)


def _run_all(runs, tmp_path, timeout: float = TIMEOUT, first_failure_ends: bool = False):
  """Starts every (name, args, env) at once and waits until all have exited; returns {name: Proc}. One shared
  deadline: a worker left waiting in a collective for one that is gone fails the test there. ``first_failure_ends``:
  so does the first nonzero exit (a dead worker makes its peer fail or hang)."""
  with procs.processes() as started:
    by_name = {}
    for name, args, env in runs:
      by_name[name] = procs.Proc(args, str(tmp_path / f'{name}.log'), env)
      started.append(by_name[name])
    deadline = time.time() + timeout
    while any(p.poll() is None for p in by_name.values()):
      failed = [n for n, p in by_name.items() if p.poll() not in (None, 0)] if first_failure_ends else []
      if failed or time.time() > deadline:
        logs = ''.join(f'\n--- {n} (exit {p.poll()}) ---\n{p.tail(2500)}' for n, p in by_name.items())
        raise AssertionError(f'failed: {failed}, or not all ended within {timeout} s (one waits for another):{logs}')
      time.sleep(0.2)
    return by_name


def _start_all(runs, tmp_path):
  """Every run, which must all exit 0."""
  by_name = _run_all(runs, tmp_path, first_failure_ends=True)
  failed = [n for n, p in by_name.items() if p.poll() != 0]
  assert not failed, ''.join(f'\n--- {n} (exit {by_name[n].poll()}) ---\n{by_name[n].tail()}' for n in failed)
  return by_name


def test_designed_data_differs_per_worker_but_has_the_global_batch_statistics():
  (x0, y0), (x1, y1) = designed_data.per_worker_batches(seed=7, steps=STEPS, global_batch=8, image_size=32,
                                                        num_classes=4)
  for s in range(STEPS):
    pairs0 = {(x0[s][i].tobytes(), int(y0[s][i])) for i in range(4)}
    pairs1 = {(x1[s][i].tobytes(), int(y1[s][i])) for i in range(4)}
    assert not pairs0 & pairs1  # no worker-1 example is a worker-0 example
    both = np.concatenate([x0[s], x1[s]])
    np.testing.assert_allclose(both.mean(axis=0), x0[s].mean(axis=0), rtol=1e-5)
    np.testing.assert_allclose(both.var(axis=0), x1[s].var(axis=0), rtol=1e-4)


def test_two_workers_agree_with_each_other_and_with_a_single_process(tmp_path):
  """--worker_hosts/--task_index, --strategy=multi_worker_mirrored, shared model_dir, vs --strategy=one_device."""
  hosts = ','.join(f'127.0.0.1:{p}' for p in procs.free_ports(2))
  shared_dir, single_dir = tmp_path / 'multi', tmp_path / 'single'
  common = ('--mode=train', f'--train_steps={STEPS}', '--iterations_per_loop=2', '--base_learning_rate=1.6',
            '--lr_schedule=cosine', '--lr_warmup_epochs=0')
  worker_tmp = tmp_path / 'worker1_tmp'
  worker_tmp.mkdir()
  runs = []
  for i in range(2):
    env = procs.base_env(DUMP_PATH=str(tmp_path / f'w{i}.npz'), DUMP_SEED='7', DESIGNED_DATA=str(STEPS),
                         TMPDIR=str(worker_tmp if i else tmp_path), **FRESH)
    runs.append((f'worker{i}', cli.MAIN_DUMP + list(cli.TINY) + list(common) + [
        f'--model_dir={shared_dir}', '--strategy=multi_worker_mirrored', f'--worker_hosts={hosts}',
        f'--task_index={i}'], env))
  env = procs.base_env(DUMP_PATH=str(tmp_path / 'single.npz'), DUMP_SEED='7', DESIGNED_DATA=str(STEPS), **FRESH)
  runs.append(('single', cli.MAIN_DUMP + list(cli.TINY) + list(common) + [
      f'--model_dir={single_dir}', '--strategy=one_device'], env))
  started = _start_all(runs, tmp_path)

  w0, w1, single = (_load(str(tmp_path / f'{n}.npz')) for n in ('w0', 'w1', 'single'))
  assert [int(d['global_step']) for d in (w0, w1, single)] == [STEPS] * 3
  assert bool(w0['is_chief']) and not bool(w1['is_chief'])
  assert int(w0['num_replicas']) == int(w1['num_replicas']) == 2 and int(single['num_replicas']) == 1
  assert MWMS_LOG.search(started['worker0'].log()) and MWMS_LOG.search(started['worker1'].log())

  a, b, s = _weights(w0), _weights(w1), _weights(single)
  assert sorted(a) == sorted(b) == sorted(s) and len(a) == 67  # every weight of the ResNet-10
  trainable = [k for k in a if not _is_moving_stat(k)]
  moving = [k for k in a if _is_moving_stat(k)]
  # Same start everywhere, and training moved the weights far beyond the tolerance used below.
  assert _max_abs_diff(_weights(w0, 'init:'), _weights(single, 'init:'), a) == 0.0
  assert _max_abs_diff(a, _weights(w0, 'init:'), trainable) > 1e-2
  for k in trainable:  # gradients are all-reduced: the workers apply the same update bit for bit
    np.testing.assert_array_equal(a[k], b[k], err_msg=k)
  for k in moving:     # per-worker BN statistics: equal here only because the data is designed so
    np.testing.assert_allclose(a[k], b[k], rtol=1e-5, atol=1e-6, err_msg=k)
  diff = _max_abs_diff(a, s, a)
  print(f'\nmax |w_multi - w_single| over {len(a)} weights: {diff:.3g} '
        f'(trainable {_max_abs_diff(a, s, trainable):.3g}, BN moving stats {_max_abs_diff(a, s, moving):.3g})')
  for k in a:
    np.testing.assert_allclose(a[k], s[k], rtol=1e-4, atol=1e-5, err_msg=f'{k}: multi-worker vs single process')

  # Only the chief wrote to the shared model_dir; the non-chief's throw-away checkpoints are gone.
  assert cli.checkpoint_steps(str(shared_dir)) == [STEPS]
  assert cli.global_step_of(str(shared_dir / 'model.ckpt-4')) == STEPS
  assert not glob.glob(str(worker_tmp / 'resnet-worker-ckpt-*'))


def test_workers_read_different_tfrecord_files_and_stay_in_sync(tmp_path):
  """TF_CONFIG set by hand and --strategy=auto: auto-detects the cluster; each worker reads its own shard."""
  data_dir = cli.make_tiny_dataset(str(tmp_path / 'data'), num_train=32, num_validation=8, num_shards=2)
  model_dir = tmp_path / 'model'
  ports = procs.free_ports(2)
  cluster = {'worker': [f'127.0.0.1:{p}' for p in ports]}
  runs = []
  for i in range(2):
    env = procs.base_env(DUMP_PATH=str(tmp_path / f'w{i}.npz'),
                         TF_CONFIG=json.dumps({'cluster': cluster, 'task': {'type': 'worker', 'index': i}}))
    runs.append((f'worker{i}', cli.MAIN_DUMP + list(cli.TINY) + [
        '--mode=train', '--strategy=auto', f'--data_dir={data_dir}', f'--model_dir={model_dir}', '--train_steps=2',
        '--iterations_per_loop=1', '--save_checkpoints_steps=2', '--base_learning_rate=1.6'], env))
  started = _start_all(runs, tmp_path)
  for i in range(2):
    assert MWMS_LOG.search(started[f'worker{i}'].log())
  a, b = (_weights(_load(str(tmp_path / f'w{i}.npz'))) for i in range(2))
  trainable = [k for k in a if not _is_moving_stat(k)]
  for k in trainable:
    np.testing.assert_array_equal(a[k], b[k], err_msg=k)
  # Different images per worker: the per-worker BN moving means differ.
  assert _max_abs_diff(a, b, [k for k in a if 'moving_mean' in k]) > 1e-3
  assert cli.checkpoint_steps(str(model_dir)) == [2] and (model_dir / 'params.yaml').exists()
  assert not [f for f in os.listdir(model_dir) if 'tmp' in f or 'temp' in f or 'worker' in f]


def test_float16_overflow_on_one_worker_skips_the_step_on_both(tmp_path):
  """Worker 1's step-1 images overflow float16: both workers skip that step together (before the fix worker 0
  applied it and waited forever in the gradient all-reduce worker 1 never joined) and halve the loss scale; the
  result equals a single process that trained only step 0. The workers run both steps in one 2-step loop, which
  calls the one-step function (loss scaling's all-reduces inside a called function inside the loop)."""
  hosts = ','.join(f'127.0.0.1:{p}' for p in procs.free_ports(2))
  common = ('--mode=train', '--iterations_per_loop=2', '--base_learning_rate=1.6', '--lr_schedule=cosine',
            '--lr_warmup_epochs=0', '--precision=float16')
  runs = []
  for i in range(2):
    env = procs.base_env(DUMP_PATH=str(tmp_path / f'w{i}.npz'), DUMP_SEED='7', DESIGNED_DATA='2',
                         OVERFLOW_STEP='1')
    runs.append((f'worker{i}', cli.MAIN_DUMP + list(cli.TINY) + list(common) + [
        '--train_steps=2', f'--model_dir={tmp_path / "multi"}', '--strategy=multi_worker_mirrored',
        f'--worker_hosts={hosts}', f'--task_index={i}'], env))
  env = procs.base_env(DUMP_PATH=str(tmp_path / 'single.npz'), DUMP_SEED='7', DESIGNED_DATA='2')
  runs.append(('single', cli.MAIN_DUMP + list(cli.TINY) + list(common) + [
      '--train_steps=1', f'--model_dir={tmp_path / "single"}', '--strategy=one_device'], env))
  _start_all(runs, tmp_path)

  w0, w1, single = (_load(str(tmp_path / f'{n}.npz')) for n in ('w0', 'w1', 'single'))
  assert int(w0['global_step']) == int(w1['global_step']) == 2
  # Step 0 finite (the scale stays), step 1 overflowed on worker 1 only: both halve it.
  assert float(w0['loss_scale']) == float(w1['loss_scale']) == float(single['loss_scale']) / 2
  a, b, s = _weights(w0), _weights(w1), _weights(single)
  trainable = [k for k in a if not _is_moving_stat(k)]
  for k in trainable:
    assert np.isfinite(a[k]).all(), k
    np.testing.assert_array_equal(a[k], b[k], err_msg=k)
  # float16 arithmetic differs between 2 x 4 and 1 x 8 images, so compare distances: the workers' weights are far
  # closer to one step of training than one step is to the start (a second step would move them as far again).
  init = _weights(w0, 'init:')
  norm = lambda x, y: np.sqrt(sum(float(np.sum((x[k] - y[k]) ** 2)) for k in trainable))
  print(f'\n|multi - single(1 step)| = {norm(a, s):.4g}, |single - init| = {norm(s, init):.4g}')
  assert norm(a, s) < 0.1 * norm(s, init)


def _eval_results(model_dir) -> dict:
  with open(os.path.join(str(model_dir), 'eval_results.json')) as f:
    return json.load(f)


def _worker_runs(tmp_path, name, num_workers, flags, dump=True, ports=None):
  """``ports``: the cluster's, when another cluster starts at the same time (free_ports of both at once)."""
  hosts = ','.join(f'127.0.0.1:{p}' for p in (ports or procs.free_ports(num_workers)))
  runs = []
  for i in range(num_workers):
    env = procs.base_env(DUMP_PATH=str(tmp_path / f'{name}{i}.npz')) if dump else procs.base_env()
    runs.append((f'{name}{i}', cli.MAIN_DUMP + list(cli.TINY) + list(flags) + [
        '--strategy=multi_worker_mirrored', f'--worker_hosts={hosts}', f'--task_index={i}'], env))
  return runs


def test_workers_train_and_eval_from_an_empty_model_dir_and_evaluate_every_image_once(tmp_path):
  """3 workers alternate training and whole-split eval from an empty model_dir (each eval uses the weights the
  workers hold, never a chief's file that may be older or not yet written), then the chief exports; 37 validation
  images in uneven shards (13, 13, 11: 2 files for worker 0, 1 each for the others) are each counted once, and
  equal a single process's eval of the same checkpoint (in this process). Then two clusters of 2 workers evaluate
  that checkpoint at once: the whole split, and the first 20 images."""
  data_dir = cli.make_tiny_dataset(str(tmp_path / 'data'), num_train=24, num_validation=37, num_shards=3)
  model_dir = tmp_path / 'model'
  _start_all(_worker_runs(tmp_path, 'w', 3, [
      '--mode=train_and_eval', f'--data_dir={data_dir}', f'--model_dir={model_dir}', '--train_steps=4',
      '--steps_per_eval=2', '--iterations_per_loop=1', '--eval_batch_size=6', '--train_batch_size=6',
      f'--export_dir={tmp_path / "export"}']), tmp_path)
  assert len(os.listdir(tmp_path / 'export')) == 1  # the chief exports alone after training: no collective
  dumps = [_load(str(tmp_path / f'w{i}.npz')) for i in range(3)]
  assert [int(d['global_step']) for d in dumps] == [4, 4, 4]
  weights = [_weights(d) for d in dumps]
  for k in weights[0]:
    if not _is_moving_stat(k):
      np.testing.assert_array_equal(weights[0][k], weights[1][k], err_msg=k)
      np.testing.assert_array_equal(weights[0][k], weights[2][k], err_msg=k)
  multi = _eval_results(model_dir)
  assert multi['num_examples'] == 37 and multi['global_step'] == 4

  checkpoint = str(model_dir / 'model.ckpt-4')
  single_dir, two_dir, first_dir = tmp_path / 'single', tmp_path / 'two', tmp_path / 'first20'
  eval_flags = ['--mode=eval', f'--data_dir={data_dir}', f'--eval_checkpoint={checkpoint}', '--eval_batch_size=4']
  alone = cli.run_in_process(*eval_flags, f'--model_dir={single_dir}', '--strategy=one_device')
  assert alone.code == 0, alone.log[-3000:]
  ports = procs.free_ports(4)  # two clusters of 2 workers at once
  _start_all(_worker_runs(tmp_path, 'two', 2, eval_flags + [f'--model_dir={two_dir}'], dump=False, ports=ports[:2])
             + _worker_runs(tmp_path, 'first', 2, eval_flags + [f'--model_dir={first_dir}', '--num_eval_images=20'],
                            dump=False, ports=ports[2:]), tmp_path)
  single, two, first = (_eval_results(d) for d in (single_dir, two_dir, first_dir))
  assert single['num_examples'] == two['num_examples'] == 37 and first['num_examples'] == 20
  for key in ('top_1_accuracy', 'top_5_accuracy', 'loss'):
    assert multi[key] == pytest.approx(single[key], rel=1e-4), key  # BN statistics: the chief's, as saved
    assert two[key] == pytest.approx(single[key], rel=1e-4), key


def test_workers_stop_early_together_on_the_chiefs_verdict(tmp_path):
  """Two fixed disagreements in one run (train_and_eval to step 6, an evaluation every 2 steps):

  - best/ holds an earlier run's best by another metric (an unbeatable loss): the chief replaces it at the first
    evaluation (step 2). Before the fix worker 1 took best/'s metric as its own, counted no improvement, stopped at
    step 2 and left the chief waiting in the next step's all-reduce.
  - Step 4 improves on step 2, but its checkpoint vanishes before the chief copies it into best/: the chief counts
    no improvement and stops. Before the fix worker 1 counted an improvement and trained on alone.
  """
  data_dir = cli.make_tiny_dataset(str(tmp_path / 'data'), num_train=16, num_validation=8, num_shards=2)
  best_dir = tmp_path / 'model' / 'best'
  best_dir.mkdir(parents=True)
  (best_dir / 'model.ckpt-0.index').write_bytes(b'')
  (best_dir / 'eval_results.json').write_text(json.dumps({
      'best_metric': 'loss', 'best_metric_goal': 'min', 'loss': -1.0, 'global_step': 0,
      'best_checkpoint': 'model.ckpt-0'}))
  runs = _worker_runs(tmp_path, 'w', 2, [  # early stopping after 1 evaluation without improvement of global_step
      '--mode=train_and_eval', f'--data_dir={data_dir}', f'--model_dir={tmp_path / "model"}', '--train_steps=6',
      '--steps_per_eval=2', '--iterations_per_loop=2', '--best_metric=global_step', '--early_stopping_evals=1',
      '--keep_checkpoint_max=5'])
  started = _start_all([(name, args, {**env, 'BEST_COPY_VANISHES_AT': '4'}) for name, args, env in runs], tmp_path)
  steps = [int(_load(str(tmp_path / f'w{i}.npz'))['global_step']) for i in range(2)]
  stops = [re.findall(r'Early stopping at step (\d+)', started[f'w{i}'].log()) for i in range(2)]
  assert steps == [4, 4] and stops == [['4'], ['4']]
  kept = json.loads((best_dir / 'eval_results.json').read_text())
  assert kept['best_metric'] == 'global_step' and kept['global_step'] == 2


def test_workers_evaluate_continuously_the_checkpoint_the_chief_sees(tmp_path):
  """mode=eval without eval_checkpoint on 2 workers: worker 1's first listing lags (it sees step 2 where the chief
  sees step 4). Before the fix each evaluated its own latest checkpoint: their metric all-reduces paired up across
  different checkpoints, the chief stopped at the final step and worker 1 was left alone in a collective."""
  data_dir = cli.make_tiny_dataset(str(tmp_path / 'data'), num_train=16, num_validation=8, num_shards=2)
  model_dir = tmp_path / 'model'
  train = ['--mode=train', f'--data_dir={data_dir}', f'--model_dir={model_dir}', '--train_steps=4',
           '--iterations_per_loop=2', '--save_checkpoints_steps=2']
  trained = cli.run_in_process(*train)
  assert trained.code == 0, trained.log[-3000:]
  assert cli.checkpoint_steps(str(model_dir)) == [2, 4]
  runs = _worker_runs(tmp_path, 'e', 2, ['--mode=eval', f'--data_dir={data_dir}', f'--model_dir={model_dir}',
                                         '--train_steps=4', '--eval_timeout=20'], dump=False)
  runs = [(name, args, {**env, 'STALE_LISTING': '1'}) for name, args, env in runs]
  started = _start_all(runs, tmp_path)
  for name in ('e0', 'e1'):
    evaluated = re.findall(r'Eval at step (\d+)', started[name].log())
    assert evaluated == ['4'], (name, evaluated)
  assert _eval_results(model_dir)['num_examples'] == 8


def test_a_seeded_two_worker_run_stopped_and_resumed_ends_bit_identical_to_the_uninterrupted_one(tmp_path):
  """Exact resume on 2 workers (tests/resnet/test_resume.py does one device and 2 mirrored replicas): a seeded
  cluster stopped at step 6, mid-epoch (as SIGINT stops it: workers stop together at the end of a loop, with a
  checkpoint at step 6, exit 0), then started again to step 8, ends with the chief's checkpoint of the cluster that
  was never stopped, every tensor bit for bit. Each worker reads its own 2 of 4 shards (16 records, 4 a step: its
  place is record 8 of its second epoch), with TrivialAugment and stochastic depth (per-record seeds, the random
  streams). The uninterrupted cluster and the first part run at once (4 new interpreters). Checked to fail when the
  input restarts at record 0 on a resume, and when the checkpoint leaves out the random streams (104 tensors differ
  either way)."""
  data_dir = cli.write_summary(cli.make_tiny_dataset(str(tmp_path / 'data'), num_shards=4))
  flags = ['--mode=train', f'--data_dir={data_dir}', '--train_steps=8', '--iterations_per_loop=2',
           '--save_checkpoints_steps=4', '--keep_checkpoint_max=20', '--shuffle_buffer_size=16', '--random_seed=7',
           '--num_train_images=32', '--augment_name=trivialaugment_wide', '--drop_connect_rate=0.2']
  whole, parts = tmp_path / 'whole', tmp_path / 'parts'

  def cluster(name, model_dir, ports, **env):
    return [(n, args, {**e, **FRESH, **env}) for n, args, e in _worker_runs(
        tmp_path, name, 2, flags + [f'--model_dir={model_dir}'], dump=False, ports=ports)]
  ports = procs.free_ports(4)
  started = _start_all(cluster('whole', whole, ports[:2]) + cluster('first', parts, ports[2:], STOP_AT='6'),
                       tmp_path)
  for i in range(2):
    assert 'Training interrupted (SIGINT) at step 6' in started[f'first{i}'].log()
  assert cli.checkpoint_steps(str(parts)) == [4, 6]
  started = _start_all(cluster('second', parts, procs.free_ports(2)), tmp_path)
  for i in range(2):
    log = started[f'second{i}'].log()
    assert cli.restored_steps(log) == [6] and 'without reading the records before it' in log, log[-3000:]
    assert (f'Training input pipeline {i} of 2: resumed at record 24 of this pipeline: epoch 1, record 8 of 16'
            in log), log[-3000:]
  want = cli.load_checkpoint_fully(str(whole / 'model.ckpt-8'))
  got = cli.load_checkpoint_fully(str(parts / 'model.ckpt-8'))
  assert sorted(got) == sorted(want) and any('random_streams' in k for k in want)
  differ = [k for k in want if not np.array_equal(want[k], got[k])]
  assert not differ, f'{len(differ)} of {len(want)} tensors differ: {differ[:8]}'


def _finish_all(runs, tmp_path, timeout=TIMEOUT):
  """Every run, whatever its exit code."""
  return _run_all(runs, tmp_path, timeout)


def _error_line(proc) -> str:
  lines = [line for line in proc.log().splitlines() if line.startswith('error: ')]
  return lines[-1] if lines else ''


@pytest.fixture
def finished_run_copy(tmp_path):
  """A copy of the session's tiny finished run (trained to step 5 on 4 classes of records) and its data."""
  import shutil  # pylint: disable=import-outside-toplevel
  model_dir, data_dir, _ = cli.shared_trained_run()
  target = tmp_path / 'model'
  shutil.copytree(model_dir, target, ignore=shutil.ignore_patterns('export'))
  return target, data_dir


@pytest.mark.parametrize('what', ['eval_results.json', 'best/progress.json', 'labels.txt'])
def test_a_write_the_chief_fails_stops_every_worker_with_it(tmp_path, finished_run_copy, what):
  """A full disk on the chief, for a write it does for all: before, the chief raised alone (the others went on to
  their next collective, or exited 0). labels.txt: the run's record of its class names, when training resumes."""
  model_dir, data_dir = finished_run_copy
  if what == 'labels.txt':
    os.remove(model_dir / what)  # written again when training starts
    mode = ['--mode=train', '--train_steps=7', '--iterations_per_loop=2']
  else:
    mode = ['--mode=eval', '--eval_timeout=60']
  runs = _worker_runs(tmp_path, 'w', 2, [*mode, f'--data_dir={data_dir}', f'--model_dir={model_dir}'], dump=False)
  runs[0] = (runs[0][0], runs[0][1], {**runs[0][2], 'FAIL_WRITE': os.path.join(str(model_dir), what)})
  ended = _finish_all(runs, tmp_path)
  assert [ended[n].poll() for n in ('w0', 'w1')] == [1, 1]
  chief, other = _error_line(ended['w0']), _error_line(ended['w1'])
  assert chief.startswith(f'error: Could not write {model_dir / what}: [Errno 28] No space left'), chief
  assert other.startswith('error: The chief could not') and other.endswith('this worker stops with it.'), other
  named = {'eval_results.json': model_dir / what, 'best/progress.json': model_dir / 'best'}.get(what, model_dir)
  assert str(named) in other


def test_a_failed_export_on_the_chief_stops_every_worker_with_it(tmp_path, finished_run_copy):
  model_dir, _ = finished_run_copy
  not_a_folder = tmp_path / 'exports'
  not_a_folder.write_text('a file where the exports would go')
  ended = _finish_all(_worker_runs(tmp_path, 'w', 2, ['--mode=export', f'--model_dir={model_dir}',
                                                      f'--export_dir={not_a_folder}'], dump=False), tmp_path)
  assert [ended[n].poll() for n in ('w0', 'w1')] == [1, 1]
  assert _error_line(ended['w1']) == (f'error: The chief could not export to {not_a_folder} (its log says why); '
                                      'this worker stops with it.')
  assert not_a_folder.read_text() == 'a file where the exports would go'


def test_a_checkpoint_gone_before_one_workers_restore_is_skipped_by_every_worker(tmp_path, finished_run_copy):
  """keep_checkpoint_max deletes a checkpoint between the workers' agreed existence check and the restore, on one
  worker only: before, that worker raised alone and the chief waited in the evaluation's collectives."""
  model_dir, data_dir = finished_run_copy
  runs = _worker_runs(tmp_path, 'e', 2, ['--mode=eval', f'--data_dir={data_dir}', f'--model_dir={model_dir}',
                                         '--eval_timeout=3'], dump=False)  # the skip comes at the first look
  runs = [(name, args, {**env, 'RESTORE_VANISHES_ON_NON_CHIEF': '1'}) for name, args, env in runs]
  ended = _finish_all(runs, tmp_path)
  for name in ('e0', 'e1'):
    assert 'model.ckpt-5 vanished before it could be evaluated; skipping' in ended[name].log(), name
    assert 'Eval at step' not in ended[name].log()
  assert _error_line(ended['e0']) == _error_line(ended['e1']) != ''


def test_workers_with_profiling_on_the_chief_stop_a_divergence_together(tmp_path):
  """A profile of steps 1-3 asks for 1-step loops there. Before, only the chief had the profiler: its compiled loops
  differed in length from the other worker's and both waited for each other from the first step on (and their
  divergence guards counted different loops). Now every worker runs the chief's loops, and the guard decides on
  the chief's verdict."""
  data_dir = cli.make_tiny_dataset(str(tmp_path / 'data'), num_train=16, num_validation=8, num_shards=2)
  ended = _finish_all(_worker_runs(tmp_path, 'w', 2, [
      '--mode=train', f'--data_dir={data_dir}', f'--model_dir={tmp_path / "model"}', '--train_steps=40',
      '--iterations_per_loop=2', '--lr_warmup_epochs=0', '--base_learning_rate=400', '--profile_steps=1,3',
      '--param_overrides=class_weights=[50,50,50,50]'], dump=False), tmp_path)
  lines = [_error_line(ended[n]) for n in ('w0', 'w1')]
  assert [ended[n].poll() for n in ('w0', 'w1')] == [1, 1], lines
  steps = [re.search(r'Training diverged at step (\d+)', line) for line in lines]
  assert all(steps) and steps[0].group(1) == steps[1].group(1), lines
