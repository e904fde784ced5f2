"""The layers, enforced from the imports of every module (lazy imports count too):

- ``resnet/estimator/`` (the runner) is model-agnostic: it imports nothing of the application, params, the input
  pipeline or the tools; and only the application (``resnet/``, ``tools/``) imports it.
- ``params/`` is pure: it imports nothing of ``resnet/`` or ``official_input/``, nor TensorFlow, and reads and writes
  no files.
- ``official_input/`` imports nothing of ``resnet/`` or ``params/``: it reads the runner's input context by duck
  typing (``official_input/contract.py``).
- Inside ``resnet/``, the rooms form layers (``RESNET_LAYERS``, bottom first): a room imports its own modules and
  rooms below it, never one above; the loose modules (the program shell) sit on top, and no room imports them.
- No import cycles anywhere.
"""
import ast
import glob
import os
import re
from tests.helpers import procs

ROOT = procs.ROOT
PACKAGES = ('resnet', 'official_input', 'params', 'tools')
RULES = {  # package (a module path prefix) -> import prefixes it must not use
    'resnet.estimator': ('resnet.', 'resnet', 'official_input', 'params', 'tools'),
    'params': ('resnet', 'official_input', 'tools', 'tensorflow', 'keras'),
    'official_input': ('resnet', 'params', 'tools'),
}
ALLOWED = {'resnet.estimator': ('resnet.estimator',)}


# resnet/'s rooms, bottom first: each may import the rooms before it (and the runner, resnet.estimator, below all).
RESNET_LAYERS = ('resnet.estimator', 'resnet.run_dir', 'resnet.model', 'resnet.weights', 'resnet.evaluation',
                 'resnet.task', 'resnet.training', 'resnet.export', 'resnet.predict', 'resnet.run_setup')


def _room(module: str):
  """The resnet/ room a module is in ('resnet.task' for resnet.task.tasks), 'shell' for a loose module of resnet/
  (resnet.wiring), None outside resnet/."""
  parts = module.split('.')
  if parts[0] != 'resnet' or len(parts) < 2:
    return None
  room = '.'.join(parts[:2])
  return room if room in RESNET_LAYERS else 'shell'


def _upward(module: str, imported: str):
  """'module imports imported' when that import runs up resnet/'s layers, else None."""
  mine, theirs = _room(module), _room(imported)
  if mine in (None, 'shell') or theirs is None or mine == theirs:
    return None
  if theirs == 'shell' or RESNET_LAYERS.index(theirs) > RESNET_LAYERS.index(mine):
    return f'{module} imports {imported}'
  return None


_TREES = {}


def _tree(path: str) -> ast.AST:
  """Each file parsed once (the cycle check asks for every import of every file)."""
  if path not in _TREES:
    _TREES[path] = ast.parse(open(path, encoding='utf-8').read(), path)
  return _TREES[path]


def _imports(path: str):
  tree = _tree(path)
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      yield from (alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and node.level:  # relative: the rules could not see its target
      yield '.' * node.level + (node.module or '')
    elif isinstance(node, ast.ImportFrom) and node.module:
      yield node.module


def _violations(module: str, imported: str):
  for package, forbidden in RULES.items():
    if module != package and not module.startswith(package + '.'):
      continue
    if any(imported == a or imported.startswith(a + '.') for a in ALLOWED.get(package, ())):
      continue
    if any(imported == f.rstrip('.') or imported.startswith(f.rstrip('.') + '.') for f in forbidden):
      yield f'{module} imports {imported}'


def _modules():
  paths = [p for package in PACKAGES for p in glob.glob(os.path.join(ROOT, package, '**', '*.py'), recursive=True)]
  return {_module_name(p): p for p in paths}


def test_each_layer_imports_only_what_it_may():
  modules = _modules()
  assert len([m for m in modules if m.startswith('resnet.estimator.')]) >= 8
  offending = [v for name, path in modules.items() for imported in _imports(path) for v in _violations(name, imported)]
  assert offending == []


def test_no_import_runs_up_resnets_layers():
  modules = _modules()
  rooms = {m.split('.')[1] for m in modules if m.count('.') >= 2 and m.startswith('resnet.')}
  assert rooms == {r.split('.')[1] for r in RESNET_LAYERS}, 'a room of resnet/ is missing from RESNET_LAYERS'
  offending = [u for name, path in modules.items() for imported in _imports(path) for u in [_upward(name, imported)]
               if u]
  assert offending == []


def test_the_layer_check_sees_an_upward_import():
  assert _upward('resnet.training.multi_label', 'resnet.evaluation.label_metrics') is None   # down: fine
  assert _upward('resnet.evaluation.predictions', 'resnet.export.litert_runtime')            # up
  assert _upward('resnet.weights.warm_start', 'resnet.training.ema')                         # up
  assert _upward('resnet.task.multi_label', 'resnet.wiring')                                 # into the shell
  assert _upward('resnet.wiring', 'resnet.run_setup.run_params') is None                     # the shell: anything
  assert _upward('resnet.task.tasks', 'resnet.task.single_label') is None                    # its own room


def test_no_relative_imports():
  """Absolute imports only, so that the rules above see every target."""
  assert [f'{n} imports {i}' for n, p in _modules().items() for i in _imports(p) if i.startswith('.')] == []


def test_only_the_application_imports_the_runner():
  offending = [f'{name} imports {imported}' for name, path in _modules().items() for imported in _imports(path)
               if imported.startswith('resnet.estimator') and name.split('.')[0] not in ('resnet', 'tools')]
  assert offending == []


def test_the_check_sees_a_forbidden_import(tmp_path):
  path = tmp_path / 'bad.py'
  path.write_text('from resnet.model import resnet_model\nimport official_input.imagenet_input\n'
                  'def f():\n  import tensorflow\n')
  imported = list(_imports(str(path)))
  assert imported == ['resnet.model', 'official_input.imagenet_input', 'tensorflow']
  assert [v for i in imported for v in _violations('params.resnet_config', i)] == [
      'params.resnet_config imports resnet.model', 'params.resnet_config imports official_input.imagenet_input',
      'params.resnet_config imports tensorflow']
  assert list(_violations('resnet.estimator.spec', 'resnet.model')) and not list(
      _violations('resnet.estimator.spec', 'resnet.estimator.files'))
  assert list(_violations('official_input.decode', 'resnet.estimator.spec'))


def _module_name(path: str) -> str:
  return os.path.relpath(path, ROOT)[:-len('.py')].replace(os.sep, '.').replace('.__init__', '')


def _import_graph():
  modules = _modules()
  graph = {}
  for name, path in modules.items():
    targets = set()
    for imported in _imports(path):
      # `from pkg import mod` names the package; the module is then pkg.mod when that is one of ours.
      targets.update(t for t in (imported,) if t in modules)
      tree_names = [n for n in modules if n.startswith(imported + '.')]
      targets.update(n for n in tree_names if n.rsplit('.', 1)[1] in _imported_names(path, imported))
    graph[name] = targets - {name}
  return graph


_NAMES = {}


def _imported_names(path: str, module: str):
  """The names ``from module import ...`` takes in ``path`` (each file walked once: the graph asks per import)."""
  if path not in _NAMES:
    _NAMES[path] = {}
    for node in ast.walk(_tree(path)):
      if isinstance(node, ast.ImportFrom) and node.module:
        _NAMES[path].setdefault(node.module, set()).update(alias.name for alias in node.names)
  return _NAMES[path].get(module, set())


def _cycle(graph):
  """One import cycle as a list of modules, or None (depth-first search, any import counts: also lazy ones)."""
  state = {}

  def visit(node, stack):
    state[node] = 'open'
    stack.append(node)
    for target in sorted(graph.get(node, ())):
      if state.get(target) == 'open':
        return stack[stack.index(target):] + [target]
      if target not in state:
        found = visit(target, stack)
        if found:
          return found
    stack.pop()
    state[node] = 'done'
    return None

  for node in sorted(graph):
    if node not in state:
      found = visit(node, [])
      if found:
        return found
  return None


def test_no_module_imports_itself_through_others():
  assert _cycle(_import_graph()) is None


def test_the_cycle_check_sees_a_cycle():
  assert _cycle({'a': {'b'}, 'b': {'c'}, 'c': {'a'}, 'd': set()}) == ['a', 'b', 'c', 'a']


FILE_ACCESS = re.compile(
    r'\bopen\(|\bio\.open\b|os\.(listdir|walk|scandir|remove|rename|makedirs)\b|os\.path\.(isfile|isdir|exists)\b'
    r'|^\s*from os(\.path)? import|\bgfile\b|\bshutil\b|\bpathlib\b|\bglob\.\w|^\s*import glob', re.M)


def test_params_reads_and_writes_no_files():
  """params/ is the table, the syntaxes and validation; the program shell reads and writes the files."""
  offending = [f'{os.path.relpath(p, ROOT)}: {m.group(0)}' for p in glob.glob(os.path.join(ROOT, 'params', '*.py'))
               for m in FILE_ACCESS.finditer(open(p, encoding='utf-8').read())]
  assert offending == []
  for access in ('with open(path) as f:', 'os.path.isfile(x)', 'from os import listdir', 'import pathlib',
                 'glob.glob(p)'):
    assert FILE_ACCESS.search(access), access


def test_no_module_defines_absl_flags_at_import():
  """A tool's flags on the global FLAGS at import take the place of resnet_main's flags of the same name in any
  process that imports both (compare_keras_fit's string --config_file=demo became resnet_main's): tools define
  theirs when they run (define_flags), resnet_flags defines resnet_main's."""
  offending = []
  for name, path in _modules().items():
    for node in _tree(path).body:
      call = node.value if isinstance(node, ast.Expr) else None
      if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr.startswith('DEFINE'):
        offending.append(f'{name}:{node.lineno} {ast.unparse(call.func)}')
  assert offending == []


def test_resnet_keeps_at_most_8_loose_modules_the_rest_in_rooms():
  """The program shell (resnet_main and what only it uses) stays small enough to read; every job has a room."""
  loose = sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, 'resnet', '*.py'))
                 if not p.endswith('__init__.py'))
  assert len(loose) <= 8, loose


def test_no_module_of_the_converter_is_over_400_lines():
  """tools/convert/ keeps one job a module (sources, splits, integrity, shards, summary, ...)."""
  long = {os.path.relpath(p, ROOT): n for p in glob.glob(os.path.join(ROOT, 'tools', 'convert', '*.py'))
          for n in [len(open(p, encoding='utf-8').read().splitlines())] if n > 400}
  assert long == {}


TASK_NAMES = ('single_label', 'multi_label')
# Where a task's name may be written outside resnet/task/: the fill that checks the param against the data's own
# record of its task (summary.json's "task", written by the converter), before any task object exists.
TASK_NAME_ALLOWED = ('resnet.run_setup.run_params',)


def _task_name_literals(path: str):
  return [node.value for node in ast.walk(_tree(path))
          if isinstance(node, ast.Constant) and node.value in TASK_NAMES]


def test_no_module_of_the_program_outside_the_task_tells_the_tasks_apart():
  """resnet/ asks the run's Task (resnet/task/tasks.for_params); only the task package names the tasks."""
  offending = [f'{name}: {_task_name_literals(path)}' for name, path in _modules().items()
               if name.startswith('resnet.') and not name.startswith('resnet.task')
               and name not in TASK_NAME_ALLOWED and _task_name_literals(path)]
  assert offending == []


def test_the_task_name_check_sees_a_comparison(tmp_path):
  path = tmp_path / 'bad.py'
  path.write_text("def f(params):\n  return params.get('task') == 'multi_label'\n")
  assert _task_name_literals(str(path)) == ['multi_label']
