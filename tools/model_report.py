"""Prints size and cost of every supported ResNet depth, computed analytically (no model is built).

  python -m tools.model_report --image_size=224 --num_classes=1000
  python -m tools.model_report --image_size=160 --se_ratio=0.25 --resnetd_shortcut --use_resnetd_stem \
      --replace_stem_max_pool          # ResNet-RS
  python -m tools.model_report --pre_activation --norm_act_layer=evonorm_s0

Convention: params = trainable parameters (conv kernels, squeeze-excitation biases, BN gamma/beta or EvoNorm
beta/gamma/v, dense kernel + bias); moving statistics (BN mean/variance, EvoNorm-B0 variance) are listed
separately. GFLOPs = 2 x multiply-adds of the convs (squeeze-excitation's on the pooled 1x1 map) and the dense
layer, forward pass, one image; norms, activations, pooling, residual adds and biases are not counted.
"""
from typing import Sequence

from absl import app
from absl import flags
from absl import logging
from params import architectures
from params.model_config import ModelConfig
from resnet.model import plan

FLAGS = flags.FLAGS


def define_flags() -> None:
  """Defined on demand, not at import: resnet_main also has --image_size, and tests import both modules."""
  definitions = {
      'image_size': lambda: flags.DEFINE_integer('image_size', 224, 'Square input size in pixels.'),
      'num_classes': lambda: flags.DEFINE_integer('num_classes', 1000, 'Classifier width.'),
      'pre_activation': lambda: flags.DEFINE_bool('pre_activation', False,
                                                  'Count ResNet v2 (pre-activation) norm layers instead of v1.'),
      'norm_act_layer': lambda: flags.DEFINE_enum('norm_act_layer', 'bn_relu', list(architectures.NORM_ACT_LAYERS),
                                                  'Normalisation-activation layer; EvoNorm needs --pre_activation.'),
      'se_ratio': lambda: flags.DEFINE_float('se_ratio', None, 'Squeeze-excitation ratio in (0, 1]; unset = none.'),
      'resnetd_shortcut': lambda: flags.DEFINE_bool('resnetd_shortcut', False,
                                                    'ResNet-D shortcut (average pool + 1x1 conv) in strided blocks.'),
      'use_resnetd_stem': lambda: flags.DEFINE_bool('use_resnetd_stem', False,
                                                    'ResNet-D stem: three 3x3 convs instead of the 7x7.'),
      'replace_stem_max_pool': lambda: flags.DEFINE_bool('replace_stem_max_pool', False,
                                                         'A 3x3/2 conv instead of the stem max pool.'),
  }
  for name, define in definitions.items():
    if name not in FLAGS:
      define()


def report_rows(image_size: int, num_classes: int, pre_activation: bool = False, norm_act_layer: str = 'bn_relu',
                se_ratio: float | None = None, resnetd_shortcut: bool = False, use_resnetd_stem: bool = False,
                replace_stem_max_pool: bool = False) -> list[dict]:
  """One row per depth: the numbers behind the table, for callers that want them without printing.

  Raises ValueError for an invalid combination (e.g. EvoNorm without pre_activation), as resnet() would.
  """
  rows = []
  for depth in architectures.SUPPORTED_DEPTHS:
    config = ModelConfig(resnet_depth=depth, num_label_classes=num_classes, pre_activation=pre_activation,
                         norm_act_layer=norm_act_layer, se_ratio=se_ratio, resnetd_shortcut=resnetd_shortcut,
                         use_resnetd_stem=use_resnetd_stem, replace_stem_max_pool=replace_stem_max_pool)
    params = plan.count_params(config)
    total = plan.count_params(config, include_bn_statistics=True)
    rows.append({
        'depth': depth,
        'block': config.spec.kind,
        'params': params,
        'bn_statistics': total - params,
        'flops': plan.count_flops(config, image_size),
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
  try:
    rows = report_rows(FLAGS.image_size, FLAGS.num_classes, FLAGS.pre_activation, FLAGS.norm_act_layer,
                       FLAGS.se_ratio, FLAGS.resnetd_shortcut, FLAGS.use_resnetd_stem, FLAGS.replace_stem_max_pool)
  except ValueError as e:
    raise app.UsageError(str(e)) from e
  logging.info('FLOPs = 2 x MACs of convs + dense, forward, batch 1.')
  print(format_table(rows, FLAGS.image_size))


def run_main() -> None:
  define_flags()
  app.run(main)


if __name__ == '__main__':
  run_main()
