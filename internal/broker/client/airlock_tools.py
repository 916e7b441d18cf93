"""Call the tools of this airlock session.

airlock makes the call on the host side, with the tool's credential, which
this sandbox never sees; it checks the arguments against the tool's schema
first and refuses with a reason that names the argument and the rule::

    from airlock_tools import call, list_tools, ToolError

    list_tools()                       # [{'name': 'search', 'arguments': {...}, ...}]
    hits = call("search", query="sandboxing", limit=5)
    try:
        call("search", query="x" * 10_000)
    except ToolError as e:
        print(e.code, e.field, e.rule, e.message)

A tool that answers JSON gives back the decoded value, text gives a str,
anything else bytes; call_raw() gives the whole answer (status, body,
stderr of a command). The same is a command, ``airlock-tool NAME --json
'{...}'`` (``airlock-tool --list``), and a JavaScript module,
``require('airlock_tools')``.
"""

import base64
import http.client
import json
import os
import sys
import urllib.parse

__all__ = ["call", "call_raw", "list_tools", "ToolError"]

_DEFAULT_URL = "http://127.0.0.1:3129"


class ToolError(Exception):
    """A call airlock refused, or that failed.

    code is the error's code (invalid_argument, not_found, quota_exceeded,
    limit_reached, too_large, timeout, unavailable, or tool_status /
    tool_exit when the tool answered an HTTP error or a non-zero exit);
    field and rule name the argument and the rule it broke; retry_after is
    in seconds; result is the tool's whole answer when it gave one.
    """

    def __init__(self, tool, code, message, field=None, rule=None, retry_after=None, failed=False, result=None):
        self.tool, self.code, self.message = tool, code, message
        self.field, self.rule, self.retry_after = field, rule, retry_after
        self.failed, self.result = failed, result
        super().__init__(str(self))

    def __str__(self):
        where = f" (argument {self.field!r}, rule {self.rule})" if self.field else (f" ({self.rule})" if self.rule else "")
        return f"{self.tool}: {self.code}: {self.message}{where}"


def _address():
    u = urllib.parse.urlsplit(os.environ.get("AIRLOCK_TOOLS_URL") or _DEFAULT_URL)
    return u.hostname or "127.0.0.1", u.port or 80


def _request(tool, method, path, body=None):
    host, port = _address()
    conn = http.client.HTTPConnection(host, port, timeout=3600)
    try:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        if os.environ.get("AIRLOCK_CONTEXT"):
            headers["X-Airlock-Context"] = os.environ["AIRLOCK_CONTEXT"]
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
    except OSError as e:
        raise ToolError(tool, "unavailable",
                        "airlock's tools do not answer in this sandbox: the session was created without tools "
                        f"(create it with \"tools\": [...]) ({e.__class__.__name__})") from None
    finally:
        conn.close()
    try:
        return resp.status, json.loads(data)
    except ValueError:
        raise ToolError(tool, "unavailable", f"airlock's tools answered HTTP {resp.status} with no JSON") from None


def list_tools():
    """The session's tools: name, description, kind, writable, arguments (a JSON Schema)."""
    _, answer = _request("list_tools", "GET", "/v1/tools")
    return answer.get("tools", [])


def call_raw(name, args=None, /, **kwargs):
    """Calls tool name; returns its whole answer (status, json/text/base64, stderr, bytes)."""
    if not isinstance(name, str) or not name:
        raise TypeError("call: the tool's name must be a non-empty string")
    merged = dict(args or {})
    merged.update(kwargs)
    body = json.dumps(merged).encode()
    _, answer = _request(name, "POST", "/v1/tools/" + urllib.parse.quote(name, safe=""), body)
    if not answer.get("ok"):
        e = answer.get("error") or {}
        retry = e.get("retry_after_ms")
        raise ToolError(name, e.get("code", "internal"), e.get("message", "refused"), e.get("field"), e.get("rule"),
                        retry / 1000 if retry else None, bool(e.get("failed")))
    return answer["result"]


def _body(result):
    if "json" in result:
        return result["json"]
    if "text" in result:
        return result["text"]
    return base64.b64decode(result.get("base64", ""))


def call(name, args=None, /, **kwargs):
    """Calls tool name with arguments (a dict, keywords, or both).

    Returns the answer's body: decoded JSON, text, or bytes. Raises
    ToolError when airlock refuses the call (the argument and rule at
    fault), when it fails (timeout, an answer over its cap), or when the
    tool answers an HTTP error status or exits non-zero.
    """
    result = call_raw(name, args, **kwargs)
    status = result.get("status", 0)
    if result.get("kind") == "command" and status != 0:
        detail = (result.get("stderr") or "").strip().splitlines()[-1:] or [""]
        raise ToolError(name, "tool_exit", f"the command exited with status {status}: {detail[0][:300]}", result=result)
    if result.get("kind") == "http" and status >= 400:
        raise ToolError(name, "tool_status", f"the tool answered HTTP {status}", result=result)
    return _body(result)


def main(argv=None):
    """airlock-tool NAME [--json '{...}'] [KEY=VALUE ...] | airlock-tool --list"""
    argv = sys.argv[1:] if argv is None else argv
    usage = ("usage: airlock-tool NAME [--json '{\"arg\": value}'] [arg=value ...]\n"
             "       airlock-tool --list\n"
             "Calls one of this session's tools through airlock and prints its answer.")
    if not argv or argv[0] in ("-h", "--help"):
        print(usage, file=sys.stderr if not argv else sys.stdout)
        return 0 if argv else 2
    if argv[0] == "--list":
        for t in list_tools():
            print(f"{t['name']}\t{t.get('kind', '')}\t{t.get('description', '')}")
        return 0
    name, rest, args = argv[0], argv[1:], {}
    while rest:
        a = rest.pop(0)
        if a == "--json" and rest:
            try:
                more = json.loads(rest.pop(0))
            except ValueError as e:
                print(f"airlock-tool: --json: {e}", file=sys.stderr)
                return 2
            if not isinstance(more, dict):
                print("airlock-tool: --json takes an object", file=sys.stderr)
                return 2
            args.update(more)
        elif "=" in a and not a.startswith("-"):
            k, v = a.split("=", 1)
            args[k] = v
        else:
            print(f"airlock-tool: unexpected {a!r}\n{usage}", file=sys.stderr)
            return 2
    try:
        result = call_raw(name, args)
    except ToolError as e:
        print(f"airlock-tool: {e}", file=sys.stderr)
        return 1 if e.failed else 2
    body = _body(result)
    if isinstance(body, bytes):
        sys.stdout.buffer.write(body)
    elif isinstance(body, str):
        sys.stdout.write(body if body.endswith("\n") or not body else body + "\n")
    else:
        print(json.dumps(body, indent=2, ensure_ascii=False))
    if result.get("stderr"):
        sys.stderr.write(result["stderr"])
    status = result.get("status", 0)
    if result.get("kind") == "command":
        return status
    return 3 if status >= 400 else 0


if __name__ == "__main__":
    sys.exit(main())
