"""The wire format of :mod:`bnfl.fl.flower`: tensors as Flower records, a client's state in its Context.

Tensors travel as :class:`flwr.app.ArrayRecord` entries, one per state key, converted with
``numpy.save`` (dtype, shape and bits kept: a float64 model arrives bit-exact, the 0-d int64
``num_batches_tracked`` stays a 0-d int64). Which keys travel is decided by the engine's key lists
(:attr:`ServerContext.upload_keys <bnfl.fl.context.ServerContext>` and friends), never here.

A client's persistent state lives in its node's :class:`flwr.app.Context` ``state``
(a :class:`flwr.app.RecordDict` that Flower keeps per node across rounds), under names that
carry the run's index ``i`` in the launch (several runs may share one federation):

``bnfl.i.local`` (ArrayRecord)
    the client-local state groups (FedBN's BN layers, SiloBN's statistics, HBN's alpha);
``bnfl.i.client`` (ConfigRecord)
    the batch cursor (``epoch``, ``position``) and the client's own algorithm state
    (``algorithm``: its :attr:`ClientContext.state <bnfl.fl.context.ClientContext>` as
    ``torch.save`` bytes, e.g. SCAFFOLD's control variate :math:`c_i` or the SGD momentum buffers
    FixBN-star keeps across rounds; nothing of the server's or another client's state).
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict
from torch import Tensor

from bnfl import _safe_torch
from bnfl.fl._checkpoint import to_device

if TYPE_CHECKING:
    from bnfl.fl._host import ClientHost

__all__ = ["from_arrays", "load_client_state", "save_client_state", "state_from_bytes", "state_to_bytes", "to_arrays"]



def _names(run: int) -> tuple[str, str]:
    return f"bnfl.{run}.local", f"bnfl.{run}.client"


def to_arrays(tensors: Mapping[str, Tensor]) -> ArrayRecord:
    """``{key: tensor}`` as an ArrayRecord (CPU copies; dtype and shape kept, 0-d included)."""
    return ArrayRecord({k: Array(np.ascontiguousarray(v.detach().cpu().numpy())) for k, v in tensors.items()})


def from_arrays(record: ArrayRecord, device: torch.device | str = "cpu") -> dict[str, Tensor]:
    """An ArrayRecord back as ``{key: tensor}`` on ``device`` (writable copies, in record order)."""
    return {k: torch.from_numpy(np.array(a.numpy(), copy=True)).to(device) for k, a in record.items()}


def state_to_bytes(state: Mapping[str, Any]) -> bytes:
    """An algorithm's client state (tensors, numbers and dicts of them) as ``torch.save`` bytes
    (tensors on the CPU), for a ConfigRecord."""
    buf = io.BytesIO()
    torch.save(to_device(dict(state), torch.device("cpu")), buf)
    return buf.getvalue()


def state_from_bytes(data: bytes, device: torch.device | str = "cpu") -> dict[str, Any]:
    """:func:`state_to_bytes` back (a safe load: tensors, numbers and containers only)."""
    return to_device(_safe_torch.load(io.BytesIO(bytes(data)), map_location=None), torch.device(device))


def save_client_state(sim: ClientHost, c: int, state: RecordDict, run: int = 0) -> None:
    """Write client ``c``'s persistent state in run ``run`` from the client-side ``sim`` into
    ``state`` (its node's ``Context.state``): local groups, batch cursor, algorithm state."""
    LOCAL, CLIENT = _names(run)
    if c in sim.client_local:
        state[LOCAL] = to_arrays(sim.client_local[c])
    epoch, position = sim.cursors[c]
    state[CLIENT] = ConfigRecord({"client": c, "epoch": int(epoch), "position": int(position),
                                  "algorithm": state_to_bytes(sim.client_algorithm.get(c, {}))})


def load_client_state(sim: ClientHost, c: int, state: RecordDict, run: int = 0) -> None:
    """Restore what :func:`save_client_state` wrote for run ``run`` into the client-side ``sim``
    (nothing on a client's first message). Refuses a Context that holds another client's state."""
    LOCAL, CLIENT = _names(run)
    if CLIENT not in state:
        return
    rec = state[CLIENT]
    if int(rec["client"]) != c:
        raise ValueError(f"this node's Context holds client {int(rec['client'])}'s state but was asked to run "
                         f"client {c}; a node must always run the same client (partition-id)")
    if LOCAL in state:
        sim.client_local[c] = from_arrays(state[LOCAL], sim.device)
    sim.cursors[c] = [int(rec["epoch"]), int(rec["position"])]
    alg_state = state_from_bytes(rec["algorithm"], sim.device)
    if alg_state:
        sim.client_algorithm[c] = alg_state
