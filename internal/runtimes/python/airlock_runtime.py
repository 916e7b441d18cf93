"""airlock's Python session runtime: the persistent interpreter of a session.

The server starts it inside the sandbox as::

    python3 -I -B /opt/airlock/python/airlock_runtime.py

or, with the zygote, imports this module in a template interpreter that has
already imported numpy/pandas/matplotlib, forks, and calls :func:`serve` in
the child.  The contract is docs/runtime-protocol.md:

* fd 3 is the control socket: frames of a 4-byte big-endian length followed
  by UTF-8 JSON.  The server sends ``configure``, ``execute`` and
  ``shutdown``; the runtime sends ``hello`` once, then per execution any
  number of ``display``, at most one ``result``, at most one ``error`` and
  exactly one ``done``, last.  A ``run`` (program mode) runs a file as
  ``python3 FILE`` would instead, answers one ``done`` and exits.
* fds 1 and 2 are the execution's stdout and stderr; user code (and every
  process it starts) writes there directly and the runtime flushes Python's
  buffers before every message it sends.
* SIGINT during an execution becomes ``KeyboardInterrupt``; while idle it is
  ignored.

Layout of this module:

* framing and JSON (``_Channel``, ``_dumps``, ``_loads``): the wire format,
  built on C-level primitives only so that user code cannot break it;
* rich display (``format_display_data``, ``display``,
  ``publish_display_data`` and IPython.display-compatible classes such as
  ``HTML`` or ``Image``), also installed as the modules ``IPython`` and
  ``IPython.display`` when the real IPython is not importable;
* IPython-style conveniences (``transform_cell`` turns ``!cmd``, ``%magic``
  and ``%%cell magic`` lines into calls on the ``__airlock__`` builtin,
  implemented by ``_Magics``);
* tracebacks that hide the runtime's frames and show cells as
  ``Cell In[N], line L``;
* ``_Session``: per-session state and the protocol loop, created by
  :func:`serve`.

Importing the module has no side effects: everything per session happens in
:func:`serve`.  The module keeps one piece of global state, ``_session``,
which the display functions and the matplotlib backend (airlock_mpl) use to
reach the running session.
"""

from __future__ import annotations

import __future__
import _signal
import _thread
import ast
import binascii
import builtins
import io
import json.decoder
import json.encoder
import linecache
import os
import re
import sys
import traceback
import types
from typing import Any, Callable, Iterable, Optional

# The runtime resolves builtins through a private snapshot taken at import
# time, so user code that monkeypatches builtins (print, len, isinstance,
# repr, open, ...) cannot break the protocol loop.  Functions capture their
# module's __builtins__ when they are defined, so this must come before any
# def or class below.  User code still sees (and may patch) the real
# builtins module.
globals()["__builtins__"] = dict(vars(builtins))

__all__ = [
    "serve", "main", "display", "publish_display_data", "format_display_data",
    "clear_output", "update_display", "DisplayHandle", "DisplayObject",
    "TextDisplayObject", "Pretty", "HTML", "Markdown", "Math", "Latex", "SVG",
    "JSON", "Javascript", "Image", "Code", "FileLink", "IFrame", "UsageError",
    "transform_cell",
]

LANGUAGE = "python"
#: Largest frame either side may send (protocol limit).
MAX_FRAME = 64 << 20
#: Cap for a single textual representation (text/plain, text/html, ...).
TEXT_LIMIT = 4 << 20
#: Cap for a single base64 image or other non-truncatable value.
BINARY_LIMIT = 32 << 20

_CO_COROUTINE = 0x0080  # inspect.CO_COROUTINE, without importing inspect
_TOP_LEVEL_AWAIT = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
_FUTURE_MASK = 0
for _name in __future__.all_feature_names:
    _FUTURE_MASK |= getattr(__future__, _name).compiler_flag
del _name

_NO_VALUE = object()  # "the cell has no value to show" (None is a value)
_BINARY_MIMES = frozenset({"image/png", "image/jpeg", "image/gif", "application/pdf"})
_PRETTY_TYPES = (list, tuple, dict, set, frozenset)

#: The one piece of module state: the session serve() is running, if any.
_session: Optional["_Session"] = None


# ---------------------------------------------------------------------------
# JSON and framing
# ---------------------------------------------------------------------------

class ProtocolError(Exception):
    """A malformed frame or message from the server (fatal: exit 2)."""


_json_str = json.encoder.encode_basestring  # C implementation when available
_json_scan = json.decoder.JSONDecoder().scan_once  # C scanner
_JSON_WS = re.compile(r"[ \t\n\r]*")
_INF = float("inf")


def _loads(text: str) -> Any:
    """Parse one JSON document (C scanner only; raises ProtocolError)."""
    start = _JSON_WS.match(text, 0).end()
    try:
        obj, end = _json_scan(text, start)
    except (StopIteration, ValueError, RecursionError) as e:
        raise ProtocolError(f"invalid JSON: {e!r}") from None
    if _JSON_WS.match(text, end).end() != len(text):
        raise ProtocolError("trailing data after the JSON object")
    return obj


def _dumps(obj: Any) -> str:
    """Serialize plain JSON data (dict/list/tuple/str/int/float/bool/None).

    Strict like ``json.dumps(allow_nan=False)``; raises ValueError or
    TypeError for anything else.  Non-ASCII text stays as is; lone
    surrogates are escaped by the caller when encoding to UTF-8.
    """
    out: list[str] = []
    _dump(obj, out.append, 0)
    return "".join(out)


def _dump(o: Any, w: Callable[[str], Any], depth: int) -> None:
    if depth > 500:
        raise ValueError("JSON value nested too deeply")
    t = type(o)
    if t is str:
        w(_json_str(o))
    elif o is None:
        w("null")
    elif o is True:
        w("true")
    elif o is False:
        w("false")
    elif t is int:
        w(int.__repr__(o))
    elif t is float:
        if o != o or o == _INF or o == -_INF:
            raise ValueError("NaN and infinity are not valid JSON")
        w(float.__repr__(o))
    elif isinstance(o, dict):
        w("{")
        first = True
        for k, v in dict.items(o):
            if type(k) is not str:
                if isinstance(k, str):
                    k = str.__str__(k)
                elif k is None or isinstance(k, (bool, int, float)):
                    k = _dumps(k)
                else:
                    raise TypeError(f"JSON keys must be str, not {type(k).__name__}")
            if not first:
                w(",")
            first = False
            w(_json_str(k))
            w(":")
            _dump(v, w, depth + 1)
        w("}")
    elif isinstance(o, (list, tuple)):
        w("[")
        for i, v in enumerate(o):
            if i:
                w(",")
            _dump(v, w, depth + 1)
        w("]")
    elif isinstance(o, str):
        w(_json_str(str.__str__(o)))
    elif isinstance(o, int):
        w(int.__repr__(o))
    elif isinstance(o, float):
        _dump(float(o), w, depth)
    else:
        raise TypeError(f"{type(o).__name__} is not JSON serializable")


class _Channel:
    """The framed control socket (fd 3), read by the main thread only.

    Writes are serialized by a lock so that user threads may display while
    the main thread runs.
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buf = bytearray()
        self.lock = _thread.allocate_lock()

    def _take(self, n: int, eof_ok: bool = False) -> Optional[bytes]:
        buf = self._buf
        while len(buf) < n:
            chunk = os.read(self.fd, max(n - len(buf), 65536))
            if not chunk:
                if eof_ok and not buf:
                    return None
                raise ProtocolError("end of file inside a frame")
            buf += chunk
        data = bytes(buf[:n])
        del buf[:n]
        return data

    def recv(self) -> Optional[dict]:
        """Return the next message, or None at end of file."""
        header = self._take(4, eof_ok=True)
        if header is None:
            return None
        n = int.from_bytes(header, "big")
        if n > MAX_FRAME:
            raise ProtocolError(f"frame of {n} bytes exceeds {MAX_FRAME}")
        body = self._take(n)
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ProtocolError(f"frame is not UTF-8: {e}") from None
        msg = _loads(text)
        if type(msg) is not dict or type(msg.get("type")) is not str:
            raise ProtocolError("a message must be a JSON object with a string 'type'")
        return msg

    def write_frame(self, payload: bytes) -> None:
        """Write one frame; the caller holds self.lock."""
        view = memoryview(len(payload).to_bytes(4, "big") + payload)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]


def _encode(msg: dict) -> bytes:
    # Lone surrogates (which UTF-8 cannot carry) become \\udXXX escapes; they
    # can only occur inside JSON strings, where that is the JSON escape.
    return _dumps(msg).encode("utf-8", "backslashreplace")


# ---------------------------------------------------------------------------
# Rich display: MIME bundles
# ---------------------------------------------------------------------------

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


def _warn(message: str) -> None:
    """Best-effort note on the user's stderr (never raises)."""
    try:
        print(message, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - stderr may be anything by now
        pass


def _type_name(obj: Any) -> str:
    try:
        t = type(obj)
        return f"{t.__module__}.{t.__qualname__}"
    except BaseException:  # noqa: BLE001
        return "object"


def _fallback_repr(obj: Any) -> str:
    try:
        return object.__repr__(obj)
    except BaseException:  # noqa: BLE001
        return "<unrepresentable object>"


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
        _warn(f"airlock: {name}() of {_type_name(obj)} raised "
              f"{type(e).__name__}: {_safe_str(e)}")
        return None


def _safe_str(obj: Any, limit: int = 2000) -> str:
    try:
        s = str(obj)
        if type(s) is not str:
            s = str.__str__(s)
    except KeyboardInterrupt:
        raise
    except BaseException:  # noqa: BLE001
        s = f"<{type(obj).__name__} str() failed>"
    if len(s) > limit:
        s = s[:limit] + "..."
    return s


def _cap_text(mime: str, text: str) -> str:
    if len(text) <= TEXT_LIMIT:
        return text
    note = f"[output truncated: {len(text):,} characters in total, showing the first {TEXT_LIMIT:,}]"
    if mime == "text/html":
        return text[:TEXT_LIMIT] + f"\n<p><em>{note}</em></p>"
    return text[:TEXT_LIMIT] + "\n... " + note


def _plain_text(obj: Any) -> str:
    """text/plain for obj: repr, pretty-printed for long builtin containers."""
    try:
        text = repr(obj)
        if type(text) is not str:
            text = str.__str__(text)
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001 - a broken __repr__
        _warn(f"airlock: repr() of {_type_name(obj)} raised {type(e).__name__}: {_safe_str(e)}")
        return _fallback_repr(obj)
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


def _mpl_backend() -> Any:
    """The airlock_mpl module (imported on first use), or None."""
    try:
        import airlock_mpl
        return airlock_mpl
    except ImportError:
        return None


def _json_value(value: Any) -> Any:
    if isinstance(value, (str, bytes)):
        value = json.loads(value)
    text = _dumps(value)  # validates
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
            dropped.append(f"{_safe_str(mime, 40)!r} (not a MIME type)")
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
            dropped.append(f"{mime} ({type(e).__name__}: {_safe_str(e, 200)})")
            continue
        out[mime] = value
    if dropped:
        note = "[airlock: dropped " + ", ".join(dropped) + "]"
        out["text/plain"] = (out.get("text/plain", "") + "\n" + note).lstrip("\n")
    md: dict = {}
    if metadata:
        try:
            _dumps(metadata)
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
        backend = _mpl_backend()
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
    session = _session
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


def _install_ipython_shim() -> None:
    """Provide ``IPython``, ``IPython.display`` (and ``IPython.core.display``).

    Only when the real IPython is not importable.  ``get_ipython()`` returns
    None, so libraries that look for an IPython shell (matplotlib, pandas,
    tqdm) correctly find none.
    """
    if "IPython" in sys.modules:
        return
    try:
        import importlib.util
        if importlib.util.find_spec("IPython") is not None:
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
    _SHIM_MODULES.update(shim)


#: The modules _install_ipython_shim added, so a program run can take them away.
_SHIM_MODULES: dict[str, types.ModuleType] = {}


# ---------------------------------------------------------------------------
# IPython-style syntax: !shell, %magic, %%cell magic
# ---------------------------------------------------------------------------

class UsageError(Exception):
    """Wrong use of a magic command (named like IPython's)."""


# Cheap test for cells that may contain magic syntax (most cells don't).
_MAGIC_HINT = re.compile(
    r"^[ \t]*(?:[!%]|(?:cd|pip3?|conda)[ \t]|[\w.,\[\] \t]+?=[ \t]*[!%])", re.M)
_ASSIGN_MAGIC = re.compile(r"(?P<target>[A-Za-z_][\w.,\[\]' \t]*?)[ \t]*=[ \t]*(?P<kind>!!?|%)(?P<rest>.*)$", re.S)
_LINE_MAGIC = re.compile(r"%(?P<name>\w+)[ \t]*(?P<arg>.*)$", re.S)
_AUTOMAGIC = re.compile(
    r"(?P<name>cd)(?:[ \t]+(?P<arg>\.{1,2}(?:/[^\n]*)?|/[^\s/=][^\n]*|-|[\w~$\"'][^\n]*))?[ \t]*$"
    r"|(?P<pname>pip3?|conda)[ \t]+(?P<parg>(?:install|uninstall|list|freeze|show|download)\b[^\n]*)$")


class _LineScanner:
    """Tracks, line by line, whether the next line starts a new statement.

    A tiny tokenizer: strings (including triple-quoted ones), comments,
    brackets and backslash continuations.  Magic syntax is only recognized
    at the start of a statement, never inside a string or an expression.
    """

    def __init__(self) -> None:
        self.depth = 0
        self.quote: Optional[str] = None
        self.continued = False

    @property
    def at_statement_start(self) -> bool:
        return self.depth == 0 and self.quote is None and not self.continued

    def feed(self, line: str) -> None:
        self.continued = False
        i, n = 0, len(line)
        while i < n:
            c = line[i]
            if self.quote is not None:
                if c == "\\":
                    i += 2
                elif line.startswith(self.quote, i):
                    i += len(self.quote)
                    self.quote = None
                else:
                    i += 1
                continue
            if c == "#":
                break
            if c in "'\"":
                self.quote = line[i:i + 3] if line[i:i + 3] in ('"""', "'''") else c
                i += len(self.quote)
                continue
            if c in "([{":
                self.depth += 1
            elif c in ")]}":
                self.depth = max(0, self.depth - 1)
            elif c == "\\" and not line[i + 1:].strip():
                self.continued = True
                break
            i += 1
        if self.quote in ("'", '"'):
            # A one-quote string only goes on after an escaped newline.
            if not line.rstrip("\r\n").endswith("\\") or line == line.rstrip("\r\n"):
                self.quote = None


def _magic_call(indent: str, body: str) -> Optional[str]:
    """Python for one magic line (without indentation), or None."""
    if body.startswith("!!"):
        return f"{indent}__airlock__.getoutput({body[2:].strip()!r})"
    if body.startswith("!"):
        return f"{indent}__airlock__.system({body[1:].strip()!r})"
    if body.startswith("%%"):
        return None  # cell magics only on the first line
    m = _LINE_MAGIC.match(body)
    if m:
        return f"{indent}__airlock__.line_magic({m['name']!r}, {m['arg'].strip()!r})"
    m = _ASSIGN_MAGIC.match(body)
    if m:
        rest = m["rest"].strip()
        if m["kind"] == "%":
            lm = _LINE_MAGIC.match("%" + rest)
            if not lm:
                return None
            call = f"__airlock__.line_magic({lm['name']!r}, {lm['arg'].strip()!r})"
        else:
            call = f"__airlock__.getoutput({rest!r})"
        return f"{indent}{m['target'].strip()} = {call}"
    m = _AUTOMAGIC.match(body)
    if m:
        if m["name"]:
            return f"{indent}__airlock__.line_magic('cd', {(m['arg'] or '').strip()!r})"
        return f"{indent}__airlock__.line_magic('pip', {m['parg'].strip()!r})"
    return None


def transform_cell(code: str) -> tuple[str, set[int]]:
    """Turn IPython-style syntax into Python; return (source, magic line numbers).

    * ``!cmd`` runs cmd through the shell; ``!!cmd`` and ``x = !cmd`` return
      its output as a list of lines; ``{expr}`` and ``$name`` in cmd are
      expanded from the namespace;
    * ``%name args`` (and ``x = %name args``) call a line magic;
    * a first line ``%%name args`` makes the whole cell a cell magic;
    * ``cd DIR`` and ``pip install ...`` work without the ``%``.

    Line numbers are preserved, so tracebacks point at the original lines.
    """
    lines = code.splitlines(keepends=True)
    first = 0
    while first < len(lines) and not lines[first].strip():
        first += 1
    if first < len(lines) and lines[first].startswith("%%"):
        head = lines[first].strip()[2:]
        name, _, arg = head.partition(" ")
        if re.fullmatch(r"\w+", name):
            body = "".join(lines[first + 1:])
            call = f"__airlock__.cell_magic({name!r}, {arg.strip()!r}, {body!r}, {first + 2})\n"
            return "\n" * first + call, {first + 1}
    out = []
    magic: set[int] = set()
    scanner = _LineScanner()
    for lineno, line in enumerate(lines, 1):
        if scanner.at_statement_start:
            stripped = line.lstrip(" \t")
            content = stripped.rstrip("\r\n")
            if content and (content[0] in "!%" or _MAGIC_HINT.match(line)):
                call = _magic_call(line[:len(line) - len(stripped)], content)
                if call is not None:
                    out.append(call + line[len(line.rstrip("\r\n")):])
                    magic.add(lineno)
                    continue
        scanner.feed(line)
        out.append(line)
    return ("".join(out), magic) if magic else (code, magic)


_IDENT = re.compile(r"[A-Za-z_]\w*")


def _expand(cmd: str, frame: types.FrameType) -> str:
    """Expand ``{expr}`` and ``$name`` in a shell command, like IPython.

    ``{{``/``}}``/``$$`` are literal braces and dollar signs; ``$name`` of
    an undefined name is left for the shell.  If any ``{expr}`` fails, the
    command is used unchanged (so ``awk '{print $1}'`` works).
    """
    if "{" not in cmd and "$" not in cmd:
        return cmd
    g, loc = frame.f_globals, frame.f_locals
    out: list[str] = []
    i, n = 0, len(cmd)
    try:
        while i < n:
            c = cmd[i]
            if c == "{":
                if cmd.startswith("{{", i):
                    out.append("{")
                    i += 2
                    continue
                depth, j = 0, i
                while j < n:
                    if cmd[j] == "{":
                        depth += 1
                    elif cmd[j] == "}":
                        depth -= 1
                        if depth == 0:
                            break
                    j += 1
                if j >= n:
                    return cmd
                out.append(str(eval(cmd[i + 1:j], g, loc)))
                i = j + 1
            elif c == "}" and cmd.startswith("}}", i):
                out.append("}")
                i += 2
            elif c == "$":
                if cmd.startswith("$$", i):
                    out.append("$")
                    i += 2
                    continue
                m = _IDENT.match(cmd, i + 1)
                if m and (m.group() in loc or m.group() in g):
                    name = m.group()
                    out.append(str(loc[name] if name in loc else g[name]))
                    i = m.end()
                else:
                    out.append("$")
                    i += 1
            else:
                out.append(c)
                i += 1
    except KeyboardInterrupt:
        raise
    except Exception:  # noqa: BLE001 - IPython semantics: leave cmd unchanged
        return cmd
    return "".join(out)


class SList(list):
    """Output lines of ``!!cmd`` / ``x = !cmd`` (a list with IPython's helpers)."""

    @property
    def s(self) -> str:
        return " ".join(self)

    @property
    def n(self) -> str:
        return "\n".join(self)

    @property
    def l(self) -> list:  # noqa: E743 - IPython's name
        return list(self)

    spstr = s
    nlstr = n


def _format_time(seconds: float, precision: int = 3) -> str:
    """Like IPython's _format_time: '1.23 ms', '4.5 µs', '1min 3s'."""
    if seconds >= 60.0:
        parts, value = [], seconds
        for suffix, length in (("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
            amount = int(value // length)
            if amount:
                value -= amount * length
                parts.append(f"{amount}{suffix}")
        return " ".join(parts)
    units, scaling = ["s", "ms", "\u00b5s", "ns"], [1, 1e3, 1e6, 1e9]
    if seconds > 0.0:
        import math
        order = min(-int(math.floor(math.log10(seconds)) // 3), 3)
    else:
        order = 3
    return "%.*g %s" % (precision, seconds * scaling[order], units[order])


def _unquote(s: str) -> str:
    s = s.strip()
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "'\"":
        s = s[1:-1]
    return s


def _shell() -> str:
    sh = os.environ.get("SHELL", "")
    if sh and os.path.isabs(sh) and os.access(sh, os.X_OK):
        return sh
    return "/bin/bash" if os.access("/bin/bash", os.X_OK) else "/bin/sh"


_PIP_NOTICE = """\
airlock: packages cannot be installed here: the sandbox has no network access (PyPI is unreachable).
airlock: Python packages come from Debian (the python3-* packages of the sandbox image); the usual
airlock: scientific stack (numpy, pandas, matplotlib, scikit-learn, scipy, ...) is preinstalled.
airlock: run `%pip list` to see every installed package."""

_PIP_VALUE_OPTIONS = frozenset({
    "-r", "--requirement", "-c", "--constraint", "-i", "--index-url", "--extra-index-url",
    "-f", "--find-links", "-t", "--target", "--prefix", "--root", "--src", "--python",
    "--platform", "--python-version", "--implementation", "--abi", "--progress-bar",
    "--cache-dir", "--log", "--proxy", "--retries", "--timeout", "--exists-action",
    "--trusted-host", "--cert", "--client-cert", "--report", "-e", "--editable",
})


def _installed_version(name: str) -> Optional[str]:
    """Installed version of distribution (or importable module) name, or None."""
    import importlib.metadata
    import importlib.util
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        if importlib.util.find_spec(name.replace("-", "_")) is not None:
            return "importable"
    except (ImportError, ValueError):
        pass
    return None


class _Magics:
    """The ``__airlock__`` builtin: what transformed magic lines call."""

    def __init__(self, session: "_Session") -> None:
        self.session = session
        self.oldpwd: Optional[str] = None

    # -- entry points called by transformed code --

    def system(self, cmd: str) -> None:
        """``!cmd``: run through the shell; output goes straight to fds 1/2."""
        frame = sys._getframe(1)
        cmd = _expand(cmd, frame)
        if self._pip_shell(cmd):
            return
        self.system_in(frame, cmd, expand=False)

    def getoutput(self, cmd: str) -> SList:
        """``!!cmd`` / ``x = !cmd``: run through the shell, return output lines."""
        frame = sys._getframe(1)
        cmd = _expand(cmd, frame)
        return self._output(frame, cmd)

    @staticmethod
    def _output(frame: types.FrameType, cmd: str) -> SList:
        import subprocess
        _flush_stdio()
        try:
            proc = subprocess.run(cmd, shell=True, executable=_shell(),
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        except KeyboardInterrupt:
            raise KeyboardInterrupt from None
        frame.f_globals["_exit_code"] = proc.returncode
        return SList(proc.stdout.decode("utf-8", "replace").splitlines())

    def line_magic(self, name: str, arg: str) -> Any:
        frame = sys._getframe(1)
        name = self._LINE_ALIASES.get(name, name)
        if name in self._SHELL_ALIASES:
            return self.system_in(frame, f"{self._SHELL_ALIASES[name]} {arg}".strip())
        method = getattr(self, "lmagic_" + name, None)
        if method is None:
            hint = ("" if ("cmagic_" + name) not in dir(self)
                    else f" (`%%{name}` is a cell magic: put it on the first line of the cell)")
            raise UsageError(f"Line magic function `%{name}` not found{hint}. "
                             f"Available: {self._available('lmagic_', '%')}.")
        return method(arg, frame)

    def cell_magic(self, name: str, line: str, body: str, body_lineno: int) -> Any:
        frame = sys._getframe(1)
        name = self._CELL_ALIASES.get(name, name)
        method = getattr(self, "cmagic_" + name, None)
        if method is None:
            raise UsageError(f"Cell magic `%%{name}` not found. "
                             f"Available: {self._available('cmagic_', '%%')}.")
        return method(line, body, body_lineno, frame)

    # -- helpers --

    _LINE_ALIASES = {"set_env": "env", "sx": "getoutput_", "system": "system_", "conda": "pip",
                     "mamba": "pip", "reload_ext": "load_ext", "unload_ext": "load_ext",
                     "aimport": "autoreload"}
    _CELL_ALIASES = {"file": "writefile", "HTML": "html", "md": "markdown", "js": "javascript"}
    _SHELL_ALIASES = {"ls": "ls", "ll": "ls -F -l", "cat": "cat", "cp": "cp", "mv": "mv",
                      "rm": "rm", "mkdir": "mkdir", "rmdir": "rmdir"}

    def _available(self, prefix: str, sigil: str) -> str:
        names = sorted(n[len(prefix):] for n in dir(self) if n.startswith(prefix)
                       and not n.endswith("_"))
        if prefix == "lmagic_":
            names = sorted(names + list(self._SHELL_ALIASES))
        return ", ".join(sigil + n for n in names)

    def system_in(self, frame: types.FrameType, cmd: str, expand: bool = True) -> None:
        """Run cmd through the shell with the session's stdio; sets ``_exit_code``."""
        import subprocess
        if expand:
            cmd = _expand(cmd, frame)
        _flush_stdio()
        try:
            rc = subprocess.call(cmd, shell=True, executable=_shell())
        except KeyboardInterrupt:
            raise KeyboardInterrupt from None  # without subprocess's frames
        frame.f_globals["_exit_code"] = rc

    def lmagic_system_(self, arg: str, frame: types.FrameType) -> None:
        self.system_in(frame, arg)

    def lmagic_getoutput_(self, arg: str, frame: types.FrameType) -> SList:
        return self._output(frame, _expand(arg, frame))

    # -- pip --

    def _pip_shell(self, cmd: str) -> bool:
        """Intercept ``pip install`` run through the shell; True if handled."""
        import shlex
        try:
            argv = shlex.split(cmd)
        except ValueError:
            return False
        if not argv:
            return False
        prog = os.path.basename(argv[0])
        if re.fullmatch(r"python[\d.]*", prog) and argv[1:3] == ["-m", "pip"]:
            argv = argv[3:]
        elif re.fullmatch(r"pip[\d.]*|conda|mamba", prog):
            argv = argv[1:]
        else:
            return False
        sub = next((a for a in argv if not a.startswith("-")), None)
        if sub not in ("install", "download", "wheel", "uninstall"):
            return False
        self._pip_notice(argv)
        return True

    def _pip_notice(self, argv: list[str]) -> None:
        lines = [_PIP_NOTICE]
        names, skip, seen_sub = [], False, False
        for a in argv:
            if skip:
                skip = False
            elif a in _PIP_VALUE_OPTIONS:
                skip = True
            elif a.startswith("-"):
                continue
            elif not seen_sub:
                seen_sub = True
            else:
                m = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", a)
                if m:
                    names.append(m.group())
        for name in names:
            version = _installed_version(name)
            state = f"already installed ({version})" if version else "NOT installed and cannot be installed"
            lines.append(f"airlock:   {name}: {state}")
        _flush_stdio()
        print("\n".join(lines), file=sys.stderr)

    def lmagic_pip(self, arg: str, frame: types.FrameType) -> None:
        """%pip: installing is impossible (no network); list/freeze work."""
        import shlex
        try:
            argv = shlex.split(arg)
        except ValueError:
            argv = arg.split()
        sub = next((a for a in argv if not a.startswith("-")), None)
        if sub in ("list", "freeze"):
            import importlib.util
            if importlib.util.find_spec("pip") is not None:
                import subprocess
                _flush_stdio()
                subprocess.call([sys.executable, "-m", "pip", *argv])
            else:
                self._pip_list(freeze=(sub == "freeze"))
            return
        if sub == "show" and len(argv) > 1:
            for name in argv[1:]:
                if not name.startswith("-"):
                    version = _installed_version(name)
                    print(f"{name}: {version or 'not installed'}")
            return
        self._pip_notice(argv)

    @staticmethod
    def _pip_list(freeze: bool) -> None:
        import importlib.metadata
        dists = {}
        for d in importlib.metadata.distributions():
            name = d.metadata["Name"]
            if name:
                dists.setdefault(name, d.version)
        items = sorted(dists.items(), key=lambda kv: kv[0].lower())
        if freeze:
            print("\n".join(f"{n}=={v}" for n, v in items))
            return
        width = max([len("Package")] + [len(n) for n, _ in items])
        vwidth = max([len("Version")] + [len(v or "") for _, v in items])
        rows = [f"{'Package':<{width}} {'Version':<{vwidth}}", f"{'-' * width} {'-' * vwidth}"]
        rows += [f"{n:<{width}} {v}" for n, v in items]
        print("\n".join(rows))

    # -- line magics --

    def lmagic_cd(self, arg: str, frame: types.FrameType) -> None:
        """%cd [DIR|-]: change the working directory (home without DIR)."""
        target = _unquote(arg)
        if not target:
            target = os.path.expanduser("~")
        elif target == "-":
            if self.oldpwd is None:
                raise UsageError("%cd -: no previous directory")
            target = self.oldpwd
        target = os.path.expandvars(os.path.expanduser(target))
        old = os.getcwd()
        os.chdir(target)
        self.oldpwd = old
        print(os.getcwd())

    def lmagic_pwd(self, arg: str, frame: types.FrameType) -> str:
        """%pwd: the working directory."""
        return os.getcwd()

    def lmagic_env(self, arg: str, frame: types.FrameType) -> Any:
        """%env: all variables; %env K: one; %env K=V or %env K V: set."""
        arg = arg.strip()
        if not arg:
            return dict(os.environ)
        if "=" in arg:
            key, _, value = arg.partition("=")
        elif " " in arg:
            key, _, value = arg.partition(" ")
        else:
            if arg not in os.environ:
                raise UsageError(f"Environment does not have key: {arg}")
            return os.environ[arg]
        key, value = key.strip(), _unquote(value)
        os.environ[key] = value
        print(f"env: {key}={value}")
        return None

    def lmagic_time(self, arg: str, frame: types.FrameType) -> Any:
        """%time STATEMENT: run it once and print CPU and wall times."""
        if not arg.strip():
            raise UsageError("%time needs a statement")
        tree = compile(arg, "<timed exec>", "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
        if len(tree.body) == 1 and isinstance(tree.body[0], ast.Expr):
            code = compile(ast.Expression(tree.body[0].value), "<timed eval>", "eval", dont_inherit=True)
        else:
            code = compile(tree, "<timed exec>", "exec", dont_inherit=True)
        return self._timed(lambda: eval(code, frame.f_globals, frame.f_locals))

    @staticmethod
    def _timed(fn: Callable[[], Any]) -> Any:
        import time
        t0, c0 = time.perf_counter(), os.times()
        try:
            return fn()
        finally:
            c1, wall = os.times(), time.perf_counter() - t0
            user, sys_ = c1.user - c0.user, c1.system - c0.system
            print(f"CPU times: user {_format_time(user)}, sys: {_format_time(sys_)}, "
                  f"total: {_format_time(user + sys_)}\nWall time: {_format_time(wall)}")

    def lmagic_timeit(self, arg: str, frame: types.FrameType) -> Any:
        """%timeit [-n N] [-r R] [-q] [-o] STATEMENT: time a statement (short)."""
        return self._timeit(arg, "pass", frame)

    def _timeit(self, arg: str, setup: str, frame: types.FrameType, stmt: Optional[str] = None) -> Any:
        import timeit
        number, repeat, quiet, ret = None, None, False, False
        words = arg.split(" ")
        i = 0
        while i < len(words):
            w = words[i]
            if w in ("-n", "-r") and i + 1 < len(words):
                if w == "-n":
                    number = int(words[i + 1])
                else:
                    repeat = int(words[i + 1])
                i += 2
            elif w == "-q":
                quiet, i = True, i + 1
            elif w == "-o":
                ret, i = True, i + 1
            elif w == "":
                i += 1
            else:
                break
        rest = " ".join(words[i:])
        if stmt is None:
            stmt = rest
        elif rest.strip():
            setup = rest
        if not stmt.strip():
            raise UsageError("%timeit needs a statement")
        ns = dict(frame.f_globals)
        ns.update(frame.f_locals)
        timer = timeit.Timer(stmt, setup, globals=ns)
        times: list[float] = []
        if number is None:
            number = 1
            while True:
                t = timer.timeit(number)
                if t >= 0.1 or number >= 10 ** 9:
                    break
                number *= 10
            times.append(t / number)
        # Without -n the whole measurement stays around a second.
        budget = 1.0 if times else None
        target = repeat or 7
        spent = sum(times) * number
        while len(times) < target and (budget is None or spent < budget or repeat):
            t = timer.timeit(number)
            spent += t
            times.append(t / number)
        mean = sum(times) / len(times)
        std = (sum((t - mean) ** 2 for t in times) / len(times)) ** 0.5
        if not quiet:
            runs = len(times)
            print(f"{_format_time(mean)} \u00b1 {_format_time(std)} per loop (mean \u00b1 std. dev. "
                  f"of {runs} run{'s' if runs != 1 else ''}, {number:,} loop{'s' if number != 1 else ''} each)")
        if ret:
            return types.SimpleNamespace(average=mean, stdev=std, loops=number, repeat=len(times),
                                         all_runs=[t * number for t in times],
                                         best=min(times), worst=max(times))
        return None

    def lmagic_who(self, arg: str, frame: types.FrameType) -> None:
        """%who: names of the user's variables."""
        names = self._user_names()
        print("\t".join(names) if names else "Interactive namespace is empty.")

    def lmagic_whos(self, arg: str, frame: types.FrameType) -> None:
        """%whos: the user's variables with their types and values."""
        names = self._user_names()
        if not names:
            print("Interactive namespace is empty.")
            return
        ns = self.session.ns
        rows = []
        for n in names:
            v = ns[n]
            try:
                info = repr(v).replace("\n", " ")
            except Exception:  # noqa: BLE001
                info = _fallback_repr(v)
            rows.append((n, type(v).__name__, info[:60] + ("..." if len(info) > 60 else "")))
        w1 = max(len("Variable"), *(len(r[0]) for r in rows))
        w2 = max(len("Type"), *(len(r[1]) for r in rows))
        out = [f"{'Variable':<{w1}}   {'Type':<{w2}}   Data/Info", "-" * (w1 + w2 + 20)]
        out += [f"{a:<{w1}}   {b:<{w2}}   {c}" for a, b, c in rows]
        print("\n".join(out))

    def _user_names(self) -> list[str]:
        return sorted(n for n in self.session.ns if not n.startswith("_")
                      and n not in self.session.initial_names)

    def lmagic_reset(self, arg: str, frame: types.FrameType) -> None:
        """%reset [-f]: delete all user variables (never asks)."""
        self.session.reset_namespace()

    def lmagic_run(self, arg: str, frame: types.FrameType) -> None:
        """%run [-i] SCRIPT [ARGS]: run a file as __main__; its globals are kept."""
        import shlex
        argv = shlex.split(arg)
        interactive = bool(argv) and argv[0] == "-i"
        if interactive:
            argv = argv[1:]
        if not argv:
            raise UsageError("%run needs a file name")
        path = os.path.expanduser(argv[0])
        if not os.path.exists(path) and os.path.exists(path + ".py"):
            path += ".py"
        with open(path, "rb") as f:
            code = compile(f.read(), path, "exec", dont_inherit=True)
        session = self.session
        if interactive:
            g = session.ns
            module = None
        else:
            module = types.ModuleType("__main__")
            g = module.__dict__
            g.update({"__file__": path, "__builtins__": builtins})
        saved_argv, saved_main = sys.argv, sys.modules.get("__main__")
        sys.argv = [path] + argv[1:]
        if module is not None:
            sys.modules["__main__"] = module
        try:
            exec(code, g)
        finally:
            sys.argv = saved_argv
            if module is not None:
                sys.modules["__main__"] = saved_main
                for k, v in g.items():
                    if k not in ("__name__", "__file__", "__builtins__", "__doc__",
                                 "__loader__", "__spec__", "__package__"):
                        session.ns[k] = v

    def lmagic_lsmagic(self, arg: str, frame: types.FrameType) -> None:
        """%lsmagic: list the supported magics."""
        print("Line magics: " + self._available("lmagic_", "%"))
        print("Cell magics: " + self._available("cmagic_", "%%"))
        print("Shell: !cmd, !!cmd, x = !cmd ({expr} and $name are expanded)")

    def lmagic_matplotlib(self, arg: str, frame: types.FrameType) -> None:
        """%matplotlib [inline]: figures are always shown inline; accepted."""
        if arg.strip() not in ("", "inline"):
            _warn(f"airlock: %matplotlib {arg.strip()} is not available; figures are shown inline")

    def lmagic_config(self, arg: str, frame: types.FrameType) -> None:
        """%config: IPython configuration does not apply; accepted and ignored."""

    def lmagic_xmode(self, arg: str, frame: types.FrameType) -> None:
        """%xmode: accepted and ignored."""

    def lmagic_load_ext(self, arg: str, frame: types.FrameType) -> None:
        """%load_ext: IPython extensions are not available; ignored with a note."""
        _warn(f"airlock: IPython extensions are not supported; ignored: {arg.strip()}")

    def lmagic_autoreload(self, arg: str, frame: types.FrameType) -> None:
        """%autoreload: not supported; ignored (use importlib.reload)."""

    # -- cell magics --

    def cmagic_time(self, line: str, body: str, body_lineno: int, frame: types.FrameType) -> Any:
        """%%time: run the cell and print its CPU and wall times."""
        return self._timed(lambda: self.session.run_nested(body, body_lineno))

    def cmagic_timeit(self, line: str, body: str, body_lineno: int, frame: types.FrameType) -> Any:
        """%%timeit [options] [SETUP]: time the cell body."""
        return self._timeit(line, "pass", frame, stmt=body)

    def cmagic_capture(self, line: str, body: str, body_lineno: int, frame: types.FrameType) -> None:
        """%%capture [--no-stdout] [--no-stderr] [--no-display] [VAR]: capture Python-level output."""
        words = line.split()
        var = next((w for w in words if not w.startswith("-")), None)
        out, err = io.StringIO(), io.StringIO()
        outputs: list = []
        saved = sys.stdout, sys.stderr
        if "--no-stdout" not in words:
            sys.stdout = out
        if "--no-stderr" not in words:
            sys.stderr = err
        session = self.session
        capturing = "--no-display" not in words
        if capturing:
            session.captures.append(outputs)
        try:
            session.run_nested(body, body_lineno)
        finally:
            if capturing:
                session.captures.pop()
            sys.stdout, sys.stderr = saved
        if var:
            frame.f_globals[var] = CapturedIO(out.getvalue(), err.getvalue(), outputs)

    def cmagic_writefile(self, line: str, body: str, body_lineno: int, frame: types.FrameType) -> None:
        """%%writefile [-a] FILE: write (or append) the cell body to FILE."""
        words = line.split(None, 1)
        append = bool(words) and words[0] in ("-a", "--append")
        path = _unquote(words[1] if append and len(words) > 1 else ("" if append else line))
        if not path:
            raise UsageError("%%writefile needs a file name")
        path = os.path.expanduser(_expand(path, frame))
        exists = os.path.exists(path)
        print(("Appending to " if append else "Overwriting " if exists else "Writing ") + path)
        with open(path, "a" if append else "w", encoding="utf-8") as f:
            f.write(body)

    def cmagic_script(self, line: str, body: str, body_lineno: int, frame: types.FrameType) -> None:
        """%%script PROGRAM [--no-raise-error]: run the body with PROGRAM (on its stdin)."""
        import shlex
        import subprocess
        argv = [w for w in shlex.split(line) if w != "--no-raise-error"]
        if not argv:
            raise UsageError("%%script needs a program, e.g. %%script bash")
        _flush_stdio()
        try:
            proc = subprocess.run(argv, input=body.encode("utf-8"))
        except KeyboardInterrupt:
            raise KeyboardInterrupt from None
        frame.f_globals["_exit_code"] = proc.returncode
        if proc.returncode != 0 and "--no-raise-error" not in line.split():
            raise subprocess.CalledProcessError(proc.returncode, line.strip())

    def cmagic_bash(self, line: str, body: str, body_lineno: int, frame: types.FrameType) -> None:
        """%%bash: run the cell with bash."""
        self.cmagic_script(f"bash {line}", body, body_lineno, frame)

    def cmagic_sh(self, line: str, body: str, body_lineno: int, frame: types.FrameType) -> None:
        """%%sh: run the cell with sh."""
        self.cmagic_script(f"sh {line}", body, body_lineno, frame)

    def cmagic_python3(self, line: str, body: str, body_lineno: int, frame: types.FrameType) -> None:
        """%%python3: run the cell in a separate python3 process."""
        self.cmagic_script(f"{sys.executable} {line}", body, body_lineno, frame)

    cmagic_python = cmagic_python3

    def cmagic_html(self, line: str, body: str, body_lineno: int, frame: types.FrameType) -> None:
        """%%html: display the cell as HTML."""
        display(HTML(body))

    def cmagic_markdown(self, line: str, body: str, body_lineno: int, frame: types.FrameType) -> None:
        """%%markdown: display the cell as Markdown."""
        display(Markdown(body))

    def cmagic_latex(self, line: str, body: str, body_lineno: int, frame: types.FrameType) -> None:
        """%%latex: display the cell as LaTeX."""
        display(Latex(body))

    def cmagic_svg(self, line: str, body: str, body_lineno: int, frame: types.FrameType) -> None:
        """%%svg: display the cell as SVG."""
        display(SVG(body))

    def cmagic_javascript(self, line: str, body: str, body_lineno: int, frame: types.FrameType) -> None:
        """%%javascript: not available (airlock has no browser to run it)."""
        raise UsageError("%%javascript is not supported: there is no browser to run it")


class CapturedIO:
    """What ``%%capture VAR`` stores: .stdout, .stderr, .outputs and .show()."""

    def __init__(self, stdout: str, stderr: str, outputs: list) -> None:
        self.stdout, self.stderr, self.outputs = stdout, stderr, outputs

    def show(self) -> None:
        sys.stdout.write(self.stdout)
        sys.stderr.write(self.stderr)
        for data, md in self.outputs:
            publish_display_data(data, md)

    __call__ = show

    def __repr__(self) -> str:
        return "<airlock CapturedIO>"


# ---------------------------------------------------------------------------
# Tracebacks
# ---------------------------------------------------------------------------

# Cells are compiled with the file name "Cell In[N]" (IPython's wording).
_CELL_FILE = re.compile(r"Cell In\[(\d+)\]\Z")
_CELL_FRAME_LINE = re.compile(r'^(.*?)File "Cell In\[(\d+)\]", line (\d+)(?:, in (.*))?$')


def _runtime_file() -> str:
    return _runtime_file.__code__.co_filename


_RUNTIME_FILE = _runtime_file()


def _clean_stack(te: traceback.TracebackException, magic_lines: dict, seen: set) -> None:
    """Hide the runtime's frames (and asyncio's before the first cell frame)."""
    if id(te) in seen:
        return
    seen.add(id(te))
    frames = list(te.stack)
    first = next((i for i, f in enumerate(frames) if _CELL_FILE.match(f.filename)), None)
    if first is not None:
        frames = frames[first:]
    kept = []
    for f in frames:
        if f.filename == _RUNTIME_FILE:
            continue
        if f.lineno in magic_lines.get(f.filename, ()):
            # The code ran the transformed line; its columns do not match the source line.
            f.colno = f.end_colno = None
        kept.append(f)
    te.stack = traceback.StackSummary.from_list(kept)
    for sub in (te.__cause__, te.__context__, *(getattr(te, "exceptions", None) or ())):
        if sub is not None:
            _clean_stack(sub, magic_lines, seen)


def _cell_line(m: re.Match) -> str:
    prefix, n, line, func = m.groups()
    where = f", in {func}" if func and func != "<module>" else ""
    return f"{prefix}Cell In[{n}], line {line}{where}"


def _format_exception(exc: BaseException, magic_lines: dict) -> tuple[str, str, list[str]]:
    """(name, value, traceback lines) of an exception, IPython style."""
    name = type(exc).__name__
    value = _safe_str(exc, TEXT_LIMIT)
    if isinstance(exc, UsageError):
        return name, value, [f"UsageError: {value}"]  # no traceback, as in IPython
    te = traceback.TracebackException(type(exc), exc, exc.__traceback__, compact=True)
    _clean_stack(te, magic_lines, set())
    lines: list[str] = []
    total = 0
    for chunk in te.format():
        for line in chunk.rstrip("\n").split("\n"):
            m = _CELL_FRAME_LINE.match(line)
            if m:
                line = _cell_line(m)
            total += len(line)
            lines.append(line)
    if total > TEXT_LIMIT:
        # Keep the head and the tail (where the exception itself is).
        head, tail, size = [], [], 0
        for line in reversed(lines):
            if size + len(line) > TEXT_LIMIT // 2:
                break
            tail.append(line)
            size += len(line)
        for line in lines:
            if size + len(line) > TEXT_LIMIT:
                break
            head.append(line)
            size += len(line)
        lines = head + [f"... [traceback truncated: {total:,} characters in total]"] + tail[::-1]
    return name, value, lines


# ---------------------------------------------------------------------------
# stdio helpers
# ---------------------------------------------------------------------------

def _text_stream(fd: int, mode: str = "w") -> io.TextIOWrapper:
    """A UTF-8 text stream on fd (line-buffered for output) that never closes fd."""
    if mode == "r":
        return io.TextIOWrapper(io.BufferedReader(io.FileIO(fd, "r", closefd=False)),
                                encoding="utf-8", errors="backslashreplace")
    return io.TextIOWrapper(io.BufferedWriter(io.FileIO(fd, "w", closefd=False)),
                            encoding="utf-8", errors="backslashreplace", line_buffering=True)


def _flush_stdio() -> None:
    """Flush Python-level stdout/stderr buffers (whatever objects they are now)."""
    session = _session
    streams = [sys.stdout, sys.stderr]
    if session is not None:
        streams += [session.stdout, session.stderr]
    for s in streams:
        if s is None:
            continue
        try:
            s.flush()
        except KeyboardInterrupt:
            if session is not None and session.busy:
                raise  # user code is running: the interrupt is for it
        except BaseException:  # noqa: BLE001 - closed streams, closed fds, odd objects
            pass


def _discard_buffered_output(streams: Iterable[Any], saved_fds: dict) -> None:
    """Empty the buffers of inherited streams without writing to fds 1/2.

    A zygote may have buffered output when it forked; it belongs to the
    template, not to this session.  Flush it into /dev/null.
    """
    if 1 not in saved_fds or 2 not in saved_fds:
        return
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        os.dup2(null, 2)
        for s in streams:
            try:
                if s is not None:
                    s.flush()
            except Exception:  # noqa: BLE001 - closed or odd objects
                pass
    finally:
        os.dup2(saved_fds[1], 1)
        os.dup2(saved_fds[2], 2)
        os.close(null)


def _is_closed(stream: Any) -> bool:
    try:
        return bool(stream.closed)
    except BaseException:  # noqa: BLE001
        return False


# ---------------------------------------------------------------------------
# The session
# ---------------------------------------------------------------------------

class _Session:
    """State of one session and its protocol loop (one per process)."""

    def __init__(self, ctl_fd: int) -> None:
        self.pid = os.getpid()
        self.main_thread = _thread.get_ident()
        # Move the control socket off fd 3 to a close-on-exec descriptor, so
        # that neither user code nor the processes it starts can write to it.
        fd = os.dup(ctl_fd)
        os.close(ctl_fd)
        self.chan = _Channel(fd)

        # stdout/stderr: line-buffered UTF-8 straight on fds 1/2; keep copies
        # of the descriptors to restore them if user code closes them.
        self.saved_fds = {}
        for n in (0, 1, 2):
            try:
                self.saved_fds[n] = os.dup(n)
            except OSError:
                pass
        _discard_buffered_output((sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__),
                                 self.saved_fds)
        self.stdout = _text_stream(1)
        self.stderr = _text_stream(2)
        self.retired: list[io.TextIOWrapper] = []
        sys.stdout = sys.__stdout__ = self.stdout
        sys.stderr = sys.__stderr__ = self.stderr
        if sys.stdin is None or _is_closed(sys.stdin):
            sys.stdin = sys.__stdin__ = _text_stream(0, "r")

        # Imports: the cwd (like Jupyter) first, the runtime's directory (for
        # airlock_mpl) last.
        here = os.path.dirname(_RUNTIME_FILE)
        if here and here not in sys.path:
            sys.path.append(here)
        if "" not in sys.path:
            sys.path.insert(0, "")
        sys.argv = [""]

        # The user's namespace is a real __main__ module, so that classes and
        # functions defined in cells pickle and `if __name__ == "__main__":` runs.
        self.main = types.ModuleType("__main__")
        self.main.__dict__["__builtins__"] = builtins
        self.ns = self.main.__dict__
        sys.modules["__main__"] = self.main
        self.initial_names = frozenset(self.ns)

        self.magics = _Magics(self)
        builtins.display = display
        builtins.__airlock__ = self.magics
        _install_ipython_shim()

        self.execution_count = 0
        self.exec_id: Optional[str] = None
        self.busy = False
        self.interrupted = False
        self.pending_interrupt = False
        self.future_flags = 0
        self.magic_lines: dict[str, set[int]] = {}
        self.filename = ""
        self.captures: list[list] = []
        self.underscore: Any = _NO_VALUE
        self.loop: Any = None

        # Figures left open by a zygote must not show up in the first cell.
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is not None:
            try:
                plt.close("all")
            except Exception:  # noqa: BLE001
                pass

        # Signals as in a freshly started interpreter (a zygote may have reset
        # them all to SIG_DFL): SIGPIPE and SIGXFSZ ignored, so that writing to
        # a closed pipe raises BrokenPipeError instead of killing the session.
        for name in ("SIGPIPE", "SIGXFSZ"):
            if hasattr(_signal, name):
                _signal.signal(getattr(_signal, name), _signal.SIG_IGN)
        self.sigint = self._on_sigint
        _signal.signal(_signal.SIGINT, self.sigint)

    # -- signals --

    def _on_sigint(self, signum: int, frame: Optional[types.FrameType]) -> None:
        """SIGINT: KeyboardInterrupt in user code; ignored while idle.

        Never raised inside the runtime's own frames (e.g. halfway through
        writing a frame): there it is recorded and raised at the next
        checkpoint before user code runs again.
        """
        if not self.busy:
            return
        if frame is not None and frame.f_code.co_filename == _RUNTIME_FILE:
            self.pending_interrupt = True
            return
        self.interrupted = True
        raise KeyboardInterrupt

    def checkpoint(self) -> None:
        """Raise an interrupt that arrived while the runtime's code was running."""
        if self.pending_interrupt and self.busy and _thread.get_ident() == self.main_thread:
            self.pending_interrupt = False
            self.interrupted = True
            raise KeyboardInterrupt

    # -- sending --

    def send(self, msg: dict) -> None:
        """Send a message (flushing stdout/stderr first); fatal if the peer is gone."""
        _flush_stdio()
        payload = self._payload(msg)
        with self.chan.lock:
            self._write(payload)

    def _write(self, payload: bytes) -> None:
        try:
            self.chan.write_frame(payload)
        except OSError as e:
            # The server is gone (or the socket was sabotaged): nothing to report to.
            import errno
            os._exit(0 if e.errno in (errno.EPIPE, errno.ECONNRESET) else 2)

    def _payload(self, msg: dict) -> bytes:
        try:
            payload = _encode(msg)
        except (ValueError, TypeError, RecursionError, MemoryError) as e:
            payload = _encode(self._shrunk(msg, f"message could not be encoded ({type(e).__name__})"))
        if len(payload) > MAX_FRAME - 1024:
            payload = _encode(self._shrunk(msg, f"message of {len(payload):,} bytes exceeds the frame limit"))
        return payload

    @staticmethod
    def _shrunk(msg: dict, why: str) -> dict:
        """A small stand-in for a message that cannot be sent as is."""
        msg = dict(msg)
        if "data" in msg:
            plain = msg["data"].get("text/plain", "") if isinstance(msg["data"], dict) else ""
            plain = plain[:65536] if isinstance(plain, str) else ""
            msg["data"] = {"text/plain": (plain + f"\n[airlock: output omitted: {why}]").lstrip("\n")}
            msg["metadata"] = {}
        if "traceback" in msg:
            tb = msg["traceback"] if isinstance(msg["traceback"], list) else []
            msg["traceback"] = [str(x)[:4096] for x in tb[:50]] + [f"[airlock: traceback shortened: {why}]"]
            msg["value"] = str(msg.get("value", ""))[:65536]
        return msg

    def publish(self, data: dict, metadata: dict) -> None:
        """Send a display message for the running execution (any thread)."""
        if os.getpid() != self.pid:
            return  # a forked child of user code must not talk on our socket
        if self.captures and _thread.get_ident() == self.main_thread:
            self.captures[-1].append((data, metadata))
            return
        _flush_stdio()
        with self.chan.lock:
            if self.exec_id is None:
                return  # no execution is running: nowhere to attribute it
            payload = self._payload({"type": "display", "id": self.exec_id,
                                     "data": data, "metadata": metadata})
            self._write(payload)
        self.checkpoint()

    # -- the loop --

    def run(self) -> None:
        self.send({"type": "hello", "language": LANGUAGE,
                   "version": "%d.%d.%d" % sys.version_info[:3], "pid": self.pid})
        while True:
            try:
                msg = self.chan.recv()
            except ProtocolError as e:
                self.fatal(str(e))
            except OSError as e:
                self.fatal(f"cannot read the control socket: {e}")
            if msg is None:
                return
            kind = msg["type"]
            if kind == "shutdown":
                return
            if kind == "execute":
                # No code is an empty cell, as "" is: it does nothing.
                msg_id, code = msg.get("id"), msg.get("code", "")
                if type(msg_id) is not str or type(code) is not str:
                    self.fatal("execute needs a string 'id' and a string 'code'")
            elif kind == "run":
                self.run_program(_program_request(msg, self.fatal))  # never returns
            elif kind != "configure":
                self.fatal(f"unknown message type {kind!r}")
            try:
                if kind == "execute":
                    self.execute(msg_id, code)
                else:
                    self.configure(msg)
            except BaseException as e:  # noqa: BLE001 - a bug here must not end the session
                self._internal_error(e)

    def _internal_error(self, e: BaseException) -> None:
        """Last resort for a bug in the runtime: note it, and end the execution."""
        self.busy = False
        try:
            os.write(2, f"airlock runtime: internal error: {type(e).__name__}\n".encode())
        except OSError:
            pass
        exec_id = self.exec_id
        if exec_id is not None:  # its done was not sent
            with self.chan.lock:
                self.exec_id = None
                self._write(_encode({
                    "type": "error", "id": exec_id, "name": "InternalError",
                    "value": "airlock runtime error", "traceback": []}))
                self._write(_encode({
                    "type": "done", "id": exec_id, "status": "error",
                    "execution_count": self.execution_count, "exit_code": 1}))

    def fatal(self, why: str) -> None:
        _flush_stdio()
        try:
            os.write(2, f"airlock runtime: fatal protocol error: {why}\n".encode("utf-8", "replace"))
        except OSError:
            pass
        os._exit(2)

    def configure(self, msg: dict) -> None:
        env, cwd = msg.get("env"), msg.get("cwd")
        if env is not None and (type(env) is not dict or
                                any(type(k) is not str or type(v) is not str for k, v in env.items())):
            self.fatal("configure: 'env' must map strings to strings")
        if cwd is not None and type(cwd) is not str:
            self.fatal("configure: 'cwd' must be a string")
        errors = []
        if env is not None:
            try:
                os.environ.clear()
                os.environ.update(env)
            except (ValueError, OSError) as e:
                errors.append(f"environment: {e}")
        if cwd:
            try:
                os.chdir(cwd)
            except OSError as e:
                errors.append(f"cannot change directory to {cwd!r}: {e.strerror}")
        reply: dict[str, Any] = {"type": "configured"}
        if errors:
            reply["error"] = "; ".join(errors)
        self.send(reply)

    # -- executing --

    def execute(self, msg_id: str, code: str) -> None:
        """Run one cell and send its messages; always ends with ``done``."""
        self.execution_count += 1
        count = self.execution_count
        with self.chan.lock:
            self.exec_id = msg_id
        self.interrupted = self.pending_interrupt = False
        result = error = report = None
        try:
            self.busy = True
            try:
                value = self.run_cell(code, count)
                self._check_fork()
                if value is not _NO_VALUE and value is not None:
                    self._bind_underscore(value)
                    self.checkpoint()
                    result = format_display_data(value)
            except BaseException as e:  # noqa: BLE001 - user code may raise anything
                self._check_fork()
                error = e
            try:
                self.checkpoint()
                self.flush_figures()
            except BaseException as e:  # noqa: BLE001
                if error is None:
                    error = e
            if error is not None:
                report = self._report(error)
            try:
                _flush_stdio()
            except BaseException:  # noqa: BLE001
                pass
        except BaseException as e:  # noqa: BLE001 - a runtime bug must not lose `done`
            if error is None:
                error = e
            if report is None:
                report = self._report(error)
        finally:
            # First our SIGINT handler back (user code may have replaced it with
            # one that raises anywhere), then interrupts off.
            self._restore_sigint()
            self.busy = False
        self.pending_interrupt = False
        self._repair_stdio()

        status, exit_code = "ok", 0
        if isinstance(error, SystemExit):
            code_ = error.code
            if code_ is None or (isinstance(code_, int) and code_ == 0):
                report = None  # a clean exit is not an error
            else:
                # Like a process: an int is the status (mod 256); anything else is 1.
                status = "error"
                exit_code = (int(code_) & 0xFF or 1) if isinstance(code_, int) else 1
        elif isinstance(error, KeyboardInterrupt) and self.interrupted:
            status, exit_code = "interrupted", 1
        elif error is not None:
            status, exit_code = "error", 1
        error = None  # drop frames (and their locals) promptly

        try:
            if result is not None:
                data, md = result
                self.send({"type": "result", "id": msg_id, "data": data, "metadata": md,
                           "execution_count": count})
            if report is not None:
                name, value, tb = report
                self.send({"type": "error", "id": msg_id, "name": name, "value": value,
                           "traceback": tb})
        finally:
            done = {"type": "done", "id": msg_id, "status": status,
                    "execution_count": count, "exit_code": exit_code}
            _flush_stdio()
            with self.chan.lock:
                self.exec_id = None
                self._write(self._payload(done))

    def _check_fork(self) -> None:
        # User code forked and the child returned from the cell: it must not
        # run the rest of the protocol (the parent does).
        if os.getpid() != self.pid:
            _flush_stdio()
            os._exit(0)

    def _report(self, error: BaseException) -> tuple[str, str, list[str]]:
        """Format an exception; never raises."""
        try:
            return _format_exception(error, self.magic_lines)
        except BaseException:  # noqa: BLE001 - interrupted, or a hostile exception object
            try:
                name = type(error).__name__
            except BaseException:  # noqa: BLE001
                name = "Exception"
            return name, "", [f"{name}: <the traceback could not be formatted>"]

    def run_cell(self, code: str, count: int) -> Any:
        """Compile and run a cell; return its final expression value or _NO_VALUE."""
        filename = f"Cell In[{count}]"  # also what warnings and SyntaxErrors show
        self.filename = filename
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        return self.run_source(code, filename)

    def run_nested(self, body: str, first_line: int) -> Any:
        """Run the body of a cell magic (lines numbered as in the cell)."""
        value = self.run_source("\n" * (first_line - 1) + body, self.filename)
        return None if value is _NO_VALUE else value

    def run_source(self, source: str, filename: str) -> Any:
        flags = _TOP_LEVEL_AWAIT | self.future_flags
        if _MAGIC_HINT.search(source):
            source, magic = transform_cell(source)
            if magic:
                self.magic_lines.setdefault(filename, set()).update(magic)
                builtins.__airlock__ = self.magics  # in case user code removed it
        tree = compile(source, filename, "exec", ast.PyCF_ONLY_AST | flags, dont_inherit=True)
        body = tree.body
        last = None
        if body and isinstance(body[-1], ast.Expr) and not _ends_with_semicolon(source, body[-1]):
            last = body.pop()
        code = compile(tree, filename, "exec", flags, dont_inherit=True)
        self.future_flags |= code.co_flags & _FUTURE_MASK
        expr = None
        if last is not None:
            expr = compile(ast.Expression(last.value), filename, "eval",
                           _TOP_LEVEL_AWAIT | self.future_flags, dont_inherit=True)
        self.checkpoint()
        self._eval(code)
        if expr is None:
            return _NO_VALUE
        self.checkpoint()
        return self._eval(expr)

    def _eval(self, code: types.CodeType) -> Any:
        if code.co_flags & _CO_COROUTINE:
            return self._run_coroutine(eval(code, self.ns))
        return eval(code, self.ns)

    def _run_coroutine(self, coro: Any) -> Any:
        """Run a cell with top-level await on the session's event loop."""
        import asyncio
        loop = self.loop
        if loop is None or loop.is_closed():
            loop = self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        task = loop.create_task(coro)
        try:
            return loop.run_until_complete(task)
        except BaseException:
            if not task.done():
                task.cancel()
                try:
                    loop.run_until_complete(task)
                except BaseException:  # noqa: BLE001 - the cancellation itself
                    pass
            raise

    def _bind_underscore(self, value: Any) -> None:
        ns = self.ns
        if ns.get("_", _NO_VALUE) is not self.underscore:
            return  # the user bound `_` themselves
        ns["___"] = ns.get("__", "")
        ns["__"] = ns.get("_", "")
        ns["_"] = self.underscore = value

    def reset_namespace(self) -> None:
        keep = {k: self.ns[k] for k in self.initial_names if k in self.ns}
        self.ns.clear()
        self.ns.update(keep)
        self.underscore = _NO_VALUE

    def flush_figures(self) -> None:
        """Show (and close) the pyplot figures the cell left open, like Jupyter."""
        helpers = sys.modules.get("matplotlib._pylab_helpers")
        if helpers is None or "matplotlib.pyplot" not in sys.modules:
            return
        try:
            if not helpers.Gcf.figs:
                return
        except AttributeError:
            return
        backend = _mpl_backend()
        if backend is not None:
            backend.flush_figures()

    # -- running a program (docs/runtime-protocol.md, "Program mode") --

    def run_program(self, req: dict) -> None:
        """Run a program file as ``python3 FILE ARGS`` would, then exit.

        The interpreter is this one, forked from the template with numpy,
        pandas and matplotlib imported: the session's conveniences are taken
        away first, so the program sees a plain ``__main__``, ``sys.argv``,
        ``sys.path`` and stdio. With ``fresh`` (the client set PYTHON*
        variables, which only a new interpreter honours) a new python3 runs
        it instead. Either way exactly one ``done`` carries the exit status,
        and the process ends: a program run is the session's last act.
        """
        msg_id, argv, env, cwd = req["id"], req["argv"], req["env"], req["cwd"]
        with self.chan.lock:
            self.exec_id = msg_id
        _flush_stdio()
        try:
            os.environ.clear()
            os.environ.update(env)
            if cwd:
                os.chdir(cwd)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.close(null)
        except (OSError, ValueError) as e:
            os.write(2, f"airlock: cannot start {argv[1]}: {e}\n".encode("utf-8", "replace"))
            self._program_done(msg_id, 127)
        if req["fresh"]:
            self._program_done(msg_id, _run_fresh(argv, env))
        try:
            code = _run_in_process(argv[1], argv[1:])
        except BaseException as e:  # noqa: BLE001 - a runtime bug still ends with done
            try:
                os.write(2, f"airlock runtime: internal error: {type(e).__name__}: {e}\n".encode("utf-8", "replace"))
            except BaseException:  # noqa: BLE001
                pass
            code = 1
        if os.getpid() != self.pid:
            os._exit(code)  # a fork of the program returned from its main module
        self._program_done(msg_id, code)

    def _program_done(self, msg_id: str, code: int) -> None:
        """Send the program's ``done``, close its stdio and exit."""
        done = {"type": "done", "id": msg_id, "status": "exited",
                "execution_count": 1, "exit_code": code}
        try:
            with self.chan.lock:
                self.exec_id = None
                self._write(self._payload(done))
        finally:
            # Nothing of the program is left to write: let the server see end
            # of file on its stdio now rather than when the process is torn down.
            for fd in (1, 2):
                try:
                    os.close(fd)
                except OSError:
                    pass
            os._exit(code & 0xFF)

    def _restore_sigint(self) -> None:
        try:
            if _signal.getsignal(_signal.SIGINT) is not self.sigint:
                _signal.signal(_signal.SIGINT, self.sigint)
        except (ValueError, OSError):
            pass

    def _repair_stdio(self) -> None:
        """Repair what user code may have broken before the next message:
        closed fds 0-2, closed or missing sys streams, a tiny recursion limit."""
        for fd, saved in self.saved_fds.items():
            try:
                os.fstat(fd)
            except OSError:
                try:
                    os.dup2(saved, fd)
                except OSError:
                    continue
                name = {1: "stdout", 2: "stderr"}.get(fd)
                if name is not None:
                    # Our stream may still buffer what could not be written while
                    # fd was closed: retire it (kept alive, so never flushed) rather
                    # than let that output surface in the next execution.
                    old = getattr(self, name)
                    self.retired.append(old)
                    setattr(self, name, _text_stream(fd))
                    if getattr(sys, name, None) is old:
                        setattr(sys, name, getattr(self, name))
                    if getattr(sys, f"__{name}__", None) is old:
                        setattr(sys, f"__{name}__", getattr(self, name))
        for name, fd in (("stdout", 1), ("stderr", 2)):
            current = getattr(sys, name, None)
            if current is None or _is_closed(current):
                ours = getattr(self, name)
                if _is_closed(ours):
                    ours = _text_stream(fd)
                    setattr(self, name, ours)
                setattr(sys, name, ours)
                setattr(sys, f"__{name}__", ours)
        if sys.stdin is None or _is_closed(sys.stdin):
            sys.stdin = sys.__stdin__ = _text_stream(0, "r")
        if sys.getrecursionlimit() < 200:
            sys.setrecursionlimit(1000)


def _program_request(msg: dict, fatal: Callable[[str], None]) -> dict:
    """Validate a ``run`` message."""
    msg_id, argv, env, cwd = msg.get("id"), msg.get("argv"), msg.get("env"), msg.get("cwd")
    if type(msg_id) is not str:
        fatal("run needs a string 'id'")
    if type(argv) is not list or len(argv) < 2 or any(type(a) is not str or "\0" in a for a in argv):
        fatal("run: 'argv' must be the interpreter, the program and its arguments, as strings")
    if type(env) is not dict or any(type(k) is not str or type(v) is not str for k, v in env.items()):
        fatal("run: 'env' must map strings to strings")
    if cwd is not None and type(cwd) is not str:
        fatal("run: 'cwd' must be a string")
    return {"id": msg_id, "argv": argv, "env": env, "cwd": cwd, "fresh": msg.get("fresh") is True}


def _run_fresh(argv: list, env: dict) -> int:
    """Run argv as a new process on our stdio; its exit status, shell style."""
    try:
        pid = os.posix_spawn(argv[0], argv, env)
        _, status = os.waitpid(pid, 0)
    except OSError as e:
        os.write(2, f"airlock: cannot start {argv[0]}: {e}\n".encode("utf-8", "replace"))
        return 127
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def _plain_interpreter(path: str, argv: list) -> types.ModuleType:
    """Take the session's conveniences away and return a fresh ``__main__``."""
    for name in ("display", "__airlock__"):
        builtins.__dict__.pop(name, None)
    for name, mod in _SHIM_MODULES.items():
        if sys.modules.get(name) is mod:
            del sys.modules[name]
    sys.displayhook = sys.__displayhook__
    sys.excepthook = sys.__excepthook__
    _signal.signal(_signal.SIGINT, _signal.default_int_handler)
    # As `python3 FILE` under PYTHONUNBUFFERED: unbuffered, strict stdout.
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(
        io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="strict", write_through=True)
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(
        io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace", write_through=True)
    sys.stdin = sys.__stdin__ = _text_stream(0, "r")
    here = os.path.dirname(_RUNTIME_FILE)
    sys.path[:] = [os.path.dirname(path)] + [p for p in sys.path if p not in ("", here)]
    sys.argv = list(argv)
    _plain_matplotlib(os.environ.get("MPLBACKEND") or "agg")
    main = types.ModuleType("__main__")
    main.__file__ = path
    main.__cached__ = None
    main.__builtins__ = builtins
    try:
        from importlib.machinery import SourceFileLoader
        main.__loader__ = SourceFileLoader("__main__", path)
    except ImportError:
        pass
    sys.modules["__main__"] = main
    return main


def _plain_matplotlib(backend: str) -> None:
    """Give an imported matplotlib the backend a new process would get."""
    mpl = sys.modules.get("matplotlib")
    if mpl is None:
        return
    plt = sys.modules.get("matplotlib.pyplot")
    try:
        if plt is not None:
            plt.close("all")
        if plt is not None and getattr(plt, "_backend_mod", None) is not None:
            plt.switch_backend(backend)
        else:
            # pyplot picks the backend when first used: naming it is enough
            # (and costs nothing, unlike importing it now).
            mpl.rcParams["backend"] = backend
    except Exception:  # noqa: BLE001 - a backend the environment names may not exist
        mpl.rcParams["backend"] = "agg"


def _run_in_process(path: str, argv: list) -> int:
    """Run the file as the main module and finalize as CPython does; the exit status."""
    main = _plain_interpreter(path, argv)
    status, sigint = 0, False
    try:
        with open(path, "rb") as f:
            source = f.read()
        code = compile(source, path, "exec", dont_inherit=True)
        del source
        exec(code, main.__dict__)
    except SystemExit as e:
        status = _system_exit_status(e)
    except BaseException as e:  # noqa: BLE001 - whatever the program raised
        sigint = isinstance(e, KeyboardInterrupt)
        tb = e.__traceback__
        # Our own frame is the outermost one: the program's start below it.
        while tb is not None and tb.tb_frame.f_code.co_filename == _RUNTIME_FILE:
            tb = tb.tb_next
        try:
            sys.excepthook(type(e), e.with_traceback(tb), tb)
        except BaseException:  # noqa: BLE001
            pass
        status = 1
        e = tb = None  # noqa: F841 - drop frames before finalizing
    status = _finalize(status)
    if sigint:
        # CPython ends with SIGINT itself after an uncaught KeyboardInterrupt.
        return 128 + _signal.SIGINT
    return status


def _system_exit_status(e: SystemExit) -> int:
    code = e.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        sys.stderr.write(str(code) + "\n")
    except BaseException:  # noqa: BLE001
        pass
    return 1


def _finalize(status: int) -> int:
    """What Py_FinalizeEx does before exit: wait for threads, atexit, flush."""
    threading = sys.modules.get("threading")
    if threading is not None:
        try:
            threading._shutdown()
        except SystemExit as e:
            status = _system_exit_status(e)
        except BaseException:  # noqa: BLE001
            pass
    try:
        import atexit
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001 - atexit reports errors itself
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except BaseException:  # noqa: BLE001
            if status == 0:
                status = 120
    return status


def _ends_with_semicolon(source: str, node: ast.stmt) -> bool:
    """Whether the final expression statement is followed by ';' (suppressed)."""
    if ";" not in source:
        return False
    lines = source.splitlines()
    if not node.end_lineno or node.end_lineno > len(lines):
        return False
    rest = lines[node.end_lineno - 1].encode("utf-8")[node.end_col_offset:]
    return rest.decode("utf-8", "replace").lstrip().startswith(";")


# ---------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------

def serve(ctl_fd: int = 3) -> None:
    """Run the session protocol on ctl_fd until ``shutdown`` or end of file.

    All per-session setup happens here (stdio, sys.path, the ``__main__``
    namespace, builtins, the IPython stand-in, SIGINT handling, hello), so
    the module can be imported by a zygote that forks and calls serve() in
    the child.  A malformed frame ends the process with exit status 2.
    """
    global _session
    if _session is not None:
        raise RuntimeError("airlock_runtime.serve() is already running")
    _session = _Session(ctl_fd)
    try:
        _session.run()
    finally:
        _flush_stdio()
        _session = None


def main() -> None:
    """Script entry point: serve fd 3, then exit 0 without waiting for user threads."""
    this = sys.modules[__name__]
    if __name__ == "__main__":
        # Run as a script, this module is __main__ (soon replaced by the
        # user's namespace): make `import airlock_runtime` (airlock_mpl does)
        # find this instance instead of loading a second copy.
        g = globals()
        g["__name__"] = "airlock_runtime"
        for obj in list(g.values()):
            if isinstance(obj, (type, types.FunctionType)) and getattr(obj, "__module__", None) == "__main__":
                obj.__module__ = "airlock_runtime"
    sys.modules.setdefault("airlock_runtime", this)
    serve(3)
    try:
        import atexit
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001
        pass
    _flush_stdio()
    os._exit(0)


if __name__ == "__main__":
    main()
