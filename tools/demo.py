r"""The end-to-end demo behind README's first command: no download, a few minutes on 2 CPU cores.

1. draws a small learnable image-folder dataset (tools/make_demo_dataset.py),
2. converts it to TFRecords with the converter users run on their own data (tools/imagenet_to_gcs.py),
3. runs ``resnet_main --mode=train_and_eval`` with params/configs/demo.yaml, exporting a SavedModel,
4. runs ``resnet_main --mode=predict`` on the test split, writing a CSV,
and prints every command it runs, so each step can be repeated by hand.

It writes only what it owns: ``--output_dir`` must be new, empty, or an earlier demo's (its ``.resnet_demo`` marker
says so). A rerun (``--fresh``, the default) replaces that demo's run and its drawn classes, and refuses, naming
them, files it did not draw among them; the converter replaces only its own outputs in records/.
"""
import json
import os
import shlex
import subprocess
import sys
import time
from typing import Optional

if __package__ in (None, ''):
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The demo's flags, defined when it runs (not at import: random_seed would clash with resnet_main's)."""
  flags.DEFINE_string('output_dir', 'demo_out', 'Where the images, records, run and export go.')
  flags.DEFINE_integer('images_per_class', 320, 'Images drawn per class.')
  flags.DEFINE_integer('num_classes', 4, 'Classes drawn (circles, squares, triangles, stripes, ...).')
  flags.DEFINE_multi_string('param_overrides', [], 'Extra overrides for the training run, e.g. train_steps=50.')
  flags.DEFINE_integer('random_seed', None, 'Seed of the training run (default: the demo config\'s).')
  flags.DEFINE_boolean('fresh', True, 'Start from an empty run directory (False resumes an earlier demo run).')


MARKER = '.resnet_demo'
OWNED = ('images', 'records', 'run', 'export')


class NotTheDemosFolder(ValueError):
  """--output_dir holds files the demo did not write."""


def prepare_output_dir(out: str, fresh: bool, class_names) -> None:
  """Makes ``out`` the demo's: new or empty (then marked), or an earlier demo's; its drawn images (any of
  ``class_names``) are removed after checking that they hold only what the demo draws, and for a fresh rerun its
  run too. The converter replaces only its own outputs in records/."""
  import re  # pylint: disable=g-import-not-at-top
  import shutil  # pylint: disable=g-import-not-at-top
  entries = sorted(os.listdir(out)) if os.path.isdir(out) else []
  # An earlier demo that wrote no marker yet left only its own folders (their content is checked below).
  if entries and MARKER not in entries and not set(entries) <= set(OWNED):
    raise NotTheDemosFolder(
        f'--output_dir={out} is not empty and was not made by the demo (it has no {MARKER}): it holds '
        f'{", ".join(entries[:8])}{", ..." if len(entries) > 8 else ""}. The demo writes images/, records/, run/ and '
        f'export/ there and replaces them on a rerun: give a new or empty --output_dir.')
  os.makedirs(out, exist_ok=True)
  with open(os.path.join(out, MARKER), 'w') as f:
    f.write('This folder was made by `python -m tools.demo`, which replaces its images/, records/ and run/ on a '
            'rerun.\n')
  images = os.path.join(out, 'images')
  if os.path.isdir(images):  # the demo redraws its classes on every run
    drawn = re.compile(r'^(%s)_\d{4}\.(png|jpg)$' % '|'.join(map(re.escape, class_names)))
    foreign = sorted(os.path.relpath(os.path.join(d, n), out) for d, _, names in os.walk(images) for n in names
                     if not (os.path.basename(d) in class_names and os.path.dirname(d) == images and drawn.match(n)))
    if foreign:
      raise NotTheDemosFolder(f'{images} holds files the demo did not draw: {", ".join(foreign[:5])}'
                              f'{", ..." if len(foreign) > 5 else ""}. Move them away, or give another --output_dir.')
    shutil.rmtree(images)
  if fresh:
    shutil.rmtree(os.path.join(out, 'run'), ignore_errors=True)


def _run(cmd):
  print('\n$ ' + ' '.join(shlex.quote(c) for c in cmd), flush=True)
  subprocess.run(cmd, check=True)


def run_seed(model_dir: str) -> Optional[int]:
  """The seed the training run used, from its own model_dir/params.yaml (flag or config, whichever won)."""
  from resnet.run_dir import params_files  # pylint: disable=g-import-not-at-top
  return params_files.read_params(os.path.join(model_dir, 'params.yaml')).as_dict().get('random_seed')


def main(argv) -> None:
  del argv
  from tools import imagenet_to_gcs  # pylint: disable=g-import-not-at-top
  from tools import make_demo_dataset  # pylint: disable=g-import-not-at-top

  start = time.time()
  out = os.path.abspath(FLAGS.output_dir)
  images, records = os.path.join(out, 'images'), os.path.join(out, 'records')
  model_dir, export_dir = os.path.join(out, 'run'), os.path.join(out, 'export')
  try:
    prepare_output_dir(out, FLAGS.fresh, make_demo_dataset.CLASSES)
  except NotTheDemosFolder as e:
    sys.exit(f'error: {e}')

  print(f'[1/4] Drawing {FLAGS.num_classes} classes x {FLAGS.images_per_class} images into {images}')
  make_demo_dataset.make_demo_dataset(images, num_classes=FLAGS.num_classes,
                                      images_per_class=FLAGS.images_per_class, seed=0)
  print(f'[2/4] Converting to TFRecords in {records}')
  summary = imagenet_to_gcs.convert_dataset(images, records, seed=0, overwrite=True)
  counts = {split: stats['images'] for split, stats in summary['splits'].items()}
  print(f'      images per split: {counts}')

  # Class and image counts come from the converter's summary.json in data_dir.
  main_cmd = [sys.executable, '-m', 'resnet.resnet_main', '--config_file=demo',
              f'--data_dir={records}', f'--model_dir={model_dir}']
  if FLAGS.random_seed is not None:
    main_cmd.append(f'--random_seed={FLAGS.random_seed}')
  main_cmd += [f'--param_overrides={o}' for o in FLAGS.param_overrides]
  print('[3/4] Training and evaluating (ResNet-18, 64 px)')
  _run(main_cmd + ['--mode=train_and_eval', f'--export_dir={export_dir}'])
  print('[4/4] Predicting the test split')
  predictions = os.path.join(model_dir, 'predictions.csv')
  _run(main_cmd + ['--mode=predict', f'--predict_output={predictions}'])

  with open(os.path.join(model_dir, 'eval_results.json')) as f:
    results = json.load(f)
  seed = run_seed(model_dir)
  exports = sorted(os.listdir(export_dir)) if os.path.isdir(export_dir) else []
  print('\nDemo finished in {:.0f} s.'.format(time.time() - start))
  print(f'  validation top-1 accuracy: {results["top_1_accuracy"]:.3f} over {results["num_examples"]} images '
        f'(step {results["global_step"]})')
  print(f'  predictions: {predictions}')
  if exports:
    print(f'  SavedModel:  {os.path.join(export_dir, exports[-1])}  '
          f'(saved_model_cli show --all --dir {os.path.join(export_dir, exports[-1])})')
  print(f'  TensorBoard: tensorboard --logdir {model_dir}')
  # Last, one line to quote: the same seed on the same machine prints the same accuracy.
  print(f'Demo result: random_seed={seed} validation top-1={results["top_1_accuracy"]:.3f} '
        f'({int(round(results["top_1_accuracy"] * results["num_examples"]))}/{results["num_examples"]})')


def run_main() -> None:
  define_flags()
  app.run(main)


if __name__ == '__main__':
  run_main()
