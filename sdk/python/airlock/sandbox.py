"""Sandbox: a session of the airlock server, with its files and commands,
and run: one piece of code in a fresh sandbox."""

import base64
import json
import re
from urllib.parse import urlencode

from . import errors
from ._http import Transport, quote, quote_path, rel_path
from .models import CodeContext, CommandResult, EntryInfo, Execution, Result, ExecutionError, RunResult, WriteInfo

# A session's own limits.timeout when the server did not say (its default).
_DEFAULT_EXEC_TIMEOUT = 30.0
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION = re.compile(r"([0-9.]+)(ns|us|µs|μs|ms|s|m|h)")


def _seconds(d):
    """A Go duration ("1m30s", "500ms") or a number of seconds, in seconds (None if unknown)."""
    if d is None or isinstance(d, (int, float)):
        return d
    total, pos = 0.0, 0
    for m in _DURATION.finditer(d):
        if m.start() != pos:
            return None
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    return total if pos == len(d) and pos else None


def _limits(limits):
    """limits as the API takes them: a dict such as {"memory": "512M", "timeout": 30}."""
    if limits is None:
        return None
    if not isinstance(limits, dict):
        raise TypeError("limits: want a dict such as {'memory': '512M', 'timeout': 30}")
    return dict(limits)


def _network(network):
    """network as the API takes it: {"allow": [names]}; a list of names is shorthand for it."""
    if isinstance(network, (list, tuple)):
        return {"allow": list(network)}
    return network


def _names(what, names):
    """tools= or secrets= as the API takes them: a list of names (one name
    alone is a list of it). A mapping is refused: a secret's value is the
    server's, never the client's (variables go in env=)."""
    if names is None:
        return None
    if isinstance(names, str):
        return [names]
    if isinstance(names, dict):
        raise TypeError("%s: want names such as ['NAME'], not a mapping: the operator declares their %s on the server "
                        "and a client never sends one (use env= for variables)"
                        % (what, "values" if what == "secrets" else "endpoints"))
    out = list(names)
    for n in out:
        if not isinstance(n, str):
            raise TypeError("%s: want names (str), got %r" % (what, n))
    return out


def _input_files(files):
    """files as {path: str|bytes} or [(path, str|bytes)] -> the API's list."""
    if not files:
        return None
    items = files.items() if isinstance(files, dict) else files
    out = []
    for path, content in items:
        if isinstance(content, str):
            out.append({"path": path, "content": content})
        else:
            out.append({"path": path, "content_base64": base64.b64encode(bytes(content)).decode()})
    return out


class _Streamer:
    """Turns streamed events into the user's callbacks."""

    def __init__(self, on_stdout, on_stderr, on_result, on_error):
        self.on_stdout, self.on_stderr, self.on_result, self.on_error = on_stdout, on_stderr, on_result, on_error

    def __call__(self, ev):
        kind = ev.get("type")
        if kind in ("stdout", "stderr"):
            text = ev.get("text")
            if text is None and ev.get("data_base64"):
                text = base64.b64decode(ev["data_base64"]).decode("utf-8", "replace")
            cb = self.on_stdout if kind == "stdout" else self.on_stderr
            if cb and text:
                cb(text)
        elif kind in ("result", "display"):
            if self.on_result:
                self.on_result(Result({"type": kind, "data": ev.get("data") or {}, "metadata": ev.get("metadata")}))
        elif kind == "error":
            if self.on_error and ev.get("error"):
                self.on_error(ExecutionError(ev["error"]))


class Sandbox:
    """A session of an airlock server: a sandbox whose interpreter keeps its
    state across ``run_code`` calls, with a /workspace (``files``) and a
    shell (``commands``). Use it as a context manager, or call ``kill()``.

        with Sandbox.create() as sbx:
            sbx.run_code("x = 41")
            print(sbx.run_code("x + 1").text)   # 42
    """

    def __init__(self, info, transport):
        self._t = transport
        self._info = info
        self.id = info["id"]
        self.language = info.get("language", "")
        self.template = info.get("template", "")  # empty: the server's own root
        # The secrets its code may use: dicts of name, env_var (the variable
        # holding the placeholder) and hosts; never a value.
        self.secrets = info.get("secrets") or []
        self.files = Files(self)
        self.commands = Commands(self)
        self.pty = Pty(self.commands)

    # --- creating and finding sandboxes

    @classmethod
    def create(cls, language="python", limits=None, network=None, env=None, timeout=None,
               base_url=None, token=None, request_timeout=None, template=None, tools=None, secrets=None, **extra):
        """Creates a session. ``language``: python, bash or javascript;
        ``limits``: {"memory": "1G", "timeout": 60, "cpu_time": ...} (each
        at most the server's maximum); ``network``: the hosts the sandbox
        may reach, {"allow": ["pypi.org", "*.example.com:8443"]} or just the
        list (where the server offers egress); ``env``: variables; ``timeout``: seconds without use
        after which the session ends (its idle timeout); ``template``: the
        root filesystem the server's operator registered (e.g.
        "code-interpreter"; default: the server's); ``tools``: names of the operator's tools the
        session's code may call through airlock (``Sandbox.available_tools()``
        lists them; inside, ``from airlock_tools import call``); ``secrets``:
        names of the operator's secrets the session's code may use
        (``Sandbox.available_secrets()`` lists them): each is in its
        variable only as a placeholder, which airlock replaces with the value
        in requests to the secret's hosts only (``network`` must allow them;
        ``sbx.secrets`` describes them); ``base_url`` and
        ``token`` default to AIRLOCK_URL and AIRLOCK_TOKEN. Other fields of
        the API's request pass through: ``on_timeout="pause"``,
        ``on_timeout_restores="files"`` (that pause keeps the files only), ``auto_resume=True``, ``metadata={"user": "u1"}`` (labels ``list``
        filters on), a lifetime ``timeout`` is ``lifetime=`` here."""
        t = Transport(base_url, token, request_timeout)
        body = {"language": language}
        if limits is not None:
            body["limits"] = _limits(limits)
        if network is not None:
            body["network"] = _network(network)
        if env:
            body["env"] = dict(env)
        if timeout is not None:
            body["timeout_idle"] = timeout
        if template:
            body["template"] = template
        if "lifetime" in extra:
            body["timeout"] = extra.pop("lifetime")
        tools, secrets = _names("tools", tools), _names("secrets", secrets)
        if tools:
            body["tools"] = tools
        if secrets:
            body["secrets"] = secrets
        body.update(extra)
        return cls(t.call("POST", "/v1/sessions", body), t)

    @classmethod
    def connect(cls, sandbox_id, base_url=None, token=None, request_timeout=None):
        """Attaches to an existing session (NotFoundError if there is none, SessionEndedError if it ended)."""
        t = Transport(base_url, token, request_timeout)
        info = t.call("GET", "/v1/sessions/" + quote(sandbox_id))
        if info.get("state") == "ended":
            raise errors.SessionEndedError("session ended: " + (info.get("end_reason") or "ended"),
                                           code="session_ended", status=410, end_code=info.get("end_code", ""))
        return cls(info, t)

    @classmethod
    def available_tools(cls, base_url=None, token=None):
        """The tools your sessions may be given (``tools=`` of create):
        dicts with name, description, kind, writable and arguments (a JSON
        Schema). Their endpoints and credentials stay the server's."""
        return Transport(base_url, token).call("GET", "/v1/tools").get("tools") or []

    @classmethod
    def available_secrets(cls, base_url=None, token=None):
        """The secrets your sessions may use (``secrets=`` of create): dicts
        with name, env_var (the variable its placeholder is in) and hosts
        (where its value is sent); never a value."""
        return Transport(base_url, token).call("GET", "/v1/secrets").get("secrets") or []

    @classmethod
    def list(cls, base_url=None, token=None, state=None, metadata=None):
        """Describes the server's sessions (dicts, as the API sends them):
        those in ``state`` ("idle", "busy", "paused", "running": any live
        one; or a list of them) whose metadata holds every entry of
        ``metadata`` (given at create: ``Sandbox.create(metadata={...})``)."""
        q = []
        if state:
            q.append(("state", state if isinstance(state, str) else ",".join(state)))
        for k, v in (metadata or {}).items():
            q.append(("metadata." + k, v))
        path = "/v1/sessions" + ("?" + urlencode(q) if q else "")
        return Transport(base_url, token).call("GET", path).get("sessions") or []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.kill()
        return False

    def __repr__(self):
        return "Sandbox(id=%r, language=%r)" % (self.id, self.language)

    # --- the session

    def info(self):
        """The session's description (a dict: state, limits, executions, end_reason...)."""
        self._info = self._t.call("GET", self._path())
        return self._info

    def history(self, after=0):
        """The session's executions and shell commands, oldest first (a dict:
        ``entries``, each with its ``seq``, ``kind``, ``code`` and ``result``
        or ``command``; ``forgotten``, ``state``). ``after``: only entries
        with a greater ``seq``. The server keeps the newest ones within its
        bounds, and an ended session's for a while."""
        path = self._path("/history")
        if after:
            path += "?after=%d" % int(after)
        return self._t.call("GET", path)

    def notebook(self, path=None):
        """The session's history as a Jupyter notebook (nbformat 4.5): a dict
        (``nbformat.from_dict`` reads it), also written to ``path`` as an
        .ipynb file when given."""
        data = self._t.raw("GET", self._path("/notebook"))
        if path is not None:
            with open(path, "wb") as f:
                f.write(data)
        return json.loads(data)

    # --- ports: programs listening inside the sandbox, reached from outside

    def open_port(self, port, public=False):
        """Opens ``port`` of the sandbox to the outside (or makes it public or
        private again): a dict with its ``path`` (on the API's origin, for
        programs), ``host`` and ``url`` (its own origin, for browsers, when
        the server has a ports domain), ``token`` (send it as
        X-Airlock-Port-Token; the SDK's key works too) and a one-time browser
        ``link``. Private unless ``public`` (which the server must allow).
        Opening an open port keeps its token."""
        return self._t.call("POST", self._path("/ports/%d" % int(port)), {"public": bool(public)})

    def get_host(self, port):
        """The host ``port`` is reached at, ``<port>-<sandbox>.<domain>`` as
        E2B's ``get_host`` gives it (the port is opened, private: see
        ``open_port`` for its token). UnsupportedError when the server has no
        ports domain: use ``open_port(port)["path"]`` there."""
        p = self.open_port(port)
        if not p.get("host"):
            raise errors.UnsupportedError(
                "airlock: this server has no ports domain (ports.domain): reach port %d at its path, %s"
                % (int(port), p.get("path")), code="unsupported")
        return p["host"]

    def ports(self):
        """The sandbox's open ports (dicts: ``port``, ``public``, ``path``,
        ``host``, ``requests``, ``bytes_in``, ``bytes_out``...; no tokens)."""
        return self._t.call("GET", self._path("/ports")).get("ports") or []

    def close_port(self, port):
        """Closes ``port``: its token and links stop working and its
        connections are cut (NotFoundError if it is not open)."""
        self._t.call("DELETE", self._path("/ports/%d" % int(port)))

    def tools(self):
        """The tools this session's code may call (dicts, as available_tools)."""
        return self._t.call("GET", self._path("/tools")).get("tools") or []

    def is_running(self):
        try:
            return self.info().get("state") != "ended"
        except (errors.NotFoundError, errors.SessionEndedError):
            return False

    def kill(self):
        """Ends the session and its sandbox. Idempotent, as the server's
        DELETE is: True once the session is ended (also when it had ended
        already), False if the server knows no such session."""
        try:
            self._t.call("DELETE", self._path())
            return True
        except (errors.NotFoundError, errors.SessionEndedError):
            return False

    close = kill

    def pause(self, restores=None):
        """Pauses the session: its /workspace files and settings are kept on the server's disk and its
        sandbox freed; the interpreter's variables are not kept (``restores: "files"``), unless the
        description said ``restores: "memory"`` (gVisor on a server with persistence).
        ``restores="files"`` keeps the files only even then (the interpreter restarts on resume;
        E2B's ``keep_memory=False``); ``restores="memory"`` raises InvalidArgumentError, saying why,
        where the memory cannot be kept. ConflictError while code runs (interrupt it first). Returns
        the description (``state: "paused"``)."""
        body = None
        if restores is not None:
            body = {"restores": restores}
        self._info = self._t.call("POST", self._path("/pause"), body)
        return self._info

    def resume(self, restores=None):
        """Makes a paused session live again in a fresh sandbox, with its files (the interpreter starts
        afresh: ``restored: "files"``; or ``restored: "memory"``: it runs on with its variables, and
        ``restored_reason`` says why a memory image was not used). ``restores="files"`` restores the
        files only even where the pause kept the memory (E2B's ``on_resume="reboot"``).
        PauseImageCorruptError if its image was damaged."""
        body = None
        if restores is not None:
            body = {"restores": restores}
        self._info = self._t.call("POST", self._path("/resume"), body)
        return self._info

    def fork(self):
        """A new Sandbox from this one's files and settings (live or paused): its interpreters start
        afresh (``restored: "files"``), or, where this one ``restores: "memory"``, run on from its
        memory (``restored: "memory"``) with their random generators reseeded (its ``info``'s
        ``reseeded`` says whether every runtime confirmed it, ``not_reseeded`` which did not); this
        one goes on as it was."""
        return Sandbox(self._t.call("POST", self._path("/fork")), self._t)

    def set_timeout(self, timeout):
        """Sets the session's lifetime again, from now (seconds, or a duration such as "30m"): it then
        ends, or pauses if created with ``on_timeout="pause"``."""
        self._info = self._t.call("PUT", self._path("/timeout"), {"timeout": timeout})
        return self._info

    def interrupt(self):
        """Interrupts the running execution (KeyboardInterrupt); the session lives on."""
        return bool(self._t.call("POST", self._path("/interrupt")).get("interrupted"))

    def run_code(self, code, timeout=None, on_stdout=None, on_stderr=None, on_result=None, on_error=None,
                 language=None, context=None):
        """Runs code in the session and returns an Execution. ``timeout``
        (seconds) overrides the session's limits.timeout for this run; when
        it runs out the code is interrupted (``killed``, ``kill_reason``
        "timeout") and the session keeps its state; ``error`` is then a
        ``TimeoutError`` whose value says the limit, how long the code ran
        and whether the state was kept (``CPUTimeError``, ``MemoryError``,
        ``ProcessLimitError`` for the other limits). With callbacks the
        output streams: ``on_stdout(str)``, ``on_stderr(str)`` as it comes,
        ``on_result(Result)`` per plot or displayed value, ``on_error(ExecutionError)``.

        ``context`` (a CodeContext or its id) runs the code there;
        ``language`` ("bash", "javascript"...) in that language's default
        context of this sandbox, started on first use: the same files,
        its own variables."""
        body = {"code": code}
        if context is not None:
            body["context"] = getattr(context, "id", context)
        elif language is not None and language != self.language:
            body["language"] = language
        if timeout is not None:
            body["timeout"] = timeout
        wait = self._wait(timeout)
        if on_stdout or on_stderr or on_result or on_error:
            end = self._t.stream(self._path("/execute"), body,
                                 _Streamer(on_stdout, on_stderr, on_result, on_error), timeout=wait)
            return Execution(end.get("result") or {})
        return Execution(self._t.call("POST", self._path("/execute"), body, timeout=wait))

    # --- code contexts

    def create_code_context(self, language=None, cwd=None, envs=None):
        """Starts another interpreter in this sandbox: ``language`` (this
        sandbox's when None), ``cwd`` (relative to /workspace, or
        absolute; it must exist), ``envs`` added to its environment.
        Returns a CodeContext for ``run_code(context=...)``."""
        body = {}
        if language:
            body["language"] = language
        if cwd:
            body["cwd"] = cwd
        if envs:
            body["env"] = dict(envs)
        return CodeContext(self._t.call("POST", self._path("/contexts"), body, timeout=_DEFAULT_EXEC_TIMEOUT))

    def list_code_contexts(self):
        """This sandbox's code contexts, its default one first."""
        return [CodeContext(c) for c in self._t.call("GET", self._path("/contexts")).get("contexts") or []]

    def restart_code_context(self, context):
        """Starts a code context's interpreter anew (empty state; the same
        id, language, directory and environment); returns its CodeContext."""
        return CodeContext(self._t.call("POST", self._path("/contexts/" + quote(getattr(context, "id", context)) + "/restart"),
                                        timeout=_DEFAULT_EXEC_TIMEOUT))

    def remove_code_context(self, context):
        """Ends a code context (a CodeContext or its id): its interpreter and what it started."""
        self._t.call("DELETE", self._path("/contexts/" + quote(getattr(context, "id", context))))

    # --- helpers

    def _path(self, tail=""):
        return "/v1/sessions/" + quote(self.id) + tail

    def _wait(self, timeout):
        """How long the HTTP request may stay silent: the execution's own timeout plus the transport's."""
        t = timeout if timeout is not None else _seconds((self._info.get("limits") or {}).get("timeout"))
        return (t or _DEFAULT_EXEC_TIMEOUT) + self._t.request_timeout


class Files:
    """The session's /workspace. Paths are relative to it (``/workspace/a`` works too)."""

    def __init__(self, sbx):
        self._s = sbx

    def write(self, path, data):
        """Writes str (UTF-8), bytes or a binary file object to path; returns WriteInfo."""
        if isinstance(data, str):
            data = data.encode()
        elif hasattr(data, "read"):
            data = data.read()
            if isinstance(data, str):
                data = data.encode()
        out = self._s._t.raw("PUT", self._s._path("/files/" + quote_path(path)), bytes(data),
                             content_type="application/octet-stream")
        return WriteInfo(json.loads(out))

    def read(self, path, format="text"):
        """Reads path: str (format "text", UTF-8) or bytes (format "bytes")."""
        data = self._s._t.raw("GET", self._s._path("/files/" + quote_path(path)))
        if format == "bytes":
            return data
        if format == "text":
            return data.decode("utf-8")
        raise ValueError("format: want 'text' or 'bytes'")

    def list(self, path="", recursive=False):
        """Lists a directory of /workspace ("" for itself): EntryInfo objects."""
        q = []
        path = rel_path(path)
        if path:
            q.append("path=" + quote(path))
        if recursive:
            q.append("recursive=true")
        out = self._s._t.call("GET", self._s._path("/files" + ("?" + "&".join(q) if q else "")))
        return [EntryInfo(e) for e in out.get("entries") or []]

    def exists(self, path):
        parent, _, name = rel_path(path).rstrip("/").rpartition("/")
        try:
            return any(e.name == name for e in self.list(parent))
        except errors.NotFoundError:
            return False

    def remove(self, path, recursive=False):
        """Removes a file (a directory with recursive=True)."""
        self._s._t.call("DELETE", self._s._path("/files/" + quote_path(path)) + ("?recursive=true" if recursive else ""))


class CommandHandle:
    """A background command: ``wait()``, ``kill()``, ``send_stdin()``, ``result()``."""

    def __init__(self, commands, res):
        self._c = commands
        self.id = res.id
        self.pid = res.pid
        self.last = res

    def result(self):
        """Its status and output so far (CommandResult)."""
        self.last = self._c.get(self.id)
        return self.last

    def wait(self, timeout=60):
        """Waits up to timeout seconds for it to end and returns its CommandResult (running if it did not)."""
        self.last = self._c.get(self.id, wait=timeout)
        return self.last

    def kill(self, signal="SIGKILL"):
        self._c.kill(self.id, signal)

    def send_stdin(self, data, close=False):
        """Writes str or bytes (a terminal's keys: b"\\x03" is Ctrl-C) to its input."""
        self._c.send_stdin(self.id, data, close)

    def resize(self, cols, rows):
        """Sets the size of its terminal (a command started by ``pty.create``)."""
        self._c.resize(self.id, cols, rows)

    def connect(self, on_stdout=None, on_stderr=None, replay=True, timeout=None):
        """Follows it until it ends (again after a disconnect): ``on_stdout``
        and ``on_stderr`` get its output (with ``replay``, what it printed
        so far first); returns its CommandResult."""
        self.last = self._c.connect(self.id, on_stdout, on_stderr, replay, timeout)
        return self.last

    def __repr__(self):
        return "CommandHandle(id=%r, pid=%r)" % (self.id, self.pid)


class Commands:
    """Shell commands run with ``bash -c`` in the session's sandbox, beside
    its interpreter (same files, limits and user; the interpreter's state is
    untouched)."""

    def __init__(self, sbx):
        self._s = sbx

    def run(self, cmd, background=False, envs=None, cwd=None, timeout=None, stdin=None,
            on_stdout=None, on_stderr=None):
        """Runs cmd and returns its CommandResult (exit_code, stdout,
        stderr...; a failing command is a result, not an exception), or,
        with background=True, a CommandHandle at once."""
        body = {"command": cmd}
        if timeout is not None:
            body["timeout"] = timeout
        if envs:
            body["env"] = dict(envs)
        if cwd:
            body["cwd"] = cwd
        if stdin is not None:
            body["stdin"] = stdin
        path = self._s._path("/commands")
        if background:
            body["background"] = True
            return CommandHandle(self, CommandResult(self._s._t.call("POST", path, body)))
        wait = self._s._wait(timeout)
        if on_stdout or on_stderr:
            end = self._s._t.stream(path, body, _Streamer(on_stdout, on_stderr, None, None), timeout=wait)
            return CommandResult(end.get("command") or {})
        return CommandResult(self._s._t.call("POST", path, body, timeout=wait))

    def get(self, command_id, wait=None):
        """A command's status and output so far; wait (seconds) waits for it to end."""
        p = self._s._path("/commands/" + quote(command_id))
        if wait:
            p += "?wait=%gs" % wait
        return CommandResult(self._s._t.call("GET", p, timeout=(wait or 0) + self._s._t.request_timeout))

    def list(self):
        return [CommandResult(c) for c in self._s._t.call("GET", self._s._path("/commands")).get("commands") or []]

    def kill(self, command_id, signal="SIGKILL"):
        """Signals a running command's process group (SIGKILL by default)."""
        self._s._t.call("POST", self._s._path("/commands/" + quote(command_id) + "/signal"), {"signal": signal})

    def send_stdin(self, command_id, data, close=False):
        """Writes str or bytes to a running command's input; ``close``
        closes it (Ctrl-D on a terminal)."""
        body = {"data_base64": base64.b64encode(data).decode()} if isinstance(data, bytes) else {"data": data}
        if close:
            body["close"] = True
        self._s._t.call("POST", self._s._path("/commands/" + quote(command_id) + "/stdin"), body)

    def resize(self, command_id, cols, rows):
        """Sets the size of a command's terminal."""
        self._s._t.call("POST", self._s._path("/commands/" + quote(command_id) + "/resize"), {"cols": cols, "rows": rows})

    def connect(self, command_id, on_stdout=None, on_stderr=None, replay=True, timeout=None):
        """Follows a running command by id until it ends: its output goes
        to the callbacks as it comes (with ``replay``, what it printed so
        far first; a terminal's output is ``stdout``). Returns its
        CommandResult. A client that left attaches again this way.
        ``timeout`` (seconds) bounds a silence of the stream (a day by
        default: a terminal may well be quiet)."""
        p = self._s._path("/commands/" + quote(command_id) + "/events" + ("" if replay else "?replay=false"))
        end = self._s._t.stream(p, None, _Streamer(on_stdout, on_stderr, None, None),
                                timeout=timeout or 86400.0, method="GET")
        return CommandResult(end.get("command") or {})


class Pty:
    """Commands under a pseudo-terminal (``sbx.pty``): interactive shells,
    programs that want a terminal. They run in the background; type with
    ``send_stdin``, follow with ``connect``."""

    def __init__(self, commands):
        self._c = commands

    def create(self, cols=80, rows=24, cmd="exec bash -i", cwd=None, envs=None, timeout=None):
        """Starts ``cmd`` under a terminal of cols x rows; returns its CommandHandle."""
        body = {"command": cmd, "pty": {"cols": cols, "rows": rows}}
        if cwd:
            body["cwd"] = cwd
        if envs:
            body["env"] = dict(envs)
        if timeout is not None:
            body["timeout"] = timeout
        return CommandHandle(self._c, CommandResult(self._c._s._t.call("POST", self._c._s._path("/commands"), body)))

    def send_stdin(self, command_id, data):
        self._c.send_stdin(command_id, data)

    def resize(self, command_id, cols, rows):
        self._c.resize(command_id, cols, rows)

    def kill(self, command_id, signal="SIGKILL"):
        self._c.kill(command_id, signal)


def run(code, files=None, language="python", limits=None, env=None, network=None, base_url=None, token=None,
        on_stdout=None, on_stderr=None, on_result=None, on_error=None, request_timeout=None, template=None,
        tools=None, secrets=None):
    """Runs code once in a fresh sandbox that is destroyed afterwards
    (POST /v1/execute) and returns a RunResult: an Execution plus the
    ``files`` the code wrote (bytes). ``files`` are placed in /workspace
    first: {"in.csv": "a,b\\n1,2\\n"} (str or bytes). ``template`` names
    the sandbox's root filesystem (see templates()); ``tools`` and
    ``secrets`` as in Sandbox.create."""
    body = {"language": language, "code": code}
    if template:
        body["template"] = template
    return _once("/v1/execute", body, files, limits, env, network, base_url, token,
                 _Streamer(on_stdout, on_stderr, on_result, on_error), request_timeout, tools, secrets)


def run_program(code, args=None, filename=None, files=None, language="python", limits=None, env=None,
                network=None, base_url=None, token=None, on_stdout=None, on_stderr=None, request_timeout=None,
                template=None, tools=None, secrets=None):
    """Runs code as a program, once, in a fresh sandbox (POST /v1/run): it
    is written to /workspace/filename (main.py by default) and run as
    ``python3 FILE ARGS`` would run it. Returns a RunResult whose
    ``exit_code`` is the program's status, with its output and the files it
    wrote. ``tools`` and ``secrets`` as in Sandbox.create."""
    body = {"language": language, "code": code}
    if template:
        body["template"] = template
    if args:
        body["args"] = [str(a) for a in args]
    if filename:
        body["filename"] = filename
    return _once("/v1/run", body, files, limits, env, network, base_url, token,
                 _Streamer(on_stdout, on_stderr, None, None), request_timeout, tools, secrets)


def templates(base_url=None, token=None):
    """The templates the caller may name (GET /v1/templates): a list of
    dicts (name, version, languages, size, pool, default...), by name. A
    request naming none gets the server's default (the host's root unless
    the operator set one)."""
    return Transport(base_url, token).call("GET", "/v1/templates").get("templates") or []


def _once(path, body, files, limits, env, network, base_url, token, streamer, request_timeout, tools=None, secrets=None):
    tools, secrets = _names("tools", tools), _names("secrets", secrets)
    if tools:
        body["tools"] = tools
    if secrets:
        body["secrets"] = secrets
    t = Transport(base_url, token, request_timeout)
    if files:
        body["files"] = _input_files(files)
    if limits is not None:
        body["limits"] = _limits(limits)
    if env:
        body["env"] = dict(env)
    if network is not None:
        body["network"] = _network(network)
    wait = (_seconds((limits or {}).get("timeout")) or _DEFAULT_EXEC_TIMEOUT) + t.request_timeout
    if streamer.on_stdout or streamer.on_stderr or streamer.on_result or streamer.on_error:
        end = t.stream(path, body, streamer, timeout=wait)
        r = dict(end.get("result") or {})
        r["files"], r["limits"] = end.get("files"), end.get("limits")
        return RunResult(r)
    return RunResult(t.call("POST", path, body, timeout=wait))
