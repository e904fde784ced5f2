"""Tests of resnet/resnet_flags.py: flag definitions, params precedence and the shipped configs."""
import glob
import os

from absl import flags
import pytest

from params import params_dict as pd
from resnet.run_dir import params_files
from params import merging
from params import resnet_config
from resnet.run_setup import run_params
from resnet.task import tasks
from params.resnet_config import RESNET_CFG
from params import architectures
from resnet import resnet_flags as rf
from tests.helpers import procs

# What params_from_flags gives with no data_dir: the defaults, with the data-dependent counts set to ImageNet's.
# The defaults as a run sees them: ImageNet's counts without data, the reference's v1.5 without warm-start weights.
DEFAULTS = dict(RESNET_CFG, **resnet_config.IMAGENET_COUNTS, **architectures.VARIANT_DEFAULTS, task='single_label',
                **tasks.for_params({'task': None}).defaults)


def _flags(*args: str) -> flags.FlagValues:
  """A fresh FlagValues with every flag defined, parsed from ``args``."""
  flag_values = flags.FlagValues()
  rf.define_flags(flag_values)
  flag_values(['resnet_main'] + list(args))
  return flag_values


def _params(*args: str) -> pd.ParamsDict:
  return rf.params_from_flags(_flags(*args))


def _write(tmp_path, name: str, text: str) -> str:
  path = tmp_path / name
  path.write_text(text)
  return str(path)


# --- definitions ----------------------------------------------------------------------------------------------------


def test_define_flags_is_idempotent():
  flag_values = flags.FlagValues()
  rf.define_flags(flag_values)
  count = len(flag_values)
  rf.define_flags(flag_values)
  assert len(flag_values) == count


def test_every_params_key_has_a_none_flag_with_its_help_default_and_choices():
  flag_values = _flags()
  for param in resnet_config.PARAMS:
    assert param.name in flag_values, param.name
    assert flag_values[param.name].value is None, param.name
    assert flag_values[param.name].help.startswith(param.help), param.name
    assert f'[params default: {param.default!r}]' in flag_values[param.name].help, param.name
  assert 'One of: float32, bfloat16, float16.' in flag_values['precision'].help


def test_list_params_take_comma_separated_values_typed_as_yaml():
  params = _params('--crop_area_range=0.35,1', '--inference_batch_sizes=1,8')
  assert params.crop_area_range == [0.35, 1] and params.inference_batch_sizes == [1, 8]


def test_value_checks_come_from_the_param_definitions():
  with pytest.raises(ValueError, match=r"precision must be one of \['float32', 'bfloat16', 'float16'\], got 'fp16'"):
    run_params.make_params({'precision': 'fp16'}, fill_from_data=False)
  with pytest.raises(ValueError, match=r'se_ratio must be > 0 and <= 1, got 2.0'):
    run_params.make_params({'se_ratio': 2.0}, fill_from_data=False)


def test_cross_key_rules_name_the_fix():
  with pytest.raises(ValueError, match='pre_activation=true'):
    _params('--norm_act_layer=evonorm_s0')
  with pytest.raises(ValueError, match='TPUStrategy feeds NHWC'):
    _params('--transpose_input=true')
  with pytest.raises(ValueError, match='crop_area_range'):
    _params('--crop_area_range=0.9,0.5')


def test_flag_types_follow_the_params_types():
  flag_values = _flags('--train_steps=5', '--base_learning_rate=2', '--use_cache=false', '--data_dir=/d',
                       '--dropout_rate=0.2', '--random_seed=3')
  assert flag_values.train_steps == 5
  assert flag_values.base_learning_rate == 2.0 and isinstance(flag_values.base_learning_rate, float)
  assert flag_values.use_cache is False
  assert flag_values.dropout_rate == 0.2 and flag_values.random_seed == 3
  with pytest.raises(flags.IllegalFlagValueError):
    _flags('--train_steps=abc')


def test_reference_and_seed_flags_exist():
  flag_values = _flags()
  for name in ('tpu', 'gcp_project', 'tpu_zone', 'use_tpu', 'data_dir', 'model_dir', 'train_batch_size',
               'eval_batch_size', 'predict_batch_size', 'train_steps', 'skip_host_call', 'iterations_per_loop',
               'precision', 'config_file', 'params_override', 'param_overrides', 'resnet_depth',
               'num_train_images', 'num_eval_images', 'num_test_images', 'num_label_classes', 'data_format',
               'transpose_input', 'use_cache', 'image_size', 'dropblock_groups', 'dropblock_keep_prob',
               'dropblock_size', 'pre_activation', 'profile_every_n_steps', 'tpu_profile_duration', 'profile_steps',
               'profiler_port', 'mode', 'steps_per_eval', 'eval_timeout', 'num_parallel_calls', 'num_cores',
               'export_dir', 'base_learning_rate', 'momentum', 'weight_decay', 'label_smoothing',
               'resnet_checkpoint', 'strategy', 'worker_hosts', 'task_index', 'eval_checkpoint', 'predict_input',
               'predict_output', 'dump_params', 'lr_schedule', 'save_checkpoints_steps', 'keep_checkpoint_max',
               'jit_compile', 'input_pipeline', 'labels_file', 'random_seed'):
    assert name in flag_values, name


def test_mode_accepts_the_four_modes_only():
  assert _flags().mode == 'train_and_eval'
  assert _flags('--mode=predict').mode == 'predict'
  with pytest.raises(flags.IllegalFlagValueError):
    _flags('--mode=serve')


# --- params_from_flags ----------------------------------------------------------------------------------------------


def test_no_flags_give_the_defaults_validated_and_locked():
  params = _params()
  assert params == DEFAULTS
  assert params.is_locked
  with pytest.raises(ValueError, match='locked'):
    params.train_steps = 1


def test_precedence_defaults_then_config_file_then_overrides_then_flags(tmp_path):
  config = _write(tmp_path, 'c.yaml', 'train_steps: 10\niterations_per_loop: 5\nsteps_per_eval: 7\n')
  params = _params(f'--config_file={config}', '--params_override=iterations_per_loop=6,steps_per_eval=8',
                   '--steps_per_eval=9')
  assert params.train_steps == 10          # config_file beats the default
  assert params.iterations_per_loop == 6   # override beats config_file
  assert params.steps_per_eval == 9        # explicit flag beats override
  assert params.train_batch_size == RESNET_CFG['train_batch_size']


def test_flag_order_on_the_command_line_does_not_change_precedence(tmp_path):
  config = _write(tmp_path, 'c.yaml', 'train_steps: 10\n')
  params = _params('--train_steps=30', '--params_override=train_steps=20', f'--config_file={config}')
  assert params.train_steps == 30


def test_both_override_spellings_apply_in_command_line_order():
  params = _params('--param_overrides=train_steps=1,iterations_per_loop=2',
                   '--params_override=train_steps=3', '--param_overrides=iterations_per_loop=4,steps_per_eval=5')
  assert (params.train_steps, params.iterations_per_loop, params.steps_per_eval) == (3, 4, 5)
  params = _params('--params_override=train_steps=3', '--param_overrides=train_steps=1')
  assert params.train_steps == 1


def test_override_flag_accepts_yaml_strings_and_files(tmp_path):
  path = _write(tmp_path, 'o.yaml', 'weight_decay: 5e-5\n')
  params = _params('--params_override={train_steps: 11}', f'--params_override={path}')
  assert params.train_steps == 11
  assert params.weight_decay == 5e-5 and isinstance(params.weight_decay, float)


def test_repeated_config_files_apply_in_order(tmp_path):
  first = _write(tmp_path, 'a.yaml', 'train_steps: 1\nimage_size: 64\n')
  second = _write(tmp_path, 'b.yaml', 'train_steps: 2\n')
  params = _params(f'--config_file={first}', f'--config_file={second}')
  assert params.train_steps == 2 and params.image_size == 64


def test_config_file_by_bare_name_is_found_in_the_configs_directory():
  assert _params('--config_file=demo').resnet_depth == 18
  assert _params('--config_file=demo.yaml').resnet_depth == 18


def test_unknown_config_file_lists_the_shipped_ones():
  with pytest.raises(ValueError, match=r"--config_file=nope: 'nope' is no file.*demo, flowers_finetune"):
    _params('--config_file=nope')


def test_unknown_key_in_an_override_names_the_flag_and_suggests():
  with pytest.raises(KeyError, match=r"--params_override=train_step=3: Unknown param 'train_step'. Did you mean: "
                     r'train_steps'):
    _params('--params_override=train_step=3')


def test_unknown_key_in_a_config_file_names_the_file(tmp_path):
  config = _write(tmp_path, 'c.yaml', 'iterations_per_lop: 5\n')
  with pytest.raises(KeyError, match=r'--config_file=.*c\.yaml: Unknown param .*iterations_per_loop'):
    _params(f'--config_file={config}')


def test_override_type_error_names_key_expected_and_given():
  with pytest.raises(ValueError, match=r"'train_steps' expects int .* got str 'abc'"):
    _params('--params_override=train_steps=abc')


def test_explicit_false_bool_flag_overrides_a_config_true():
  assert _params('--config_file=resnet50_tpu_v3_8').use_cache is True
  assert _params('--config_file=resnet50_tpu_v3_8', '--nouse_cache').use_cache is False
  assert _params('--config_file=resnet50_tpu_v3_8', '--use_cache=false').use_cache is False


def test_restrictions_are_checked_after_all_overrides():
  with pytest.raises(ValueError, match="precision must be one of .*, got 'fp16'"):
    _params('--precision=fp16')
  with pytest.raises(ValueError, match='train_batch_size must be > 0, got 0'):
    _params('--params_override=train_batch_size=0')


def test_mode_inputs_are_params_so_params_yaml_describes_the_run():
  params = _params('--mode=eval', '--worker_hosts=a:1,b:2', '--task_index=1', '--eval_checkpoint=/m/ckpt-5',
                   '--predict_input=/x/*.jpg', '--predict_output=/x/p.csv', '--dump_params', '--gcp_project=p',
                   '--tpu_zone=z')
  for name in rf.NON_PARAMS_FLAG_NAMES:
    assert name not in params, name
  assert (params.worker_hosts, params.task_index, params.eval_checkpoint) == ('a:1,b:2', 1, '/m/ckpt-5')
  assert (params.predict_input, params.predict_output, params.gcp_project, params.tpu_zone) == (
      '/x/*.jpg', '/x/p.csv', 'p', 'z')


def test_non_params_flag_values():
  flag_values = _flags('--worker_hosts=a:1,b:2', '--task_index=1', '--dump_params')
  assert flag_values.worker_hosts == 'a:1,b:2' and flag_values.task_index == 1 and flag_values.dump_params


def test_params_from_flags_needs_parsed_flags():
  flag_values = flags.FlagValues()
  rf.define_flags(flag_values)
  with pytest.raises(ValueError, match='parsed'):
    rf.params_from_flags(flag_values)


def test_seed_finetune_command_line():
  params = _params('--tpu=grpc://10.0.0.2:8470', '--data_dir=gs://bucket/data',
                   '--param_overrides=train_steps=42,iterations_per_loop=6,num_parallel_calls=64,'
                   'train_batch_size=1024',
                   '--model_dir=gs://bucket/resnet-tpu-model',
                   '--resnet_checkpoint=gs://cloud-tpu-artifacts/resnet/resnet-nhwc-2018-02-07',
                   '--mode=train_and_eval', '--steps_per_eval=42', '--profile_every_n_steps=1',
                   '--tpu_profile_duration=15000', '--export_dir=gs://resnet-tpu-colab/exported-model')
  assert (params.train_steps, params.iterations_per_loop, params.num_parallel_calls) == (42, 6, 64)
  assert params.steps_per_eval == 42 and params.tpu_profile_duration == 15000
  assert params.resnet_checkpoint == 'gs://cloud-tpu-artifacts/resnet/resnet-nhwc-2018-02-07'
  assert params.data_dir == 'gs://bucket/data' and params.tpu == 'grpc://10.0.0.2:8470'


def test_seed_predict_command_line():
  flag_values = _flags('--mode=predict', '--predict_batch_size=360', '--num_test_images=372')
  params = rf.params_from_flags(flag_values)
  assert flag_values.mode == 'predict'
  assert params.predict_batch_size == 360 and params.num_test_images == 372


# --- make_params: the one way to make params ------------------------------------------------------------------------


def test_make_params_rejects_an_unknown_key_naming_close_ones():
  with pytest.raises(KeyError, match=r"Unknown param 'train_step'. Did you mean: train_steps"):
    run_params.make_params({'train_step': 3})


def test_make_params_rejects_a_bad_type_naming_key_expected_and_given():
  with pytest.raises(ValueError, match=r"'train_steps' expects int .* got str 'abc'"):
    run_params.make_params({'train_steps': 'abc'})
  with pytest.raises(ValueError, match=r"num_label_classes must be int, got str 'ten'"):  # None default: by PARAMS
    run_params.make_params({'num_label_classes': 'ten'})
  with pytest.raises(ValueError, match=r'train_steps must be int, got None \(it cannot be unset\)'):
    run_params.make_params({'train_steps': None})


def test_make_params_rejects_a_failed_check_naming_key_rule_and_value():
  with pytest.raises(ValueError, match=r'image_size must be >= 32, got 16'):
    run_params.make_params({'image_size': 16})
  with pytest.raises(ValueError, match='pre_activation=true'):  # a rule between keys (check_consistency)
    run_params.make_params({'norm_act_layer': 'evonorm_s0'})


def test_make_params_is_validated_and_locked():
  params = run_params.make_params({'train_steps': 7})
  assert params.is_locked and params.train_steps == 7
  with pytest.raises(ValueError, match='locked'):
    params.train_steps = 1
  params.validate()
  assert dict(params) == params.as_dict()  # a plain copy, as the Estimator takes it


def test_make_params_labels_errors_and_takes_strings_files_and_mappings(tmp_path):
  with pytest.raises(KeyError, match=r"params override 'train_step=3': Unknown param 'train_step'"):
    run_params.make_params('train_step=3')
  with pytest.raises(KeyError, match=r"mine: Unknown param 'train_step'"):
    run_params.make_params([('mine', {'train_step': 3})])
  config = _write(tmp_path, 'c.yaml', 'train_steps: 10\nimage_size: 64\n')
  params = run_params.make_params(['train_steps=11', {'iterations_per_loop': 5}],
                                     config_files=[config, 'demo'])
  assert (params.train_steps, params.image_size, params.iterations_per_loop, params.resnet_depth) == (11, 64, 5, 18)


def test_make_params_gives_the_cli_params_for_the_same_overrides(tmp_path):
  config = _write(tmp_path, 'c.yaml', 'train_steps: 10\niterations_per_loop: 5\n')
  cli = _params(f'--config_file={config}', '--config_file=demo', '--params_override=iterations_per_loop=6',
                '--steps_per_eval=9', '--crop_area_range=0.35,1', f'--data_dir={_converted(tmp_path / "d")}')
  made = run_params.make_params(['iterations_per_loop=6', {'steps_per_eval': 9, 'crop_area_range': [0.35, 1]},
                                    {'data_dir': str(tmp_path / 'd')}], config_files=[config, 'demo'])
  assert made == cli and made.as_dict() == cli.as_dict()
  assert made.num_label_classes == 3  # filled from the data by both
  assert rf.params_from_flags(_flags(), fill_from_data=False) == run_params.make_params(fill_from_data=False)


# --- shipped configs ------------------------------------------------------------------------------------------------

CONFIGS = sorted(glob.glob(os.path.join(rf.CONFIG_DIR, '*.yaml')))


def test_the_five_configs_are_shipped():
  names = {os.path.basename(path) for path in CONFIGS}
  assert {'resnet50_tpu_v3_8.yaml', 'resnet50_gpu.yaml', 'resnet50_cpu.yaml', 'flowers_finetune.yaml',
          'demo.yaml'} <= names


@pytest.mark.parametrize('path', CONFIGS, ids=os.path.basename)
def test_config_passes_strict_override_and_validate(path):
  params = run_params.make_params(config_files=[path])
  config = params_files.read_params(path).as_dict()
  assert params == {**DEFAULTS, **config}
  assert _params(f'--config_file={path}') == params


def test_tpu_config_matches_the_reference_with_per_epoch_loops():
  params = _params('--config_file=resnet50_tpu_v3_8')
  assert (params.train_steps, params.train_batch_size, params.eval_batch_size) == (113854, 1024, 1024)
  assert (params.iterations_per_loop, params.num_cores, params.strategy) == (1251, 8, 'tpu')
  assert params.precision == 'bfloat16' and params.use_cache is True


def test_flowers_config_uses_the_seed_numbers_and_the_measured_recipe():
  params = _params('--config_file=flowers_finetune')
  assert params.train_steps == int(15 * 2934 / 1024) == 42
  assert params.num_label_classes == 1000  # no data_dir: the counts come from the data's summary.json
  assert (params.iterations_per_loop, params.steps_per_eval) == (6, 42)
  assert params.label_smoothing == 0.1 and params.resnet_checkpoint is None
  # The recipe measured fastest on a fine-tuning task (docs/performance.md), not the seed's momentum SGD.
  assert (params.optimizer, params.base_learning_rate, params.weight_decay) == ('lamb', 0.04, 0.02)
  assert (params.lr_schedule, params.lr_warmup_epochs) == ('cosine', 1.0)


# --- data-aware defaults --------------------------------------------------------------------------------------------


def _converted(tmp_path, classes=3, train=120, validation=15, test=15) -> str:
  tmp_path.mkdir(exist_ok=True)
  (tmp_path / 'labels.txt').write_text(''.join(f'class_{i}\n' for i in range(classes)))
  (tmp_path / 'summary.json').write_text(
      '{"splits": {"train": {"images": %d}, "validation": {"images": %d}, "test": {"images": %d}}}'
      % (train, validation, test))
  return str(tmp_path)


def test_unset_counts_come_from_the_converters_summary(tmp_path):
  params = _params(f'--data_dir={_converted(tmp_path)}')
  assert (params.num_label_classes, params.num_train_images, params.num_eval_images, params.num_test_images) == (
      3, 120, 15, 15)


def test_a_count_that_contradicts_the_data_is_an_error_naming_both_values(tmp_path):
  with pytest.raises(ValueError, match=r'num_label_classes=5 but .*labels.txt lists 3 classes'):
    _params(f'--data_dir={_converted(tmp_path)}', '--num_label_classes=5')
  assert _params(f'--data_dir={_converted(tmp_path)}', '--num_label_classes=4').num_label_classes == 4  # background


def test_without_summary_the_counts_are_imagenets():
  params = _params()
  assert (params.num_label_classes, params.num_train_images) == (1000, 1281167)


def test_the_reference_names_of_renamed_params_still_work_everywhere(tmp_path):
  """skip_host_call / tpu_profile_duration: the reference's names, as flags, overrides and in config files."""
  by_flag = _params('--skip_host_call=true', '--tpu_profile_duration=250')
  assert by_flag.skip_train_summaries is True and by_flag.profile_duration_ms == 250
  config = tmp_path / 'old.yaml'
  config.write_text('skip_host_call: true\ntpu_profile_duration: 300\n')
  made = run_params.make_params(['tpu_profile_duration=400'], config_files=[str(config)], fill_from_data=False)
  assert made.skip_train_summaries is True and made.profile_duration_ms == 400
  assert made['tpu_profile_duration'] == 400  # read under either name
  assert 'skip_host_call' not in made.as_dict()  # params.yaml records our name only
  with pytest.raises(ValueError, match='profile_duration_ms must be > 0'):
    run_params.make_params({'tpu_profile_duration': 0}, fill_from_data=False)


def test_aliases_answer_every_lookup_and_may_not_be_given_twice():
  params = run_params.make_params({'skip_host_call': True}, fill_from_data=False)
  assert 'skip_host_call' in params and params.get('skip_host_call') is True and params.skip_host_call is True
  with pytest.raises(KeyError, match="'skip_host_call' and 'skip_train_summaries' name the same param"):
    run_params.make_params({'skip_host_call': True, 'skip_train_summaries': False}, fill_from_data=False)


def test_params_load_without_tensorflow():
  """Flags and params come before TensorFlow (whose import takes seconds): the params table, the flags and reading
  a config file must not pull it in."""
  import subprocess  # pylint: disable=import-outside-toplevel
  import sys  # pylint: disable=import-outside-toplevel
  code = ('import sys; from params import merging; from resnet import resnet_flags; '
          "from resnet.run_dir import params_files; merging.make_params(configs=[('demo', params_files.read_params("
          "params_files.resolve_config_file('demo')).as_dict())]); print('tensorflow' in sys.modules)")
  out = subprocess.run([sys.executable, '-c', code], cwd=procs.ROOT,
                       capture_output=True, text=True, timeout=120, check=True).stdout
  assert out.strip() == 'False'


def test_params_given_for_another_mode_are_named_by_their_own_modes():
  """One mechanism: each param knows the modes it acts in; the command line's params are checked against it."""
  assert all(set(p.modes) <= set(rf.MODES) for p in resnet_config.PARAMS)
  given = rf.given_param_keys(_flags('--mode=eval', '--early_stopping_evals=3', '--resnet_depth=18',
                                     '--params_override=mixup_alpha=0.2,skip_host_call=true'))
  assert sorted(given) == ['early_stopping_evals', 'mixup_alpha', 'resnet_depth', 'skip_host_call']
  assert resnet_config.unused_in_mode(given, 'eval') == [
      'early_stopping_evals does nothing in --mode=eval (it acts in --mode=train_and_eval)',
      'mixup_alpha does nothing in --mode=eval (it acts in --mode=train/train_and_eval)']
  assert not resnet_config.unused_in_mode(given, 'train_and_eval')
  assert resnet_config.unused_in_mode(['predict_top_k', 'export_tflite'], 'train') == [
      'predict_top_k does nothing in --mode=train (it acts in --mode=predict)']


@pytest.mark.slow
def test_the_cli_warns_about_a_param_its_mode_ignores(tmp_path):
  import subprocess  # pylint: disable=import-outside-toplevel
  import sys  # pylint: disable=import-outside-toplevel
  proc = subprocess.run([sys.executable, '-m', 'resnet.resnet_main', '--mode=export', f'--model_dir={tmp_path}',
                         '--early_stopping_evals=3', '--num_label_classes=4'],
                        capture_output=True, text=True, timeout=300, check=False,
                        cwd=procs.ROOT)
  assert 'early_stopping_evals does nothing in --mode=export (it acts in --mode=train_and_eval): remove it' in (
      proc.stderr), proc.stderr[-2000:]


def test_the_params_table_offers_the_runners_strategies():
  from resnet.estimator import run_config  # pylint: disable=import-outside-toplevel
  assert resnet_config.STRATEGIES == run_config.STRATEGIES


@pytest.mark.parametrize('override,message', [
    ({'mix_prob': 1.5}, 'mix_prob must be in'), ({'randaug_magnitude': 31}, 'randaug_magnitude must be in 0..30'),
    ({'crop_area_range': [0.5, 0.2]}, 'crop_area_range must satisfy'), ({'mixup_alpha': -1.0}, 'mixup_alpha must be')])
def test_each_range_is_checked_once_by_the_component_that_takes_it(override, message):
  with pytest.raises(ValueError, match=message):
    run_params.make_params(override, fill_from_data=False)
  merging.make_params(override)   # the table itself does not repeat the component's check
