"""The wire: JSON and the framed control socket (docs/runtime-protocol.md).

Built on C-level primitives only (the C scanner and string encoder of
``_json``, os.read and os.write), so that user code, which shares this
interpreter, cannot break the protocol by patching Python-level functions.
It imports neither ``json`` nor ``re``: a program run's interpreter
would pay about 5 ms of CPU for them before the program starts.
Everything read here comes from the server; a malformed frame is a
ProtocolError, which ends the runtime (exit 2).
"""

from __future__ import annotations

import _thread
import builtins
import os

globals()["__builtins__"] = dict(vars(builtins))  # see the package doc

#: Largest frame either side may send (protocol limit).
MAX_FRAME = 64 << 20


class ProtocolError(Exception):
    """A malformed frame or message from the server (fatal: exit 2)."""


_INF = float("inf")


class _Decoding:
    """What the C scanner reads from a decoder: json.JSONDecoder()'s
    defaults (NaN and the infinities accepted, as json.loads does)."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = {"-Infinity": -_INF, "Infinity": _INF, "NaN": _INF - _INF}.__getitem__


try:
    from _json import encode_basestring as _json_str  # the C encoder, non-ASCII kept
    from _json import make_scanner as _make_scanner  # the C scanner

    _json_scan = _make_scanner(_Decoding())
except ImportError:  # an interpreter without CPython's accelerator: json's own
    import json.decoder
    import json.encoder

    _json_str = json.encoder.encode_basestring
    _json_scan = json.decoder.JSONDecoder().scan_once
_JSON_WS = " \t\n\r"  # JSON's whitespace, and only it


def loads(text: str) -> Any:
    """Parse one JSON document (C scanner only; raises ProtocolError)."""
    start = len(text) - len(str.lstrip(text, _JSON_WS))
    try:
        obj, end = _json_scan(text, start)
    except (StopIteration, ValueError, RecursionError) as e:
        raise ProtocolError(f"invalid JSON: {e!r}") from None
    # A JSON value never ends in whitespace: what follows it is all
    # whitespace exactly when stripping it leaves the value's end.
    if len(str.rstrip(text, _JSON_WS)) != end:
        raise ProtocolError("trailing data after the JSON object")
    return obj


def dumps(obj: Any) -> str:
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
                    k = dumps(k)
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


class Channel:
    """The framed control socket (fd 3), read by the main thread only.

    Writes are serialized by a lock so that user threads may display while
    the main thread runs.
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buf = bytearray()
        self.lock = _thread.allocate_lock()
        self._poll: Any = None  # made by the first pending()

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

    def pending(self) -> bool:
        """Whether input is waiting (buffered, or on the socket)."""
        if self._buf:
            return True
        if self._poll is None:
            import select
            self._poll = select.poll()
            self._poll.register(self.fd, select.POLLIN)
        # Any event: input, end of file or an error, each of which recv
        # reads or raises (select() called all three readable).
        return bool(self._poll.poll(0))

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
        msg = loads(text)
        if type(msg) is not dict or type(msg.get("type")) is not str:
            raise ProtocolError("a message must be a JSON object with a string 'type'")
        return msg

    def write_frame(self, payload: bytes) -> None:
        """Write one frame; the caller holds self.lock."""
        view = memoryview(len(payload).to_bytes(4, "big") + payload)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]


#: The statuses a done message carries.
DONE_STATUSES = frozenset({"ok", "error", "interrupted", "exited"})


def encode_done(msg_id: str, status: str, count: int, exit_code: int) -> bytes:
    """encode() of an execution's done message, written out directly: every
    execution sends one, and the generic encoder walks it key by key."""
    if type(msg_id) is not str or status not in DONE_STATUSES or type(count) is not int or type(exit_code) is not int:
        return encode({"type": "done", "id": msg_id, "status": status,
                       "execution_count": count, "exit_code": exit_code})
    return ('{"type":"done","id":' + _json_str(msg_id) + ',"status":"' + status +
            '","execution_count":' + int.__repr__(count) + ',"exit_code":' +
            int.__repr__(exit_code) + "}").encode("utf-8", "backslashreplace")


def encode(msg: dict) -> bytes:
    # Lone surrogates (which UTF-8 cannot carry) become \\udXXX escapes; they
    # can only occur inside JSON strings, where that is the JSON escape.
    return dumps(msg).encode("utf-8", "backslashreplace")

