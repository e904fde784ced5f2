r"""torchvision's reference classification recipe, trained on exported images and timed by tools.time_to_accuracy.

Why a module of its own that imports the standard library, torch, torchvision and PIL only: torch is never a
dependency of this project. A scratch environment holds it (``--torch_python`` of tools.time_to_accuracy), and
that Python runs this file as a script (``python tools/torchvision_recipe.py SPEC_JSON``); TensorFlow never loads
in it, so the two never fight over the cores. The images come from our TFRecords, written out once as files by
``time_to_accuracy.export_images`` (a folder per 0-based label), so both rows learn from the same images.

What it trains is what ``references/classification/train.py`` in torchvision does with its defaults, at the
run's size (one process, no distributed launcher):

- ``torchvision.models.resnet<depth>(weights=None, num_classes=N)``, channels_last (as our throughput rows);
- ``SGD(momentum=0.9, weight_decay=1e-4)`` on every parameter; the reference's ``--lr 0.1`` is for its 8 x 32 =
  256 images a step, so the default here is ``0.1 * batch / 256`` (linear scaling); the learning rate drops 10x
  after a third and two thirds of the epochs (the reference's ``StepLR`` at 30 and 60 of 90), no warm-up, no label
  smoothing;
- training: ``RandomResizedCrop(size)`` (scale 0.08-1, bilinear, antialiased), ``RandomHorizontalFlip``, ImageNet
  mean/std; validation: ``Resize(round(size * 256 / 224))``, ``CenterCrop(size)``, the same normalisation;
- a ``DataLoader`` with shuffling and ``workers`` processes (started each epoch, as the reference's); unseeded, as
  time_to_accuracy's runs are.

Unlike the reference: it runs on the CPU only (this tool times CPU recipes; the reference defaults to CUDA), and in
float32 (the reference without ``--amp``; our rows run the precision their flags give, float32 in the demo's and
small_data's configs).

After each epoch it evaluates the validation images and replaces ``model_dir/eval_results.json`` atomically with
``global_step`` (epochs x batches per epoch), ``top_1_accuracy``, ``loss`` and the epoch's training
``images_per_sec``: the same file, and so the same watcher, as our runs and the Keras row.
"""
import json
import os
import sys
import time
from typing import Any, Dict, List, Mapping, Tuple

RESULTS_FILE = 'eval_results.json'
DEPTHS = (18, 34, 50, 101, 152)     # torchvision.models.resnet{depth}
REFERENCE_LR, REFERENCE_BATCH = 0.1, 256
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
IMAGE_SUFFIXES = ('.jpg', '.jpeg', '.png', '.bmp', '.gif', '.webp')


def learning_rate(spec: Mapping[str, Any]) -> float:
  """The spec's ``learning_rate``, else the reference's 0.1 scaled linearly from its 256 images a step."""
  lr = spec.get('learning_rate')
  return float(lr) if lr else REFERENCE_LR * spec['batch_size'] / REFERENCE_BATCH


def milestones(epochs: int) -> List[int]:
  """The epochs after which the learning rate drops 10x: the reference's StepLR(30) over 90 epochs drops at 30
  and 60, a third and two thirds of the way; twice at most, never at the last epoch's end."""
  return sorted({m for m in (round(epochs / 3), round(2 * epochs / 3)) if 0 < m < epochs})


def python_problem(python: str) -> str:
  """'' when ``python`` is an executable that imports torch, torchvision and PIL; else what is wrong."""
  import subprocess  # pylint: disable=g-import-not-at-top
  if not (os.path.isfile(python) and os.access(python, os.X_OK)):
    return f'{python} is not an executable Python file'
  proc = subprocess.run([python, '-c', 'import torch, torchvision, PIL'], capture_output=True, text=True,
                        check=False, timeout=300)
  if proc.returncode:
    return f'{python} cannot import torch, torchvision and PIL: {proc.stderr.strip().splitlines()[-1:]}'
  return ''


def batches_per_epoch(images: int, batch_size: int) -> int:
  return -(-images // batch_size)   # the reference's DataLoader keeps the last, smaller batch


def list_images(split_dir: str) -> List[Tuple[str, int]]:
  """(path, label) of every image under ``split_dir/<label>/``, labels the folder names (0-based integers)."""
  if not os.path.isdir(split_dir):
    raise FileNotFoundError(f'No exported images in {split_dir} (tools.time_to_accuracy writes them first).')
  items = []
  for name in sorted(os.listdir(split_dir), key=lambda n: (len(n), n)):
    folder = os.path.join(split_dir, name)
    if not (os.path.isdir(folder) and name.isdigit()):
      continue
    items += [(os.path.join(folder, f), int(name)) for f in sorted(os.listdir(folder))
              if f.lower().endswith(IMAGE_SUFFIXES)]
  if not items:
    raise FileNotFoundError(f'No images in {split_dir}/<label>/ (looked for {", ".join(IMAGE_SUFFIXES)}).')
  return items


def write_result(model_dir: str, record: Mapping[str, Any]) -> None:
  """Replaces model_dir/eval_results.json in one rename, so the watcher never reads half a file."""
  path = os.path.join(model_dir, RESULTS_FILE)
  tmp = f'{path}.tmp-{os.getpid()}'
  with open(tmp, 'w') as f:
    json.dump(record, f, indent=2)
  os.replace(tmp, path)


def train(spec: Mapping[str, Any]) -> None:
  """Trains and evaluates as the module docstring says; one eval_results.json per epoch."""
  import torch  # pylint: disable=g-import-not-at-top
  import torchvision  # pylint: disable=g-import-not-at-top
  from PIL import Image  # pylint: disable=g-import-not-at-top
  from torchvision import transforms as T  # pylint: disable=g-import-not-at-top

  depth, size, batch, epochs = spec['resnet_depth'], spec['image_size'], spec['batch_size'], spec['epochs']
  if depth not in DEPTHS:
    raise ValueError(f'torchvision has no ResNet-{depth} (it has {", ".join(map(str, DEPTHS))}).')
  cores = len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else (os.cpu_count() or 1)
  torch.set_num_threads(cores)
  normalize = [T.PILToTensor(), T.ConvertImageDtype(torch.float), T.Normalize(MEAN, STD)]
  train_tf = T.Compose([T.RandomResizedCrop(size, antialias=True), T.RandomHorizontalFlip(0.5), *normalize])
  eval_tf = T.Compose([T.Resize(round(size * 256 / 224), antialias=True), T.CenterCrop(size), *normalize])

  class Folder(torch.utils.data.Dataset):
    def __init__(self, items, transform):
      self.items, self.transform = items, transform

    def __len__(self):
      return len(self.items)

    def __getitem__(self, i):
      path, label = self.items[i]
      with Image.open(path) as image:
        return self.transform(image.convert('RGB')), label

  train_items = list_images(os.path.join(spec['images_dir'], 'train'))
  eval_items = list_images(os.path.join(spec['images_dir'], 'validation'))
  workers = spec.get('workers', 1)
  loader = lambda items, tf, shuffle: torch.utils.data.DataLoader(   # noqa: E731
      Folder(items, tf), batch_size=batch, shuffle=shuffle, num_workers=workers)
  train_loader, eval_loader = loader(train_items, train_tf, True), loader(eval_items, eval_tf, False)
  model = getattr(torchvision.models, f'resnet{depth}')(weights=None, num_classes=spec['num_classes'])
  model = model.to(memory_format=torch.channels_last)
  lr = learning_rate(spec)
  optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=1e-4)
  scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=milestones(epochs), gamma=0.1)
  loss_fn = torch.nn.CrossEntropyLoss()
  per_epoch = batches_per_epoch(len(train_items), batch)
  print(f'torchvision.models.resnet{depth}(weights=None, num_classes={spec["num_classes"]}), channels_last; '
        f'SGD(momentum=0.9, weight_decay=1e-4) at lr {lr:g}, x0.1 after epochs {milestones(epochs)} of {epochs}, '
        f'{per_epoch} batches of {batch} each; {len(train_items)} train / {len(eval_items)} validation images '
        f'from {spec["images_dir"]}; torch {torch.__version__}, torchvision {torchvision.__version__}, {cores} '
        f'threads, {workers} loader worker(s)', flush=True)
  for epoch in range(epochs):
    model.train()
    began, seen, total = time.time(), 0, 0.0
    for images, labels in train_loader:
      images = images.contiguous(memory_format=torch.channels_last)
      optimizer.zero_grad(set_to_none=True)
      loss = loss_fn(model(images), labels)
      loss.backward()
      optimizer.step()
      seen += len(labels)
      total += loss.item() * len(labels)
    trained = time.time() - began
    scheduler.step()
    model.eval()
    correct, count, eval_loss = 0, 0, 0.0
    with torch.no_grad():
      for images, labels in eval_loader:
        logits = model(images.contiguous(memory_format=torch.channels_last))
        eval_loss += loss_fn(logits, labels).item() * len(labels)
        correct += int((logits.argmax(1) == labels).sum())
        count += len(labels)
    record = {'global_step': (epoch + 1) * per_epoch, 'epoch': epoch + 1, 'top_1_accuracy': correct / count,
              'loss': eval_loss / count, 'train_loss': total / max(seen, 1),
              'images_per_sec': seen / max(trained, 1e-9)}
    write_result(spec['model_dir'], record)
    print(f'epoch {epoch + 1}/{epochs} step {record["global_step"]} train loss {record["train_loss"]:.4f} '
          f'top-1 {record["top_1_accuracy"]:.4f} ({correct}/{count}) {record["images_per_sec"]:.1f} img/s',
          flush=True)


def main(argv: List[str]) -> int:
  if len(argv) != 2:
    print(f'usage: {argv[0]} SPEC_JSON (written by tools.time_to_accuracy)', file=sys.stderr)
    return 2
  spec: Dict[str, Any] = json.loads(argv[1])
  os.makedirs(spec['model_dir'], exist_ok=True)
  train(spec)
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv))
