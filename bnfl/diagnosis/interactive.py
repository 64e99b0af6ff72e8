"""The diagnosis on the embedded digits, live: the pieces of ``notebooks/theory/diagnose_live.py``.

:func:`digits_diagnosis` splits scikit-learn's bundled digits (Q-DIG) among clients with a
Dirichlet(phi) label split and diagnoses the ``bnfl demo`` MLP (64-32-BN-ReLU-32-BN-ReLU-10,
float64) on it; :func:`show` displays the report (HTML tables and the figure);
:func:`explorer` wires sliders (label skew, batch size, clients, local steps) to both. The
notebook only calls these.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from bnfl.data import digits, partition
from bnfl.diagnosis._core import diagnose
from bnfl.diagnosis._model import build_model
from bnfl.diagnosis.report import Diagnosis, figure, to_html
from bnfl.display import image

__all__ = ["digits_clients", "digits_diagnosis", "explorer", "show"]


def digits_clients(*, phi: float, clients: int, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Q-DIG's training split dealt to ``clients`` clients by a Dirichlet(``phi``) label split.

    Small ``phi`` (0.05) gives clients of one or two classes, large ``phi`` (100) an i.i.d.-like
    split (:func:`bnfl.data.partition.dirichlet`, at least 8 samples per client).
    """
    split = digits(form="flat", seed=0)
    parts = partition.dirichlet(split.y_train.numpy(), clients, phi, seed, min_size=8)
    return [(split.x_train[torch.as_tensor(p)], split.y_train[torch.as_tensor(p)]) for p in parts]


def digits_diagnosis(*, phi: float = 0.3, clients: int = 5, batch_size: int = 32, local_steps: int = 2,
                     seed: int = 0, stat_samples: int = 128, **options: Any) -> Diagnosis:
    """:func:`bnfl.diagnose` of the ``bnfl demo`` MLP at initialisation on :func:`digits_clients`.

    ``options`` go to :func:`bnfl.diagnose` (``per_client_models``, ``sync_rounds_ok``, ``lr``...).
    """
    return diagnose(build_model(seed), digits_clients(phi=phi, clients=clients, seed=seed), batch_size=batch_size,
                    local_steps=local_steps, seed=seed, stat_samples=stat_samples, progress=False, **options)


def show(d: Diagnosis) -> None:
    """Display the report of ``d`` in a notebook: its HTML tables and verdict, then the figure."""
    from IPython.display import HTML, display  # optional (the notebooks extra): a notebook shows it

    display(HTML(to_html(d)))
    image(figure(d))


def explorer(*, phi: float = 0.3, clients: int = 5, batch_size: int = 32, local_steps: int = 2,
             seed: int = 0) -> Any:
    """Sliders for label skew (Dirichlet phi), batch size, clients and local steps, and the report
    they recompute (:func:`digits_diagnosis` + :func:`show`) each time one is released.

    Returns
    -------
    ipywidgets.VBox
        Display it in a notebook with a live kernel.
    """
    import ipywidgets as w  # optional (the notebooks extra): sliders need a live kernel

    style = {"description_width": "11em"}
    layout = w.Layout(width="32em")
    sliders = {
        "phi": w.FloatLogSlider(value=phi, base=10, min=-1.3, max=2, step=0.1, readout_format=".2f",
                                description="label skew: Dirichlet phi", style=style, layout=layout),
        "batch_size": w.IntSlider(value=batch_size, min=2, max=64, description="batch size B", style=style,
                                  layout=layout),
        "clients": w.IntSlider(value=clients, min=2, max=10, description="clients", style=style, layout=layout),
        "local_steps": w.IntSlider(value=local_steps, min=1, max=10, description="local steps E", style=style,
                                   layout=layout),
    }
    status = w.HTML()
    out = w.Output()

    def update(_change: Any = None) -> None:
        start = time.perf_counter()
        values = {k: s.value for k, s in sliders.items()}
        with out:
            out.clear_output(wait=True)
            try:
                show(digits_diagnosis(seed=seed, **values))
            except ValueError as err:  # e.g. a Dirichlet draw that leaves a client too small
                print(f"not diagnosable: {err}")
        status.value = f"<small>updated in {time.perf_counter() - start:.2f} s</small>"

    for s in sliders.values():
        s.continuous_update = False
        s.observe(update, names="value")
    update()
    return w.VBox([w.HTML("<b>Small phi = strong label skew; phi = 100 is close to i.i.d.</b>"),
                   *sliders.values(), status, out])
