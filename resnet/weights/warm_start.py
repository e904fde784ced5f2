"""Warm start (``--resnet_checkpoint``): copy model weights from a checkpoint into a freshly built ResNet.

Three sources are understood:
- ``tf2``: a checkpoint of this application (``tf.train.Checkpoint(global_step=, model=, optimizer=[, ema=])``).
- ``tf1``: a name-based checkpoint of the reference TPU ResNet (``conv2d/kernel``,
  ``batch_normalization_52/moving_variance``, ``dense/bias``; an outer scope such as ``resnet50/`` is stripped).
- ``foreign``: Keras applications or torchvision/timm weights files, which resnet/weights/foreign_weights.py reads under the
  same TF1 names. Their framework computes with another ``Variant`` (stride placement, pool padding, ...); the model
  must have been built with it (``model.variant``, set from the file by run_params.make_params), else
  WarmStartMismatchError names each difference: same shapes, another function, is never copied silently.

What is copied: every model weight, BN moving statistics included (the reference's ``WarmStartSettings`` pitfall:
trainable-only regexes lose them). Not copied: the global step and optimizer slots (``Momentum``). With
``use_moving_average=True`` the weights come from the moving averages instead: the ``ema`` object's shadows
(resnet/weights/ema.py) of a tf2 checkpoint, or ``<name>/ExponentialMovingAverage`` of a reference checkpoint.

All or nothing, except the classifier head: a backbone variable missing from the checkpoint or of another shape
raises ``WarmStartMismatchError`` (naming the variables and both shapes) before anything is assigned, because a
checkpoint of another depth or block version shares a few shapes (the stem, some BNs) and would otherwise
warm-start a handful of layers and train on as if nothing happened. ``allow_partial=True`` copies what matches and
logs a warning instead. The head (``dense/*``) is skipped, and named in the log, when its shape differs (another
class count) or the checkpoint has none. A checkpoint where nothing matches is always an error (a typo'd path must
not train from scratch unnoticed).

Mapping tf2 checkpoint keys to variables. Keras 3 keys are object-graph paths, not layer names, and the key of a
variable is its *first* path in a breadth-first walk from the root: trainable weights are stored as
``optimizer/_trainable_variables/<i>`` (shorter than ``model/_operations/<j>/_kernel``), only non-trainable ones
(BN moving stats) under ``model/...``. So neither a ``model/`` prefix filter nor pairing with the keys of a
throwaway ``tf.train.Checkpoint(model=model)`` (which has every key under ``model/``, sorted lexicographically)
finds the trainable weights. Instead we walk the checkpoint's object graph (``_CHECKPOINTABLE_OBJECT_GRAPH``) from
its ``model`` node and the live model in step, following the same named edges (``_operations`` -> ``3`` ->
``_kernel``) with ``tf.train.TrackableView``; a graph node carrying a ``VARIABLE_VALUE`` attribute then pairs its
checkpoint key with the live variable. This is how ``tf.train.Checkpoint.restore`` itself matches objects, it does
not depend on key spelling or sort order, and it never reaches the optimizer or the global step (they are not
below ``model``). Moving averages sit below ``ema/shadows``, one child per variable named by its Keras path.
"""
import collections
import dataclasses
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from absl import logging
import keras
import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import trackable_object_graph_pb2

from params import architectures
from resnet.weights import ema as ema_lib
from resnet.weights import foreign_weights
from resnet.model import tf1_names
from resnet.estimator import checkpoints as checkpoints_lib

OBJECT_GRAPH_KEY = '_CHECKPOINTABLE_OBJECT_GRAPH'
MODEL_NODE = 'model'
MAX_LISTED = 6

Shape = Tuple[int, ...]
# A reference (TF1) model variable, possibly under outer scopes: '<scopes/>conv2d_7/kernel'.
_TF1_LEAF = re.compile(r'(?:^|/)((?:conv2d|batch_normalization|evonorm|dense)(?:_\d+)?/'
                       r'(?:kernel|bias|gamma|beta|v|moving_mean|moving_variance))$')
TF1_EMA_SUFFIX = '/ExponentialMovingAverage'


class WarmStartMismatchError(ValueError):
  """The checkpoint does not fit the model (other architecture, no matching or no averaged variables)."""


@dataclasses.dataclass
class WarmStartSummary:
  """What a warm start did; names are the model's TF1 names (``conv2d/kernel``)."""
  restored: List[str]
  skipped: List[Tuple[str, Shape, Shape]]   # (name, checkpoint shape, model shape)
  missing: List[str]                         # model variables the checkpoint does not have
  source_format: str                         # 'tf2' | 'tf1' | 'foreign'
  checkpoint: str = ''
  moving_average: bool = False               # the values came from the checkpoint's moving averages
  foreign: Optional[foreign_weights.ForeignWeights] = None  # the weights file, for a foreign source


# ------------------------------------------------------------------------------------------------ paths
resolve_checkpoint = checkpoints_lib.resolve


# ------------------------------------------------------------------------------------------------ tf2 format
def _object_graph(reader) -> Optional[trackable_object_graph_pb2.TrackableObjectGraph]:
  if not reader.has_tensor(OBJECT_GRAPH_KEY):
    return None
  graph = trackable_object_graph_pb2.TrackableObjectGraph()
  graph.ParseFromString(reader.get_tensor(OBJECT_GRAPH_KEY))
  return graph


def _model_node(graph: trackable_object_graph_pb2.TrackableObjectGraph) -> Optional[int]:
  for child in graph.nodes[0].children:
    if child.local_name == MODEL_NODE:
      return child.node_id
  return None


def tf2_keys(graph: trackable_object_graph_pb2.TrackableObjectGraph, model_node: int,
             model: keras.Model) -> Dict[int, str]:
  """id(live variable) -> checkpoint key, by walking the checkpoint's object graph and the model in step."""
  keys: Dict[int, str] = {}
  queue = collections.deque([(model_node, model)])
  seen = {model_node}
  while queue:
    node_id, obj = queue.popleft()
    node = graph.nodes[node_id]
    for attribute in node.attributes:
      if attribute.name == 'VARIABLE_VALUE' and isinstance(obj, (keras.Variable, tf.Variable)):
        keys.setdefault(id(obj), attribute.checkpoint_key)
    if not node.children:
      continue
    live_children = tf.train.TrackableView(obj).children(obj)
    for child in node.children:
      if child.node_id not in seen and child.local_name in live_children:
        seen.add(child.node_id)
        queue.append((child.node_id, live_children[child.local_name]))
  return keys


# ------------------------------------------------------------------------------------------------ tf1 format
def reference_names(checkpoint_names: Sequence[str]) -> Dict[str, str]:
  """Reference name (``conv2d/kernel``) -> checkpoint name, stripping the outer scope the names share.

  Optimizer slots (``.../Momentum``), EMA shadows and ``global_step`` do not end in a layer variable and drop out.
  When several scopes occur (a detection checkpoint with a backbone and heads), the most common one wins.
  """
  by_prefix: Dict[str, Dict[str, str]] = collections.defaultdict(dict)
  for name in checkpoint_names:
    match = _TF1_LEAF.search(name)
    if match:
      by_prefix[name[:match.start(1)]][match.group(1)] = name
  if not by_prefix:
    return {}
  prefix = max(by_prefix, key=lambda p: (len(by_prefix[p]), -len(p)))
  if len(by_prefix) > 1:
    logging.info('Warm start: checkpoint variables sit under several scopes %s; using %r.',
                 sorted(by_prefix), prefix)
  return by_prefix[prefix]


def tf1_ema_names(checkpoint_names: Sequence[str]) -> Dict[str, str]:
  """Reference name -> checkpoint name of its moving average (``<scope/>conv2d/kernel/ExponentialMovingAverage``)."""
  averaged = [n[:-len(TF1_EMA_SUFFIX)] for n in checkpoint_names if n.endswith(TF1_EMA_SUFFIX)]
  return {leaf: name + TF1_EMA_SUFFIX for leaf, name in reference_names(averaged).items()}


def _child(graph: trackable_object_graph_pb2.TrackableObjectGraph, node_id: int, name: str) -> Optional[int]:
  for child in graph.nodes[node_id].children:
    if child.local_name == name:
      return child.node_id
  return None


def tf2_ema_keys(graph: trackable_object_graph_pb2.TrackableObjectGraph) -> Optional[Dict[str, str]]:
  """Keras variable path -> checkpoint key of its shadow (resnet/weights/ema.py), or None without an EMA object."""
  ema_node = _child(graph, 0, ema_lib.CHECKPOINT_NAME)
  shadows_node = _child(graph, ema_node, ema_lib.SHADOWS_ATTRIBUTE) if ema_node is not None else None
  if shadows_node is None:
    return None
  keys = {}
  for child in graph.nodes[shadows_node].children:
    for attribute in graph.nodes[child.node_id].attributes:
      if attribute.name == 'VARIABLE_VALUE':
        keys[child.local_name] = attribute.checkpoint_key
  return keys


# ------------------------------------------------------------------------------------------------ main
def warm_start(model: keras.Model, checkpoint: str, allow_partial: bool = False,
               use_moving_average: bool = False) -> WarmStartSummary:
  """Assigns checkpoint values to ``model``'s weights (built model; the caller picks the scope).

  Args:
    model: the freshly built ResNet.
    checkpoint: a checkpoint prefix, one of its files, a directory (its latest checkpoint), or a Keras
      applications / torchvision / timm weights file (resnet/weights/foreign_weights.py).
    allow_partial: copy whatever matches when backbone variables are missing or differ in shape (warning);
      by default that raises WarmStartMismatchError and leaves the model untouched.
    use_moving_average: take the checkpoint's moving averages (EMA shadows) instead of the raw weights; raises
      WarmStartMismatchError if the checkpoint has none.
  Raises:
    WarmStartMismatchError: nothing matches; backbone mismatches without allow_partial; no moving averages; a
      foreign file whose framework computes with another Variant than the model.
    FileNotFoundError: no checkpoint at ``checkpoint``.
    ValueError: a foreign weights file that cannot be read (a .pth without torch, another architecture).
  """
  variables = tf1_names.tf1_variable_map(model)   # TF1 name -> variable, creation order
  foreign = foreign_weights.load(checkpoint)
  graph = model_node = None
  if foreign is not None:
    path, source_format = checkpoint, 'foreign'
    if use_moving_average:
      raise WarmStartMismatchError(f'Warm start from {path}: moving averages were requested (use_moving_average='
                                   f'True), but {foreign.header.title()} holds plain weights; warm-start without.')
    _check_variant(model, foreign.header)
    shapes = {name: value.shape for name, value in foreign.tensors.items()}
    keys = {name: name for name in foreign.tensors}
    read = foreign.tensors.__getitem__
  else:
    path = resolve_checkpoint(checkpoint)
    reader = tf.train.load_checkpoint(path)
    read = reader.get_tensor
    shapes = reader.get_variable_to_shape_map()
    graph = _object_graph(reader)
    model_node = _model_node(graph) if graph is not None else None
    source_format, keys = _checkpoint_keys(model, variables, path, shapes, graph, model_node, use_moving_average)
  summary = WarmStartSummary([], [], [], source_format, path, use_moving_average, foreign)
  to_assign = []
  for name, variable in variables.items():
    key = keys.get(name)
    if key is None or key not in shapes:
      summary.missing.append(name)
      continue
    ckpt_shape, model_shape = tuple(shapes[key]), tuple(variable.shape)
    if ckpt_shape != model_shape:
      summary.skipped.append((name, ckpt_shape, model_shape))
      continue
    to_assign.append((name, variable, key))
  if not to_assign:
    raise WarmStartMismatchError(_nothing_matches(path, shapes, variables, summary, graph, model_node))
  mismatches = backbone_mismatches(summary)
  if mismatches and not allow_partial:
    raise WarmStartMismatchError(_mismatch_message(summary, mismatches, variables))
  if foreign is not None and foreign.unused and not allow_partial:
    raise WarmStartMismatchError(_unused_message(summary, len(to_assign)))
  for name, variable, key in to_assign:
    variable.assign(np.asarray(read(key)).astype(_numpy_dtype(variable)))
    summary.restored.append(name)
  _log(summary, len(variables))
  return summary


def _checkpoint_keys(model: keras.Model, variables: Mapping[str, Any], path: str, shapes: Mapping[str, Any],
                     graph, model_node: Optional[int], use_moving_average: bool) -> Tuple[str, Dict[str, str]]:
  """(source format, TF1 name -> checkpoint key) of a TF checkpoint: our object graph (tf2) or reference names."""
  if model_node is not None:
    if use_moving_average:
      by_path = tf2_ema_keys(graph)
      if not by_path:
        raise WarmStartMismatchError(_no_averages(path, 'tf2'))
      return 'tf2', {name: by_path[v.path] for name, v in variables.items() if v.path in by_path}
    by_id = tf2_keys(graph, model_node, model)
    return 'tf2', {name: by_id[id(v)] for name, v in variables.items() if id(v) in by_id}
  if use_moving_average:
    keys = tf1_ema_names(list(shapes))
    if not keys and reference_names(list(shapes)):
      raise WarmStartMismatchError(_no_averages(path, 'tf1'))
    return 'tf1', keys
  return 'tf1', reference_names(list(shapes))


def backbone_mismatches(summary: WarmStartSummary) -> List[Tuple[str, Optional[Shape], Optional[Shape]]]:
  """(name, checkpoint shape or None if missing, model shape) of every non-head variable that was not copied."""
  out = [(n, c, m) for n, c, m in summary.skipped if not tf1_names.is_classifier_head(n)]
  return out + [(n, None, None) for n in summary.missing if not tf1_names.is_classifier_head(n)]


def _numpy_dtype(variable) -> np.dtype:
  return tf.as_dtype(variable.dtype).as_numpy_dtype


def _check_variant(model: keras.Model, header: foreign_weights.Header) -> None:
  """The model must compute as the file's framework does: the same shapes with another stride placement, pool
  padding, epsilon or input normalisation would load without complaint and compute another function."""
  variant = getattr(model, 'variant', architectures.Variant())
  problems = [f'{key}: the weights need {value!r}, the model has {getattr(variant, key)!r}'
              for key, value in header.variant.items() if getattr(variant, key) != value]
  if problems:
    raise WarmStartMismatchError(
        f'Warm start from {header.path} ({header.title()}): the model does not compute as these weights were '
        f'trained: {"; ".join(problems)}. Nothing was copied. Build the model from params made with '
        f'resnet_checkpoint set to this file (run_params.make_params sets them from it), or set these params.')


# ------------------------------------------------------------------------------------------------ messages
def _fmt_shape(shape: Sequence[int]) -> str:
  return '[' + ','.join(str(d) for d in shape) + ']'


def _listed(items: Sequence[str], limit: int = MAX_LISTED) -> str:
  shown = ', '.join(items[:limit])
  return shown + (f', ... and {len(items) - limit} more' if len(items) > limit else '')


def head_note(skipped: Sequence[Tuple[str, Shape, Shape]]) -> str:
  """Explains a classifier-head mismatch: class counts, and the 1001 background-class convention if off by one."""
  bias = [(c, m) for name, c, m in skipped if name == 'dense/bias']
  if not bias:
    return ''
  ckpt_classes, model_classes = bias[0][0][-1], bias[0][1][-1]
  note = f' (classifier head: checkpoint {ckpt_classes} classes, model {model_classes}; it starts fresh'
  if abs(ckpt_classes - model_classes) == 1:
    note += ('; off by one: 1001 = 1000 ImageNet classes + background class 0 in the reference\'s convention, '
             'set num_label_classes to match the checkpoint to keep its head')
  return note + ')'


def _mismatch_message(summary: WarmStartSummary, mismatches, variables: Mapping[str, Any]) -> str:
  total = len(variables)
  listed = []
  sources = summary.foreign.sources if summary.foreign is not None else {}
  for name, ckpt_shape, _ in mismatches[:MAX_LISTED]:
    model_shape = _fmt_shape(tuple(variables[name].shape))
    label = f'{name} ({sources[name]})' if name in sources else name  # the file's name for it
    listed.append(f'{label} model {model_shape} checkpoint {_fmt_shape(ckpt_shape) if ckpt_shape else "missing"}')
  more = f', ... and {len(mismatches) - MAX_LISTED} more' if len(mismatches) > MAX_LISTED else ''
  source = 'moving averages of ' if summary.moving_average else ''
  return (f'Warm start from {source}{summary.checkpoint}: {len(mismatches)} of {total} model variables outside the '
          f'classifier head are missing from the checkpoint or have another shape: {"; ".join(listed)}{more}. '
          f'Nothing was copied. {_architecture_hint(summary)}, or set '
          f'allow_partial_warm_start=true to copy only the {total - len(summary.missing) - len(summary.skipped)} '
          f'matching variables.')


def _unused_message(summary: WarmStartSummary, matching: int) -> str:
  """Every model variable found its tensor, but the file has more: layers this model lacks (an SE-ResNet's
  squeeze-excitation, say), so the copied weights would compute another function than the file's."""
  unused = summary.foreign.unused
  kind = ''
  if any('.se.' in name or '/se_' in name or name.startswith('se') for name in unused):
    kind = (' (squeeze-and-excitation layers: an SE-ResNet, whose SE weights this reader does not map even with '
            'se_ratio)')
  return (f'Warm start from {summary.checkpoint}: {summary.foreign.header.title()} holds {len(unused)} tensors '
          f'that no model variable takes: {_listed(unused)}{kind}. Without them the model would compute another '
          f'function than the file\'s. Nothing was copied. Use a plain ResNet file, or set '
          f'allow_partial_warm_start=true to copy the {matching} matching variables and drop them.')


def _architecture_hint(summary: WarmStartSummary) -> str:
  if summary.foreign is None:
    return ('The checkpoint was probably written by another architecture: check that --resnet_depth, '
            '--pre_activation and the other model params match the checkpoint\'s run')
  header = summary.foreign.header
  hint = f'The file holds a {header.title()}'
  hint += ''.join(f' ({note})' for note in header.notes if 'ResNet-D' in note)
  if summary.foreign.unused:
    hint += f'; its tensors that map to no model variable: {_listed(summary.foreign.unused)}'
  depth = f'--resnet_depth={header.depth}' if header.depth else '--resnet_depth'
  return hint + f'. Check that {depth} and the other model params match it'



def _no_averages(path: str, source_format: str) -> str:
  where = (f"no '{ema_lib.CHECKPOINT_NAME}' object with shadow variables" if source_format == 'tf2'
           else f"no '<variable>{TF1_EMA_SUFFIX}' tensors")
  return (f'Warm start from {path}: moving averages were requested (use_moving_average=True) but the checkpoint '
          f'has {where}; it was trained without moving_average_decay. Warm-start from its raw weights '
          f'(use_moving_average=False), or pick a checkpoint of a run with moving_average_decay > 0.')


def _log(summary: WarmStartSummary, total: int) -> None:
  skipped = [f'{n} {_fmt_shape(c)} vs {_fmt_shape(m)}' for n, c, m in summary.skipped]
  line = (f'Warm start from {summary.checkpoint}: restored {len(summary.restored)} of {total} variables; '
          f'skipped {len(skipped)}' + (f': {_listed(skipped)}' if skipped else '') + head_note(summary.skipped))
  if summary.missing:
    line += f'; missing from the checkpoint {len(summary.missing)}: {_listed(summary.missing)}'
  averaged = '; moving averages' if summary.moving_average else ''
  if summary.foreign is not None:
    header, folded = summary.foreign.header, summary.foreign.folded_biases
    line += (f' [{header.title()}' + (f'; {folded} conv biases folded into batch-norm moving means' if folded
                                      else '') + ']')
  else:
    line += f' [{summary.source_format} checkpoint{averaged}; global step and optimizer slots not restored]'
  logging.info('%s', line)
  backbone = backbone_mismatches(summary)
  if backbone:
    logging.warning('Warm start (allow_partial_warm_start) restored only %d of %d variables: %d backbone variables '
                    'are missing or differ in shape. Is %s a checkpoint of the same resnet_depth / pre_activation?',
                    len(summary.restored), total, len(backbone), summary.checkpoint)


def _nothing_matches(path: str, shapes: Mapping[str, Any], variables: Mapping[str, Any],
                     summary: WarmStartSummary, graph, model_node: Optional[int]) -> str:
  names = sorted(k for k in shapes if k != OBJECT_GRAPH_KEY)
  expected = [f'{n} {_fmt_shape(v.shape)}' for n, v in list(variables.items())[:4]]
  if summary.foreign is not None:
    return f'Warm start from {path}: nothing in the file fits the model. {_architecture_hint(summary)}.'

  message = (f'Warm start from {path}: no checkpoint variable matches the model ({len(names)} checkpoint '
             f'tensors, e.g. {_listed(names, 5)}; the model expects TF1 names such as {", ".join(expected)}, or a '
             f'checkpoint of this application).')
  if summary.skipped:
    message += (f' {len(summary.skipped)} had the right name but another shape, e.g. '
                f'{_listed([f"{n} {_fmt_shape(c)} vs {_fmt_shape(m)}" for n, c, m in summary.skipped], 3)}: '
                f'a different resnet_depth?')
  if graph is not None and model_node is None:
    roots = [c.local_name for c in graph.nodes[0].children]
    message += f' It is an object-based checkpoint whose root objects are {roots}, with no {MODEL_NODE!r}.'
  return message
