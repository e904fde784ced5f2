"""The run's task, chosen once from params among the registered ones; importing this module registers the
built-in tasks (single_label, multi_label). Everything that depends on the task asks ``for_params(params)``."""
from typing import Any, Mapping

from resnet.task import multi_label  # pylint: disable=unused-import  # registers the task
from resnet.task import single_label  # pylint: disable=unused-import  # registers the task
from resnet.task import task


def for_params(params: Mapping[str, Any]) -> task.Task:
  """The run's task: ``params['task']`` (unset: single-label)."""
  return task.lookup(params.get('task'))(params)
