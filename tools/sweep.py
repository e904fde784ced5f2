r"""A budgeted search over params: which learning rate, optimizer, ... fit this data, in N runs or M minutes.

  python -m tools.sweep --space=space.yaml --output_dir=sweeps/lr --trials=8 --minutes=30 -- \
      --config_file=small_data --data_dir=tf-records --param_overrides=train_steps=600,steps_per_eval=150

Everything after ``--`` is the trial command (resnet_main's flags, as for one run); each trial is that command with
``--mode=train_and_eval``, ``--model_dir=OUTPUT_DIR/trial-NNN`` and the sampled params as the last
``--param_overrides``: an ordinary run, resumable, evaluated, exported and predicted from like any other, and in
TensorBoard's HParams dashboard (``tensorboard --logdir OUTPUT_DIR``, resnet/run_dir/hparams.py).

The space (YAML): the metric to optimise (best/'s: the value of the checkpoint a run keeps; default top_1_accuracy,
goal auto = best_checkpoint's rule) and one entry per param, checked against the params table::

  metric: top_1_accuracy
  params:
    base_learning_rate: {low: 0.05, high: 1.0, log: true}     # a range (log scale)
    weight_decay: {low: 1.0e-5, high: 1.0e-3, log: true}
    label_smoothing: {low: 0.0, high: 0.2}
    optimizer: [momentum, adamw]                              # choices (also {choices: [...]})
    train_batch_size: {low: 16, high: 64, step: 16}           # an int param: integers

Optuna samples (TPE after ``--random_trials`` random ones) and prunes: each trial runs as a child process; the
sweep reads each evaluation from the trial's ``eval_results.json`` as it appears, reports it, and stops a trial
the pruner (median of the earlier trials at the same step, after ``--startup_trials`` finished ones) gives up on,
with SIGTERM: the run saves a checkpoint and exits, as any interrupted run. A trial is judged from its second
evaluation on (``--prune_from_eval``): in the measured sweep of docs/training.md, judging the first, a few epochs
in, pruned 6 of 8 trials, learning rates next to the winner's among them.

Budget: ``--trials`` counts the sweep's runs (finished, pruned and failed ones; every worker's), ``--minutes`` this
worker's wall clock: no trial starts that the median finished trial says cannot end in time, and one running at the
deadline is stopped. A trial stopped by the budget, by Ctrl-C or SIGTERM to the sweep, or left behind by a worker
that died (Optuna's heartbeat) is resumed in its own model_dir, from its checkpoint, by the next run of the sweep.

Several workers share one sweep: run the same command (or just ``--output_dir``) on more terminals or machines
that see the folder. The study is a SQLite file in it (``sweep.db``, on local disk: SQLite's locks do not hold on
network file systems), which also keeps the space and the trial command: a later run with another is refused.

After each finished trial, ``OUTPUT_DIR/best.yaml`` holds the best trial's recipe (the params the trial command
gave, from its config files, overrides and flags, and the sampled ones, at the values the trial ran with; not where
it ran: model_dir, data_dir, exports), which ``--config_file=OUTPUT_DIR/best.yaml`` takes.
"""
import contextlib
import dataclasses
import difflib
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple
import warnings

if __package__ in (None, ''):
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from resnet import process_env  # pylint: disable=g-import-not-at-top,unused-import  # before TensorFlow
from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags

from params import params_yaml
from params import resnet_config
from params import validation
from tools import repeat_runs

FLAGS = flags.FLAGS
STUDY_NAME = 'sweep'
DB_FILE = 'sweep.db'
BEST_FILE = 'best.yaml'
SPACE_FILE = 'space.yaml'
HEARTBEAT_S = 30
FAILURES_IN_A_ROW = 3   # trials that failed one after another: the command is broken, not the params
# Why a trial ended unfinished, kept with it: all but FAILED are resumed by the next run of the sweep.
BUDGET, INTERRUPTED, FAILED = 'stopped by the budget', 'interrupted', 'failed'
# The trial command's flags that the sweep sets itself.
OWN_FLAGS = ('mode', 'model_dir', 'best_metric', 'best_metric_goal', 'keep_best_checkpoint')


class SweepError(ValueError):
  """A space, trial command or sweep folder that cannot be used; the message names the fix."""


def define_flags() -> None:
  """This tool's flags, defined when it runs (not at import: a test process imports it beside resnet_main)."""
  flags.DEFINE_string('space', None, 'The search space (YAML): metric, goal and params (see the module docstring). '
                      'Optional when the sweep in --output_dir exists (its own space is used).')
  flags.DEFINE_string('output_dir', None, 'The sweep folder: sweep.db, the trials\' model_dirs and logs, best.yaml.')
  flags.DEFINE_integer('trials', None, 'Budget: runs in the whole sweep (finished, pruned or failed).')
  flags.DEFINE_float('minutes', None, 'Budget: this worker\'s minutes of wall clock.')
  flags.DEFINE_integer('random_trials', 3, 'Trials sampled at random before TPE models the results.')
  flags.DEFINE_integer('startup_trials', 3, 'Finished trials before the pruner stops any.')
  flags.DEFINE_integer('prune_from_eval', 2, 'A trial\'s first evaluation the pruner judges (1: its first).')
  flags.DEFINE_bool('prune', True, 'Stop trials whose evaluations fall below the median of earlier ones.')


def _optuna():
  try:
    import optuna  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise SweepError("tools.sweep needs Optuna, which is not installed: pip install -e '.[sweep]'") from None
  optuna.logging.set_verbosity(optuna.logging.WARNING)
  # The heartbeat (a dead worker's trial is resumed) is used with ask-and-tell, which runs each trial as a process.
  warnings.filterwarnings('ignore', message='Heartbeat of storage is supposed to be used with Study.optimize')
  warnings.filterwarnings('ignore', category=optuna.exceptions.ExperimentalWarning)
  return optuna


# ------------------------------------------------------------------------------------------------ the space
@dataclasses.dataclass(frozen=True)
class Dimension:
  """One param's values: ``choices``, or a range [low, high] (``log`` scale, or ``step``)."""
  name: str
  choices: Optional[Tuple[Any, ...]] = None
  low: Optional[float] = None
  high: Optional[float] = None
  log: bool = False
  step: Optional[float] = None

  def suggest(self, trial) -> Any:
    if self.choices is not None:   # Optuna's choices are scalars: a list choice travels as its JSON
      labels = [json.dumps(c) if isinstance(c, list) else c for c in self.choices]
      label = trial.suggest_categorical(self.name, labels)
      return self.choices[labels.index(label)]
    if resnet_config.PARAMS_BY_NAME[self.name].value_type is int:
      return trial.suggest_int(self.name, int(self.low), int(self.high), step=int(self.step or 1), log=self.log)
    return trial.suggest_float(self.name, self.low, self.high, step=self.step, log=self.log)

  def as_dict(self) -> Dict[str, Any]:
    if self.choices is not None:
      return {'choices': list(self.choices)}
    return {k: v for k, v in (('low', self.low), ('high', self.high), ('log', self.log or None),
                              ('step', self.step)) if v is not None}


@dataclasses.dataclass(frozen=True)
class Space:
  metric: str
  goal: str                   # 'max' or 'min'
  dimensions: Tuple[Dimension, ...]

  def as_dict(self) -> Dict[str, Any]:
    return {'metric': self.metric, 'goal': self.goal, 'params': {d.name: d.as_dict() for d in self.dimensions}}


def _param(name: str, source: str) -> resnet_config.Param:
  if name not in resnet_config.PARAMS_BY_NAME:
    close = difflib.get_close_matches(name, list(resnet_config.PARAMS_BY_NAME), n=3)
    raise SweepError(f'{source}: {name!r} is not a param' + (f' (did you mean {", ".join(close)}?)' if close else '')
                     + '. The params are those of params/resnet_config.py (resnet_main --helpfull lists them).')
  if name in OWN_FLAGS:
    raise SweepError(f'{source}: {name} is the sweep\'s to set; search other params.')
  return resnet_config.PARAMS_BY_NAME[name]


def _dimension(name: str, entry: Any, source: str) -> Dimension:
  param = _param(name, source)
  where = f'{source}, params.{name}'
  if isinstance(entry, list):
    entry = {'choices': entry}
  if not isinstance(entry, dict):
    raise SweepError(f'{where}: give choices ([a, b] or {{choices: [a, b]}}) or a range ({{low: L, high: H}}, '
                     f'with log: true or step: S), not {entry!r}.')
  unknown = sorted(set(entry) - {'choices', 'low', 'high', 'log', 'step'})
  if unknown:
    raise SweepError(f'{where}: unknown keys {unknown}; an entry has choices, or low, high and log or step.')
  if 'choices' in entry:
    if set(entry) != {'choices'} or not isinstance(entry['choices'], list) or not entry['choices']:
      raise SweepError(f'{where}: choices is a non-empty list, alone (no low/high/log/step with it).')
    for choice in entry['choices']:
      problem = validation.value_problem(param, choice)
      if problem:
        raise SweepError(f'{where}: {problem}.')
    return Dimension(name, choices=tuple(entry['choices']))
  if 'low' not in entry or 'high' not in entry:
    raise SweepError(f'{where}: a range needs both low and high.')
  low, high, log, step = entry['low'], entry['high'], bool(entry.get('log', False)), entry.get('step')
  if param.value_type not in (int, float):
    raise SweepError(f'{where}: {name} is a {param.value_type.__name__} param: give it choices, not a range.')
  numbers = [v for v in (low, high, step) if v is not None]
  if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in numbers):
    raise SweepError(f'{where}: low, high and step are numbers, got {entry!r}.')
  if param.value_type is int and not all(float(v).is_integer() for v in numbers):
    raise SweepError(f'{where}: {name} is an int param: low, high and step must be whole numbers.')
  if not low < high:
    raise SweepError(f'{where}: low ({low}) must be below high ({high}).')
  if log and step is not None:
    raise SweepError(f'{where}: a range is either on a log scale or in steps, not both.')
  if log and low <= 0:
    raise SweepError(f'{where}: a log-scale range needs low > 0 (got {low}).')
  for bound in (low, high):
    problem = validation.value_problem(param, int(bound) if param.value_type is int else float(bound))
    if problem:
      raise SweepError(f'{where}: {problem}.')
  return Dimension(name, low=low, high=high, log=log, step=step)


def parse_space(text: str, source: str) -> Space:
  """The space of a YAML text; a SweepError names what is wrong and where."""
  from resnet.estimator import best_checkpoint  # pylint: disable=g-import-not-at-top
  data = params_yaml.yaml_mapping(text, source)
  unknown = sorted(set(data) - {'metric', 'goal', 'params'})
  if unknown:
    raise SweepError(f'{source}: unknown keys {unknown}; a space has metric, goal and params.')
  entries = data.get('params')
  if not isinstance(entries, dict) or not entries:
    raise SweepError(f'{source}: params is a mapping of at least one param to its choices or range.')
  metric = data.get('metric') or 'top_1_accuracy'
  try:
    goal = best_checkpoint.metric_goal(metric, data.get('goal') or 'auto')
  except ValueError as e:
    raise SweepError(f'{source}: {e}') from None
  return Space(str(metric), goal, tuple(_dimension(name, entry, source) for name, entry in entries.items()))


# ------------------------------------------------------------------------------------------------ the trial command
def _flag_name(arg: str) -> Optional[str]:
  """The params key a command-line argument gives (--name=v, --name, --noname), aliases resolved; else None."""
  if not arg.startswith('--'):
    return None
  name = arg[2:].split('=', 1)[0]
  if name not in resnet_config.PARAMS_BY_NAME and name not in resnet_config.ALIASES and name.startswith('no'):
    name = name[2:]
  return resnet_config.ALIASES.get(name, name) if (
      name in resnet_config.PARAMS_BY_NAME or name in resnet_config.ALIASES) else None


def _flag_values(args: Sequence[str], names: Sequence[str]) -> List[str]:
  """The values of the flags ``names`` in ``args`` (--name=v and --name v)."""
  values = []
  for i, arg in enumerate(args):
    for name in names:
      if arg.startswith(f'--{name}='):
        values.append(arg.split('=', 1)[1])
      elif arg == f'--{name}' and i + 1 < len(args):
        values.append(args[i + 1])
  return values


def given_keys(args: Sequence[str]) -> List[str]:
  """The params keys the trial command gives: its config files' keys, its overrides' and its flags'."""
  from params import override_syntax  # pylint: disable=g-import-not-at-top
  from resnet.run_dir import params_files  # pylint: disable=g-import-not-at-top
  keys: List[str] = []
  for name in _flag_values(args, ('config_file',)):
    path = params_files.resolve_config_file(name)
    keys += list(params_yaml.yaml_mapping(params_files.read_text(path) or '', f'file {path!r}'))
  for text in _flag_values(args, ('param_overrides', 'params_override')):
    keys += list(override_syntax.parse_override_string(text, params_files.read_text))
  keys += [key for key in map(_flag_name, args) if key]
  return list(dict.fromkeys(resnet_config.ALIASES.get(k, k) for k in keys))


def check_args(args: Sequence[str], space: Space) -> None:
  """The trial command must leave the sweep's flags and the searched params to the sweep."""
  for arg in args:
    name = arg[2:].split('=', 1)[0] if arg.startswith('--') else None
    if name in OWN_FLAGS:
      raise SweepError(f'The trial command gives --{name}: the sweep sets it for each trial; remove it.')
    key = _flag_name(arg)
    if key in {d.name for d in space.dimensions}:
      raise SweepError(f'The trial command gives {arg}, a param the space searches; remove it from the command.')


def trial_command(args: Sequence[str], model_dir: str, values: Mapping[str, Any], space: Space) -> List[str]:
  overrides = dict(values, best_metric=space.metric, best_metric_goal=space.goal, keep_best_checkpoint=True)
  return [sys.executable, '-m', 'resnet.resnet_main', '--mode=train_and_eval', f'--model_dir={model_dir}', *args,
          f'--param_overrides={json.dumps(overrides)}']


def _read_json(path: str) -> Optional[Dict[str, Any]]:
  try:
    with open(path) as f:
      value = json.load(f)
  except (OSError, ValueError):
    return None
  return value if isinstance(value, dict) else None


# ------------------------------------------------------------------------------------------------ one trial
@dataclasses.dataclass
class Outcome:
  state: str                     # 'complete', 'pruned', 'fail'
  value: Optional[float] = None  # complete: best/'s metric
  why: Optional[str] = None      # fail: BUDGET, INTERRUPTED or FAILED
  detail: str = ''


class _Interrupted(Exception):
  """SIGTERM to the sweep."""


def run_trial(trial, model_dir: str, command: Sequence[str], space: Space, deadline: Optional[float],
              heartbeat=None, poll_seconds: float = 1.0, prune_from_eval: int = 2) -> Outcome:
  """Runs one trial's process, reporting each evaluation to Optuna; stops it (SIGTERM: a checkpoint) when pruned
  (judged from its ``prune_from_eval``-th evaluation on), at the deadline, or when the sweep is interrupted."""
  from resnet.estimator import best_checkpoint  # pylint: disable=g-import-not-at-top
  from resnet.run_setup import finished_run  # pylint: disable=g-import-not-at-top
  os.makedirs(model_dir, exist_ok=True)
  results_path = os.path.join(model_dir, 'eval_results.json')
  earlier = (_read_json(results_path) or {}).get('global_step')   # a resumed trial's last evaluation
  seen = set()
  stop: Optional[Outcome] = None
  last_beat = 0.0
  with open(model_dir + '.log', 'a') as log:
    proc = subprocess.Popen(list(command), stdout=log, stderr=subprocess.STDOUT,
                            preexec_fn=repeat_runs.stop_with_parent)

    def report() -> Optional[Outcome]:
      """The trial's newest evaluation to Optuna, once; the pruner's verdict."""
      results = _read_json(results_path) or {}
      step, value = results.get('global_step'), results.get(space.metric)
      if step in seen or step == earlier or not isinstance(value, (int, float)) or not isinstance(step, int):
        return None
      seen.add(step)
      trial.report(float(value), step)
      if len(seen) >= prune_from_eval and trial.should_prune():
        return Outcome('pruned', detail=f'pruned at step {step} ({space.metric}={value:.4f})')
      return None
    try:
      while proc.poll() is None:
        time.sleep(poll_seconds)
        if heartbeat is not None and time.time() - last_beat >= HEARTBEAT_S:
          heartbeat()
          last_beat = time.time()
        if stop is None:
          stop = report()
        if stop is None and deadline is not None and time.time() >= deadline:
          step = (_read_json(results_path) or {}).get('global_step')
          stop = Outcome('fail', why=BUDGET, detail=f'{BUDGET} (last evaluation: step {step}); the next run of the '
                         'sweep resumes it')
        if stop is not None:
          repeat_runs.stop_run(proc)
    except (KeyboardInterrupt, _Interrupted):
      repeat_runs.stop_run(proc)
      raise
  if stop is not None:
    return stop
  report()   # the last evaluation, written just before the process ended
  ended = os.path.exists(os.path.join(model_dir, finished_run.ENDED_FILE))
  best = _read_json(os.path.join(model_dir, best_checkpoint.BEST_DIR, best_checkpoint.RESULTS_FILE)) or {}
  if proc.returncode == 0 and ended and isinstance(best.get(space.metric), (int, float)):
    return Outcome('complete', float(best[space.metric]),
                   detail=f'best {space.metric}={best[space.metric]:.4f} at step {best.get("global_step")}')
  if proc.returncode == 0 and not ended:   # stopped from outside (SIGTERM to the trial): resumable
    return Outcome('fail', why=INTERRUPTED, detail='stopped from outside; the next run of the sweep resumes it')
  return Outcome('fail', why=FAILED, detail=f'exit code {proc.returncode}: see {model_dir}.log')


# ------------------------------------------------------------------------------------------------ the sweep
def _storage(optuna, output_dir: str):
  if '://' in output_dir:
    raise SweepError(f'--output_dir={output_dir}: the sweep keeps its study in a SQLite file, which needs a local '
                     'disk (SQLite\'s locks do not hold on network file systems); give a local folder.')
  os.makedirs(output_dir, exist_ok=True)
  return optuna.storages.RDBStorage(f'sqlite:///{os.path.abspath(os.path.join(output_dir, DB_FILE))}',
                                    heartbeat_interval=HEARTBEAT_S, grace_period=4 * HEARTBEAT_S)


def open_study(output_dir: str, space_text: Optional[str], args: Optional[Sequence[str]],
               random_trials: int = 3, startup_trials: int = 3, prune: bool = True, pruner=None, sampler=None):
  """(study, space, args): the sweep in output_dir, created with ``space_text`` and ``args`` or taken as it is (a
  space or command that differs from the sweep's own is a SweepError)."""
  optuna = _optuna()
  storage = _storage(optuna, output_dir)
  exists = STUDY_NAME in [s.study_name for s in optuna.get_all_study_summaries(storage)]
  if not exists and space_text is None:
    raise SweepError(f'{output_dir} holds no sweep yet: give --space=SPACE.yaml and the trial command after --.')
  space = parse_space(space_text, '--space') if space_text is not None else None
  if space is not None:
    check_args(args or [], space)
    given_keys(args or [])   # its config files and overrides read (a typo fails now, not in every trial)
  study = optuna.create_study(
      storage=storage, study_name=STUDY_NAME, load_if_exists=True,
      direction='maximize' if (space or _stored_space(storage)).goal == 'max' else 'minimize',
      sampler=sampler or optuna.samplers.TPESampler(n_startup_trials=random_trials),
      pruner=pruner or (optuna.pruners.MedianPruner(n_startup_trials=startup_trials) if prune
                        else optuna.pruners.NopPruner()))
  if not study.user_attrs:
    if space is None:
      raise SweepError(f'{output_dir} holds a sweep that never recorded its space: give --space and the trial '
                       'command after --.')
    study.set_user_attr('space', space.as_dict())
    study.set_user_attr('args', list(args or []))
    with open(os.path.join(output_dir, SPACE_FILE), 'w') as f:
      f.write(params_yaml.params_to_yaml_string(space.as_dict()))
  stored = _space_from(study.user_attrs['space'])
  if space is not None and space != stored:
    raise SweepError(f'{output_dir} holds a sweep of another space ({os.path.join(output_dir, SPACE_FILE)}): use a '
                     'new --output_dir for this one, or leave out --space to go on with that sweep.')
  if args and list(args) != study.user_attrs['args']:
    raise SweepError(f'{output_dir} holds a sweep with another trial command ({" ".join(study.user_attrs["args"])}): '
                     'use a new --output_dir, or leave out the command after -- to go on with that sweep.')
  return study, stored, study.user_attrs['args']


def _space_from(stored: Mapping[str, Any]) -> Space:
  return Space(stored['metric'], stored['goal'],
               tuple(_dimension(name, entry, 'the sweep\'s space') for name, entry in stored['params'].items()))


def _stored_space(storage) -> Space:
  import optuna  # pylint: disable=g-import-not-at-top
  return _space_from(optuna.load_study(study_name=STUDY_NAME, storage=storage).user_attrs['space'])


def _resumable(trial) -> bool:
  from optuna.trial import TrialState  # pylint: disable=g-import-not-at-top
  return trial.state == TrialState.FAIL and trial.user_attrs.get('outcome') != FAILED


def _counted(study) -> int:
  """Trials that use the --trials budget: all but those waiting and those to be resumed (their resumption counts)."""
  from optuna.trial import TrialState  # pylint: disable=g-import-not-at-top
  return sum(1 for t in study.get_trials(deepcopy=False) if t.state != TrialState.WAITING and not _resumable(t))


def _queue_resumptions(study) -> None:
  """Each trial stopped unfinished (budget, interruption, a worker that died) is queued once, with its params and
  model_dir, so that it goes on from its checkpoint."""
  from optuna.storages import fail_stale_trials  # pylint: disable=g-import-not-at-top
  fail_stale_trials(study)
  trials = study.get_trials(deepcopy=False)
  resumed = {t.user_attrs.get('resumes') for t in trials}
  for t in trials:
    if _resumable(t) and t.number not in resumed and t.user_attrs.get('model_dir'):
      study.enqueue_trial(t.params, user_attrs={'resumes': t.number, 'model_dir': t.user_attrs['model_dir']})


def _median_minutes(study) -> Optional[float]:
  from optuna.trial import TrialState  # pylint: disable=g-import-not-at-top
  done = [t.duration.total_seconds() / 60 for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
          if t.duration is not None]
  return statistics.median(done) if done else None


def run_sweep(study, space: Space, args: Sequence[str], output_dir: str, trials: Optional[int],
              minutes: Optional[float], poll_seconds: float = 1.0, say=None, prune_from_eval: int = 2) -> None:
  """Asks for trials and runs them until the budget is spent; best.yaml after each finished one."""
  from optuna.trial import TrialState  # pylint: disable=g-import-not-at-top
  if trials is None and minutes is None:
    raise SweepError('Give a budget: --trials=N (runs in the sweep) and/or --minutes=M (this worker).')
  say = say or (lambda line: print(line, flush=True))
  deadline = time.time() + 60 * minutes if minutes is not None else None
  storage = study._storage  # pylint: disable=protected-access
  failures = 0
  while True:
    _queue_resumptions(study)
    if trials is not None and _counted(study) >= trials:
      say(f'The budget of {trials} trials is spent.')
      break
    typical = _median_minutes(study)
    if deadline is not None and (time.time() >= deadline or (
        typical is not None and time.time() + 60 * typical > deadline)):
      say(f'The budget of {minutes:g} minutes leaves no time for another trial'
          + (f' (a finished one took {typical:.1f} min).' if typical else '.'))
      break
    trial = study.ask()
    values = {d.name: d.suggest(trial) for d in space.dimensions}
    model_dir = trial.user_attrs.get('model_dir') or os.path.join(output_dir, f'trial-{trial.number:03d}')
    trial.set_user_attr('model_dir', model_dir)
    resumes = trial.user_attrs.get('resumes')
    say(f'trial {trial.number}{f" (resumes trial {resumes})" if resumes is not None else ""}: '
        + ', '.join(f'{k}={_shown(v)}' for k, v in values.items()))
    try:
      outcome = run_trial(trial, model_dir, trial_command(args, model_dir, values, space), space, deadline,
                          heartbeat=lambda: storage.record_heartbeat(trial._trial_id),  # pylint: disable=protected-access
                          poll_seconds=poll_seconds, prune_from_eval=prune_from_eval)
    except (KeyboardInterrupt, _Interrupted):
      trial.set_user_attr('outcome', INTERRUPTED)
      study.tell(trial, state=TrialState.FAIL)
      say(f'trial {trial.number}: interrupted with a checkpoint; the next run of the sweep resumes it.')
      raise
    trial.set_user_attr('detail', outcome.detail)
    if outcome.state == 'complete':
      study.tell(trial, outcome.value)
    elif outcome.state == 'pruned':
      study.tell(trial, state=TrialState.PRUNED)
    else:
      trial.set_user_attr('outcome', outcome.why)
      study.tell(trial, state=TrialState.FAIL)
    say(f'trial {trial.number}: {outcome.state}, {outcome.detail}')
    failures = failures + 1 if outcome.why == FAILED else 0
    if failures >= FAILURES_IN_A_ROW:
      raise SweepError(f'{failures} trials in a row failed; the last one\'s log says why: {model_dir}.log. Fix the '
                       'trial command (or the space), then run the sweep again.')
    if outcome.state == 'complete':
      write_best_config(study, space, args, output_dir)


def _shown(value: Any) -> str:
  return f'{value:.4g}' if isinstance(value, float) else str(value)


def best_config(study, space: Space, args: Sequence[str]) -> Optional[str]:
  """best.yaml's text: the best finished trial's recipe (the keys the trial command gave and the sampled ones, at
  the values the trial ran with; not where it ran), or None before any trial finished."""
  from optuna.trial import TrialState  # pylint: disable=g-import-not-at-top
  from resnet.run_dir import hparams  # pylint: disable=g-import-not-at-top
  from resnet.run_dir import model_dir as model_dir_lib  # pylint: disable=g-import-not-at-top
  if not study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
    return None
  best = study.best_trial
  ran = model_dir_lib.recorded_params(best.user_attrs['model_dir']) or {}
  where = set(hparams.NOT_COMPARED) | {'data_dir'}
  keys = [k for k in given_keys(args) + [d.name for d in space.dimensions] if k not in where and k in ran]
  recipe = {k: ran[k] for k in dict.fromkeys(keys)}
  done = [t for t in study.get_trials(deepcopy=False) if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
  header = (f'# The best of the sweep in {os.path.dirname(best.user_attrs["model_dir"])}: trial {best.number} '
            f'({best.user_attrs["model_dir"]}), {space.metric}={best.value:.4f} (best/), of {len(done)} trials '
            f'({sum(t.state == TrialState.PRUNED for t in done)} pruned).\n'
            f'# Searched: {", ".join(d.name for d in space.dimensions)}. The trial command: {" ".join(args)}\n'
            '# Train with it: resnet-main --config_file=THIS_FILE --data_dir=DATA --model_dir=RUN\n')
  return header + params_yaml.params_to_yaml_string(recipe)


def write_best_config(study, space: Space, args: Sequence[str], output_dir: str) -> Optional[str]:
  from resnet.estimator import files  # pylint: disable=g-import-not-at-top
  text = best_config(study, space, args)
  if text is None:
    return None
  path = os.path.join(output_dir, BEST_FILE)
  files.atomic_write(path, text)
  return path


def summary_rows(study, space: Space) -> List[str]:
  """One line per trial: number, state, value or why it stopped, minutes, params."""
  from optuna.trial import TrialState  # pylint: disable=g-import-not-at-top
  rows = []
  for t in study.get_trials(deepcopy=False):
    value = f'{space.metric}={t.value:.4f}' if t.state == TrialState.COMPLETE else (
        t.user_attrs.get('detail') or t.user_attrs.get('outcome') or '')
    minutes = f'{t.duration.total_seconds() / 60:.1f} min' if t.duration is not None else '-'
    rows.append(f'{t.number:4d} {t.state.name.lower():9s} {minutes:>9s}  {value}  '
                + ', '.join(f'{k}={_shown(v)}' for k, v in t.params.items()))
  return rows


def main(argv: Sequence[str]) -> None:
  if not FLAGS.output_dir:
    raise app.UsageError('--output_dir is required (the sweep folder).')
  space_text = None
  if FLAGS.space:
    if not os.path.isfile(FLAGS.space):
      raise app.UsageError(f'--space={FLAGS.space}: no such file.')
    with open(FLAGS.space) as f:
      space_text = f.read()

  def interrupted(signum, frame):
    del signum, frame
    raise _Interrupted()
  signal.signal(signal.SIGTERM, interrupted)
  try:
    study, space, args = open_study(FLAGS.output_dir, space_text, argv[1:], FLAGS.random_trials,
                                    FLAGS.startup_trials, FLAGS.prune)
    start = time.time()
    with contextlib.suppress(KeyboardInterrupt, _Interrupted):
      run_sweep(study, space, args, FLAGS.output_dir, FLAGS.trials, FLAGS.minutes,
                prune_from_eval=FLAGS.prune_from_eval)
  except SweepError as e:
    sys.exit(f'error: {e}')
  print(f'\nSweep {FLAGS.output_dir} ({(time.time() - start) / 60:.1f} min in this worker):')
  print('\n'.join(summary_rows(study, space)))
  path = write_best_config(study, space, args, FLAGS.output_dir)
  if path:
    print(f'Best: trial {study.best_trial.number}, {space.metric}={study.best_value:.4f}; its recipe: {path} '
          f'(--config_file={path}).')
  print(f'Compare the trials: tensorboard --logdir {FLAGS.output_dir}')


def run_main() -> None:
  define_flags()
  app.run(main)


if __name__ == '__main__':
  run_main()
