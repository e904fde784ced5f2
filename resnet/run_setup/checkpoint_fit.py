"""Whether a checkpoint fits the model these params build, checked from the checkpoint's own variable shapes before
anything is restored (the Estimator's ``restore_check``).

A model_dir copied without its params.yaml, or ``--eval_checkpoint`` from a run of another architecture, would
otherwise meet TensorFlow's "Received incompatible tensor with shape (128,) ... batch_normalization_8/moving_mean"
and hundreds of restore warnings. Instead: one message naming the first layers that differ, what the checkpoint
holds (its run's params.yaml when there is one, else the depth and classes read from its shapes) and the fix.

Keras tracks a model's layers by position (``model/_operations/<j>``), so the comparison is per position: the
variables of layer j in the checkpoint's object graph (wherever the checkpoint keyed them: a training checkpoint
keys trainable ones under the optimizer) against the built layer j's.

A run may resume in another precision (float16 on GPUs, bfloat16 on TPUs and CPUs): float16 wraps the optimizer in
Keras' LossScaleOptimizer, whose checkpoint keys the optimizer's state one level down (``optimizer/inner_optimizer``)
and puts the loss scale's counters where the plain optimizer's slots are (TensorFlow's "expected dtype int64 does
not equal original dtype float"). The optimizer is then restored through a stand-in of the checkpoint's layout
(``optimizer_stand_in``): its slots and step count, all of them; a loss scale the checkpoint lacks starts afresh.
"""
import os
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from absl import logging
import keras
import tensorflow as tf
from tensorflow.core.protobuf import trackable_object_graph_pb2

from params import architectures
from params import resnet_config
from params.model_config import ModelConfig
from resnet.run_dir import model_dir as model_dir_lib
from resnet.estimator import checkpoints
from resnet.model import plan
from resnet.training import resnet_model_fn

SHOWN = 3  # differing layers named in the message


class CheckpointMismatch(ValueError):
  """The checkpoint holds another model than the params build."""


def restore_check(params: Mapping[str, Any]
                  ) -> Callable[[str, Mapping[str, Any]], Optional[Dict[str, Any]]]:
  def check(path: str, objects: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
    model = objects.get(resnet_model_fn.MODEL)
    if model is not None:
      problem = mismatch(path, model, params)
      if problem:
        raise CheckpointMismatch(problem)
    stand_in = optimizer_stand_in(path, objects.get(resnet_model_fn.OPTIMIZER), params)
    return None if stand_in is None else {**objects, resnet_model_fn.OPTIMIZER: stand_in}
  return check


def _loss_scaled_in(path: str) -> Optional[bool]:
  """Whether the checkpoint's optimizer is a LossScaleOptimizer (None: it holds no optimizer)."""
  graph = _object_graph(path)
  optimizer = _child(graph, 0, resnet_model_fn.OPTIMIZER) if graph is not None else None
  if optimizer is None:
    return None
  return _child(graph, optimizer, 'inner_optimizer') is not None


def optimizer_stand_in(path: str, optimizer: Any, params: Mapping[str, Any]) -> Any:
  """None when the checkpoint's optimizer has this run's layout; else what to restore in its place: the run's
  optimizer inside a stand-in keyed as the checkpoint's LossScaleOptimizer (float16 -> another precision), or the
  run's LossScaleOptimizer's inner optimizer (another precision -> float16, whose loss scale starts afresh)."""
  if optimizer is None:
    return None
  scaled_here = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
  scaled_there = _loss_scaled_in(path)
  if scaled_there is None or scaled_there == scaled_here:
    return None
  if scaled_there:
    logging.info('Checkpoint %s was trained with float16 loss scaling; this run is %s: its optimizer state (slots, '
                 'step count) is restored without the loss scale.', path, params['precision'])
    return tf.train.Checkpoint(inner_optimizer=optimizer)
  logging.info('Checkpoint %s was trained without float16 loss scaling; this run is float16: its optimizer state '
               '(slots, step count) is restored into the loss-scaled optimizer, whose loss scale starts at %g.', path,
               float(optimizer.dynamic_scale.numpy()))
  return optimizer.inner_optimizer


def _checkpoint_layers(path: str) -> Dict[int, List[Tuple[int, ...]]]:
  """Layer position -> the shapes of its variables, from the checkpoint's object graph ({} when it has no model
  layers there, e.g. a TF1 checkpoint)."""
  reader = tf.train.load_checkpoint(path)
  shapes = reader.get_variable_to_shape_map()
  graph = _object_graph(path, reader)
  if graph is None:
    return {}
  child = lambda node, name: _child(graph, node, name)
  model = child(0, resnet_model_fn.MODEL)
  operations = child(model, '_operations') if model is not None else None
  if operations is None:
    return {}
  layers = {}
  for reference in graph.nodes[operations].children:
    variables = [tuple(shapes[a.checkpoint_key]) for c in graph.nodes[reference.node_id].children
                 for a in graph.nodes[c.node_id].attributes
                 if a.name == 'VARIABLE_VALUE' and a.checkpoint_key in shapes]
    if variables:
      layers[int(reference.local_name)] = sorted(variables)
  return layers


def _object_graph(path: str, reader=None) -> Optional[trackable_object_graph_pb2.TrackableObjectGraph]:
  """The checkpoint's object graph (None for a checkpoint without one, e.g. a TF1 one)."""
  reader = reader or tf.train.load_checkpoint(path)
  if '_CHECKPOINTABLE_OBJECT_GRAPH' not in reader.get_variable_to_shape_map():
    return None
  graph = trackable_object_graph_pb2.TrackableObjectGraph()
  graph.ParseFromString(reader.get_tensor('_CHECKPOINTABLE_OBJECT_GRAPH'))
  return graph


def _child(graph: trackable_object_graph_pb2.TrackableObjectGraph, node: int, name: str) -> Optional[int]:
  return next((c.node_id for c in graph.nodes[node].children if c.local_name == name), None)


def _model_layers(model) -> Dict[int, Tuple[str, List[Tuple[int, ...]]]]:
  return {j: (layer.name, sorted(tuple(v.shape) for v in layer.weights))
          for j, layer in enumerate(model._operations) if layer.weights}  # pylint: disable=protected-access


def mismatch(path: str, model, params: Mapping[str, Any]) -> Optional[str]:
  """None when every layer's variables in ``path`` have the model's shapes, else the message."""
  try:
    held = _checkpoint_layers(path)
  except (tf.errors.OpError, ValueError) as e:
    if not checkpoints.is_complete(path):
      # Its files went away (keep_checkpoint_max, under continuous eval): NotFoundError, which every worker skips.
      raise tf.errors.NotFoundError(None, None, f'Checkpoint {path}: its files are gone.') from e
    return f'Cannot read checkpoint {path}: {getattr(e, "message", e)}'
  if not held:  # not a checkpoint of this program's layout (e.g. a TF1 one): the restore says what it finds
    return None
  built = _model_layers(model)
  differing = []
  for j in sorted(set(held) | set(built)):
    name, shapes = built.get(j, (None, []))
    if held.get(j, []) != shapes:
      differing.append(f'{name or f"layer {j}"}: {_shapes(held.get(j))} in the checkpoint, {_shapes(shapes)} here'
                       if name else f'layer {j}: {_shapes(held.get(j))} in the checkpoint, no such layer here')
  if not differing:
    return None
  logging.error('Checkpoint %s: %d layers differ from the model these params build.', path, len(differing))
  return (f'Checkpoint {path} holds another model than these params build ({len(differing)} layers differ, '
          f'e.g. {"; ".join(differing[:SHOWN])}). {_what_differs(path, held, params)}')


def _shapes(shapes: Optional[List[Tuple[int, ...]]]) -> str:
  if not shapes:
    return 'none'
  return ', '.join(str(list(s)) for s in shapes)


def _run_dir(path: str) -> str:
  """The run a checkpoint belongs to: its directory, or the one above best/."""
  directory = os.path.dirname(path)
  return os.path.dirname(directory) if os.path.basename(directory) == 'best' else directory


def _what_differs(path: str, held: Dict[int, List[Tuple[int, ...]]], params: Mapping[str, Any]) -> str:
  run = _run_dir(path)
  recorded = model_dir_lib.recorded_params(run)
  ours = os.path.abspath(run) == os.path.abspath(params['model_dir'])
  if recorded:
    changed = [(k, recorded[k], params[k]) for k in resnet_config.MODEL_PARAMS if k in recorded
               and recorded[k] != params[k]]
    if changed:
      listed = ', '.join(f'{k}={old!r} (these params: {new!r})' for k, old, new in changed)
      flags = ' '.join(f'--{k}={_flag(old)}' for k, old, _ in changed)
      return (f'Its run\'s {os.path.join(run, model_dir_lib.PARAMS_FILE)} says {listed}. Evaluate it with its own '
              f'--model_dir={run}, or give {flags}.')
  inferred = infer(held, params)
  described = ', '.join(f'{k}={v}' for k, v in inferred.items()) or 'an architecture these params cannot name'
  flags = ' '.join(f'--{k}={v}' for k, v in inferred.items())
  why = (f'{run} has no readable {model_dir_lib.PARAMS_FILE} (copied without it?), so the params are the defaults '
         'and your flags' if not recorded and ours else 'its shapes say')
  fix = (f'Give the params it was trained with ({flags} and any other model options)' if flags
         else 'Give the params it was trained with')
  return f'From the checkpoint: {described} ({why}). {fix}, or copy its run\'s {model_dir_lib.PARAMS_FILE} back.'


def _flag(value: Any) -> str:
  return str(value).lower() if isinstance(value, bool) else str(value)


def infer(held: Dict[int, List[Tuple[int, ...]]], params: Mapping[str, Any]) -> Dict[str, int]:
  """The depth and class count a checkpoint's shapes say (each only when they say it unambiguously)."""
  shapes = [s for j in sorted(held) for s in held[j]]
  found: Dict[str, int] = {}
  convs = sorted(s for s in shapes if len(s) == 4)
  options = dict(pre_activation=params['pre_activation'], use_resnetd_stem=params['use_resnetd_stem'],
                 replace_stem_max_pool=params['replace_stem_max_pool'])
  depths = [d for d in architectures.SUPPORTED_DEPTHS if any(
      sorted(_kernel(c) for c in plan.conv_shapes(ModelConfig(resnet_depth=d, projection_shortcut=p, **options)))
      == convs for p in architectures.PROJECTION_SHORTCUTS)]
  if len(depths) == 1:
    found['resnet_depth'] = depths[0]
  dense = [s for s in shapes if len(s) == 2]
  if len(dense) == 1:
    found['num_label_classes'] = dense[0][1]
  return found


def _kernel(conv: plan.ConvShape) -> Tuple[int, int, int, int]:
  return (conv.kernel, conv.kernel, conv.cin, conv.cout)
