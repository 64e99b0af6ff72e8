"""Which engine trains a simulation's clients, and the line that says why.

:class:`~bnfl.fl.TrainConfig` ``batched`` picks between the batched engine (:mod:`bnfl.fl.batched`,
the default where it can run: ``"auto"``) and the sequential one (the reference, one client at a
time): :func:`batched_obstacle` says what stands in the way, :func:`select_batched` picks, and
:func:`choose` writes the choice to ``History.meta["batched"]`` with the line of :func:`engine_line`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bnfl.nn.batched import batching_obstacle

if TYPE_CHECKING:
    from bnfl.fl._host import ClientHost

__all__ = ["batched_obstacle", "choose", "engine_line", "select_batched"]


def batched_obstacle(sim: ClientHost) -> str | None:
    """Why the clients of ``sim`` cannot train as one batched computation, or ``None``.

    The algorithm says what it needs (:meth:`Algorithm.batching_obstacle
    <bnfl.fl.Algorithm.batching_obstacle>`: e.g. its own ``local_loss``, MOON's representations or
    FedSAM's perturbed weights); a model needs layers that
    :func:`~bnfl.nn.batched.batching_obstacle` accepts.
    """
    if sim.clients_elsewhere:
        return "this engine runs the clients itself (on Flower: each on its own node), not as one computation here"
    why = sim.algorithm.batching_obstacle()
    return why if why is not None else batching_obstacle(sim.model)


def select_batched(sim: ClientHost, batched: Callable[[ClientHost], Any]) -> tuple[Any, str]:
    """The batched engine for ``sim`` per ``sim.config.batched`` and why (or why not).

    ``"off"``: ``None``; ``"auto"``: batched unless :func:`batched_obstacle`; ``"on"``: batched
    or a ``ValueError`` naming the obstacle.
    """
    mode = sim.config.batched
    if mode == "off":
        return None, "batched='off'"
    why = batched_obstacle(sim)
    if why is None:
        return batched(sim), "batched"
    if mode == "on":
        raise ValueError(f"batched='on' but this run cannot be batched: {why}. Use batched='auto' (falls back to "
                         "the sequential engine) or 'off'")
    return None, why


# -- which engine trains a simulation's clients, and the line that says why -------------------------
# Which engine trains a simulation's clients, and the line that says why.
# :class:`~bnfl.fl.TrainConfig` ``batched`` picks between the batched engine
# (:mod:`bnfl.fl.batched`, the default where it can run: ``"auto"``) and the sequential one (the
# reference, one client at a time). :func:`choose` makes the choice for a
# :class:`~bnfl.fl.Simulation` and writes it to ``History.meta["batched"]``: the mode asked for,
# whether the batched engine is used, the reason, and one line a person reads, e.g.::
#     batched: batched='auto' chose the batched engine: the clients share one architecture (Net)
#     and nothing in FedTAN or the model needs one client at a time; equal to batched='off' up to
#     rounding, not bitwise
#     sequential: batched='auto' fell back to the sequential engine: MOON defines its own
#     local_loss, which runs one client's model (...)
# A backend whose clients run elsewhere (Flower's nodes) runs them one by one through
# :meth:`Simulation.client_round <bnfl.fl.Simulation.client_round>`: ``"auto"`` is sequential
# there and the line says so; a torch.distributed rank batches its own participants.
_NOT_BITWISE = "equal to batched='off' up to rounding, not bitwise"


def engine_line(mode: str, used: bool, why: str, *, model: str = "", algorithm: str = "") -> str:
    """The one-line account of the engine choice (``History.meta["batched"]["line"]``).

    Parameters
    ----------
    mode : {"off", "auto", "on"}
        ``TrainConfig.batched``.
    used : bool
        Whether the batched engine trains the clients.
    why : str
        :func:`bnfl.fl.batched.select_batched`'s reason (the obstacle when it fell back).
    model, algorithm : str
        Class names of the model and the algorithm, for the batched case's reason.
    """
    if used:
        if mode == "on":
            return f"batched: batched='on' ({_NOT_BITWISE})"
        arch = f" ({model})" if model else ""
        alg = f" in {algorithm}" if algorithm else ""
        return (f"batched: batched='{mode}' chose the batched engine: the clients share one architecture{arch} and "
                f"nothing{alg} or the model needs one client at a time; {_NOT_BITWISE}")
    if mode == "off":
        return "sequential: batched='off' (the reference engine, one client at a time; bitwise reproducible)"
    return f"sequential: batched='{mode}' fell back to the sequential engine: {why}"


def choose(sim: ClientHost, batched: Callable[[ClientHost], Any]) -> tuple[Any, dict[str, Any]]:
    """The batched engine of ``sim`` (``None``: sequential) and its ``History.meta["batched"]``
    entry: ``mode``, ``used``, ``why`` and ``line`` (:func:`engine_line`). Raises the
    ``ValueError`` of :func:`~bnfl.fl.batched.select_batched` under ``batched="on"`` when the run
    cannot be batched."""
    engine, why = select_batched(sim, batched)
    mode, used = sim.config.batched, engine is not None
    line = engine_line(mode, used, why, model=type(sim.model).__name__, algorithm=type(sim.algorithm).__name__)
    return engine, {"mode": mode, "used": used, "why": why, "line": line}
