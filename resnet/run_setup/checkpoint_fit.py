"""Whether a checkpoint fits the model these params build, checked from the checkpoint's own variable shapes before
anything is restored (the Estimator's ``restore_check``).

A model_dir copied without its params.yaml, or ``--eval_checkpoint`` from a run of another architecture, would
otherwise meet TensorFlow's "Received incompatible tensor with shape (128,) ... batch_normalization_8/moving_mean"
and hundreds of restore warnings. Instead: one message naming the first layers that differ, what the checkpoint
holds (its run's params.yaml when there is one, else the depth and classes read from its shapes) and the fix.

Keras tracks a model's layers by position (``model/_operations/<j>``), so the comparison is per position: the
variables of layer j in the checkpoint's object graph (wherever the checkpoint keyed them: a training checkpoint
keys trainable ones under the optimizer) against the built layer j's.
"""
import os
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from absl import logging
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


def restore_check(params: Mapping[str, Any]) -> Callable[[str, Mapping[str, Any]], None]:
  def check(path: str, objects: Mapping[str, Any]) -> None:
    model = objects.get(resnet_model_fn.MODEL)
    if model is not None:
      problem = mismatch(path, model, params)
      if problem:
        raise CheckpointMismatch(problem)
  return check


def _checkpoint_layers(path: str) -> Dict[int, List[Tuple[int, ...]]]:
  """Layer position -> the shapes of its variables, from the checkpoint's object graph ({} when it has no model
  layers there, e.g. a TF1 checkpoint)."""
  reader = tf.train.load_checkpoint(path)
  shapes = reader.get_variable_to_shape_map()
  if '_CHECKPOINTABLE_OBJECT_GRAPH' not in shapes:
    return {}
  graph = trackable_object_graph_pb2.TrackableObjectGraph()
  graph.ParseFromString(reader.get_tensor('_CHECKPOINTABLE_OBJECT_GRAPH'))

  def child(node: int, name: str) -> Optional[int]:
    return next((c.node_id for c in graph.nodes[node].children if c.local_name == name), None)

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
