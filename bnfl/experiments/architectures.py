"""A paper's printed architecture table checked against the model bnfl builds.

A paper prints its networks layer by layer (FedBN Tables 3 and 9, HBN Table 7); an entry reproduces
such a table by building the model and reading its layers back in the paper's notation
(:func:`layer_rows`), counting parameters and measuring the flattened width with a forward hook
(:func:`flatten_width`); :func:`architecture_check` puts both side by side with the claims.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from bnfl import models
from bnfl.experiments.claims import at_least, within

__all__ = ["architecture_check", "flatten_width", "layer_rows"]


def layer_rows(model: nn.Module) -> list[str]:
    """One row per conv / FC layer in the paper's notation: ``Conv2D(3, 64, 5, 1, 2); BN(64), ReLU,
    MaxPool2D(2, 2)``, the modules up to the next conv / FC listed after it."""
    rows: list[list[str]] = []
    for m in model.modules():
        if list(m.children()):
            continue
        if isinstance(m, nn.Conv2d):
            rows.append([f"Conv2D({m.in_channels}, {m.out_channels}, {m.kernel_size[0]}, {m.stride[0]}, "
                         f"{m.padding[0]})"])
        elif isinstance(m, nn.Linear):
            rows.append([f"FC({m.in_features}, {m.out_features})"])
        elif isinstance(m, nn.modules.batchnorm._BatchNorm):
            rows[-1].append(f"BN({m.num_features})")
        elif isinstance(m, nn.ReLU):
            rows[-1].append("ReLU")
        elif isinstance(m, nn.MaxPool2d):
            rows[-1].append(f"MaxPool2D({m.kernel_size}, {m.stride})")
        elif isinstance(m, nn.AdaptiveAvgPool2d):
            size = m.output_size if isinstance(m.output_size, int) else m.output_size[0]
            rows.append([f"AdaptiveAvgPool2D({size}, {size})"])
    return [r[0] + ("; " + ", ".join(r[1:]) if len(r) > 1 else "") for r in rows]


def flatten_width(model: nn.Module, shape: tuple[int, ...]) -> int:
    """Input width of the first FC layer on an input of ``shape`` (a forward hook)."""
    seen: list[int] = []
    first = next(m for m in model.modules() if isinstance(m, nn.Linear))
    handle = first.register_forward_hook(lambda m, i, o: seen.append(int(i[0].shape[1])))
    model.eval()
    with torch.no_grad():
        model(torch.zeros(1, *shape))
    handle.remove()
    return seen[0]


def architecture_check(name: str, shape: tuple[int, int, int], printed: Sequence[tuple[str, str]], bad_row: int, *,
                       params: int, affine: int | None, flat: tuple[int, int, int], source: str,
                       erratum: str) -> dict[str, Any]:
    """A paper's printed architecture table against the model bnfl builds (``models.build(name)`` for
    ``shape`` = (C, H, W) inputs, 10 classes): one row per printed row beside the row read off the
    built model (:func:`layer_rows`), the printed row ``bad_row`` marked with ``erratum`` (why it
    cannot be), and the claims: the layers equal the printed rows (``bad_row`` left out), the
    trainable parameters equal ``params`` (``source`` says where that count comes from), the first
    FC layer's input is ``C*H*W`` of ``flat``, the printed table has the impossible row, and, given,
    the BN affine parameters equal ``affine``. Returns the entry's result (rows, paper, claims,
    series)."""
    model = models.build(name, num_classes=10, in_channels=shape[0], input_size=shape[1])
    ours = layer_rows(model)
    n_params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    bn = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    n_affine = sum(m.weight.numel() + m.bias.numel() for m in bn)
    n_stats = sum(m.running_mean.numel() + m.running_var.numel() for m in bn)
    width = flatten_width(model, shape)
    expected = [text for i, (_, text) in enumerate(printed) if i != bad_row]
    rows = []
    j = 0
    for i, (layer, text) in enumerate(printed):
        if i == bad_row:
            rows.append({"layer": layer, "paper (as printed)": text, "bnfl": "-", "note": erratum})
            continue
        mine = ours[j] if j < len(ours) else ""
        rows.append({"layer": layer, "paper (as printed)": text, "bnfl": mine,
                     "note": "" if mine == text else "differs"})
        j += 1
    claims = [
        at_least("layers-match", "bnfl's layers equal the printed rows (the erroneous row left out)",
                 float(sum(a == b for a, b in zip(ours, expected, strict=False)) == len(expected) == len(ours)), 1.0,
                 detail=f"{sum(a == b for a, b in zip(ours, expected, strict=False))} of {len(expected)} rows equal"),
        within("params", f"trainable parameters = {params:,} [{source}]", n_params, params, 0,
               detail=f"bnfl {n_params:,}"),
        within("flatten", f"first FC input = {flat[0]}*{flat[1]}*{flat[2]} = {np.prod(flat)} at {shape[1]}x{shape[2]}",
               width, int(np.prod(flat)), 0, detail=f"forward hook: {width}"),
        at_least("printed-row-is-an-error", "the printed table has one row the architecture cannot have",
                 float(printed[bad_row][1] not in ours or printed.count(printed[bad_row]) > 1), 1.0,
                 kind="consistency", detail=f"row {bad_row + 1}: {printed[bad_row][1]}"),
    ]
    if affine is not None:
        claims.append(within("bn-affine", f"BN affine parameters = {affine:,} (and as many statistics)",
                             n_affine, affine, 0, detail=f"affine {n_affine:,}, running statistics {n_stats:,}"))
    return {"rows": rows, "paper": [{"layer": a, "details": b} for a, b in printed], "claims": claims,
            "series": {"params": n_params, "bn_affine": n_affine, "bn_stats": n_stats, "flatten": width,
                       "layers": ours}}
