"""The course's plot style, and figures shown with alt text.

Why a style: the default matplotlib colours tell series apart by hue alone, which fails in
greyscale print and for many readers with a colour-vision deficiency. The Okabe–Ito palette
stays distinct for the common deficiencies, and every series also gets its own line style, so
a plot still reads when the colours are gone.

Why ``show(fig, alt=...)``: JupyterLab (4.x) renders ``image/png`` outputs as an ``<img>`` with
no ``alt`` attribute, and its image renderer reads no alt text from the output's metadata (only
width, height, ``needs_background`` and ``unconfined``). Its HTML renderer keeps ``<img alt>``
with a ``data:`` source through the sanitizer, so the figure goes out as HTML, with the PNG and
the text itself as fallbacks (VS Code uses an image's ``text/plain`` sibling as its alt text).
``describe_all_figures()`` does the same for every figure a kernel shows, ``plt.show()`` and the
inline backend's figures included, with alt text set by ``set_alt(fig, ...)`` or, failing that,
written from the figure's titles, axis labels, ranges and legend (``describe_figure``).
"""
import base64
import html
import io

import matplotlib
import matplotlib.pyplot as plt
from cycler import cycler
from IPython.display import display

# Okabe & Ito (2008), "Color Universal Design"; yellow last: it is faint on white.
OKABE_ITO = {
    "blue": "#0072B2",
    "orange": "#E69F00",
    "bluish green": "#009E73",
    "vermillion": "#D55E00",
    "reddish purple": "#CC79A7",
    "sky blue": "#56B4E9",
    "black": "#000000",
    "yellow": "#F0E442",
}
COLORS = list(OKABE_ITO.values())
LINESTYLES = ["-", "--", ":", "-.", (0, (5, 1)), (0, (3, 1, 1, 1, 1, 1)), (0, (1, 3)), (0, (8, 2, 1, 2))]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]

COURSE_RC = {
    # colour and line style change together: series k is told apart by both
    "axes.prop_cycle": cycler(color=COLORS) + cycler(linestyle=LINESTYLES),
    "lines.linewidth": 2.0,
    "lines.markersize": 6.5,
    "legend.handlelength": 3.5,  # long enough to show each dash pattern
    "legend.framealpha": 0.9,
    "axes.grid": True,
    "grid.alpha": 0.35,
    "image.cmap": "cividis",  # perceptually uniform, readable with colour-vision deficiencies and in greyscale
    "savefig.bbox": "tight",
}


def use_course_style() -> None:
    """Okabe–Ito colours with a line style per series, thicker lines, a light grid, cividis images.

    Call it once in a notebook's set-up cell (after ``import matplotlib.pyplot``); every later
    plot in the kernel uses it. Markers are not in the cycle (a marker on each of 400 points hides
    the line); sparse series can add them with ``**series_style(k)``.
    """
    matplotlib.rcParams.update(COURSE_RC)


def series_style(k: int) -> dict:
    """Colour, line style and marker of series ``k``: ``ax.plot(x, y, **series_style(k))``."""
    return {"color": COLORS[k % len(COLORS)], "linestyle": LINESTYLES[k % len(LINESTYLES)],
            "marker": MARKERS[k % len(MARKERS)]}


def _png(fig, dpi=None) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi or "figure", bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _bundle(png: str, alt: str, size=None) -> dict:
    text = " ".join(alt.split())
    width = f' width="{int(size["width"])}"' if size and "width" in size else ""
    img = f'<img src="data:image/png;base64,{png}" alt="{html.escape(text, quote=True)}"{width}/>'
    return {"text/html": img, "image/png": png, "text/plain": text}


def figure_bundle(fig, alt: str, dpi: int = 100) -> dict:
    """The display bundle of a figure: HTML ``<img alt>``, the PNG itself and the text."""
    if not alt or not alt.strip():
        raise ValueError("give the figure a text description: show(fig, alt='what the plot shows')")
    return _bundle(_png(fig, dpi), alt)


def show(fig, alt: str, dpi: int = 100) -> None:
    """Display ``fig`` as a PNG that carries ``alt`` as its alt text, then close it.

    Closing it keeps the inline backend from showing the same figure a second time, without alt.
    """
    bundle = figure_bundle(fig, alt, dpi=dpi)
    plt.close(fig)
    display(bundle, raw=True)


# --- alt text for every figure ---------------------------------------------------------------------
ALT_ATTRIBUTE = "_course_alt_text"
LISTED_SERIES = 4


def set_alt(fig, alt: str) -> None:
    """Give `fig` its own alt text, used wherever it is shown after ``describe_all_figures()``."""
    setattr(fig, ALT_ATTRIBUTE, " ".join(alt.split()))


def _quoted(text):
    return f"'{' '.join(text.split())}'"


def _axis(ax, which):
    label = (ax.get_xlabel() if which == "x" else ax.get_ylabel()).strip()
    low, high = ax.get_xlim() if which == "x" else ax.get_ylim()
    scale = (ax.get_xscale() if which == "x" else ax.get_yscale())
    words = f"{which} axis {_quoted(label)}" if label else f"unlabelled {which} axis"
    return words + (f" ({scale} scale)" if scale != "linear" else "") + f" from {low:.3g} to {high:.3g}"


def describe_figure(fig) -> str:
    """The figure in words: each plot's title, axes (label, scale, range) and legend entries."""
    plots = [ax for ax in fig.axes if ax.get_visible() and ax.axison and not hasattr(ax, "_colorbar")]
    suptitle = fig._suptitle.get_text() if getattr(fig, "_suptitle", None) else ""
    parts = [f"Figure {_quoted(suptitle)}." if suptitle else ""]
    if not plots:
        return (parts[0] + " " if parts[0] else "") + "A figure without axes."
    for k, ax in enumerate(plots, 1):
        title = next((t for t in (ax.get_title(loc=w) for w in ("center", "left", "right")) if t), "")
        name = f"Plot {k} of {len(plots)}" if len(plots) > 1 else "A plot"
        text = f"{name}{' ' + _quoted(title) if title else ''}: {_axis(ax, 'x')}, {_axis(ax, 'y')}"
        labels = [lab for lab in ax.get_legend_handles_labels()[1] if lab and not lab.startswith("_")]
        if labels:
            shown = ", ".join(_quoted(lab) for lab in labels[:LISTED_SERIES])
            more = f" and {len(labels) - LISTED_SERIES} more" if len(labels) > LISTED_SERIES else ""
            text += f"; {len(labels)} series: {shown}{more}"
        parts.append(text + ".")
    return " ".join(p for p in parts if p)


class _FigureBundle:
    """IPython's mimebundle formatter for figures: the PNG is rendered once, by the renderer the
    inline backend registered (its dpi, retina and tight-bbox settings) where there is one."""

    def __init__(self, png_formatter):
        self.png_formatter = png_formatter
        self.render = None

    def __call__(self, fig, include=None, exclude=None):
        from matplotlib.figure import Figure
        registered = self.png_formatter.type_printers.pop(Figure, None)  # else IPython renders it again
        self.render = registered or self.render
        try:
            alt = getattr(fig, ALT_ATTRIBUTE, "") or describe_figure(fig)
        except Exception:  # noqa: BLE001 - an odd figure still shows; a formatter error would go to stderr
            alt = "A matplotlib figure."
        if self.render is None:
            return _bundle(_png(fig), alt)
        png, size = self.render(fig), None
        if isinstance(png, tuple):  # retina: (data, {"width": ..., "height": ...})
            png, size = png
        if isinstance(png, bytes):
            png = base64.b64encode(png).decode("ascii")
        return (_bundle(png, alt, size), {"image/png": size}) if size else _bundle(png, alt)


def describe_all_figures(shell=None) -> None:
    """From now on, every matplotlib figure this kernel shows carries alt text (see the module doc).

    Call it in a notebook's set-up cell; running it again changes nothing. Outside IPython it does nothing."""
    if shell is None:
        from IPython import get_ipython
        shell = get_ipython()
    if shell is None or not hasattr(shell, "display_formatter"):
        return
    from matplotlib.figure import Figure
    png = shell.display_formatter.formatters["image/png"]
    bundles = shell.display_formatter.mimebundle_formatter
    earlier = bundles.type_printers.get(Figure)
    formatter = _FigureBundle(png)
    formatter.render = getattr(earlier, "render", None)  # what an earlier call took from the inline backend
    bundles.for_type(Figure, formatter)
