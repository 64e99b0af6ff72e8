"""One registry helper for everything bnfl looks up by name.

Methods, algorithms, models, data sets, norm kinds, partition kinds and experiments are each a
:class:`Registry` (timm's ``register_model`` / ``create_model`` / ``list_models`` is the model):
an entry is registered beside what it registers, by decorator or by a call, and a name that is
not there is an error listing the valid ones::

    >>> from bnfl.registry import Registry
    >>> SHAPES = Registry("shape")
    >>> @SHAPES.register("square")
    ... def square(a):
    ...     return a * a
    >>> SHAPES.available(), SHAPES.lookup("square")(3)
    (['square'], 9)
    >>> SHAPES.lookup("circle")
    Traceback (most recent call last):
    ...
    ValueError: unknown shape 'circle'; valid names: square

Besides its registered names, :meth:`Registry.lookup` accepts

* an **import string** ``"package.module:Name"`` (``Name`` may be dotted: ``"pkg.mod:Class.attr"``):
  the module is imported (which runs its top-level code, as any ``import`` does), the object is
  checked to be of the registry's kind *before anything calls it* (an :class:`~bnfl.fl.Algorithm`
  subclass for a method, an ``nn.Module`` subclass or a function marked ``@plugin("model")`` for a
  model, a function marked ``@plugin("data set")`` or ``@plugin("partition kind")``: :func:`plugin`),
  converted by the registry's ``convert`` (a user's :class:`~bnfl.fl.Algorithm` subclass becomes a
  :class:`~bnfl.methods.Method`, a loader function a :class:`~bnfl.data.Dataset`, ...) and kept,
  so every later lookup returns the same object. ``"os:system"``, ``"shutil:rmtree"`` or any
  function not marked is refused with one line; an import that fails is a ``ValueError`` naming
  the module and the error, on one line;
* the name of an **entry point** of the registry's group (``bnfl.methods``, ``bnfl.models``,
  ``bnfl.datasets``) declared by an installed package (:func:`importlib.metadata.entry_points`),
  for example in that package's ``pyproject.toml``::

      [project.entry-points."bnfl.methods"]
      median-stats = "mypkg.algos:MedianStats"

A registry is a read-only :class:`~collections.abc.Mapping` of its registered entries (``name in
REG``, ``REG[name]``, iteration in registration order); what import strings and entry points
resolved to is kept apart and never listed as registered.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar, overload

__all__ = ["Registry", "import_object", "is_import_string", "plugin"]

T = TypeVar("T")
F = TypeVar("F")

#: the attribute :func:`plugin` sets
_MARK = "__bnfl_plugin__"


def plugin(kind: str) -> Callable[[F], F]:
    """Mark a function (or class) as a bnfl plug-in of ``kind``, so that a config may name it by
    import string: ``"model"``, ``"data set"``, ``"partition kind"`` or ``"norm kind"`` (the
    :attr:`Registry.kind` of the slot). A config's import string resolves only to an object of
    its slot's kind: an :class:`~bnfl.fl.Algorithm` subclass or an ``nn.Module`` subclass needs no
    mark, a plain function does, and one marked for another kind is refused too::

        from bnfl.registry import plugin

        @plugin("data set")
        def load(*, n=120): ...

    An installed package's entry points (``[project.entry-points."bnfl.datasets"]``) need no mark:
    installing the package declared them.
    """
    if not isinstance(kind, str) or not kind:
        raise ValueError(f"plugin(kind): kind is a registry's kind such as 'model' or 'data set', got {kind!r}")

    def mark(obj: F) -> F:
        setattr(obj, _MARK, frozenset(getattr(obj, _MARK, frozenset())) | {kind})
        return obj

    return mark


def _marked(obj: Any, kind: str) -> bool:
    marks = getattr(obj, _MARK, None) if not isinstance(obj, type) else obj.__dict__.get(_MARK)
    return isinstance(marks, frozenset) and kind in marks


def is_import_string(name: object) -> bool:
    """Whether ``name`` is written ``"package.module:Name"`` (a registered name has no colon)."""
    return isinstance(name, str) and ":" in name


def import_object(spec: str, *, what: str = "object") -> Any:
    """The object named by the import string ``spec`` (``"package.module:Name"``).

    Raises
    ------
    ValueError
        ``spec`` is not of that form, its module cannot be imported (the message names the
        module and the error, on one line), or the module has no such attribute.
    """
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr or ":" in attr:
        raise ValueError(f"{what} {spec!r}: an import string is written 'package.module:Name'")
    try:
        module = importlib.import_module(module_name)
    except Exception as err:  # noqa: BLE001 - a user's module may raise anything while importing
        detail = " ".join(f"{type(err).__name__}: {err}".split())
        raise ValueError(f"{what} {spec!r}: cannot import module {module_name!r} ({detail})") from None
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ValueError(f"{what} {spec!r}: module {module_name!r} has no attribute {attr!r}") from None
    return obj


class Registry(Mapping[str, T], Generic[T]):
    """Named entries of one kind, with import strings and entry points besides.

    Parameters
    ----------
    kind : str
        What an entry is, for messages: ``"method"``, ``"model"``, ``"data set"``...
    group : str, optional
        Entry-point group searched for names not registered (``"bnfl.methods"``).
    listing : str, default "valid names"
        How an unknown-name error introduces the valid names (``"valid ids"``, ``"available"``).
    sort : bool, default False
        List names sorted (else in registration order).
    lower : bool, default False
        Registered names are lower case and looked up case-insensitively (import strings keep
        their case).
    convert : callable, optional
        ``convert(spec, obj) -> entry`` turns what an import string or entry point names into an
        entry of this registry (checking it); default: the object itself.
    accepts : callable, optional
        ``accepts(obj) -> bool``: what an import string may name besides objects marked
        ``@plugin(kind)`` (:func:`plugin`), checked before ``convert`` and before anything calls
        ``obj``; default: marked objects only.
    expects : str, default "a function marked @plugin(kind)"
        What an import string may name, for the refusal's message.
    """

    def __init__(self, kind: str, *, group: str | None = None, listing: str = "valid names", sort: bool = False,
                 lower: bool = False, convert: Callable[[str, Any], T] | None = None,
                 accepts: Callable[[Any], bool] | None = None, expects: str = "") -> None:
        self.kind = kind
        self.group = group
        self.listing = listing
        self.sort = sort
        self.lower = lower
        self._convert = convert
        self._accepts = accepts
        self._expects = expects
        self._entries: dict[str, T] = {}
        self._aliases: dict[str, str] = {}  # an older spelling -> its registered name (read, never listed)
        self._plugins: dict[str, T] = {}  # import strings and entry points already resolved
        # the defining module, as typing.TypeVar records it (the API docs document it there)
        self.__module__ = sys._getframe(1).f_globals.get("__name__", __name__)

    # -- the Mapping of registered entries ----------------------------------------------------
    def __getitem__(self, name: str) -> T:
        return self._entries[self._aliases.get(name, name)]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {len(self)} entries)"

    # -- registering -----------------------------------------------------------------------------
    @overload
    def register(self, name: str, obj: None = None, *, replace: bool = False) -> Callable[[Any], Any]: ...
    @overload
    def register(self, name: str, obj: T, *, replace: bool = False) -> T: ...
    @overload
    def register(self, name: Callable[..., Any], obj: None = None, *, replace: bool = False) -> Any: ...

    def register(self, name: Any, obj: Any = None, *, replace: bool = False) -> Any:
        """Register ``obj`` as ``name`` and return it; without ``obj``, a decorator doing that.

        ``@REG.register`` (no name) registers a function or class under its ``__name__``.
        A name registered twice is an error unless ``replace=True``; a name with a colon is an
        import string, never a registered name.
        """
        if callable(name) and not isinstance(name, str) and obj is None:
            return self.register(name.__name__, name, replace=replace)
        if not isinstance(name, str) or not name or ":" in name:
            raise ValueError(f"a {self.kind} is registered under a non-empty name without ':', got {name!r}")
        if self.lower and name != name.lower():
            raise ValueError(f"{self.kind} names are lower case, got {name!r}")
        if obj is None:
            def decorate(o: Any) -> Any:
                self.register(name, o, replace=replace)
                return o

            return decorate
        if name in self._entries and not replace:
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        self._entries[name] = obj
        return obj

    def alias(self, old: str, name: str) -> None:
        """Let ``old`` (an earlier spelling, as older logs and configs wrote it) read as the registered
        ``name``; it is looked up, never listed (:meth:`available`, iteration)."""
        if name not in self._entries or old in self._entries:
            raise ValueError(f"{self.kind} alias {old!r} -> {name!r}: the name must be registered, the alias not")
        self._aliases[old] = name

    # -- looking up ------------------------------------------------------------------------------
    def available(self) -> list[str]:
        """The registered names, then the names of entry points in :attr:`group` not registered."""
        names = list(self._entries)
        names += [n for n in self._entry_points() if n not in self._entries]
        return sorted(names) if self.sort else names

    def unknown(self, name: object) -> str:
        """The message of an unknown ``name``: the valid names listed."""
        near = difflib.get_close_matches(str(name).lower(), list(self.available()), n=3, cutoff=0.6)
        hint = f"; did you mean {' or '.join(map(repr, near))}?" if near else ""
        return f"unknown {self.kind} {name!r}; {self.listing}: {', '.join(self.available())}{hint}"

    def knows(self, name: object) -> bool:
        """Whether :meth:`lookup` would find ``name`` without importing anything (registered, or an
        entry point's name); import strings are checked only by :meth:`lookup`."""
        return isinstance(name, str) and (self._key(name) in self._entries or name in self._entry_points())

    def lookup(self, name: str) -> T:
        """The entry of ``name``: a registered name, an import string or an entry point's name.

        Raises
        ------
        ValueError
            An unknown name (the valid names listed), or an import string that does not import.
        """
        if isinstance(name, str):
            key = self._key(name)
            if key in self._entries:
                return self._entries[key]
            if key in self._plugins:
                return self._plugins[key]
            if is_import_string(name):
                obj = import_object(name, what=self.kind)
                self.check_kind(name, obj)
                return self._keep(name, obj)
            eps = self._entry_points()
            if name in eps:
                try:
                    obj = eps[name].load()
                except Exception as err:  # noqa: BLE001 - an installed package may raise anything
                    detail = " ".join(f"{type(err).__name__}: {err}".split())
                    raise ValueError(f"{self.kind} {name!r} (entry point {eps[name].value!r} of group "
                                     f"{self.group!r}): cannot load it ({detail})") from None
                return self._keep(name, obj)
        raise ValueError(self.unknown(name))

    def check_kind(self, spec: str, obj: Any) -> None:
        """Refuse, in one line and before anything calls it, an object that an import string names
        and that is not of this registry's kind (:func:`plugin`)."""
        if _marked(obj, self.kind) or (self._accepts is not None and self._accepts(obj)):
            return
        kind = 'class' if isinstance(obj, type) else {'builtin_function_or_method': 'built-in function'}.get(
            type(obj).__name__, type(obj).__name__)
        what = f"{kind} {getattr(obj, '__module__', None) or '?'}." \
               f"{getattr(obj, '__qualname__', None) or getattr(obj, '__name__', '?')}"
        other = sorted(getattr(obj, _MARK, None) or ()) if not isinstance(obj, type) else []
        takes = self._expects or f"a function marked @plugin({self.kind!r})"
        raise ValueError(f"{self.kind} {spec!r} is {what}" + (f" (marked for {', '.join(other)})" if other else "")
                         + f", not {takes} (bnfl.registry.plugin); refused, nothing was called")

    def _key(self, name: str) -> str:
        key = name.lower() if self.lower and not is_import_string(name) else name
        return self._aliases.get(key, key)

    def _keep(self, name: str, obj: Any) -> T:
        entry = self._convert(name, obj) if self._convert is not None else obj
        self._plugins[name] = entry
        return entry

    def _entry_points(self) -> dict[str, importlib.metadata.EntryPoint]:
        if self.group is None:
            return {}
        return {ep.name: ep for ep in importlib.metadata.entry_points(group=self.group)}
