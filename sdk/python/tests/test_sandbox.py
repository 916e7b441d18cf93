"""The SDK against a real airlock server (AIRLOCK_URL, AIRLOCK_TOKEN)."""

import http.client
import os
import threading
import time
import unittest
import urllib.parse

import support
import airlock
from airlock import Sandbox


class SandboxTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.sbx = None

    def setUp(self):
        support.need_server(self)
        if SandboxTest.sbx is None:
            SandboxTest.sbx = Sandbox.create(limits={"timeout": 60})

    @classmethod
    def tearDownClass(cls):
        if cls.sbx is not None:
            cls.sbx.kill()

    def test_state_is_kept(self):
        self.sbx.run_code("x = 41")
        e = self.sbx.run_code("x + 1")
        self.assertIsNone(e.error)
        self.assertEqual(e.text, "42")
        self.assertTrue(e.results[0].is_main_result)
        self.assertEqual(e.results[0].formats(), ["text"])
        self.assertEqual(Sandbox.connect(self.sbx.id).run_code("x").text, "41")

    def test_metadata_and_list_filters(self):
        tag = "run-%d" % time.monotonic_ns()
        a = Sandbox.create(metadata={"suite": tag, "user": "u1"})
        b = Sandbox.create(metadata={"suite": tag, "user": "u2"})
        try:
            self.assertEqual(a.info()["metadata"], {"suite": tag, "user": "u1"})
            ids = lambda **kw: sorted(s["id"] for s in Sandbox.list(**kw))
            self.assertEqual(ids(metadata={"suite": tag}), sorted([a.id, b.id]))
            self.assertEqual(ids(metadata={"suite": tag, "user": "u2"}), [b.id])
            self.assertEqual(ids(metadata={"suite": tag}, state="running"), sorted([a.id, b.id]))
            self.assertEqual(ids(metadata={"suite": tag}, state=["paused"]), [])
            with self.assertRaises(airlock.InvalidArgumentError):
                Sandbox.list(state="asleep")
            with self.assertRaises(airlock.InvalidArgumentError):
                Sandbox.create(metadata={"bad\nkey": "v"})
        finally:
            a.kill()
            b.kill()

    def test_logs_and_no_result(self):
        e = self.sbx.run_code("import sys\nprint('out')\nprint('err', file=sys.stderr)\ny = 1")
        self.assertEqual(e.logs.stdout, "out\n")
        self.assertEqual(e.logs.stderr, "err\n")
        self.assertEqual("".join(e.logs.stdout), "out\n")  # E2B-style joins work on str too
        self.assertIsNone(e.text)
        self.assertEqual(e.results, [])

    def test_plot_png_bytes(self):
        e = self.sbx.run_code("import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()")
        self.assertIsNone(e.error)
        pngs = [r.png for r in e.results if r.png is not None]
        self.assertEqual(len(pngs), 1, e.results)
        self.assertTrue(pngs[0].startswith(b"\x89PNG\r\n\x1a\n"))
        self.assertIn("png", e.results[0].formats())
        self.assertFalse(e.results[0].is_main_result)

    def test_history_and_notebook(self):
        sbx = Sandbox.create()
        try:
            sbx.run_code("print('first')")
            sbx.commands.run("echo second")
            h = sbx.history()
            self.assertEqual([e["kind"] for e in h["entries"]], ["execution", "command"])
            self.assertEqual(h["entries"][0]["result"]["stdout"], "first\n")
            self.assertEqual(sbx.history(after=1)["entries"][0]["command"]["stdout"], "second\n")
            self.assertIn("usage", sbx.info())
            nb = sbx.notebook()
            self.assertEqual((nb["nbformat"], len(nb["cells"])), (4, 2))
            self.assertEqual(nb["cells"][0]["outputs"][0]["text"], ["first\n"])
        finally:
            sbx.kill()

    def test_tools(self):
        # The server declares a tool "lookup"; a session given it calls it
        # from inside, the credential attached by airlock, and the result
        # lists each call with airlock's decision.
        names = [t["name"] for t in Sandbox.available_tools()]
        self.assertIn("lookup", names)
        with Sandbox.create(tools=["lookup"]) as sbx:
            self.assertEqual([t["name"] for t in sbx.tools()], ["lookup"])
            ex = sbx.run_code(
                "from airlock_tools import call, ToolError\n"
                "print(call('lookup', q='sdk'))\n"
                "try:\n"
                "    call('lookup', q='x' * 40)\n"
                "except ToolError as e:\n"
                "    print(e.code, e.field, e.rule)\n")
            self.assertIsNone(ex.error, ex.error)
            self.assertEqual(ex.logs.stdout, "{'q': 'sdk', 'authorized': True}\ninvalid_argument q maxLength\n")
            self.assertEqual([(c["tool"], c["decision"]) for c in ex.tool_calls], [("lookup", "ok"), ("lookup", "refused")])
        with Sandbox.create() as sbx:
            self.assertEqual(sbx.tools(), [])

    def test_secrets(self):
        # The server declares SDK_API_KEY, bound to api.sdk.test: a session
        # or a one-shot run that asks for it sees only a placeholder of its
        # own in its variable, with the bundle that trusts airlock's CA; a
        # name the tenant does not have, or an env variable over the
        # placeholder, is refused as the HTTP API refuses it, and a client
        # cannot pass a value.
        listed = Sandbox.available_secrets()
        self.assertEqual([(x["name"], x["env_var"], x["hosts"]) for x in listed],
                         [("SDK_API_KEY", "SDK_API_KEY", ["api.sdk.test"])])
        show = "import os; print(os.environ.get('SDK_API_KEY', '-')[:15], os.environ.get('SSL_CERT_FILE', '-'))"
        with Sandbox.create(secrets=["SDK_API_KEY"]) as sbx:
            self.assertEqual(sbx.secrets, listed)
            ex = sbx.run_code(show)
            self.assertIsNone(ex.error, ex.error)
            self.assertEqual(ex.logs.stdout, "airlock-secret- /opt/airlock/secrets/ca-bundle.pem\n")
            self.assertEqual(Sandbox.connect(sbx.id).secrets, listed)
        with Sandbox.create() as sbx:
            self.assertEqual(sbx.secrets, [])
            self.assertEqual(sbx.run_code(show).logs.stdout, "- -\n")
        with self.assertRaises(airlock.InvalidArgumentError) as cm:
            Sandbox.create(secrets=["NOPE"])
        self.assertIn("declared: SDK_API_KEY", str(cm.exception))
        self.assertEqual(cm.exception.status, 400)
        with self.assertRaises(airlock.InvalidArgumentError) as cm:
            Sandbox.create(secrets="SDK_API_KEY", env={"SDK_API_KEY": "mine"})
        self.assertIn("placeholder", str(cm.exception))
        with self.assertRaises(TypeError) as cm:
            Sandbox.create(secrets={"SDK_API_KEY": "sk-a-value-of-mine"})
        self.assertNotIn("sk-a-value-of-mine", str(cm.exception))
        r = airlock.run(show, secrets=["SDK_API_KEY"])
        self.assertEqual(r.logs.stdout, "airlock-secret- /opt/airlock/secrets/ca-bundle.pem\n")
        r = airlock.run_program(show, secrets="SDK_API_KEY")
        self.assertEqual((r.exit_code, r.logs.stdout), (0, "airlock-secret- /opt/airlock/secrets/ca-bundle.pem\n"))
        with self.assertRaises(airlock.InvalidArgumentError):
            airlock.run(show, secrets=["NOPE"])
        # One-shot runs take tools as sessions do.
        r = airlock.run("from airlock_tools import call\nprint(call('lookup', q='once'))", tools=["lookup"])
        self.assertEqual(r.logs.stdout, "{'q': 'once', 'authorized': True}\n")
        with self.assertRaises(airlock.InvalidArgumentError):
            airlock.run_program("print(1)", tools=["nope"])

    def test_ports(self):
        # A web server in the sandbox, reached from outside by its port's
        # path (and host, where the server has a ports domain) with the
        # port's token; the SDK's key gets a clear 502 where nothing listens.
        u = urllib.parse.urlsplit(os.environ["AIRLOCK_URL"])
        self.assertEqual(u.scheme, "http")

        def get(path, token=None, host=None):
            conn = http.client.HTTPConnection(u.netloc, timeout=30)
            headers = {"X-Airlock-Port-Token": token} if token else {}
            if host:
                headers["Host"] = host
            try:
                conn.request("GET", path, headers=headers)
                r = conn.getresponse()
                return r.status, r.read()
            finally:
                conn.close()

        sbx = Sandbox.create()
        try:
            sbx.files.write("index.html", "hello from the sandbox\n")
            sbx.commands.run("exec python3 -m http.server 8000 --bind 127.0.0.1", background=True)
            p = sbx.open_port(8000)
            self.assertFalse(p["public"])
            self.assertTrue(p["token"].startswith("alp_"))
            deadline = time.time() + 60
            while True:
                status, body = get(p["path"] + "index.html", p["token"])
                if status != 502 or time.time() > deadline:
                    break
                time.sleep(0.05)
            self.assertEqual((status, body), (200, b"hello from the sandbox\n"))
            self.assertEqual(get(p["path"] + "index.html")[0], 401)
            if p.get("host"):
                self.assertEqual(sbx.get_host(8000), p["host"])
                self.assertEqual(get("/index.html", p["token"], p["host"]), (200, b"hello from the sandbox\n"))
            else:
                with self.assertRaises(airlock.UnsupportedError):
                    sbx.get_host(8000)
            with self.assertRaises(airlock.BadGatewayError) as cm:
                sbx._t.raw("GET", sbx._path("/ports/8001/"))
            self.assertIn("nothing listens on port 8001", cm.exception.message)
            self.assertEqual(sorted(x["port"] for x in sbx.ports()), [8000, 8001])
            self.assertNotIn("token", sbx.ports()[0])
            sbx.close_port(8000)
            self.assertEqual(get(p["path"] + "index.html", p["token"])[0], 401)
            with self.assertRaises(airlock.NotFoundError):
                sbx.close_port(8000)
        finally:
            sbx.kill()

    def test_html_and_json(self):
        e = self.sbx.run_code("import pandas as pd\npd.DataFrame({'a': [1, 2]})")
        self.assertIn("<table", e.results[0].html)
        self.assertIn("a", e.text)
        e = self.sbx.run_code("from IPython.display import JSON, display\ndisplay(JSON({'k': [1, 2]}))")
        self.assertEqual([r.json for r in e.results if r.json is not None], [{"k": [1, 2]}])

    def test_template(self):
        # AIRLOCK_TEST_TEMPLATE: the server's templates.default, whose root
        # has the real IPython (e2e's TestPythonSDKOnTemplate); unset, the
        # host's root, where IPython is the runtime's stand-in or real.
        want = os.environ.get("AIRLOCK_TEST_TEMPLATE", "")
        self.assertEqual(self.sbx.template, want)
        if want:
            e = self.sbx.run_code("import IPython\nIPython.__file__.startswith('/usr/lib/python3/dist-packages/')")
            self.assertEqual(e.text, "True")
            # templates() lists it as the default; a one-shot run names it.
            listed = [t for t in airlock.templates() if t["name"] == want]
            self.assertEqual(len(listed), 1)
            self.assertTrue(listed[0]["default"])
            self.assertIn("python", listed[0]["languages"])
            r = airlock.run("import seaborn\nprint('ok')", template=want)
            self.assertEqual(r.logs.stdout, "ok\n")
        with self.assertRaises(airlock.InvalidArgumentError):
            airlock.run("1", template="no-such-template")

    def test_exception(self):
        e = self.sbx.run_code("def f():\n    return 1 / 0\nf()")
        self.assertIsNotNone(e.error)
        self.assertEqual(e.error.name, "ZeroDivisionError")
        self.assertEqual(e.error.value, "division by zero")
        self.assertIn("return 1 / 0", e.error.traceback)
        self.assertEqual(e.error.traceback, "\n".join(e.error.traceback_lines))
        self.assertEqual(self.sbx.run_code("2 * 21").text, "42")  # the session lives on

    def test_timeout_interrupts_and_keeps_state(self):
        self.sbx.run_code("kept = 'yes'")
        e = self.sbx.run_code("import time\ntime.sleep(30)", timeout=0.5)
        self.assertTrue(e.killed)
        self.assertEqual(e.kill_reason, "timeout")
        # The error says what happened: the limit, the time, the state kept.
        self.assertEqual(e.error.name, "TimeoutError")
        self.assertIn("timeout of 500ms", e.error.value)
        self.assertIn("interrupted after", e.error.value)
        self.assertIn("state (variables, files) were kept", e.error.value)
        self.assertEqual(self.sbx.run_code("kept").text, "'yes'")

    def test_streaming_callbacks(self):
        events = []
        lock = threading.Lock()

        def record(kind):
            def f(x):
                with lock:
                    events.append((kind, x))
            return f

        code = ("import sys, time\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(0.05)\n"
                "print('warn', file=sys.stderr, flush=True)\n"
                "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()\n'done'")
        e = self.sbx.run_code(code, on_stdout=record("out"), on_stderr=record("err"), on_result=record("result"))
        self.assertEqual("".join(x for k, x in events if k == "out"), "0\n1\n2\n")
        self.assertEqual([x for k, x in events if k == "err"], ["warn\n"])
        results = [x for k, x in events if k == "result"]
        self.assertEqual(len(results), 2)
        self.assertTrue(results[0].png.startswith(b"\x89PNG"))
        self.assertEqual(results[1].text, "'done'")
        self.assertTrue(results[1].is_main_result)
        kinds = [k for k, _ in events]
        self.assertLess(kinds.index("out"), kinds.index("result"))
        # the returned Execution is the whole result, as without streaming
        self.assertEqual(e.logs.stdout, "0\n1\n2\n")
        self.assertEqual(e.text, "'done'")
        errors = []
        e = self.sbx.run_code("raise ValueError('boom')", on_error=errors.append)
        self.assertEqual([(x.name, x.value) for x in errors], [("ValueError", "boom")])
        self.assertEqual(e.error.name, "ValueError")

    def test_files(self):
        f = self.sbx.files
        info = f.write("data/notes.txt", "héllo\n")
        self.assertEqual((info.path, info.size), ("data/notes.txt", 7))
        self.assertEqual(f.read("data/notes.txt"), "héllo\n")
        blob = bytes(range(256))
        f.write("/workspace/data/blob.bin", blob)
        self.assertEqual(f.read("data/blob.bin", format="bytes"), blob)
        names = sorted(e.name for e in f.list("data"))
        self.assertEqual(names, ["blob.bin", "notes.txt"])
        self.assertIn("data/blob.bin", [e.path for e in f.list(recursive=True)])
        self.assertTrue([e for e in f.list() if e.name == "data"][0].is_dir)
        # the interpreter sees the files, and its own appear in files_changed
        e = self.sbx.run_code("open('data/notes.txt').read().strip() + '!'")
        self.assertEqual(e.text, "'héllo!'")
        e = self.sbx.run_code("open('made.txt', 'w').write('abc')")
        self.assertIn(("made.txt", "created"), [(c.path, c.change) for c in e.files_changed])
        self.assertEqual(f.read("made.txt"), "abc")
        self.assertTrue(f.exists("data/notes.txt"))
        f.remove("data/notes.txt")
        self.assertFalse(f.exists("data/notes.txt"))
        with self.assertRaises(airlock.NotFoundError):
            f.read("data/notes.txt")
        f.remove("data", recursive=True)
        self.assertFalse(f.exists("data"))
        with self.assertRaises(airlock.InvalidArgumentError):
            f.read("../etc/passwd")

    def test_commands(self):
        self.sbx.run_code("secret = 7")
        self.sbx.files.write("c.txt", "from a file")
        r = self.sbx.commands.run("cat c.txt; echo oops >&2; exit 3")
        self.assertEqual((r.exit_code, r.stdout, r.stderr), (3, "from a file", "oops\n"))
        self.assertEqual(r.error, "exit status 3")
        r = self.sbx.commands.run("pwd; echo $GREETING", envs={"GREETING": "hi"}, cwd="/tmp")
        self.assertEqual(r.stdout, "/tmp\nhi\n")
        self.assertIsNone(r.error)
        self.sbx.files.write("sub/keep", "")
        r = self.sbx.commands.run("pwd", cwd="sub")  # relative to /workspace
        self.assertEqual(r.stdout, "/workspace/sub\n")
        r = self.sbx.commands.run("cat", stdin="piped")
        self.assertEqual(r.stdout, "piped")
        out = []
        r = self.sbx.commands.run("for i in 1 2 3; do echo $i; done", on_stdout=out.append)
        self.assertEqual("".join(out), "1\n2\n3\n")
        self.assertEqual(r.stdout, "1\n2\n3\n")
        r = self.sbx.commands.run("sleep 30", timeout=0.5)
        self.assertTrue(r.killed)
        self.assertEqual(r.kill_reason, "timeout")
        self.assertEqual(self.sbx.run_code("secret").text, "7")  # the interpreter is untouched

    def test_background_command(self):
        h = self.sbx.commands.run("read line; echo got $line; sleep 30", background=True)
        self.assertTrue(h.id)
        self.assertTrue(h.result().running)
        self.assertIsNone(h.result().exit_code)  # no status before it ends
        h.send_stdin("ping\n")
        self.assertIn(h.id, [c.id for c in self.sbx.commands.list()])
        deadline = time.monotonic() + 30
        while h.result().stdout != "got ping\n" and time.monotonic() < deadline:
            time.sleep(0.02)  # polls the command's output until it echoed
        h.kill()
        r = h.wait(timeout=10)
        self.assertFalse(r.running)
        self.assertEqual(r.signal, "SIGKILL")
        self.assertEqual(r.stdout, "got ping\n")

    def test_code_contexts_share_files(self):
        with Sandbox.create() as sbx:
            sbx.run_code("open('sales.csv', 'w').write('region,sales\\nnorth,3\\nsouth,4\\n')")
            r = sbx.run_code("awk -F, 'NR > 1 { s += $2 } END { print s }' sales.csv", language="bash")
            self.assertEqual(r.logs.stdout, "7\n")
            ctx = sbx.create_code_context(language="javascript", envs={"WHO": "js"})
            self.assertEqual((ctx.language, ctx.cwd), ("javascript", "/workspace"))
            r = sbx.run_code("require('fs').readFileSync('sales.csv', 'utf8').split('\\n').length + process.env.WHO",
                             context=ctx)
            self.assertEqual(r.text, "'4js'")
            ids = [c.id for c in sbx.list_code_contexts()]
            self.assertEqual(ids[0], "python")
            self.assertIn(ctx.id, ids)
            sbx.run_code("globalThis.kept = 1", context=ctx)
            self.assertEqual(sbx.restart_code_context(ctx).id, ctx.id)
            self.assertEqual(sbx.run_code("typeof kept", context=ctx).text, "'undefined'")
            sbx.remove_code_context(ctx)
            with self.assertRaises(airlock.NotFoundError):
                sbx.run_code("1", context=ctx.id)

    def test_pty(self):
        with Sandbox.create() as sbx:
            h = sbx.pty.create(cols=100, rows=30, cmd="stty size; exec tr a-z A-Z")
            self.assertEqual(h.result().pty, (100, 30))
            out = []
            seen = threading.Event()

            def on_stdout(text):
                out.append(text)
                if "PING" in "".join(out):
                    seen.set()
            t = threading.Thread(target=lambda: h.connect(on_stdout=on_stdout))
            t.start()
            h.send_stdin("ping\n")
            self.assertTrue(seen.wait(30), out)
            self.assertIn("30 100", "".join(out))
            h.resize(120, 40)
            h.send_stdin(b"\x03")  # Ctrl-C: tr dies of SIGINT
            t.join(30)
            self.assertEqual(h.last.exit_code, 130)
            # Attached again after it ended: replayed, then its end.
            again = []
            r = sbx.commands.connect(h.id, on_stdout=again.append)
            self.assertIn("PING", "".join(again))
            self.assertEqual(r.signal, "SIGINT")


class LifecycleTest(unittest.TestCase):
    def setUp(self):
        support.need_server(self)

    def test_context_manager_ends_the_session(self):
        with Sandbox.create() as sbx:
            self.assertTrue(sbx.is_running())
            sbx.run_code("x = 1")
            sid = sbx.id
        self.assertFalse(sbx.is_running())
        with self.assertRaises((airlock.SessionEndedError, airlock.NotFoundError)) as cm:
            Sandbox.connect(sid).run_code("x")
        if isinstance(cm.exception, airlock.SessionEndedError):
            self.assertEqual(cm.exception.end_code, "deleted")
        with self.assertRaises((airlock.SessionEndedError, airlock.NotFoundError)):
            sbx.run_code("x")
        self.assertTrue(sbx.kill())  # already ended: idempotent, no error

    def test_context_manager_ends_the_session_on_exception(self):
        with self.assertRaises(RuntimeError):
            with Sandbox.create() as sbx:
                raise RuntimeError("the agent failed")
        self.assertFalse(sbx.is_running())

    def test_other_languages(self):
        with Sandbox.create(language="bash") as sbx:
            self.assertEqual(sbx.run_code("cd /tmp; X=5").exit_code, 0)
            self.assertEqual(sbx.run_code("echo $PWD $X").logs.stdout, "/tmp 5\n")

    def test_errors_are_typed(self):
        with self.assertRaises(airlock.NotFoundError) as cm:
            Sandbox.connect("no-such-session")
        self.assertEqual((cm.exception.code, cm.exception.status), ("not_found", 404))
        self.assertTrue(cm.exception.request_id)
        with self.assertRaises(airlock.InvalidArgumentError):
            Sandbox.create(language="cobol")
        with self.assertRaises(airlock.InvalidArgumentError):
            Sandbox.create(limits={"memory": "1000T"})  # above the server's maximum
        with self.assertRaises(airlock.AuthenticationError) as cm:
            Sandbox.create(token="wrong-" + (os.environ.get("AIRLOCK_TOKEN") or "token"))
        self.assertEqual(cm.exception.status, 401)
        with self.assertRaises(airlock.ConnectionError):
            Sandbox.create(base_url="http://127.0.0.1:1")
        with self.assertRaises(airlock.InvalidArgumentError):
            Sandbox.create(base_url="ftp://example")
        # pause's restores reaches the server, which reads it before all
        # else; this server cannot pause at all (persistence is off).
        with Sandbox.create() as sbx:
            with self.assertRaises(airlock.InvalidArgumentError) as cm:
                sbx.pause(restores="disk")
            self.assertIn("restores", str(cm.exception))
            with self.assertRaises(airlock.UnsupportedError):
                sbx.pause(restores="files")

    def test_quota(self):
        token = os.environ.get("AIRLOCK_QUOTA_TOKEN")
        if not token:
            support.skip(self, "AIRLOCK_QUOTA_TOKEN (an API key allowed one session) is not set; the Go test sets it")
        with Sandbox.create(token=token) as sbx:
            with self.assertRaises(airlock.QuotaExceededError) as cm:
                Sandbox.create(token=token)
            self.assertIsInstance(cm.exception, airlock.RateLimitError)
            self.assertEqual((cm.exception.code, cm.exception.status), ("quota_exceeded", 429))
            self.assertIn("max_sessions", cm.exception.message)
            self.assertGreater(cm.exception.retry_after, 0)
            self.assertEqual(sbx.run_code("1 + 1").text, "2")
        with Sandbox.create(token=token) as sbx:  # the session ended: room again
            self.assertEqual(sbx.run_code("2 + 2").text, "4")
        # another tenant's session does not exist for this key
        with Sandbox.create() as mine:
            with self.assertRaises(airlock.NotFoundError):
                Sandbox.connect(mine.id, token=token)

    def test_busy_session_is_a_conflict(self):
        with Sandbox.create() as sbx:
            started = threading.Event()
            t = threading.Thread(target=lambda: sbx.run_code(
                "import time\nprint('go', flush=True)\ntime.sleep(3)", on_stdout=lambda _: started.set()))
            t.start()
            self.assertTrue(started.wait(30))
            with self.assertRaises(airlock.ConflictError):
                sbx.run_code("1")
            self.assertTrue(sbx.interrupt())
            t.join(30)

    def test_one_shot_run(self):
        r = airlock.run("import pandas as pd\n"
                        "df = pd.read_csv('in.csv')\n"
                        "df.describe().to_csv('out.csv')\n"
                        "open('raw.bin', 'wb').write(bytes([0, 255]))\n"
                        "print(int(df.b.sum()))",
                        files={"in.csv": "a,b\n1,2\n3,4\n", "blob.bin": b"\x00\x01"},
                        limits={"timeout": 30})
        self.assertIsNone(r.error)
        self.assertEqual(r.logs.stdout, "6\n")
        self.assertIn("b", r.file("out.csv").text)
        self.assertEqual(r.file("raw.bin").content, b"\x00\xff")
        self.assertIsNone(r.file("in.csv"))  # inputs are not outputs
        self.assertEqual(r.limits["timeout"], "30s")
        out = []
        r = airlock.run("echo hi; echo x > f.txt", language="bash", on_stdout=out.append)
        self.assertEqual("".join(out), "hi\n")
        self.assertEqual(r.file("f.txt").content, b"x\n")
        r = airlock.run("1/0")
        self.assertEqual(r.error.name, "ZeroDivisionError")

    def test_program_run(self):
        r = airlock.run_program("import sys\nprint(sys.argv[1:])\nopen('o.txt', 'w').write('x')\nsys.exit(3)",
                                args=["a", 2])
        self.assertEqual((r.exit_code, r.logs.stdout), (3, "['a', '2']\n"))
        self.assertEqual(r.file("o.txt").content, b"x")
        out = []
        r = airlock.run_program("echo $0 $1; printf '\\377' >&1", args=["arg"], language="bash", filename="s.sh",
                                on_stdout=out.append)
        self.assertEqual(r.exit_code, 0)
        self.assertTrue("".join(out).startswith("/workspace/s.sh arg\n"), out)

    def test_unix_socket(self):
        sock = os.environ.get("AIRLOCK_SOCKET")
        if not sock:
            support.skip(self, "AIRLOCK_SOCKET is not set (the Go test sets it)")
        with Sandbox.create(base_url="unix://" + sock, token="") as sbx:
            self.assertEqual(sbx.run_code("6 * 7").text, "42")


if __name__ == "__main__":
    unittest.main()
