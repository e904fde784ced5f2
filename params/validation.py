"""The checks of a run's params: each key on its own, from its row in ``resnet_config.PARAMS`` (type, choices,
range, a list's items), then the rules between keys (``RULES``, one function each), then the validators of the
components that take a group of params (``model_config``, the augmentation and mixing configs). Each rule lives in
one of these places, once.
"""
import numbers
import operator
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from params.resnet_config import PARAMS, Param

_CHECK_OPS: Dict[str, Callable[[Any, Any], bool]] = {
    '>': operator.gt, '>=': operator.ge, '<': operator.lt, '<=': operator.le, '!=': operator.ne}


def _parse_check(check: str) -> Tuple[Callable[[Any, Any], bool], float]:
  """``'> 0'`` -> (operator.gt, 0.0)."""
  op, bound = check.split()
  return _CHECK_OPS[op], float(bound)


def _passes(value: Any, check: str) -> bool:
  op, bound = _parse_check(check)
  return op(value, bound)


for _param in PARAMS:  # A malformed check fails at import, not in some later run.
  for _check in _param.checks + (_param.items.checks if _param.items else ()):
    _parse_check(_check)


def _is_type(value: Any, kind: type) -> bool:
  if kind is bool or isinstance(value, bool):
    return kind is bool and isinstance(value, bool)
  if kind is int:
    return isinstance(value, numbers.Integral)
  if kind is float:
    return isinstance(value, numbers.Real)
  return isinstance(value, kind)


def value_problem(param: Param, value: Any) -> Optional[str]:
  """Why ``value`` is invalid for ``param`` (type, choices, checks, a list's items), naming the key, the rule and
  the value."""
  kind = param.value_type.__name__
  if param.words and isinstance(value, str):
    return None if value in param.words else (f'{param.name} must be {kind} or one of {list(param.words)!r}, '
                                               f'got {value!r}')
  if value is None:
    return None if param.default is None else f'{param.name} must be {kind}, got None (it cannot be unset)'
  if not _is_type(value, param.value_type):
    return f'{param.name} must be {kind}, got {type(value).__name__} {value!r}'
  if param.choices is not None and value not in param.choices:
    return f'{param.name} must be one of {list(param.choices)!r}, got {value!r}'
  if not all(_passes(value, check) for check in param.checks):
    return f'{param.name} must be {" and ".join(param.checks)}, got {value!r}'
  if param.items is not None and isinstance(value, list):
    bad = [item for item in value if item is None or value_problem(param.items, item)]
    if bad:
      rule = param.items.value_type.__name__ + ''.join(f' {c}' for c in param.items.checks)
      if param.items.choices:
        rule = f'one of {list(param.items.choices)}'
      return f'{param.name}={value!r}: each item must be {rule} (not {bad[0]!r})'
  return None


def value_problems(params: Mapping[str, Any], skip: Sequence[str] = ()) -> List[str]:
  """Each key on its own, from its definition in PARAMS: type, choices and checks (None only where unset is);
  ``skip``: keys a component checks itself."""
  return [problem for problem in (value_problem(p, params[p.name]) for p in PARAMS if p.name not in skip) if problem]


# ------------------------------------------------------------------------------------------------ rules between keys
# Each takes the (well-typed) params and returns what is wrong with the fix, or None.

def export_moving_average_needs_the_average(p: Mapping[str, Any]) -> Optional[str]:
  if p['export_moving_average'] and not p['moving_average_decay']:
    return 'export_moving_average=true needs moving_average_decay (e.g. 0.9999)'
  return None


def lars_is_the_momentum_optimizer(p: Mapping[str, Any]) -> Optional[str]:
  if p['enable_lars'] and p['optimizer'] != 'momentum':
    return (f'enable_lars=true is the LARS optimizer and optimizer={p["optimizer"]!r} another: choose one '
            '(enable_lars=false, or optimizer=momentum)')
  return None


def _optimizer_name(p: Mapping[str, Any]) -> str:
  return 'LARS' if p['enable_lars'] else {'adamw': 'AdamW', 'lamb': 'LAMB', 'muon': 'Muon'}.get(p['optimizer'], '')


def layer_decay_needs_momentum(p: Mapping[str, Any]) -> Optional[str]:
  name = _optimizer_name(p)
  if p['layer_decay'] is not None and name:
    return (f'layer_decay scales each stage\'s gradients, which {name} normalises away: use layer_decay with the '
            'momentum optimizer (optimizer=momentum, enable_lars=false)')
  return None


def head_only_steps_need_momentum(p: Mapping[str, Any]) -> Optional[str]:
  name = _optimizer_name(p)
  if p['train_head_only_steps'] and name:
    return (f'train_head_only_steps freezes the backbone by zeroing its gradients, but {name} still applies its '
            'weight decay to every kernel, so the backbone would move: use train_head_only_steps with the momentum '
            'optimizer (optimizer=momentum, enable_lars=false)')
  return None


def frozen_batch_norm_needs_batch_norm(p: Mapping[str, Any]) -> Optional[str]:
  if p['freeze_batch_norm'] and p['norm_act_layer'] != 'bn_relu':
    return f'freeze_batch_norm needs batch norm; norm_act_layer={p["norm_act_layer"]!r} has none'
  return None


def one_class_weight_per_class(p: Mapping[str, Any]) -> Optional[str]:
  """The one check of the weights' count (the model_fn and 'balanced' rely on it)."""
  weights = p['class_weights']
  if not isinstance(weights, list):
    return None
  if not weights or not any(weights):
    return (f'class_weights={weights!r} are all 0: the training loss would be weight decay alone; give the classes '
            'to learn a positive weight' if weights else 'class_weights=[] lists no weight: give one per class')
  if p['num_label_classes'] is not None and len(weights) != p['num_label_classes']:
    return (f'class_weights lists {len(weights)} weights for num_label_classes={p["num_label_classes"]}: give one '
            'per model class (or class_weights=balanced, which takes them from the data)')
  return None


def no_transposed_input(p: Mapping[str, Any]) -> Optional[str]:
  if p['transpose_input']:
    return ('transpose_input=true is the TPUEstimator infeed trick (batches sent as HWCN and transposed back on the '
            "TPU); TF2's TPUStrategy feeds NHWC batches directly, where it would only add two transposes: remove "
            'transpose_input from the config')
  return None


def one_deployed_file_to_predict_with(p: Mapping[str, Any]) -> Optional[str]:
  if p['predict_tflite'] and p['predict_onnx']:
    return 'predict_tflite and predict_onnx are both set: predict with one file at a time'
  if p['tta'] != 'none' and (p['predict_tflite'] or p['predict_onnx']):
    return (f'tta={p["tta"]} averages views in the model_fn, but a .tflite or .onnx file serves one view: predict '
            'with the file without tta, or with the checkpoint with it')
  return None


def target_threshold_needs_bce(p: Mapping[str, Any]) -> Optional[str]:
  threshold = p['bce_target_threshold']
  if threshold is not None and p['loss'] != 'binary_cross_entropy':
    return (f'bce_target_threshold={threshold} thresholds binary cross-entropy targets, but loss={p["loss"]}: set '
            'loss=binary_cross_entropy or unset bce_target_threshold')
  if (threshold is not None and p['class_weights'] and (p['mixup_alpha'] or p['cutmix_alpha'])
      and p['task'] != 'multi_label'):  # multi-label weights weigh positives in the loss, not the targets
    return (f'bce_target_threshold={threshold} with class_weights and mixup/CutMix: a mixed target row is weighed by '
            'its classes\' weights, so the weights would decide which classes pass the threshold. Use two of the '
            'three')
  return None


def multi_label_learns_sigmoids(p: Mapping[str, Any]) -> Optional[str]:
  """Multi-label data: a sigmoid per class; what assumes one class per image is refused."""
  if p['task'] != 'multi_label':
    return None
  if p['loss'] == 'softmax_cross_entropy':
    return ('task=multi_label with loss=softmax_cross_entropy: a softmax makes the classes compete for one answer, '
            'but an image may hold several or none. Unset loss (binary_cross_entropy, a sigmoid per class)')
  if p['teacher_checkpoint']:
    return ("task=multi_label with teacher_checkpoint: distillation's soft term is a softmax over the classes, "
            'which multi-label data has not. Train without a teacher')
  if p['best_metric'] in ('top_1_accuracy', 'top_5_accuracy'):
    return (f'task=multi_label with best_metric={p["best_metric"]}: multi-label eval reports mAP, micro_AP, '
            'micro_f1, macro_f1 (and *_tuned), exact_match, precision_at_1, loss. Unset best_metric (mAP) or name one')
  if p['class_weights'] is not None and p['class_weight_normalization'] == 'weight_sum':
    return ('task=multi_label with class_weight_normalization=weight_sum: multi-label class weights weigh each '
            "class's positives, not examples, so there is no sum of example weights to divide by. "
            'Use class_weight_normalization=batch_size')
  return None


def teacher_depth_needs_a_teacher(p: Mapping[str, Any]) -> Optional[str]:
  if p['teacher_resnet_depth'] is not None and not p['teacher_checkpoint']:
    return (f'teacher_resnet_depth={p["teacher_resnet_depth"]} is the depth of a distillation teacher, but '
            'teacher_checkpoint is unset: name the teacher, or unset teacher_resnet_depth')
  return None


def size_schedule_reaches_image_size(p: Mapping[str, Any]) -> Optional[str]:
  sizes = p['train_size_schedule']
  if not sizes:
    return None
  if sizes[-1] < p['image_size']:
    return (f'train_size_schedule={list(sizes)} ends at {sizes[-1]} px, below image_size={p["image_size"]}: the '
            f'last stretch must train at the size eval runs at; end the schedule with {p["image_size"]} (or lower '
            'image_size)')
  if len(sizes) > p['train_steps']:
    return f'train_size_schedule has {len(sizes)} sizes for train_steps={p["train_steps"]}: at most one per step'
  return None


RULES: Tuple[Callable[[Mapping[str, Any]], Optional[str]], ...] = (
    export_moving_average_needs_the_average, lars_is_the_momentum_optimizer, layer_decay_needs_momentum,
    head_only_steps_need_momentum,
    frozen_batch_norm_needs_batch_norm, one_class_weight_per_class, no_transposed_input,
    one_deployed_file_to_predict_with, target_threshold_needs_bce, multi_label_learns_sigmoids,
    teacher_depth_needs_a_teacher, size_schedule_reaches_image_size)

# Raises ValueError naming what is wrong. A validator with a ``keys`` attribute checks those keys fully, each on its
# own too (model_config.validate): the table's per-key check leaves them to it, so no rule runs twice.
Validator = Callable[[Mapping[str, Any]], Any]


def _raise(problems: Sequence[str]) -> None:
  if problems:
    raise ValueError('Invalid params: ' + '; '.join(p.rstrip('.') for p in problems) + '.')


def validate(params: Mapping[str, Any], validators: Sequence[Validator] = ()) -> None:
  """Every rule: each key's own, the rules between keys, then ``validators`` (the components that take a group of
  params). Each key's own problems come first: the rest may assume well-typed values (a validator that owns keys
  checks them first, then its rules)."""
  owned = [key for validator in validators for key in getattr(validator, 'keys', ())]
  owned_problems = []
  for validator in validators:
    if getattr(validator, 'keys', ()):
      try:
        validator(params)
      except (TypeError, ValueError) as e:
        owned_problems.append(str(e))
  _raise(value_problems(params, skip=owned) + owned_problems)
  problems = [problem for problem in (rule(params) for rule in RULES) if problem]
  for validator in validators:
    if getattr(validator, 'keys', ()):
      continue
    try:
      validator(params)
    except (TypeError, ValueError) as e:
      problems.append(str(e))
  _raise(problems)
