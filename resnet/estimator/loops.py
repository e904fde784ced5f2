"""What a compiled step does, per mode: the replica functions and the loops that run them.

``iterations_per_loop`` training steps run inside one ``tf.function`` (a ``while`` loop); the iterator's
``next`` stays outside the replica computation, on the host side. With ``jit_compile`` only the per-replica
computation is XLA-compiled -- what TPUStrategy compiles too -- because XLA cannot compile an iterator's GetNext. Replica functions
only see numeric tensors of static shape: string features (file names, keys) stay on the host and are joined to
the predictions there, and eval sums are float32 (TPUs have no float64).
"""
from typing import Any, Callable, Dict, Mapping, NamedTuple, Tuple

import tensorflow as tf

from resnet.estimator.spec import ModeKeys

ModelFn = Callable[..., Any]


def split_host_features(features: Any) -> Tuple[Any, Dict[str, Any]]:
  """(device features, host-only string features) of a dict of features; other features are all device."""
  if not isinstance(features, Mapping):
    return features, {}

  def is_string(value) -> bool:  # a tensor, or a PerReplica of tensors
    return (value.dtype if hasattr(value, 'dtype') else value.values[0].dtype) == tf.string

  device = {k: v for k, v in features.items() if not is_string(v)}
  host = {k: v for k, v in features.items() if is_string(v)}
  return device, host


def split_element(element: Any) -> Tuple[Any, Any]:
  """An input element is ``(features, labels)`` or bare features (predict on unlabelled data)."""
  if isinstance(element, tuple) and len(element) == 2:
    return element
  return element, None


class EvalOutputs(NamedTuple):
  """One eval batch of one replica: metric (sum, weight) pairs and sums (summed over replicas), and per-example
  outputs (left per replica, for the host)."""
  metrics: Dict[str, Tuple[tf.Tensor, tf.Tensor]]
  sums: Dict[str, tf.Tensor]
  per_example: Dict[str, tf.Tensor]


class ReplicaFunctions:
  """model_fn bound to a mode's params: the computation each replica runs (XLA-compiled if asked)."""

  def __init__(self, model_fn: ModelFn, params_for: Callable[[str], Mapping[str, Any]], jit_compile: bool,
               strategy: tf.distribute.Strategy):
    self._model_fn = model_fn
    self._params_for = params_for
    self._tpu = isinstance(strategy, tf.distribute.TPUStrategy)
    # TPUStrategy compiles the whole replica computation itself; a nested jit there is redundant.
    self._jit = bool(jit_compile) and not self._tpu

  def _wrap(self, fn: Callable, nested: bool = False) -> Callable:
    """One ``tf.function`` per replica, XLA-compiled if asked, or (``nested``) whether or not: its one trace then
    serves every step function that calls it. Sharing one across MirroredStrategy's replicas would bind the first
    replica's variables into every replica's step. Training is nested only where XLA is asked for: otherwise,
    under MirroredStrategy, the train step's updates of mirrored variables make a merge_call, which a nested
    function cannot hold. TPUs keep the function as it is: their replica ids are not static while tracing (and
    their compile dwarfs a trace)."""
    if not (self._jit or (nested and not self._tpu)):
      return fn
    functions: Dict[Any, Callable] = {}

    def per_replica(*args):
      context = tf.distribute.get_replica_context()
      key = int(tf.get_static_value(context.replica_id_in_sync_group)) if context is not None else 0
      if key not in functions:
        functions[key] = tf.function(fn, jit_compile=self._jit)
      return functions[key](*args)
    return per_replica

  def train(self) -> Callable:
    params = self._params_for(ModeKeys.TRAIN)

    def train_replica(features, labels):
      spec = self._model_fn(features, labels, ModeKeys.TRAIN, params)
      scalars = {k: tf.cast(v, tf.float32) for k, v in (spec.scalars or {}).items()}
      means = {k: tf.cast(v, tf.float32) for k, v in (spec.mean_scalars or {}).items()}
      return tf.cast(spec.loss, tf.float32), scalars, means
    return self._wrap(train_replica)

  def eval(self) -> Callable:
    params = self._params_for(ModeKeys.EVAL)

    def eval_replica(features, labels):
      spec = self._model_fn(features, labels, ModeKeys.EVAL, params)
      return EvalOutputs(
          metrics={k: (tf.cast(s, tf.float32), tf.cast(w, tf.float32)) for k, (s, w) in spec.eval_metrics.items()},
          sums={k: tf.cast(v, tf.float32) for k, v in (spec.eval_sums or {}).items()},
          per_example=dict(spec.eval_outputs or {}))
    return self._wrap(eval_replica, nested=True)  # eval_step's shape probe and its step share the trace

  def predict(self) -> Callable:
    params = self._params_for(ModeKeys.PREDICT)

    def predict_replica(features, labels=None):
      spec = self._model_fn(features, labels, ModeKeys.PREDICT, params)
      return dict(spec.predictions)
    return self._wrap(predict_replica)


def reduce_sum(strategy: tf.distribute.Strategy, value: Any) -> Any:
  return tf.nest.map_structure(lambda v: strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None), value)


def reduce_mean(strategy: tf.distribute.Strategy, value: Any) -> Any:
  return tf.nest.map_structure(lambda v: strategy.reduce(tf.distribute.ReduceOp.MEAN, v, axis=None), value)


class TrainLoop:
  """A multi-step loop and a single-step function sharing one step body (next -> run -> reduce -> step += 1)."""

  def __init__(self, strategy: tf.distribute.Strategy, replica_fn: Callable, iterator, global_step: tf.Variable,
               stop_flag: tf.Variable, check_stop_each_step: bool):
    self._strategy = strategy
    self._replica_fn = replica_fn
    self._global_step = global_step

    def step(iterator):
      loss, scalars, means = strategy.run(replica_fn, args=split_element(next(iterator)))
      global_step.assign_add(1)
      return reduce_sum(strategy, loss), reduce_mean(strategy, scalars), reduce_mean(strategy, means)

    def loop(iterator, num_steps):
      loss_sum = tf.constant(0.0, tf.float32)
      scalars = {k: tf.constant(0.0, tf.float32) for k in self.scalar_names}
      mean_sums = {k: tf.constant(0.0, tf.float32) for k in self.mean_names}
      done = tf.constant(0, tf.int64)
      while done < num_steps and not (check_stop_each_step and stop_flag):
        loss, scalars, means = body(iterator)
        loss_sum += loss
        mean_sums = {k: mean_sums[k] + means[k] for k in self.mean_names}
        done += 1
      steps = tf.maximum(tf.cast(done, tf.float32), 1.0)
      return loss_sum / steps, scalars, {k: v / steps for k, v in mean_sums.items()}

    # One step without a loop: profile tools group a while loop by iteration and would find no marked steps.
    self.single_step = tf.function(step)
    # The loop carries the last step's scalars and sums the mean scalars, so it needs their names up front: the
    # single step's trace gives them, and is the trace a one-step run then uses (a separate probe of the replica
    # function would trace the whole model and its gradient once more, seconds at every start).
    outputs = self.single_step.get_concrete_function(iterator).structured_outputs
    self.scalar_names, self.mean_names = sorted(outputs[1]), sorted(outputs[2])
    # The loop calls that traced step instead of tracing model and gradient once more (measured 1.4 s a start for
    # ResNet-10 and ResNet-18, 3.6 s for ResNet-50 on 2 cores). It must not call it inside a tf.cond (where a
    # `break` in the loop would put it): the collectives' instance keys, captured where the call is traced, are
    # then never fed. TPUs trace the step inline in the loop: a replicated computation inside a called function is
    # not something this machine can check.
    body = step if isinstance(strategy, tf.distribute.TPUStrategy) else self.single_step
    self.loop = tf.function(loop)

  def run(self, iterator, num_steps: int) -> Tuple[float, Dict[str, float]]:
    if num_steps == 1:
      loss, scalars, means = self.single_step(iterator)
    else:
      loss, scalars, means = self.loop(iterator, tf.constant(num_steps, tf.int64))
    return float(loss), {k: float(v) for k, v in {**scalars, **means}.items()}


def _batch_size(features: Any) -> tf.Tensor:
  return tf.shape(tf.nest.flatten(features)[0])[0]


def _device_args(element: Any) -> Tuple[Tuple[Any, Any], Dict[str, Any]]:
  """((device features, labels), host-only string features) of an input element."""
  features, labels = split_element(element)
  device, host = split_host_features(features)
  return (device, labels), host


def _replica_value(value: Any) -> tf.Tensor:
  return value.values[0] if hasattr(value, 'values') else value


def eval_step(strategy: tf.distribute.Strategy, replica_fn: Callable, element_spec: Any) -> Callable:
  """Runs ``replica_fn`` on each replica's batch; returns (metrics and sums, summed over every replica and worker;
  per-example outputs, labels and string features, per replica).

  A replica whose batch is empty contributes zeros without running the model: when one worker's eval data ends
  before another's (uneven shards), tf.distribute hands the finished worker empty batches so that it keeps
  joining the all-reduce until every worker is done.
  """
  # The probe's trace of replica_fn (ReplicaFunctions.eval: a tf.function per replica, except on TPUs) is the one
  # the step calls.
  probe = tf.function(lambda element: strategy.run(replica_fn, args=_device_args(element)[0]))
  shapes = tf.nest.map_structure(lambda v: (_replica_value(v).shape, _replica_value(v).dtype),
                                 probe.get_concrete_function(element_spec).structured_outputs)

  def guarded(features, labels=None):
    rows = _batch_size(features)

    def zeros():  # per-example outputs get the batch's rows (0; a static batch keeps its static shape for TPUs)
      return EvalOutputs(
          metrics={k: (tf.constant(0.0, tf.float32), tf.constant(0.0, tf.float32)) for k in shapes.metrics},
          sums={k: tf.zeros(shape, dtype) for k, (shape, dtype) in shapes.sums.items()},
          per_example={k: tf.zeros(tf.concat([[rows], tf.constant(shape[1:].as_list(), tf.int32)], 0), dtype)
                       for k, (shape, dtype) in shapes.per_example.items()})
    return tf.cond(rows > 0, lambda: replica_fn(features, labels), zeros)

  # Traced once for the dataset's spec: a retrace for an empty batch would see a static batch of 0, which some
  # Keras layers reject while tracing even in the branch that never runs.
  @tf.function(input_signature=[element_spec])
  def step(element):
    (features, labels), host = _device_args(element)
    out = strategy.run(guarded, args=(features, labels))
    examples = dict(out.per_example, **host)
    if labels is not None:
      examples['label'] = labels
    return reduce_sum(strategy, out.metrics), reduce_sum(strategy, out.sums), examples
  return step


def predict_step(strategy: tf.distribute.Strategy, replica_fn: Callable) -> Callable:
  @tf.function
  def step(features, labels):
    args = (features,) if labels is None else (features, labels)
    return strategy.run(replica_fn, args=args)
  return step
