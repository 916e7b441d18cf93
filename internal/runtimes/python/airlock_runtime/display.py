"""Rich display: MIME bundles as IPython makes them, and IPython.display.

``format_display_data`` turns an object into a Jupyter MIME bundle
(``_repr_mimebundle_`` and the ``_repr_*_`` methods, matplotlib figures as
PNG, always text/plain); ``display`` and ``publish_display_data`` send
bundles as ``display`` messages of the running execution; the classes
(``HTML``, ``Image``, ...) follow ``IPython.display``, and
``install_ipython_shim`` provides them as the modules ``IPython`` and
``IPython.display`` when the real IPython is not importable (when it is,
its display functions are routed to airlock's as it loads). Bundles are
made wire-ready here (base64 binaries, valid JSON, capped text), because
the server treats a malformed one as fatal.
"""

from __future__ import annotations

import binascii
import builtins
import json
import os
import re
import sys
import types
from typing import Any, Callable, Iterable, Optional

from . import current, wire

globals()["__builtins__"] = dict(vars(builtins))  # see the package doc

#: Cap for a single textual representation (text/plain, text/html, ...).
TEXT_LIMIT = 4 << 20
#: Cap for a single base64 image or other non-truncatable value.
BINARY_LIMIT = 32 << 20

_BINARY_MIMES = frozenset({"image/png", "image/jpeg", "image/gif", "application/pdf"})
_PRETTY_TYPES = (list, tuple, dict, set, frozenset)

_REPR_METHODS = (
    ("text/html", "_repr_html_"),
    ("text/markdown", "_repr_markdown_"),
    ("image/svg+xml", "_repr_svg_"),
    ("image/png", "_repr_png_"),
    ("image/jpeg", "_repr_jpeg_"),
    ("text/latex", "_repr_latex_"),
    ("application/json", "_repr_json_"),
    ("application/javascript", "_repr_javascript_"),
)


def _method(obj: Any, name: str) -> Optional[Callable]:
    try:
        m = getattr(obj, name, None)
    except KeyboardInterrupt:
        raise
    except BaseException:  # noqa: BLE001 - a broken __getattr__
        return None
    return m if callable(m) else None


def _call_repr(obj: Any, name: str, method: Callable, **kwargs: Any) -> Any:
    """Call one of obj's _repr_*_ methods; a failure only costs that format."""
    try:
        return method(**kwargs)
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001
        current.warn(f"airlock: {name}() of {current.type_name(obj)} raised "
              f"{type(e).__name__}: {current.safe_str(e)}")
        return None


def _cap_text(mime: str, text: str) -> str:
    if len(text) <= TEXT_LIMIT:
        return text
    note = f"[output truncated: {len(text):,} characters in total, showing the first {TEXT_LIMIT:,}]"
    if mime == "text/html":
        return text[:TEXT_LIMIT] + f"\n<p><em>{note}</em></p>"
    return text[:TEXT_LIMIT] + "\n... " + note


def _pretty_text(obj: Any) -> Optional[str]:
    """text/plain from obj's ``_repr_pretty_``, through the real IPython's
    printer when it is installed (None otherwise, or if it fails)."""
    if _method(obj, "_repr_pretty_") is None:
        return None
    try:
        from IPython.lib.pretty import pretty
    except ImportError:
        return None
    except KeyboardInterrupt:
        raise
    except BaseException:  # noqa: BLE001 - a broken IPython
        return None
    try:
        text = pretty(obj)
    except KeyboardInterrupt:
        raise
    except BaseException:  # noqa: BLE001 - fall back to repr
        return None
    return text if type(text) is str else None


def _plain_text(obj: Any) -> str:
    """text/plain for obj: repr, pretty-printed for long builtin containers
    (and by ``_repr_pretty_`` where the real IPython is installed)."""
    pretty = _pretty_text(obj)
    if pretty is not None:
        return pretty
    try:
        text = repr(obj)
        if type(text) is not str:
            text = str.__str__(text)
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001 - a broken __repr__
        current.warn(f"airlock: repr() of {current.type_name(obj)} raised {type(e).__name__}: {current.safe_str(e)}")
        return current.fallback_repr(obj)
    if 79 < len(text) <= 100_000 and isinstance(obj, _PRETTY_TYPES):
        try:
            import pprint
            text = pprint.pformat(obj, width=79, sort_dicts=False)
        except KeyboardInterrupt:
            raise
        except BaseException:  # noqa: BLE001 - keep the plain repr
            pass
    return text


def _is_figure(obj: Any) -> bool:
    mod = sys.modules.get("matplotlib.figure")
    if mod is None:
        return False
    try:
        return isinstance(obj, mod.Figure)
    except BaseException:  # noqa: BLE001
        return False


def mpl_backend() -> Any:
    """The airlock_mpl module (imported on first use), or None."""
    try:
        import airlock_mpl
        return airlock_mpl
    except ImportError:
        return None


def _json_value(value: Any) -> Any:
    if isinstance(value, (str, bytes)):
        value = json.loads(value)
    text = wire.dumps(value)  # validates
    if len(text) > BINARY_LIMIT:
        raise ValueError(f"JSON value of {len(text):,} characters is too large")
    return value


#: What the server accepts as a MIME type (runtimes.ValidMIME).
_VALID_MIME = re.compile(r"[A-Za-z0-9.+_-]+/[A-Za-z0-9.+_-]+")


def _normalize_bundle(data: dict, metadata: dict) -> tuple[dict, dict]:
    """Make a MIME bundle wire-ready: base64 binaries, valid JSON, capped text."""
    out: dict[str, Any] = {}
    dropped = []
    for mime, value in list(data.items()):
        if type(mime) is not str or len(mime) > 128 or not _VALID_MIME.fullmatch(mime):
            # The server treats a frame with a malformed MIME type as fatal.
            dropped.append(f"{current.safe_str(mime, 40)!r} (not a MIME type)")
            continue
        try:
            if mime in _BINARY_MIMES:
                if isinstance(value, (bytes, bytearray, memoryview)):
                    value = binascii.b2a_base64(bytes(value), newline=False).decode("ascii")
                elif isinstance(value, str):
                    value = "".join(value.split())  # already base64; drop newlines
                else:
                    raise TypeError(f"expected bytes, got {type(value).__name__}")
                if len(value) > BINARY_LIMIT:
                    raise ValueError(f"{len(value):,} bytes of base64 is too large")
            elif mime == "application/json" or mime.endswith("+json"):
                value = _json_value(value)
            else:
                if isinstance(value, (bytes, bytearray)):
                    value = bytes(value).decode("utf-8", "replace")
                elif type(value) is not str:
                    if not isinstance(value, str):
                        raise TypeError(f"expected str, got {type(value).__name__}")
                    value = str.__str__(value)
                if mime == "image/svg+xml":
                    if len(value) > BINARY_LIMIT:
                        raise ValueError(f"SVG of {len(value):,} characters is too large")
                else:
                    value = _cap_text(mime, value)
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # noqa: BLE001
            dropped.append(f"{mime} ({type(e).__name__}: {current.safe_str(e, 200)})")
            continue
        out[mime] = value
    if dropped:
        note = "[airlock: dropped " + ", ".join(dropped) + "]"
        out["text/plain"] = (out.get("text/plain", "") + "\n" + note).lstrip("\n")
    md: dict = {}
    if metadata:
        try:
            wire.dumps(metadata)
            md = dict(metadata)
        except KeyboardInterrupt:
            raise
        except BaseException:  # noqa: BLE001 - metadata is optional
            md = {}
    return out, md


def _wanted(mime: str, include: Optional[Iterable[str]], exclude: Optional[Iterable[str]]) -> bool:
    if include is not None and mime not in include:
        return False
    return not (exclude is not None and mime in exclude)


def format_display_data(obj: Any, include: Optional[Iterable[str]] = None,
                        exclude: Optional[Iterable[str]] = None) -> tuple[dict, dict]:
    """Return the (data, metadata) MIME bundle of obj, like IPython.

    Uses ``_repr_mimebundle_`` and the ``_repr_*_`` methods, renders
    matplotlib figures to PNG, and always includes text/plain (unless
    excluded).  Errors in representation methods are reported on stderr and
    only cost that format; KeyboardInterrupt propagates.
    """
    data: dict[str, Any] = {}
    md: dict[str, Any] = {}
    include = set(include) if include is not None else None
    exclude = set(exclude) if exclude is not None else None
    if _is_figure(obj):
        backend = mpl_backend()
        if backend is not None:
            fig_data, fig_md = backend.figure_mimebundle(obj)
            data.update(fig_data)
            md.update(fig_md)
    # Objects that answer every attribute (proxies, mocks) and classes (whose
    # _repr_*_ are unbound) only get text/plain, as in IPython.
    elif not isinstance(obj, type) and _method(obj, "_ipython_canary_method_should_not_exist_") is None:
        method = _method(obj, "_repr_mimebundle_")
        if method is not None:
            r = _call_repr(obj, "_repr_mimebundle_", method, include=include, exclude=exclude)
            if isinstance(r, tuple) and len(r) == 2:
                r, extra = r
                if isinstance(extra, dict):
                    md.update(extra)
            if isinstance(r, dict):
                data.update(r)
        for mime, name in _REPR_METHODS:
            if mime in data or not _wanted(mime, include, exclude):
                continue
            method = _method(obj, name)
            if method is None:
                continue
            r = _call_repr(obj, name, method)
            if isinstance(r, tuple) and len(r) == 2:
                r, extra = r
                if isinstance(extra, dict):
                    md[mime] = extra
            if r is not None:
                data[mime] = r
    if "text/plain" not in data:
        data["text/plain"] = _plain_text(obj)
    data = {k: v for k, v in data.items() if _wanted(k, include, exclude)}
    return _normalize_bundle(data, md)


def publish_display_data(data: dict, metadata: Optional[dict] = None, **_ignored: Any) -> None:
    """Send a raw MIME bundle as a ``display`` message of the running execution.

    Outside an execution (e.g. a thread still running after its cell ended)
    the bundle is dropped; outside a session its text/plain is printed.
    """
    if not isinstance(data, dict):
        raise TypeError("data must be a dict of MIME type to value")
    _publish(*_normalize_bundle(data, metadata or {}))


def _publish(data: dict, metadata: dict) -> None:
    """Publish an already normalized bundle."""
    session = current.session
    if session is None:
        if "text/plain" in data:
            print(data["text/plain"])
        return
    session.publish(data, metadata)


def display(*objs: Any, include: Optional[Iterable[str]] = None,
            exclude: Optional[Iterable[str]] = None, metadata: Optional[dict] = None,
            transient: Optional[dict] = None, display_id: Any = None, raw: bool = False,
            clear: bool = False, **kwargs: Any) -> Optional["DisplayHandle"]:
    """Display objects as rich output, like ``IPython.display.display``.

    With ``raw=True`` each object is already a MIME bundle (a dict).  With
    ``display_id`` a :class:`DisplayHandle` is returned; airlock cannot
    update outputs in place, so ``update`` displays again.
    """
    for obj in objs:
        if raw:
            publish_display_data(obj, metadata)
            continue
        data, md = format_display_data(obj, include=include, exclude=exclude)
        if metadata:
            md.update(metadata)
            data, md = _normalize_bundle(data, md)  # revalidates the merged metadata
        _publish(data, md)
    if display_id:
        return DisplayHandle(display_id if isinstance(display_id, str) else None)
    return None


def clear_output(wait: bool = False) -> None:
    """Accepted for compatibility; output already sent cannot be cleared."""


def update_display(obj: Any, *, display_id: Any = None, **kwargs: Any) -> None:
    """Display obj again (outputs cannot be updated in place)."""
    display(obj, **kwargs)


class DisplayHandle:
    """Returned by ``display(..., display_id=...)``."""

    _counter = 0

    def __init__(self, display_id: Optional[str] = None) -> None:
        if display_id is None:
            DisplayHandle._counter += 1
            display_id = f"airlock-display-{DisplayHandle._counter}"
        self.display_id = display_id

    def __repr__(self) -> str:
        return f"<DisplayHandle display_id={self.display_id}>"

    def display(self, obj: Any, **kwargs: Any) -> None:
        display(obj, **kwargs)

    def update(self, obj: Any, **kwargs: Any) -> None:
        display(obj, **kwargs)

    def clear(self, wait: bool = False) -> None:
        pass


def _display_for(mime: str) -> Callable[..., None]:
    def display_fn(*objs: Any, raw: bool = False, metadata: Optional[dict] = None) -> None:
        if raw:
            for obj in objs:
                publish_display_data({mime: obj}, {mime: metadata} if metadata else None)
        else:
            display(*objs, include=[mime, "text/plain"], metadata=metadata)
    display_fn.__name__ = display_fn.__qualname__ = "display_" + mime.split("/")[-1].split("+")[0]
    display_fn.__doc__ = f"Display the {mime} representation of objects (raw: the data itself)."
    return display_fn


display_html = _display_for("text/html")
display_markdown = _display_for("text/markdown")
display_svg = _display_for("image/svg+xml")
display_png = _display_for("image/png")
display_jpeg = _display_for("image/jpeg")
display_latex = _display_for("text/latex")
display_json = _display_for("application/json")
display_javascript = _display_for("application/javascript")
display_pretty = _display_for("text/plain")


def set_matplotlib_formats(*formats: str, **kwargs: Any) -> None:
    """Accepted for compatibility; figures are always PNG."""


def get_ipython() -> None:
    """There is no IPython shell in airlock (libraries use this to detect one)."""
    return None


# IPython.display-compatible classes ------------------------------------------

def _safe_exists(path: str) -> bool:
    try:
        return len(path) < 4096 and "\n" not in path and os.path.exists(path)
    except (OSError, ValueError):
        return False


class DisplayObject:
    """Base of the displayable objects (data inline, from a file or a URL).

    airlock has no network access, so URLs are never fetched; objects that
    only have a URL are shown by reference where the format allows.
    """

    _binary = False

    def __init__(self, data: Any = None, url: Optional[str] = None,
                 filename: Optional[str] = None, metadata: Optional[dict] = None) -> None:
        if isinstance(data, os.PathLike):
            data = os.fspath(data)
        if isinstance(data, str):
            if data.startswith(("http://", "https://")) and url is None:
                url, data = data, None
            elif filename is None and _safe_exists(data):
                filename, data = data, None
        self.data = data
        self.url = url
        self.filename = None if filename is None else os.fspath(filename)
        self.metadata = dict(metadata) if metadata else {}
        self.reload()

    def reload(self) -> None:
        """Re-read the data from the file, if there is one."""
        if self.filename is not None:
            if self._binary:
                with open(self.filename, "rb") as f:
                    self.data = f.read()
            else:
                with open(self.filename, encoding="utf-8") as f:
                    self.data = f.read()

    def _with_metadata(self, data: Any) -> Any:
        if data is None:
            return None
        return (data, dict(self.metadata)) if self.metadata else data

    def __repr__(self) -> str:
        return f"<IPython.core.display.{type(self).__name__} object>"


class TextDisplayObject(DisplayObject):
    """A display object whose data is text."""

    def reload(self) -> None:
        super().reload()
        if isinstance(self.data, (bytes, bytearray)):
            self.data = bytes(self.data).decode("utf-8", "replace")
        elif self.data is not None and not isinstance(self.data, str):
            raise TypeError(f"{type(self).__name__} expects text, got {type(self.data).__name__}")


class Pretty(TextDisplayObject):
    """Plain text shown as is."""

    def __repr__(self) -> str:
        return self.data if self.data is not None else ""


class HTML(TextDisplayObject):
    """HTML shown as text/html."""

    def _repr_html_(self) -> Any:
        if self.data is None and self.url:
            return f'<a href="{_html_escape(self.url)}">{_html_escape(self.url)}</a>'
        return self._with_metadata(self.data)

    def __html__(self) -> str:
        return self.data or ""


class Markdown(TextDisplayObject):
    """Markdown shown as text/markdown."""

    def _repr_markdown_(self) -> Any:
        return self._with_metadata(self.data)


class Math(TextDisplayObject):
    """A LaTeX math expression (without the surrounding $)."""

    def _repr_latex_(self) -> Any:
        if self.data is None:
            return None
        return self._with_metadata(r"$\displaystyle %s$" % self.data.strip("$"))


class Latex(TextDisplayObject):
    """LaTeX shown as text/latex."""

    def _repr_latex_(self) -> Any:
        return self._with_metadata(self.data)


class Javascript(TextDisplayObject):
    """JavaScript sent as application/javascript; airlock never runs it."""

    def __init__(self, data: Any = None, url: Optional[str] = None,
                 filename: Optional[str] = None, lib: Any = None, css: Any = None) -> None:
        super().__init__(data=data, url=url, filename=filename)

    def _repr_javascript_(self) -> Any:
        return self.data


class SVG(DisplayObject):
    """An SVG image (the <svg> element of the data is kept)."""

    def reload(self) -> None:
        super().reload()
        data = self.data
        if isinstance(data, (bytes, bytearray)):
            data = bytes(data).decode("utf-8", "replace")
        if isinstance(data, str):
            start = data.find("<svg")
            if start > 0:
                data = data[start:]
        self.data = data

    def _repr_svg_(self) -> Any:
        return self._with_metadata(self.data)


class JSON(DisplayObject):
    """JSON data (a dict or list, or JSON text) shown as application/json."""

    def __init__(self, data: Any = None, url: Optional[str] = None, filename: Optional[str] = None,
                 expanded: bool = False, metadata: Optional[dict] = None, root: str = "root",
                 **kwargs: Any) -> None:
        self.expanded = expanded
        self.root = root
        md = dict(metadata or {})
        md.update(kwargs)
        if isinstance(data, str) and not data.lstrip().startswith(("{", "[")):
            super().__init__(data=data, url=url, filename=filename, metadata=md)
        else:
            super().__init__(data=None, url=url, filename=filename, metadata=md)
            if filename is None:
                self.data = data
        if isinstance(self.data, (str, bytes)):
            self.data = json.loads(self.data)
        if self.data is not None and not isinstance(self.data, (dict, list)):
            raise TypeError(f"JSON expects a dict or a list, got {type(self.data).__name__}")

    def _repr_json_(self) -> Any:
        md = {"expanded": self.expanded, "root": self.root}
        md.update(self.metadata)
        return self.data, md


def _image_format(data: bytes) -> Optional[str]:
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return "png"
    if data[:3] == b"\xff\xd8\xff":
        return "jpeg"
    return None


class Image(DisplayObject):
    """A PNG or JPEG image from bytes, a file name or a URL."""

    _binary = True
    _FORMATS = {"png": "png", "jpg": "jpeg", "jpeg": "jpeg", "jpe": "jpeg"}

    def __init__(self, data: Any = None, url: Optional[str] = None, filename: Optional[str] = None,
                 format: Optional[str] = None, embed: Optional[bool] = None,
                 width: Any = None, height: Any = None, retina: bool = False,
                 unconfined: bool = False, metadata: Optional[dict] = None,
                 alt: Optional[str] = None) -> None:
        if isinstance(data, os.PathLike):
            data = os.fspath(data)
        if filename is None and isinstance(data, str) and not data.startswith(("http://", "https://", "data:")):
            filename, data = data, None
        if url is None and isinstance(data, str):
            url, data = data, None
        self.width, self.height, self.alt = width, height, alt
        self.retina, self.unconfined = retina, unconfined
        self.embed = embed if embed is not None else (url is None)
        if self.embed and url is not None and data is None and filename is None:
            raise ValueError("no network access: cannot embed an image from a URL (use embed=False)")
        name = filename or url or ""
        if format is None and "." in name:
            format = self._FORMATS.get(name.rsplit(".", 1)[-1].lower())
        super().__init__(data=data, url=url, filename=filename, metadata=metadata)
        if isinstance(self.data, (bytearray, memoryview)):
            self.data = bytes(self.data)
        if self.embed:
            if not isinstance(self.data, bytes):
                raise TypeError("Image data must be bytes (or pass filename=...)")
            detected = _image_format(self.data)
            format = self._FORMATS.get((format or "").lower(), detected)
            if format not in ("png", "jpeg"):
                raise ValueError("only PNG and JPEG images are supported")
        self.format = format

    def _md(self) -> dict:
        md = dict(self.metadata)
        if self.width:
            md["width"] = self.width
        if self.height:
            md["height"] = self.height
        if self.unconfined:
            md["unconfined"] = True
        if self.alt:
            md["alt"] = self.alt
        return md

    def _image(self, fmt: str) -> Any:
        if not self.embed or self.format != fmt:
            return None
        md = self._md()
        return (self.data, md) if md else self.data

    def _repr_png_(self) -> Any:
        return self._image("png")

    def _repr_jpeg_(self) -> Any:
        return self._image("jpeg")

    def _repr_html_(self) -> Optional[str]:
        if self.embed or not self.url:
            return None
        attrs = f' width="{self.width}"' if self.width else ""
        attrs += f' height="{self.height}"' if self.height else ""
        attrs += f' alt="{_html_escape(self.alt)}"' if self.alt else ""
        return f'<img src="{_html_escape(self.url)}"{attrs}/>'


class Code(TextDisplayObject):
    """Source code: text/plain is the code, text/html a <pre> block."""

    def __init__(self, data: Any = None, url: Optional[str] = None,
                 filename: Optional[str] = None, language: Optional[str] = None) -> None:
        self.language = language
        super().__init__(data=data, url=url, filename=filename)

    def __repr__(self) -> str:
        return self.data or ""

    def _repr_html_(self) -> str:
        return f"<pre><code>{_html_escape(self.data or '')}</code></pre>"

    def _repr_markdown_(self) -> str:
        return f"```{self.language or ''}\n{self.data or ''}\n```"


class FileLink:
    """A link to a local file."""

    def __init__(self, path: str, url_prefix: str = "", result_html_prefix: str = "",
                 result_html_suffix: str = "<br>") -> None:
        self.path = os.fspath(path)
        self.url_prefix = url_prefix
        self.result_html_prefix = result_html_prefix
        self.result_html_suffix = result_html_suffix

    def __repr__(self) -> str:
        return self.path

    def _repr_html_(self) -> str:
        href = _html_escape(self.url_prefix + self.path)
        return (f"{self.result_html_prefix}<a href='{href}' target='_blank'>"
                f"{_html_escape(self.path)}</a>{self.result_html_suffix}")


class IFrame:
    """An <iframe> (text/html)."""

    def __init__(self, src: str, width: Any, height: Any, extras: Optional[Iterable[str]] = None,
                 **kwargs: Any) -> None:
        self.src, self.width, self.height = src, width, height
        self.extras = list(extras or [])
        self.params = kwargs

    def _repr_html_(self) -> str:
        src = self.src
        if self.params:
            from urllib.parse import urlencode
            src += "?" + urlencode(self.params)
        extras = "".join(" " + e for e in self.extras)
        return (f'<iframe width="{self.width}" height="{self.height}" src="{_html_escape(src)}" '
                f'frameborder="0" allowfullscreen{extras}></iframe>')


def _html_escape(s: Any) -> str:
    import html
    return html.escape(str(s))


_DISPLAY_EXPORTS = (
    "display", "publish_display_data", "clear_output", "update_display", "DisplayHandle",
    "DisplayObject", "TextDisplayObject", "Pretty", "HTML", "Markdown", "Math", "Latex",
    "Javascript", "SVG", "JSON", "Image", "Code", "FileLink", "IFrame", "display_html",
    "display_markdown", "display_svg", "display_png", "display_jpeg", "display_latex",
    "display_json", "display_javascript", "display_pretty", "set_matplotlib_formats",
    "format_display_data",
)


def install_ipython_shim() -> None:
    """Provide ``IPython``, ``IPython.display`` (and ``IPython.core.display``).

    Only when the real IPython is not importable; when it is, route its
    display functions to airlock's instead (``route_real_ipython``).  ``get_ipython()`` returns
    None, so libraries that look for an IPython shell (matplotlib, pandas,
    tqdm) correctly find none.
    """
    if "IPython" in sys.modules and sys.modules["IPython"] not in SHIM_MODULES.values():
        route_real_ipython()
        return
    try:
        import importlib.util
        if importlib.util.find_spec("IPython") is not None:
            route_real_ipython()
            return
    except (ImportError, ValueError):
        pass
    from importlib.machinery import ModuleSpec

    def module(name: str, package: bool, doc: str) -> types.ModuleType:
        m = types.ModuleType(name, doc)
        m.__spec__ = ModuleSpec(name, None, is_package=package)
        if package:
            m.__path__ = []
        return m

    doc = "airlock's stand-in for IPython: rich display without an IPython shell."
    ipython = module("IPython", True, doc)
    core = module("IPython.core", True, doc)
    disp = module("IPython.display", False, "IPython.display-compatible rich display for airlock.")
    getipython = module("IPython.core.getipython", False, doc)
    g = globals()
    for name in _DISPLAY_EXPORTS:
        setattr(disp, name, g[name])
    disp.__all__ = list(_DISPLAY_EXPORTS)
    ipython.__version__ = "0.0.0+airlock"
    ipython.get_ipython = getipython.get_ipython = get_ipython
    ipython.display = core.display = disp
    ipython.core = core
    core.getipython = getipython
    shim = {
        "IPython": ipython, "IPython.core": core, "IPython.display": disp,
        "IPython.core.display": disp, "IPython.core.getipython": getipython,
    }
    sys.modules.update(shim)
    SHIM_MODULES.update(shim)


def reconsider_ipython() -> None:
    """Install the stand-in or route the real IPython again, now that
    sys.path has grown: the stand-in's modules, installed when the real
    IPython could not be found, are taken away first."""
    if not SHIM_MODULES or sys.modules.get("IPython") is not SHIM_MODULES.get("IPython"):
        return
    for name, mod in SHIM_MODULES.items():
        if sys.modules.get(name) is mod:
            del sys.modules[name]
    SHIM_MODULES.clear()
    install_ipython_shim()


# The real IPython -------------------------------------------------------------
#
# Outside an IPython shell, IPython's own display() only prints repr()
# ("<IPython.core.display.HTML object>"), and publish_display_data has no
# publisher.  Where IPython is installed (Debian's python3-ipython, as data
# science images have it), airlock routes them to its own when IPython's
# modules load, so that `from IPython.display import display, HTML` gives
# rich output either way.  No shell is made: get_ipython() stays None, and
# libraries that look for one find none, as with the stand-in.

#: IPython's modules whose display functions are airlock's once loaded
#: (display_functions since IPython 7.23, core.display before it).
_IPYTHON_DISPLAY_MODULES = ("IPython.core.display_functions", "IPython.core.display")
_IPYTHON_ROUTED = ("display", "publish_display_data", "update_display", "clear_output")


def _route_ipython(module: types.ModuleType) -> None:
    """Make module's display functions airlock's (see above)."""
    for name in _IPYTHON_ROUTED:
        if hasattr(module, name):
            setattr(module, name, globals()[name])


class _RoutingLoader:
    """Runs a module's own loader, then routes its display functions."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: Any) -> Any:
        create = getattr(self.loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: types.ModuleType) -> None:
        self.loader.exec_module(module)
        _route_ipython(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


class _IPythonFinder:
    """A meta path finder that only wraps the loader of IPython's display
    modules; every other import goes on as if it were not there."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in _IPYTHON_DISPLAY_MODULES:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _RoutingLoader(spec.loader)
                return spec
        return None


_ipython_finder = _IPythonFinder()


def route_real_ipython() -> None:
    """Route the real IPython's display functions to airlock's: those of
    its modules already loaded now, the others as they load."""
    for name in _IPYTHON_DISPLAY_MODULES:
        mod = sys.modules.get(name)
        if mod is not None:
            _route_ipython(mod)
    if _ipython_finder not in sys.meta_path:
        sys.meta_path.insert(0, _ipython_finder)


def routed_functions() -> dict[tuple[types.ModuleType, str], Any]:
    """The display functions of IPython's modules loaded now, which
    routing replaces: {(module, name): function}."""
    out = {}
    for name in _IPYTHON_DISPLAY_MODULES:
        mod = sys.modules.get(name)
        for fn in _IPYTHON_ROUTED if mod is not None else ():
            if hasattr(mod, fn):
                out[(mod, fn)] = getattr(mod, fn)
    return out


def unroute_real_ipython() -> None:
    """Stop routing IPython modules loaded from now on (a program run is a
    plain interpreter, whose IPython prints as it does outside a shell)."""
    try:
        sys.meta_path.remove(_ipython_finder)
    except ValueError:
        pass


#: The modules install_ipython_shim added, so a program run can take them away.
SHIM_MODULES: dict[str, types.ModuleType] = {}

