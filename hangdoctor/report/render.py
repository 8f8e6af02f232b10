"""Render the analysis model (MODEL.md) as HTML, Markdown, JSON or a terminal summary.

HTML comes from jinja2 templates (user template folders first, then the built-in ones shipped
as ``hangdoctor.templates``) with autoescape on. Markdown and the terminal summary are built in
Python (``markdown.py``, ``terminal.py``) because they need byte budgets and their own escaping.

Layer: report; may import: the standard library, jinja2, hangdoctor.report and the foundation
(it reads the analysis model only).
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path
from typing import Any, Callable

import jinja2
from markupsafe import Markup

from hangdoctor.report.analysis_view import build_view, fmt_num, frame_line
from hangdoctor.report.markdown import render_markdown
from hangdoctor.report.svg import POWER_COLOR, UTIL_COLOR, gpu_chart_svg, sparkline_svg
from hangdoctor.report.terminal import render_terminal

__all__ = [
    "FORMATS",
    "render_html",
    "render_json",
    "render_markdown",
    "render_terminal",
    "sparkline_svg",
    "write_report",
]

# Report file suffixes and the format each one means.
FORMATS = {
    ".html": "html",
    ".htm": "html",
    ".md": "markdown",
    ".markdown": "markdown",
    ".json": "json",
}
_FORMAT_ALIASES = {
    "html": "html",
    "htm": "html",
    "md": "markdown",
    "markdown": "markdown",
    "json": "json",
}


def _builtin_templates() -> Any:
    """The folder (a Traversable) of the built-in templates.

    Installed, they are the package ``hangdoctor.templates``; in a source checkout run with
    PYTHONPATH that package does not exist (setup maps ``templates/`` onto it), so fall back to
    the repository's ``templates/`` next to ``hangdoctor/``.
    """
    from importlib import resources

    try:
        return resources.files("hangdoctor.templates")
    except ModuleNotFoundError:
        return Path(__file__).resolve().parents[2] / "templates"


def _builtin_loader() -> jinja2.BaseLoader:
    root = _builtin_templates()

    def load(name: str) -> tuple[str, str, Callable[[], bool]] | None:
        # Template names come from our own templates; still refuse anything that walks up.
        if ".." in name.split("/") or name.startswith("/"):
            return None
        node = root
        for part in name.split("/"):
            node = node.joinpath(part)
        if not node.is_file():
            return None
        return node.read_text(encoding="utf-8"), str(node), lambda: True

    return jinja2.FunctionLoader(load)


@functools.lru_cache(maxsize=8)
def _environment(template_dirs: tuple[str, ...]) -> jinja2.Environment:
    loaders: list[jinja2.BaseLoader] = [jinja2.FileSystemLoader(d) for d in template_dirs]
    loaders.append(_builtin_loader())
    env = jinja2.Environment(
        loader=jinja2.ChoiceLoader(loaders),
        autoescape=jinja2.select_autoescape(
            enabled_extensions=("html", "htm", "xml", "svg"), default_for_string=True, default=True
        ),
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.globals.update(
        sparkline=sparkline_svg,
        gpu_chart=gpu_chart_svg,
        UTIL_COLOR=UTIL_COLOR,
        POWER_COLOR=POWER_COLOR,
    )
    env.filters.update(num=fmt_num, frame=frame_line, pct=_pct, mib=_mib, dur=_duration)
    return env


def _pct(value: Any) -> str:
    return fmt_num(value, 0, " %")


def _mib(value: Any) -> str:
    """MiB as a short human size (GiB above 1 GiB)."""
    text = fmt_num(value, 0)
    if text == "–":
        return text
    mib = float(value)
    return f"{mib / 1024:.1f} GiB" if mib >= 1024 else f"{mib:.0f} MiB"


def _duration(value: Any) -> str:
    text = fmt_num(value, 2)
    if text == "–":
        return text
    seconds = float(value)
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    return f"{seconds:.1f} s"


def warm_up() -> None:
    """Load and compile the built-in templates (jinja2 caches them), so the first render after a
    collection costs milliseconds. The CLI calls this while the probe samples its window."""
    env = _environment(())
    for node in _builtin_templates().iterdir():
        if node.name.endswith(".html"):
            env.get_template(node.name)
    render_html({"verdict": "hung", "causes": [], "ranks": [], "hosts": []})


def render_html(analysis: dict, template_dirs: list[str] | None = None) -> str:
    """Return the self-contained HTML report (inline CSS and SVG, no scripts, no requests).

    ``template_dirs`` are searched before the built-in templates, so a user can override
    ``report.html`` or any ``_partial.html`` by name.
    """
    env = _environment(tuple(str(d) for d in (template_dirs or [])))
    view = build_view(analysis)
    return env.get_template("report.html").render(v=view, Markup=Markup)


def _finite(value: Any) -> Any:
    """``value`` with NaN and infinities replaced by None (JSON has no spelling for them)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def render_json(analysis: dict) -> str:
    """Return the analysis as indented JSON (strict: no NaN, valid UTF-8 or ASCII escapes)."""
    try:
        out = json.dumps(analysis, indent=2, ensure_ascii=False, allow_nan=False, default=str)
    except ValueError:
        out = json.dumps(_finite(analysis), indent=2, ensure_ascii=False, default=str)
    try:
        out.encode("utf-8")
    except UnicodeEncodeError:
        # Lone surrogates (from undecodable bytes) cannot be UTF-8: escape them instead.
        out = json.dumps(_finite(analysis), indent=2, ensure_ascii=True, default=str)
    return out + "\n"


def _format_for(path: str, fmt: str | None) -> str:
    if fmt:
        key = fmt.lower().lstrip(".")
        if key not in _FORMAT_ALIASES:
            raise ValueError(
                f"unknown report format {fmt!r}: use one of html, markdown (md) or json"
            )
        return _FORMAT_ALIASES[key]
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(
            f"cannot tell the report format from {path!r}: name the file with one of "
            f"{', '.join(sorted(FORMATS))} or pass the format (html, markdown, json)"
        )
    return FORMATS[suffix]


def write_report(analysis: dict, path: str, fmt: str | None = None) -> str:
    """Write the report to ``path`` and return the format used ("html", "markdown", "json").

    The format comes from ``fmt`` or else the file suffix; an unknown one raises ValueError.
    The file is replaced atomically, so a reader never sees half a report; a device or FIFO
    (``-o /dev/stdout``) is written to as it is (hangdoctor.outfile).
    """
    chosen = _format_for(path, fmt)
    if chosen == "html":
        body = render_html(analysis)
    elif chosen == "markdown":
        body = render_markdown(analysis)
    else:
        body = render_json(analysis)
    from hangdoctor.outfile import write_text  # never renames over a device; honours umask

    write_text(path, body, what="report")
    return chosen
