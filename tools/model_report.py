"""Prints size and cost of every supported ResNet depth, computed analytically (no model is built).

  python -m tools.model_report --image_size=224 --num_classes=1000

Convention: params = trainable parameters (conv kernels, BN gamma/beta, dense kernel + bias); BN moving statistics
are listed separately. GFLOPs = 2 x multiply-adds of the convs and the dense layer, forward pass, one image; BN,
ReLU, pooling and residual adds are not counted.
"""
from typing import Sequence

from absl import app
from absl import flags
from absl import logging

from resnet import resnet_model

FLAGS = flags.FLAGS


def define_flags() -> None:
  """Defined on demand, not at import: resnet_main also has --image_size, and tests import both modules."""
  definitions = {
      'image_size': lambda: flags.DEFINE_integer('image_size', 224, 'Square input size in pixels.'),
      'num_classes': lambda: flags.DEFINE_integer('num_classes', 1000, 'Classifier width.'),
      'pre_activation': lambda: flags.DEFINE_bool('pre_activation', False,
                                                  'Count ResNet v2 (pre-activation) BN layers instead of v1.'),
  }
  for name, define in definitions.items():
    if name not in FLAGS:
      define()


def report_rows(image_size: int, num_classes: int, pre_activation: bool = False) -> list[dict]:
  """One row per depth: the numbers behind the table, for callers that want them without printing."""
  rows = []
  for depth in resnet_model.SUPPORTED_DEPTHS:
    params = resnet_model.count_params(depth, num_classes, pre_activation)
    total = resnet_model.count_params(depth, num_classes, pre_activation, include_bn_statistics=True)
    rows.append({
        'depth': depth,
        'block': resnet_model.architecture(depth).kind,
        'params': params,
        'bn_statistics': total - params,
        'flops': resnet_model.count_flops(depth, image_size, num_classes),
    })
  return rows


def format_table(rows: Sequence[dict], image_size: int) -> str:
  header = f'| depth | block      | params (M) | BN stats (M) | GFLOPs @{image_size} |'
  lines = [header, '|' + '|'.join('-' * (len(c)) for c in header.split('|')[1:-1]) + '|']
  for r in rows:
    lines.append(f"| {r['depth']:>5} | {r['block']:<10} | {r['params'] / 1e6:>10.3f} | "
                 f"{r['bn_statistics'] / 1e6:>12.3f} | {r['flops'] / 1e9:>{len(str(image_size)) + 8}.2f} |")
  return '\n'.join(lines)


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  if FLAGS.image_size < 32 or FLAGS.num_classes <= 0:
    raise app.UsageError('--image_size must be >= 32 and --num_classes > 0.')
  logging.info('FLOPs = 2 x MACs of convs + dense, forward, batch 1.')
  print(format_table(report_rows(FLAGS.image_size, FLAGS.num_classes, FLAGS.pre_activation), FLAGS.image_size))


def run_main() -> None:
  define_flags()
  app.run(main)


if __name__ == '__main__':
  run_main()
