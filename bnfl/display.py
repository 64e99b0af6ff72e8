"""How bnfl shows numbers, tables and figures to a reader: rounded for display only, as HTML
tables, as PNG images in a notebook.

It sits at the bottom of bnfl (the standard library; matplotlib and IPython on first use), so the
diagnosis report and the experiments' notebooks and dashboard share one rendering. Stored values
are never rounded: only what a reader sees.
"""

from __future__ import annotations

import html
import io
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["cell_text", "display_number", "display_value", "html_table", "image", "png", "round_numbers", "show", "show_html"]


def display_number(value: Any) -> str:
    """A number as a reader wants it: 2 decimals from 1 up (``97.77766666666666 -> "97.78"``), 3
    significant digits below 1, integers as they are; anything else as ``str``."""
    if value is None:
        return "–"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def display_value(value: Any) -> str:
    """A stored table value as a table shows it: below 10 with up to 4 decimals (an entry that
    stores ``2.1388`` to set beside the paper's printed ``2.1388`` keeps it), from 10 up with 2
    (``97.77766666666666 -> "97.78"``), very large or small ones in 4 significant digits; non-floats
    as :func:`display_number`."""
    if not isinstance(value, float) or not math.isfinite(value):
        return display_number(value)
    if value != 0 and (abs(value) >= 1e6 or abs(value) < 1e-3):
        return f"{value:.4g}"
    return f"{value:.4f}".rstrip("0").rstrip(".") if abs(value) < 10 else f"{value:.2f}"


def round_numbers(text: str, *, digits: int = 5) -> str:
    """``text`` with every decimal of ``digits`` or more fractional digits shown by :func:`display_number`
    (``"|97.77766666666666 - 97.4| = 0.3703"`` -> ``"|97.78 - 97.4| = 0.3703"``)."""
    pattern = re.compile(r"(?<![\w.])([-+]?\d+\.\d{" + str(int(digits)) + r",})(?![\d])")
    return pattern.sub(lambda m: display_number(float(m.group(1))), str(text))


def show(obj: Any) -> None:
    """Show ``obj`` when IPython runs this code (a notebook); do nothing in a plain interpreter."""
    try:
        # IPython is optional (the notebooks extra): without it there is nothing to show into
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:  # IPython is not installed: nothing to show into
        return
    if get_ipython() is not None:
        display(obj)


def show_html(text: str) -> None:
    from IPython.display import HTML  # optional (the notebooks extra); only a notebook shows HTML

    show(HTML(text))


def png(fig: Any, *, dpi: int | None = None) -> bytes:
    """The PNG bytes of a matplotlib figure (which is closed afterwards)."""
    import matplotlib.pyplot as plt  # about a second to import; this bottom module loads without it

    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": "bnfl"})
    finally:
        plt.close(fig)
    return buf.getvalue()


def image(fig: Any, *, dpi: int | None = None) -> None:
    """Show a matplotlib figure as an inline PNG image and close it.

    Unlike displaying the Figure object (which prints ``<Figure size ...>`` when no inline
    backend is active, e.g. under ``MPLBACKEND=Agg``), a PNG is shown by every front end:
    JupyterLab, nbclient, myst-nb.
    """
    # optional (the notebooks extra); only a notebook shows images
    from IPython.display import Image

    show(Image(data=png(fig, dpi=dpi), format="png"))


def cell_text(value: Any) -> str:
    """One value as table-cell text: numbers as a reader compares them
    (:func:`display_value`: ``97.77766666666666 -> "97.78"``, ``2.1388`` as stored), long decimals
    inside text rounded, lists joined."""
    if value is None or isinstance(value, float):
        return display_value(value)
    if isinstance(value, (list, tuple)):
        return ", ".join(cell_text(v) for v in value)
    return round_numbers(str(value))


def html_table(rows: Sequence[Mapping[str, Any]], *, caption: str = "",
               styles: Mapping[str, Any] | None = None) -> str:
    """An HTML ``<table>`` of ``rows`` (columns: the union of keys, in first-seen order).

    Parameters
    ----------
    rows : sequence of mapping
        One mapping per row; a missing key is an empty cell.
    caption : str, optional
        Shown above the table (plain text; escaped).
    styles : mapping, optional
        ``{column: callable(value) -> CSS declarations}`` for cells of that column.

    Returns
    -------
    str
        ``<p><em>(none)</em></p>`` when ``rows`` is empty. Numbers are right-aligned.
    """
    if not rows:
        return "<p><em>(none)</em></p>"
    cols: list[str] = []
    for r in rows:
        cols += [k for k in r if k not in cols]
    out = ['<table class="table bnfl-table">']  # "table": the docs theme's table style
    if caption:
        out.append(f"<caption>{html.escape(caption)}</caption>")
    out.append("<thead><tr>" + "".join(f"<th>{html.escape(str(c))}</th>" for c in cols) + "</tr></thead>")
    out.append("<tbody>")
    for r in rows:
        cells = []
        for c in cols:
            v = r.get(c, "")
            css = "text-align:right;" if isinstance(v, (int, float)) and not isinstance(v, bool) else ""
            if styles and c in styles:
                css += styles[c](v)
            attr = f' style="{css}"' if css else ""
            cells.append(f"<td{attr}>{html.escape(cell_text(v))}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)
