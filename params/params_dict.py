"""A flat, lockable, type-checked params dictionary (the reference's override syntaxes: ``override_syntax``).

Re-implements the reference's ``params_dict`` (tensorflow/tpu ``models/hyperparameters/params_dict.py``) with the
same public names for a flat table of params, and fixes its defects on purpose:
- overrides are type-checked against the current value (the reference accepted ``train_steps='abc'``);
- unknown keys name the closest valid keys;
- validation is a function of the params (``validation.validate``: typed checks from the param definitions),
  not restriction strings to parse;
- YAML is always read with one safe loader (``params_yaml``).

It reads and writes no files (``resnet/run_dir/params_files.py`` reads local and ``gs://`` paths, and writes
``params.yaml`` atomically).
"""
import collections.abc
import copy
import difflib
import numbers
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence

from params import params_yaml


# ------------------------------------------------------------------------------------------------------------------
# Errors


class UnknownParamError(KeyError, AttributeError):
  """A key that does not exist. Both a KeyError (as the reference) and an AttributeError (so hasattr() works)."""

  def __str__(self) -> str:  # KeyError would repr() the message.
    return str(self.args[0]) if self.args else ''


class ParamTypeError(TypeError, ValueError):
  """An override whose type does not match the current value. Also a ValueError, as all bad input here."""


def _unknown_key_message(key: str, known: Sequence[str]) -> str:
  """``Unknown param 'x'.`` and the closest valid keys, or all of them when none is close."""
  names = sorted(known)
  close = difflib.get_close_matches(key, names, n=5, cutoff=0.6)
  if close:
    hint = 'Did you mean: ' + ', '.join(close) + '?'
  else:
    hint = 'Valid params here: ' + (', '.join(names) if names else '(none)') + '.'
  return f'Unknown param {key!r}. {hint}'


# ------------------------------------------------------------------------------------------------------------------
# Type checking of one override


def _type_name(value: Any) -> str:
  return 'dict' if isinstance(value, Mapping) else type(value).__name__


def _checked_value(name: str, old: Any, new: Any) -> Any:
  """Returns ``new`` converted to the type of ``old``, or raises ParamTypeError naming the param.

  Rules: None replaces anything and anything replaces None; bool and int are distinct; an int is accepted for a
  float (converted); a float is not accepted for an int; lists replace lists, dicts replace dicts; otherwise the
  types must match.
  """
  if new is None or old is None:
    return new
  if isinstance(new, Mapping) and not isinstance(old, Mapping):
    raise ParamTypeError(f'Param {name!r} is a scalar ({type(old).__name__} {old!r}); cannot override it with a '
                         f'dict {dict(new)!r}.')
  problem = None
  if isinstance(old, bool):
    if isinstance(new, bool):
      return new
    problem = 'use true or false'
  elif isinstance(old, numbers.Integral):
    if isinstance(new, numbers.Integral) and not isinstance(new, bool):
      return int(new)
  elif isinstance(old, numbers.Real):
    if isinstance(new, numbers.Real) and not isinstance(new, bool):
      return float(new)
  elif isinstance(old, str):
    if isinstance(new, str):
      return new
    problem = f"quote the value to pass a string, e.g. {name}='{new}'"
  elif isinstance(old, (list, tuple)):
    if isinstance(new, (list, tuple)):
      return list(new)
  elif isinstance(old, Mapping):
    if isinstance(new, Mapping):
      return dict(new)
  elif isinstance(new, type(old)):
    return new
  expected = 'list' if isinstance(old, (list, tuple)) else _type_name(old)
  message = f'Param {name!r} expects {expected} (current value {old!r}), but got {_type_name(new)} {new!r}.'
  if problem:
    message += f' Hint: {problem}.'
  raise ParamTypeError(message)


# ------------------------------------------------------------------------------------------------------------------
# ParamsDict

_INTERNAL_ATTRS = ('_params', '_locked', '_validator', '_aliases')
Validator = Callable[['ParamsDict'], None]


class ParamsDict(collections.abc.Mapping):
  """Flat params with attribute access, strict type-checked overrides, a validator and a lock.

  A read-only ``Mapping`` (``dict(params)`` is a plain shallow copy); values live in an internal dict (not in
  ``__dict__``), so a key can never shadow a method. A dict value is one value: an override replaces it whole.
  ``validator`` (e.g. ``validation.validate``) raises ValueError for invalid values; ``validate()`` and the
  constructor run it. ``aliases`` maps other names of a key (e.g. a reference's old name) to the key; overrides
  and lookups accept them.
  """

  def __init__(self, default_params: Optional[Mapping[str, Any]] = None,
               validator: Optional[Validator] = None, aliases: Optional[Mapping[str, str]] = None) -> None:
    if validator is not None and not callable(validator):
      raise TypeError(f'validator must be a function of the params, got {type(validator).__name__} {validator!r} '
                      '(restriction strings are not supported).')
    object.__setattr__(self, '_params', {})
    object.__setattr__(self, '_locked', False)
    object.__setattr__(self, '_validator', validator)
    object.__setattr__(self, '_aliases', dict(aliases or {}))
    if default_params is not None:
      self.override(default_params, is_strict=False)
    self.validate()

  # --- access -----------------------------------------------------------------------------------------------------

  def __getattr__(self, name: str) -> Any:
    # Only called when normal lookup fails. Internal or dunder names must fail fast: copy and pickle probe them
    # on instances that have no ``_params`` yet.
    if name.startswith('_'):
      raise AttributeError(name)
    return self[name]

  def __getitem__(self, key: str) -> Any:
    params = self._params
    key = self._aliases.get(key, key)
    if key not in params:
      raise UnknownParamError(_unknown_key_message(key, list(params)))
    return params[key]

  def __setattr__(self, name: str, value: Any) -> None:
    self.override({name: value}, is_strict=True)  # A strict, type-checked one-key override.

  def __setitem__(self, key: str, value: Any) -> None:
    self.__setattr__(key, value)

  def __delattr__(self, name: str) -> None:
    name = self._aliases.get(name, name)
    if self._locked:
      raise ValueError(f'Params are locked; cannot delete {name!r}.')
    if name not in self._params:
      raise UnknownParamError(_unknown_key_message(name, list(self._params)))
    del self._params[name]

  def __delitem__(self, key: str) -> None:
    self.__delattr__(key)

  def __contains__(self, key: object) -> bool:
    return self._aliases.get(key, key) in self._params if isinstance(key, str) else False

  def __iter__(self) -> Iterator[str]:
    return iter(list(self._params))

  def __len__(self) -> int:
    return len(self._params)

  def __dir__(self) -> List[str]:
    return sorted(set(super().__dir__()) | set(self._params))

  def get(self, key: str, default: Any = None) -> Any:
    """Returns the value of ``key`` (or of the key it is an alias of), or ``default`` when it does not exist."""
    return self._params.get(self._aliases.get(key, key), default)

  def as_dict(self) -> Dict[str, Any]:
    """A deep copy as a plain dict, safe to mutate, pickle or dump."""
    return copy.deepcopy(self._params)

  def __eq__(self, other: object) -> bool:
    if isinstance(other, Mapping):
      return self._params == dict(other)
    return NotImplemented

  __hash__ = None  # Mutable.

  def __repr__(self) -> str:
    return f'ParamsDict({self._params!r})'

  def __str__(self) -> str:
    return params_yaml.params_to_yaml_string(self)

  # --- pickling and copying ---------------------------------------------------------------------------------------

  def __getstate__(self) -> Dict[str, Any]:
    return {name: self.__dict__[name] for name in _INTERNAL_ATTRS}

  def __setstate__(self, state: Mapping[str, Any]) -> None:
    for name in _INTERNAL_ATTRS:
      object.__setattr__(self, name, state[name])

  # --- override, validate, lock -----------------------------------------------------------------------------------

  def lock(self) -> 'ParamsDict':
    """Freezes the params: any later set, override or delete raises ValueError."""
    object.__setattr__(self, '_locked', True)
    return self

  @property
  def is_locked(self) -> bool:
    return self._locked

  def override(self, override_params: Mapping[str, Any], is_strict: bool = True) -> None:
    """Overrides values from a dict (or ParamsDict); all-or-nothing.

    Strict mode refuses unknown keys (KeyError listing the closest keys); non-strict mode adds them. Every
    override of an existing value is type-checked (see ``_checked_value``). Nothing changes if any key fails.
    """
    if not isinstance(override_params, Mapping):
      raise ValueError(f'override() needs a dict or ParamsDict, got {type(override_params).__name__}.')
    if self._locked:
      names = ', '.join(repr(str(k)) for k in override_params) or '(nothing)'
      raise ValueError(f'Params are locked; cannot override {names}.')
    updates = {}
    for key, value in override_params.items():
      if not isinstance(key, str):
        raise KeyError(f'Param names must be strings; got {key!r}.')
      if key in self._aliases and self._aliases[key] in override_params:
        raise KeyError(f'{key!r} and {self._aliases[key]!r} name the same param: give one of them.')
      key = self._aliases.get(key, key)
      if key in _INTERNAL_ATTRS or hasattr(ParamsDict, key):
        raise KeyError(f'{key!r} is a reserved name (a ParamsDict method or internal).')
      if isinstance(value, Mapping):
        value = dict(value)
      if key in self._params:
        value = _checked_value(key, self._params[key], value)
      elif is_strict:
        raise UnknownParamError(_unknown_key_message(key, list(self._params)))
      updates[key] = copy.deepcopy(value)
    self._params.update(updates)

  def validate(self) -> None:
    """Runs the validator, if any: a ValueError names every invalid value."""
    if self._validator is not None:
      self._validator(self)


