"""The Method table: the one place that defines a method id; every legend, CLI choice, JSON
field and communication cost reads it.

A *method* is an algorithm of :mod:`bnfl.fl.algorithms` with its options and the normalisation
of the model it trains (FedAvg+GN = algorithm ``fedavg`` + norm ``gn``)::

    >>> from bnfl.methods import METHODS
    >>> m = METHODS["fedavg+bn"]
    >>> m.label, m.color, m.norm
    ('FedAvg+BN', '#0072B2', 'bn')
    >>> m.algorithm()
    FedAvg()
    >>> sorted(METHODS["fedbn"].local_state)
    ['bn_affine', 'bn_stats']

What stays on the client (``local_state``) and what the server sets (``server_state``) is read
from the algorithm class, where it is declared once; ``shared_state`` is the rest (broadcast,
trained and averaged). ``comm`` names how :func:`bnfl.fl.comm_volume` counts the method's
traffic in closed form (``None``: only a simulation's channel counts it). ``norm`` is a kind of
the layer registry :data:`bnfl.nn.NORM_KINDS` (a row with another is refused when the table is
built).

The table lives here, below the builder (:func:`bnfl.fl.build` looks a method id up once, into
its algorithm and normalisation, and passes those down; no backend names a method), and is
imported, never installed: :mod:`bnfl.methods` is its public name. The experiments ask it
instead of comparing ids (:attr:`Method.iid_pool`, :meth:`Method.for_rounds`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from bnfl.fl._volume import CommVolume, closed_form_volume
from bnfl.fl.algorithms import ALGORITHMS, Algorithm, make_algorithm
from bnfl.fl.state import GROUPS
from bnfl.nn.norms import NORM_KINDS
from bnfl.registry import Registry, is_import_string

if TYPE_CHECKING:
    from torch import nn


__all__ = ["COMM_SCHEMES", "METHODS", "Method", "check", "get"]

#: How :func:`bnfl.fl.comm_volume` counts a method per iteration: ``"none"`` nothing is sent;
#: ``"model"`` the model's shared state once (FedAvg type); ``"fedtan"`` plus statistics and
#: stat-gradients in 3L+1 rounds (FedTAN Alg. 1-3); ``"stats"`` plus statistics in 2L+1 rounds
#: (FedAvg+Algorithm 2); ``"fedtan2"`` FedTAN for M iterations, then ``"model"``.
COMM_SCHEMES = ("none", "model", "fedtan", "stats", "fedtan2")


@dataclass(frozen=True)
class Method:
    """One method: identity, display, algorithm with options, normalisation and cost.

    Attributes
    ----------
    id : str
        The one spelling (CLI ``--method``, configs, JSON outputs), e.g. ``"fedavg+gn"``.
    label : str
        Legend and table name, e.g. ``"FedAvg+GN"``.
    color : str
        Hex colour, the same in every figure (colour-blind-safe Okabe-Ito / Tol palettes).
    marker : str
        Matplotlib marker.
    algorithm_name : str
        Key of :data:`bnfl.fl.ALGORITHMS`, or the import string of an :class:`~bnfl.fl.Algorithm`
        subclass (``"mypkg.algos:MedianStats"``).
    norm : str
        Normalisation kind of the model (:data:`bnfl.nn.NORM_KINDS`).
    comm : str or None
        One of :data:`COMM_SCHEMES`, or ``None`` when traffic has no closed form here
        (SCAFFOLD's control variates, HBN/FBN moments, FixBN-global momentum buffers).
    options : mapping, default {}
        Default keyword options of the algorithm (``.algorithm(**opts)`` overrides them).
    source : str, default ""
        Where the method is defined.
    iid_pool : bool, default False
        The experiments train it on one IID draw of the clients (seed 0, the same for every
        seed), pooled by its algorithm, unless the data is split by domain; their dry run counts
        it as one client. FedTAN's centralized baseline (CATALOG §0.2); the FixBN rows
        Centralized+GN/+FixBN keep their entry's partition (FixBN Tables 1 and 4).
    before_switch : str or None, default None
        The id of the method this one runs for its first ``switch`` rounds (option ``switch``,
        default 1): a run no longer than that is that method (:meth:`for_rounds`). FedTAN-II is
        FedTAN up to its switch (FedTAN Sec. 5.4).
    """

    id: str
    label: str
    color: str
    marker: str
    algorithm_name: str
    norm: str
    comm: str | None
    options: Mapping[str, Any] = field(default_factory=dict)
    source: str = ""
    iid_pool: bool = False
    before_switch: str | None = None

    def __post_init__(self) -> None:
        try:  # resolved once, here: the row carries its class (no look-up per run)
            cls = ALGORITHMS[self.algorithm_name] if self.algorithm_name in ALGORITHMS else \
                ALGORITHMS.lookup(self.algorithm_name)  # an import string
        except ValueError:
            raise ValueError(f"method {self.id!r}: unknown algorithm {self.algorithm_name!r}; "
                             f"valid: {', '.join(sorted(ALGORITHMS))}") from None
        object.__setattr__(self, "_algorithm_class", cls)
        if not (isinstance(self.norm, str) and (NORM_KINDS.knows(self.norm) or is_import_string(self.norm))):
            raise ValueError(f"method {self.id!r}: unknown norm kind {self.norm!r}; valid kinds: "
                             f"{', '.join(NORM_KINDS)} (bnfl.nn.NORM_KINDS), or an import string")
        if self.comm is not None and self.comm not in COMM_SCHEMES:
            raise ValueError(f"method {self.id!r}: comm must be one of {', '.join(COMM_SCHEMES)} or None")
        object.__setattr__(self, "options", MappingProxyType(dict(self.options)))

    @property
    def algorithm_class(self) -> type[Algorithm]:
        """The :class:`~bnfl.fl.Algorithm` subclass (resolved when the row was made)."""
        return self._algorithm_class  # type: ignore[attr-defined]

    def algorithm(self, **options: Any) -> Algorithm:
        """A fresh algorithm instance: the method's default options updated by ``options``."""
        return make_algorithm(self.algorithm_name, self.algorithm_class, **{**self.options, **options})

    @property
    def local_state(self) -> frozenset[str]:
        """State groups that never leave the client (declared by the algorithm class)."""
        return self.algorithm_class.local_state

    @property
    def server_state(self) -> frozenset[str]:
        """State groups the server sets (broadcast, never uploaded; declared by the algorithm)."""
        return self.algorithm_class.server_state

    @property
    def shared_state(self) -> frozenset[str]:
        """State groups broadcast, trained, uploaded and averaged (all groups but the local and
        server ones and ``bn_count``); empty when the method communicates nothing."""
        if not self.algorithm_class.communicates:
            return frozenset()
        return frozenset(GROUPS) - self.local_state - self.server_state - {"bn_count"}

    @property
    def personalized(self) -> bool:
        """Each client's own model is evaluated (FedTAN protocol for FedBN/SiloBN/SingleNet)."""
        return self.algorithm_class.personalized

    def for_rounds(self, rounds: int, options: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        """The ``(id, options)`` of the method that a run of ``rounds`` rounds with ``options`` is:
        :attr:`before_switch` with its defaults when ``rounds`` is at most the option ``switch``
        (default 1), else this method with ``options``."""
        if self.before_switch is not None and int(options.get("switch", 1)) >= int(rounds):
            return self.before_switch, {}
        return self.id, dict(options)

    def comm_volume(self, model: nn.Module, num_clients: int, **kwargs: Any) -> CommVolume:
        """:func:`bnfl.fl.comm_volume` of this method on ``model``."""
        return closed_form_volume(model, num_clients, method_id=self.id, comm=self.comm, local_state=self.local_state,
                                  **kwargs)


def _m(id: str, label: str, color: str, marker: str, algorithm: str, norm: str, comm: str | None,
       source: str, *, iid_pool: bool = False, before_switch: str | None = None, **options: Any) -> Method:
    return Method(id=id, label=label, color=color, marker=marker, algorithm_name=algorithm, norm=norm,
                  comm=comm, options=options, source=source, iid_pool=iid_pool, before_switch=before_switch)


def _as_method(spec: str, obj: Any) -> Method:
    """What an import string or entry point of group ``bnfl.methods`` names, as a :class:`Method`:
    a :class:`Method` as is; an :class:`~bnfl.fl.Algorithm` subclass as a method of that
    algorithm with its defaults, the norm of its class attribute ``norm`` (default ``"bn"``), and
    no closed-form cost (the simulation's channel counts its traffic)."""
    if isinstance(obj, Method):
        return obj
    if isinstance(obj, type) and issubclass(obj, Algorithm):
        return Method(id=spec, label=obj.__name__, color="#444444", marker="o",
                      algorithm_name=f"{obj.__module__}:{obj.__qualname__}", norm=getattr(obj, "norm", "bn"),
                      comm=None, source=spec)
    raise ValueError(f"method {spec!r} is {obj!r}: a method is a bnfl.methods.Method or a subclass of "
                     "bnfl.fl.Algorithm")


#: Every method of the four papers and their baselines, by id (insertion order = legend order): a
#: read-only :class:`~bnfl.registry.Registry`; :func:`get` also takes an import string
#: (``"mypkg.algos:MedianStats"``: an Algorithm subclass or a Method) or an entry point of group
#: ``bnfl.methods``.
METHODS: Registry[Method] = Registry(
    "method", group="bnfl.methods", listing="valid ids", lower=True, convert=_as_method,
    accepts=lambda o: isinstance(o, Method) or isinstance(o, type) and issubclass(o, Algorithm),
    expects="a subclass of bnfl.fl.Algorithm or a bnfl.methods.Method")
for _method in (
    _m("centralized", "Centralized+BN", "#000000", "s", "centralized", "bn", "none", "CATALOG §0.2", iid_pool=True),
    _m("fedtan", "FedTAN", "#D55E00", "*", "fedtan", "bn", "fedtan", "FedTAN Alg. 1-3"),
    _m("fedtan2", "FedTAN-II", "#E69F00", "P", "fedtan2", "bn", "fedtan2", "FedTAN Sec. 5.4",
       before_switch="fedtan"),
    _m("fedavg+bn", "FedAvg+BN", "#0072B2", "o", "fedavg", "bn", "model", "FedTAN eq. 7"),
    _m("fedavg+alg2", "FedAvg+Algorithm 2", "#56B4E9", "D", "fedavg+alg2", "bn", "stats", "FedTAN Alg. 2"),
    _m("fedavg+gn", "FedAvg+GN", "#009E73", "^", "fedavg", "gn", "model", "FedTAN Sec. 6.2; FixBN"),
    _m("fedavg+ln", "FedAvg+LN", "#44AA99", "<", "fedavg", "ln", "model", "HBN Table 2"),
    _m("fedavg+none", "FedAvg (no norm)", "#999999", "x", "fedavg", "none", "model", "FedTAN Fig. 3"),
    _m("fedprox", "FedProx+BN", "#882255", "d", "fedprox", "bn", "model", "Li et al. 2020"),
    _m("scaffold", "SCAFFOLD+BN", "#AA4499", ">", "scaffold", "bn", None, "Karimireddy et al. 2020"),
    _m("fedbn", "FedBN", "#CC79A7", "h", "fedbn", "bn", "model", "FedBN Alg. 1"),
    _m("silobn", "SiloBN", "#F0E442", "p", "silobn", "bn", "model", "Andreux et al. 2020"),
    _m("singlenet", "SingleNet", "#777777", "v", "singlenet", "bn", "none", "FedTAN Sec. 6"),
    _m("fixbn", "FixBN", "#117733", "X", "fixbn", "bn", "model", "FixBN Sec. 4.2"),
    _m("fixbn-local", "FixBN (local momentum)", "#999933", "1", "fixbn", "bn", "model", "FixBN Sec. 5",
       momentum="local"),
    _m("fixbn-global", "FixBN (global momentum)", "#DDCC77", "2", "fixbn", "bn", None, "FixBN Sec. 5",
       momentum="global"),
    _m("centralized+gn", "Centralized+GN", "#555555", "$G$", "centralized", "gn", "none", "FixBN Table 1"),
    _m("centralized+fixbn", "Centralized+FixBN", "#333333", "$F$", "centralized+fixbn", "bn", "none", "FixBN Table 4"),
    _m("decoupled-bn", "Decoupled BN statistics", "#6699CC", "3", "decoupled-bn", "bn", None, "FixBN Sec. 3.3"),
    _m("heterofl", "HeteroFL (static BN)", "#EE7733", "4", "fedavg", "static_bn", "model", "Diao et al. 2020; FixBN Table 4"),
    _m("fedavg+in", "FedAvg+IN", "#AA3377", "+", "fedavg", "in", "model", "FixBN Table 5"),
    _m("fedavg+gn-ws", "FedAvg+GN+WS", "#225555", "|", "fedavg", "gn_ws", "model", "FixBN Table 5 (GN+WN)"),
    _m("hbn", "HBN", "#332288", "8", "hbn", "hbn", None, "HBN Alg. 1"),
    _m("fbn", "FedAvg+FBN", "#88CCEE", "H", "fbn", "fbn", None, "Guerraoui et al. 2024"),
    _m("fedavg+fedfn", "FedAvg+FedFN", "#BB5566", "$f$", "fedavg", "fedfn", "model",
       "Kim et al. 2023 as HBN App. B.1 places it (before the head of Simple-CNN)"),
    _m("fedadam+gn", "FedAdam+GN", "#661100", "$A$", "fedadam", "gn", "model", "Reddi et al. 2021, Alg. 2"),
    _m("fedadam+bn", "FedAdam+BN", "#994411", "$a$", "fedadam", "bn", "model", "Reddi et al. 2021, Alg. 2"),
    _m("moon", "MOON+BN", "#6699AA", "$M$", "moon", "bn", "model", "Li, He, Song 2021"),
    _m("fedsam", "FedSAM+BN", "#AA7744", "$S$", "fedsam", "bn", "model", "Qu et al. 2022"),
    _m("fedacg+gn", "FedACG+GN", "#447733", "$C$", "fedacg", "gn", "model", "Kim, Kim, Ham 2024, Alg. 1"),
    _m("fedacg+bn", "FedACG+BN", "#77AA55", "$c$", "fedacg", "bn", "model", "Kim, Kim, Ham 2024, Alg. 1"),
    _m("fedwon", "FedWon", "#555599", "$W$", "fedwon", "ws", "model", "Zhuang & Lyu 2024"),
):
    METHODS.register(_method.id, _method)


def get(name: str | Method) -> Method:
    """The :class:`Method` with id ``name`` (a :class:`Method` is returned as is), an import
    string ``"package.module:Name"`` or an entry point of group ``bnfl.methods``.

    Raises
    ------
    ValueError
        For an unknown id, listing the valid ones, or an import string that does not import.
    """
    if isinstance(name, Method):
        return name
    return METHODS.lookup(name)


def check(name: object) -> str:
    """That ``name`` can name a method, checked against the table without resolving it (nothing is
    imported): a registered id (returned in its one spelling), an entry point's name of group
    ``bnfl.methods``, or an import string (returned as given; :func:`get` imports it). A config
    checks its method with this; the builder (:func:`bnfl.train.builder.resolve`) is the one place
    that looks a method id up, with :func:`get`.

    Raises
    ------
    ValueError
        For a name that is not a string, or an unknown id, listing the valid ones.
    """
    if not isinstance(name, str):
        raise ValueError(f"method must be a string, got {name!r}")
    if is_import_string(name):
        return name
    if not METHODS.knows(name):
        raise ValueError(METHODS.unknown(name))
    return name.lower() if name.lower() in METHODS else name  # a registered id, or an entry point's name
