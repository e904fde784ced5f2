"""The Estimator package is model-agnostic: it imports nothing of ResNet, images, params or the input pipeline."""
import ast
import glob
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ESTIMATOR = os.path.join(ROOT, 'resnet', 'estimator')
FORBIDDEN = ('official_input', 'params', 'tools')


def _imports(path: str):
  tree = ast.parse(open(path, encoding='utf-8').read(), path)
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      yield from (alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module:
      yield node.module


def test_estimator_modules_import_only_the_estimator_and_libraries():
  modules = glob.glob(os.path.join(ESTIMATOR, '*.py'))
  assert len(modules) >= 8
  offending = []
  for path in modules:
    for name in _imports(path):
      top = name.split('.')[0]
      if top in FORBIDDEN or (top == 'resnet' and not name.startswith('resnet.estimator')):
        offending.append(f'{os.path.basename(path)} imports {name}')
  assert offending == []


def test_the_check_sees_a_forbidden_import(tmp_path):
  path = tmp_path / 'bad.py'
  path.write_text('from resnet import resnet_model\nimport official_input.imagenet_input\n')
  assert list(_imports(str(path))) == ['resnet', 'official_input.imagenet_input']


def _module_name(path: str) -> str:
  return os.path.relpath(path, ROOT)[:-len('.py')].replace(os.sep, '.').replace('.__init__', '')


def _import_graph():
  paths = [p for package in ('resnet', 'official_input', 'params', 'tools')
           for p in glob.glob(os.path.join(ROOT, package, '**', '*.py'), recursive=True)]
  modules = {_module_name(p): p for p in paths}
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


def _imported_names(path: str, module: str):
  tree = ast.parse(open(path, encoding='utf-8').read(), path)
  return {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module == module
          for alias in node.names}


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
