"""What each evaluation adds beside top-1/top-5: per-class metrics, the confusion-matrix image and the list of
misclassified images (an Estimator eval hook, so train_and_eval, continuous and one-shot eval all get them).

The confusion matrix is summed exactly inside the compiled eval step (the single-label task: resnet/task/single_label.py) over every
replica and worker; this hook turns it into numbers, an image and files on the host. The misclassified list comes
from per-example predictions joined on the host with the file names, which never enter the step; each worker lists
the images it evaluated (the chief's file has no suffix).
"""
from typing import Any, Mapping, Optional, Sequence

from absl import logging
import numpy as np

from resnet.evaluation import class_metrics
from resnet.evaluation import confusion_image
from resnet.estimator import hooks as hooks_lib


class ClassificationReport(hooks_lib.EvalHook):

  def __init__(self, class_names: Sequence[str], background: bool, max_misclassified_rows: int):
    self.class_names = list(class_names)
    self.background = background
    self.max_rows = max_misclassified_rows
    self._misclassified: Optional[class_metrics.Misclassified] = None
    self._seen = 0
    self._path = ''

  def begin(self, estimator, name: str) -> None:
    self._name = name
    self._step = int(estimator.global_step.numpy())
    self._seen = 0
    self._misclassified = class_metrics.Misclassified(self.max_rows) if self.max_rows else None
    resolver = getattr(estimator.strategy, 'cluster_resolver', None)
    task = None if estimator.is_chief else f'{resolver.task_type}-{resolver.task_id}'
    self._path = class_metrics.misclassified_path(estimator.model_dir, name, task)

  def after_batch(self, examples: Mapping[str, np.ndarray]) -> None:
    if self._misclassified is None or 'predicted' not in examples:
      return
    names = class_metrics.image_names(examples, self._seen)
    self._seen += len(examples['label'])
    self._misclassified.add(names, examples['label'], examples['predicted'], examples['probability'])

  def end(self, results: Mapping[str, Any], sums: Mapping[str, np.ndarray]) -> hooks_lib.EvalReport:
    report = hooks_lib.EvalReport()
    matrix = sums.get('confusion_matrix')
    if matrix is not None:
      report.results.update(class_metrics.class_report(matrix, self.class_names, self.background))
      first = 1 if self.background else 0  # the background row has no examples: leave it out of the picture
      names = report.results['class_names']
      report.images['confusion_matrix'] = confusion_image.render(
          matrix[first:, first:], names[first:], f'{self._name}, step {self._step}: share of each true class')
    if self._misclassified is not None:
      self._misclassified.write(self._path, self.class_names)
      listed = (f'the {self._misclassified.rows} most confident (max_misclassified_rows={self.max_rows})'
                if self._misclassified.count > self._misclassified.rows else 'all')
      logging.info('%d misclassified images; listed %s in %s.', self._misclassified.count, listed, self._path)
      report.results['misclassified_examples'] = self._misclassified.count
    return report
