"""Merging: a run's params from what it is given, in order (the defaults, config files, overrides, then the fills
that only files know), validated and locked. The program (``resnet/run_setup/run_params.py``) gives it the files' contents,
since ``params/`` reads none.
"""
import contextlib
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence, Tuple, Union

from absl import logging

from params import override_syntax
from params import params_dict
from params import validation
from params.resnet_config import ALIASES, RESNET_CFG

# An override: a mapping, or a string (k=v CSV, a YAML/JSON mapping, or a YAML file path).
Source = Union[str, Mapping[str, Any]]
# Any item may come as a (label, item) pair: its errors then start with the label.
Labelled = Union[Source, Tuple[str, Source]]


Fill = Callable[[Mapping[str, Any]], Mapping[str, Any]]  # the values so far -> values for params left unset


def make_params(overrides: Union[None, Source, Sequence[Labelled]] = None, *,
                configs: Sequence[Tuple[str, Mapping[str, Any]]] = (), fills: Sequence[Fill] = (),
                read_file: Optional[override_syntax.ReadFile] = None,
                validators: Sequence[validation.Validator] = ()) -> params_dict.ParamsDict:
  """The run's params: the defaults, then ``configs`` in order (``(label, mapping)``: a config file as read), then
  ``overrides`` in order; validated, locked.

  Every config and override is strict (an unknown key is a KeyError naming the closest keys) and type-checked.
  ``overrides`` is one mapping or override string, or a sequence of them; any may be a ``(label, item)`` pair: its
  errors then start with the label (the CLI names its flag). An override string that names a file is read with
  ``read_file``.
  Then each of ``fills`` in order: values only files know (the program's ``resnet/run_setup/run_params.py`` reads
  ``summary.json``, a run's params.yaml and weight files; this package reads none; without fills the counts and the
  Variant params stay unset). Then ``validation.validate`` (each key's type, choices and checks; the rules between
  keys; ``validators``) raises ValueError naming every problem.
  """
  params = params_dict.ParamsDict(RESNET_CFG, lambda values: validation.validate(values, validators),
                                  aliases=ALIASES)
  for label, values in configs:
    with labelled_errors(label):
      logging.info('Params: applying %s', label)
      params.override(values, is_strict=True)
  if overrides is None or isinstance(overrides, (str, Mapping)):
    overrides = [] if overrides is None else [overrides]
  for label, source in _labelled_items(overrides, lambda source: None if isinstance(source, Mapping)
                                       else f'params override {source!r}'):
    logging.info('Params: applying %s', label or source)
    with labelled_errors(label):
      override_syntax.override_params_dict(params, source, is_strict=True, read_file=read_file)
  for fill in fills:
    for key, value in fill(params.as_dict()).items():
      if params[key] is not None and type(value) is not type(params[key]):  # e.g. class_weights 'balanced' -> list
        params.override({key: None}, is_strict=True)
      params.override({key: value}, is_strict=True)
  params.validate()
  return params.lock()


def _labelled_items(items: Sequence[Any], default_label: Callable[[Any], Optional[str]]
                    ) -> Iterator[Tuple[Optional[str], Any]]:
  for item in items:
    if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
      yield item
    else:
      yield default_label(item), item


@contextlib.contextmanager
def labelled_errors(label: Optional[str]) -> Iterator[None]:
  """Prefixes a KeyError/ValueError raised inside with ``label`` (where it came from), keeping its type."""
  try:
    yield
  except (KeyError, ValueError) as e:
    if label is None:
      raise
    message = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
    try:
      labelled = type(e)(f'{label}: {message}')
    except TypeError:  # An exception type with a different constructor, e.g. UnicodeDecodeError.
      labelled = ValueError(f'{label}: {message}')
    raise labelled from e
