"""Matplotlib backend for airlock sessions: ``MPLBACKEND=module://airlock_mpl``.

Figures are drawn with Agg.  ``plt.show()`` renders every open pyplot
figure to PNG, sends each as a ``display`` message of the running execution
(image/png plus text/plain such as ``<Figure size 640x480 with 1 Axes>``)
and closes them.  After every execution the runtime calls
:func:`flush_figures`, which does the same for figures the cell left open,
so plots come back with or without ``plt.show()`` (like Jupyter's inline
backend).

Outside an airlock session (e.g. a script started from a cell that inherits
MPLBACKEND), the backend behaves like Agg: ``show()`` does nothing.

The module must stay importable before a session exists (a zygote imports
matplotlib.pyplot with this backend before forking), so it looks the
runtime up only when it needs it.
"""

from __future__ import annotations

import binascii
import io
import sys
from typing import Any

from matplotlib._pylab_helpers import Gcf
from matplotlib.backend_bases import FigureManagerBase
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

__all__ = ["FigureCanvas", "FigureManager", "new_figure_manager",
           "new_figure_manager_given_figure", "draw_if_interactive", "show",
           "flush_figures", "figure_mimebundle", "render_png"]

backend_version = "airlock"
FigureCanvas = FigureCanvasAgg
FigureManager = FigureManagerBase


def new_figure_manager(num: int, *args: Any, FigureClass: type = Figure, **kwargs: Any) -> FigureManagerBase:
    """Create a figure and its (non-GUI) manager."""
    return new_figure_manager_given_figure(num, FigureClass(*args, **kwargs))


def new_figure_manager_given_figure(num: int, figure: Figure) -> FigureManagerBase:
    """A manager for an existing figure, drawn by Agg."""
    return FigureCanvasAgg.new_manager(figure, num)


def draw_if_interactive() -> None:
    """Nothing to redraw: figures are rendered when shown."""


def render_png(fig: Figure) -> bytes:
    """The figure as PNG, cropped like Jupyter's inline backend."""
    buf = io.BytesIO()
    fig.canvas.print_figure(buf, format="png", bbox_inches="tight",
                            facecolor=fig.get_facecolor(), edgecolor=fig.get_edgecolor(),
                            dpi=fig.dpi)
    return buf.getvalue()


def figure_mimebundle(fig: Figure) -> tuple[dict, dict]:
    """(data, metadata) of a figure: text/plain, plus image/png if it has content.

    Marks the figure as shown, so the end-of-execution flush does not send
    it again unless it changes afterwards.
    """
    data: dict[str, Any] = {"text/plain": repr(fig)}
    if fig.axes or fig.lines or fig.texts or fig.images or fig.patches or fig.legends:
        png = render_png(fig)
        data["image/png"] = binascii.b2a_base64(png, newline=False).decode("ascii")
    fig._airlock_shown = True
    # Drawing may leave the figure stale; any later change sets it again.
    fig.stale = False
    return data, {}


def _runtime() -> Any:
    """The airlock runtime module when a session is running, else None."""
    rt = sys.modules.get("airlock_runtime")
    if rt is None or rt.current.session is None:
        return None
    return rt


def _publish_and_close(managers: list, skip_unchanged: bool) -> None:
    rt = _runtime()
    try:
        for manager in sorted(managers, key=lambda m: m.num if isinstance(m.num, int) else 0):
            fig = manager.canvas.figure
            if skip_unchanged and getattr(fig, "_airlock_shown", False) and not fig.stale:
                continue  # already displayed during this execution and not changed since
            data, md = figure_mimebundle(fig)
            if rt is not None:
                rt.publish_display_data(data, md)
    finally:
        for manager in managers:
            Gcf.destroy(manager)


def show(*args: Any, block: Any = None, **kwargs: Any) -> None:
    """Display every open figure and close it (Agg's no-op outside a session)."""
    if _runtime() is None:
        return
    managers = Gcf.get_all_fig_managers()
    if managers:
        _publish_and_close(managers, skip_unchanged=False)


def flush_figures() -> None:
    """Display the figures an execution left open (unless already shown) and close them all.

    Called by the runtime after every execution.
    """
    managers = Gcf.get_all_fig_managers()
    if managers:
        _publish_and_close(managers, skip_unchanged=True)
