"""The HTTP transport: one JSON request, one streamed NDJSON request, one
error path. Standard library only (http.client), over TCP, TLS or the
server's unix socket (``unix:///run/airlock/airlock.sock``)."""

import http.client
import json
import os
import socket
import ssl
import urllib.parse

from . import errors

DEFAULT_URL = "http://127.0.0.1:8080"
# DEFAULT_REQUEST_TIMEOUT bounds one HTTP request's silences (seconds);
# an execution's own timeout is added to it.
DEFAULT_REQUEST_TIMEOUT = 60.0


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("airlock", timeout=timeout)
        self._path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self._path)
        except BaseException:
            s.close()
            raise
        self.sock = s


def quote(segment):
    return urllib.parse.quote(str(segment), safe="")


def quote_path(path):
    """Escapes each segment of a workspace path (relative to /workspace;
    "/workspace/a" is "a")."""
    return "/".join(quote(p) for p in rel_path(path).split("/"))


def rel_path(path):
    """A workspace path relative to /workspace ("/workspace/a" is "a")."""
    path = str(path)
    if path == "/workspace" or path.startswith("/workspace/"):
        path = path[len("/workspace/"):]
    return path


class Transport:
    """Speaks the airlock API at base_url with an optional bearer token."""

    def __init__(self, base_url=None, token=None, request_timeout=None):
        base_url = base_url or os.environ.get("AIRLOCK_URL") or DEFAULT_URL
        self.token = token if token is not None else os.environ.get("AIRLOCK_TOKEN") or None
        self.request_timeout = DEFAULT_REQUEST_TIMEOUT if request_timeout is None else request_timeout
        u = urllib.parse.urlsplit(base_url)
        self.base_url = base_url
        if u.scheme == "unix":
            self._kind, self._host, self._prefix = "unix", urllib.parse.unquote(u.path), ""
        elif u.scheme in ("http", "https"):
            self._kind, self._host, self._prefix = u.scheme, u.netloc, u.path.rstrip("/")
        else:
            raise errors.InvalidArgumentError(
                "airlock: base URL %r: want http://HOST:PORT, https://... or unix:///path/to/airlock.sock" % base_url,
                code="invalid_argument")

    def _connection(self, timeout):
        if self._kind == "unix":
            return _UnixConnection(self._host, timeout)
        if self._kind == "https":
            return http.client.HTTPSConnection(self._host, timeout=timeout, context=ssl.create_default_context())
        return http.client.HTTPConnection(self._host, timeout=timeout)

    def _send(self, method, path, body=None, content_type=None, accept="application/json", timeout=None):
        """Sends a request and returns (connection, response) for a success;
        raises the typed error otherwise."""
        headers = {"Accept": accept, "User-Agent": "airlock-python"}
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        t = self.request_timeout if timeout is None else timeout
        conn = self._connection(t)
        try:
            conn.request(method, self._prefix + path, body=body, headers=headers)
            resp = conn.getresponse()
        except socket.timeout as e:
            conn.close()
            raise errors.TimeoutError("airlock: %s %s: no answer within %ss" % (method, path, t), code="timeout") from e
        except OSError as e:
            conn.close()
            raise errors.ConnectionError("airlock: the server at %s cannot be reached: %s" % (self.base_url, e)) from e
        if resp.status >= 300:
            try:
                raise _read_error(resp)
            finally:
                conn.close()
        return conn, resp

    def call(self, method, path, payload=None, timeout=None):
        """Sends JSON (if payload is not None) and returns the decoded JSON answer (None when empty)."""
        body = None if payload is None else json.dumps(payload).encode()
        conn, resp = self._send(method, path, body, timeout=timeout)
        try:
            data = _read(resp, method, path)
        finally:
            conn.close()
        return json.loads(data) if data else None

    def raw(self, method, path, body=None, content_type=None, timeout=None):
        """Sends body as is and returns the answer's bytes."""
        conn, resp = self._send(method, path, body, content_type=content_type, accept="*/*", timeout=timeout)
        try:
            return _read(resp, method, path)
        finally:
            conn.close()

    def stream(self, path, payload, on_event, timeout=None, method="POST"):
        """Sends payload (None: no body) asking for NDJSON, hands every
        event to on_event, and returns the end event; a "failed" event
        raises its typed error."""
        body = None if payload is None else json.dumps(payload).encode()
        conn, resp = self._send(method, path, body, accept="application/x-ndjson", timeout=timeout)
        try:
            while True:
                try:
                    line = resp.readline()
                except socket.timeout as e:
                    raise errors.TimeoutError("airlock: the stream of %s went silent" % path, code="timeout") from e
                if not line:
                    raise errors.ServerError("airlock: the stream of %s ended without a result" % path)
                line = line.strip()
                if not line:
                    continue
                ev = json.loads(line)
                kind = ev.get("type")
                if kind == "failed":
                    e = ev.get("error") or {}
                    raise errors.error_for(e.get("name", ""), e.get("value", "") or "the request failed",
                                           status=resp.status, request_id=resp.getheader("X-Request-Id", ""))
                if kind == "end":
                    return ev
                on_event(ev)
        finally:
            conn.close()


def _read(resp, method, path):
    try:
        return resp.read()
    except socket.timeout as e:
        raise errors.TimeoutError("airlock: %s %s: the answer went silent" % (method, path), code="timeout") from e


def _read_error(resp):
    request_id = resp.getheader("X-Request-Id", "")
    retry_after = None
    ra = resp.getheader("Retry-After")
    if ra:
        try:
            retry_after = float(ra)
        except ValueError:
            retry_after = None
    try:
        data = resp.read(1 << 20)
    except OSError:
        data = b""
    code = message = end_code = ""
    try:
        e = json.loads(data)["error"]
        code, message = e.get("code", ""), e.get("message", "")
        end_code = e.get("end_code", "")
        request_id = e.get("request_id") or request_id
    except (ValueError, KeyError, TypeError, AttributeError):
        # Not the API's error body (a 416's text, a proxy's page).
        message = data.decode("utf-8", "replace").strip()
    if not message:
        message = "airlock server: %d %s" % (resp.status, resp.reason)
    return errors.error_for(code, message, status=resp.status, request_id=request_id,
                            end_code=end_code, retry_after=retry_after)
