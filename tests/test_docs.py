"""README and docs/ stay true: every trainer command in them parses and makes valid params, every link resolves,
and docs/layout.md names every module of the tree (and nothing that is not there)."""
import glob
import os
import re
import shlex

from absl import flags
import pytest

from resnet import resnet_flags
from tests.helpers import procs

ROOT = procs.ROOT
PAGES = [os.path.join(ROOT, 'README.md')] + sorted(glob.glob(os.path.join(ROOT, 'docs', '*.md')))
# A trainer command, after any VAR=value prefixes (TF_CONFIG=... resnet-main ...).
TRAINER = re.compile(r'^(?:[A-Z_][A-Z0-9_]*=\S+\s+)*(python3? resnet/resnet_main\.py|python3? -m resnet\.resnet_main'
                     r'|resnet-main)\b')


def _text(path: str) -> str:
  with open(path, encoding='utf-8') as f:
    return f.read()


def _commands(path: str):
  """(page, command line) for each trainer command in the page's bash blocks, continuation lines joined."""
  for block in re.findall(r'```(?:bash|sh|shell)?\n(.*?)```', _text(path), flags=re.S):
    for line in block.replace('\\\n', ' ').splitlines():
      line = line.strip()
      if TRAINER.match(line):
        yield os.path.relpath(path, ROOT), line


COMMANDS = [c for page in PAGES for c in _commands(page)]


def test_the_docs_show_trainer_commands():
  assert len(COMMANDS) >= 15 and {page for page, _ in COMMANDS} >= {'README.md', 'docs/fine-tuning.md'}


def _finished_run(directory) -> str:
  """What eval, predict and export commands name: a model_dir with a checkpoint and the params.yaml of its run."""
  os.makedirs(directory)
  with open(os.path.join(directory, 'params.yaml'), 'w', encoding='utf-8') as f:
    f.write('data_dir: /records/of/that/run\n')
  open(os.path.join(directory, 'model.ckpt-1.index'), 'w').close()
  with open(os.path.join(directory, 'checkpoint'), 'w', encoding='utf-8') as f:
    f.write('model_checkpoint_path: "model.ckpt-1"\n')
  return str(directory)


@pytest.mark.parametrize('page,command', COMMANDS, ids=[f'{p}:{i}' for i, (p, _) in enumerate(COMMANDS)])
def test_each_trainer_command_parses_and_makes_valid_params(page, command, monkeypatch, tmp_path):
  monkeypatch.setenv('HOME', str(tmp_path))
  argv = [a for a in shlex.split(os.path.expandvars(command), comments=True) if a not in ('...',)]
  if any(a in argv for a in ('--mode=eval', '--mode=predict', '--mode=export')):   # they read a finished run
    run = _finished_run(tmp_path / 'run')
    argv = [f'--model_dir={run}' if a.startswith('--model_dir=') else a for a in argv]
  program = next(i for i, a in enumerate(argv) if a in ('resnet/resnet_main.py', 'resnet.resnet_main', 'resnet-main'))
  argv = argv[program + 1:]
  flag_values = flags.FlagValues()
  resnet_flags.define_flags(flag_values)
  flag_values(['resnet_main'] + argv)   # unknown flags and badly typed values raise here
  assert flag_values.mode in resnet_flags.MODES, page
  resnet_flags.params_from_flags(flag_values, fill_from_data=False)   # config names, overrides, rules


def _anchors(path: str):
  """GitHub's heading anchors of a page."""
  out = set()
  text = re.sub(r'```.*?```', '', _text(path), flags=re.S)   # a '# comment' in a code block is no heading
  for heading in re.findall(r'^#{1,6} (.*)$', text, flags=re.M):
    slug = re.sub(r'[^\w\- ]', '', heading.strip().lower()).replace(' ', '-')
    out.add(slug)
  return out


def test_every_relative_link_and_anchor_resolves():
  broken = []
  for page in PAGES:
    for target in re.findall(r'\]\(([^)\s]+)\)', _text(page)):
      if '://' in target:
        continue
      path, _, anchor = target.partition('#')
      resolved = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
      if not os.path.exists(resolved) or (anchor and anchor not in _anchors(resolved)):
        broken.append(f'{os.path.relpath(page, ROOT)}: {target}')
  assert broken == []


def _layout_entries():
  """Paths named by docs/layout.md's tree: a name ending in / opens a room at its indentation."""
  block = re.search(r'```\n(.*?)```', _text(os.path.join(ROOT, 'docs', 'layout.md')), flags=re.S).group(1)
  stack, named = [], set()
  for line in block.splitlines():
    name = line.split()[0] if line.strip() else ''
    depth = (len(line) - len(line.lstrip())) // 2
    if name.endswith('/'):
      stack = stack[:depth] + [name.rstrip('/')]
      named.add('/'.join(stack))
    elif name.endswith('.py'):
      named.add('/'.join(stack[:depth] + [name]))
  return named


def test_the_layout_page_names_every_module_and_only_those():
  tree = {os.path.relpath(p, ROOT) for package in ('resnet', 'official_input', 'params', 'tools')
          for p in glob.glob(os.path.join(ROOT, package, '**', '*.py'), recursive=True)
          if not p.endswith('__init__.py') and '/train_bench/' not in p}
  named = _layout_entries()
  assert sorted(tree - named) == [], 'modules the layout page does not name'
  missing = sorted(n for n in named if not os.path.exists(os.path.join(ROOT, n)))
  assert missing == [], 'names on the layout page that are not in the tree'
