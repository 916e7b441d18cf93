"""Error mapping and the transport against a scripted local HTTP server
(no airlock needed): every code of the table, statuses without a code,
Retry-After, streams that fail midway."""

import http.server
import json
import threading
import unittest

import support  # noqa: F401  (puts the SDK on sys.path)
import airlock
from airlock import errors
from airlock import Sandbox


class _Handler(http.server.BaseHTTPRequestHandler):
    # script: path -> (status, headers, body bytes)
    script = {}
    seen = []

    def _answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        _Handler.seen.append((self.command, self.path, dict(self.headers), body))
        status, headers, out = _Handler.script[self.path.split("?")[0]]
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_POST = do_PUT = do_DELETE = _answer

    def log_message(self, *args):
        pass


def _err(code, message="msg", **extra):
    return json.dumps({"error": dict(code=code, message=message, request_id="rid-1", **extra)}).encode()


class ErrorsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        cls.url = "http://127.0.0.1:%d" % cls.httpd.server_address[1]
        threading.Thread(target=cls.httpd.serve_forever, daemon=True).start()

    @classmethod
    def tearDownClass(cls):
        cls.httpd.shutdown()
        cls.httpd.server_close()

    def setUp(self):
        _Handler.script = {}
        _Handler.seen = []

    def test_every_code_has_its_class(self):
        statuses = {"invalid_argument": 400, "unauthorized": 401, "not_found": 404, "permission_denied": 403,
                    "method_not_allowed": 405, "conflict": 409, "too_large": 413, "quota_exceeded": 429, "limit_reached": 429,
                    "session_ended": 410, "timeout": 504, "unsupported": 501, "unavailable": 503, "internal": 500,
                    "session_lost": 410, "misdirected": 421, "node_unavailable": 503,
                    "audit_unavailable": 503, "bad_gateway": 502,
                    "session_paused": 409, "pause_image_corrupt": 422}
        self.assertEqual(set(statuses), set(errors.CODES))
        for code, status in statuses.items():
            _Handler.script = {"/v1/sessions": (status, {"Content-Type": "application/json"}, _err(code, "m " + code))}
            with self.assertRaises(errors.CODES[code]) as cm:
                Sandbox.create(base_url=self.url, token="t")
            e = cm.exception
            self.assertIsInstance(e, airlock.AirlockError)
            self.assertEqual((e.code, e.status, e.message, e.request_id), (code, status, "m " + code, "rid-1"))

    def test_builtin_bases(self):
        self.assertTrue(issubclass(airlock.TimeoutError, TimeoutError))
        self.assertTrue(issubclass(airlock.InvalidArgumentError, ValueError))
        self.assertTrue(issubclass(airlock.ConnectionError, ConnectionError))

    def test_cluster_codes(self):
        # A lost session is an ended one; the router's node_unavailable an
        # unavailable server, with its Retry-After.
        self.assertTrue(issubclass(airlock.SessionLostError, airlock.SessionEndedError))
        self.assertTrue(issubclass(airlock.NodeUnavailableError, airlock.UnavailableError))
        _Handler.script = {"/v1/sessions": (503, {"Retry-After": "1", "Content-Type": "application/json"},
                                            _err("node_unavailable", "the server holding this session is unavailable"))}
        with self.assertRaises(airlock.NodeUnavailableError) as cm:
            Sandbox.create(base_url=self.url)
        self.assertEqual(cm.exception.retry_after, 1)
        # A 421 without airlock's body (a proxy's page) is still misdirected.
        _Handler.script = {"/v1/sessions": (421, {"Content-Type": "text/plain"}, b"misdirected")}
        with self.assertRaises(airlock.MisdirectedError):
            Sandbox.create(base_url=self.url)

    def test_rate_limit_retry_after(self):
        _Handler.script = {"/v1/sessions": (429, {"Retry-After": "3"}, _err("limit_reached", "too many sessions"))}
        with self.assertRaises(airlock.RateLimitError) as cm:
            Sandbox.create(base_url=self.url)
        self.assertEqual(cm.exception.retry_after, 3.0)
        _Handler.script = {"/v1/sessions": (429, {"Retry-After": "60"}, _err("quota_exceeded", "quota"))}
        with self.assertRaises(airlock.RateLimitError) as cm:  # a quota is a rate limit too
            Sandbox.create(base_url=self.url)
        self.assertIsInstance(cm.exception, airlock.QuotaExceededError)
        self.assertEqual(cm.exception.retry_after, 60.0)

    def test_session_ended_end_code(self):
        _Handler.script = {"/v1/sessions/s1": (410, {}, _err("session_ended", "session ended: out of memory",
                                                               end_code="out_of_memory"))}
        with self.assertRaises(airlock.SessionEndedError) as cm:
            Sandbox.connect("s1", base_url=self.url)
        self.assertEqual(cm.exception.end_code, "out_of_memory")

    def test_unknown_code_and_foreign_bodies(self):
        _Handler.script = {"/v1/sessions": (418, {}, _err("brand_new_code"))}
        with self.assertRaises(airlock.AirlockError) as cm:
            Sandbox.create(base_url=self.url)
        self.assertIs(type(cm.exception), airlock.AirlockError)
        self.assertEqual(cm.exception.code, "brand_new_code")
        _Handler.script = {"/v1/sessions": (502, {}, b"<html>bad gateway</html>")}
        with self.assertRaises(airlock.ServerError) as cm:
            Sandbox.create(base_url=self.url)
        self.assertIn("bad gateway", str(cm.exception))
        _Handler.script = {"/v1/sessions": (404, {}, b"")}
        with self.assertRaises(airlock.NotFoundError):
            Sandbox.create(base_url=self.url)

    def test_token_and_requests(self):
        info = json.dumps({"id": "s/1", "language": "python", "limits": {"timeout": "1m30s"}}).encode()
        _Handler.script = {"/v1/sessions": (201, {}, info),
                           "/v1/sessions/s%2F1/execute": (200, {}, json.dumps({"stdout": "hi\n", "results": []}).encode()),
                           "/base/v1/sessions": (201, {}, info)}
        sbx = Sandbox.create(base_url=self.url, token="sekret", limits={"memory": "1G"}, timeout=120,
                             network={"allow": ["pypi.org"]})
        method, path, headers, body = _Handler.seen[0]
        self.assertEqual((method, path, headers["Authorization"]), ("POST", "/v1/sessions", "Bearer sekret"))
        self.assertEqual(json.loads(body), {"language": "python", "limits": {"memory": "1G"}, "timeout_idle": 120,
                                            "network": {"allow": ["pypi.org"]}})
        self.assertEqual(sbx._wait(None), 90 + 60)  # the session's timeout plus the transport's
        self.assertEqual(sbx.run_code("print('hi')").logs.stdout, "hi\n")
        self.assertEqual(_Handler.seen[1][1], "/v1/sessions/s%2F1/execute")
        Sandbox.create(base_url=self.url + "/base/", token="")  # no token: no header
        Sandbox.create(base_url=self.url, network=["pypi.org"])  # a list is shorthand for allow
        self.assertEqual(json.loads(_Handler.seen[3][3])["network"], {"allow": ["pypi.org"]})
        self.assertEqual(_Handler.seen[2][1], "/base/v1/sessions")
        self.assertNotIn("Authorization", _Handler.seen[2][2])

    def test_stream_failed_event(self):
        info = json.dumps({"id": "s1", "language": "python"}).encode()
        stream = (json.dumps({"type": "stdout", "text": "a"}) + "\n" +
                  json.dumps({"type": "failed", "error": {"name": "session_ended", "value": "session ended: deleted"}}) + "\n")
        _Handler.script = {"/v1/sessions": (201, {}, info),
                           "/v1/sessions/s1/execute": (200, {"Content-Type": "application/x-ndjson"}, stream.encode())}
        got = []
        sbx = Sandbox.create(base_url=self.url)
        with self.assertRaises(airlock.SessionEndedError):
            sbx.run_code("x", on_stdout=got.append)
        self.assertEqual(got, ["a"])
        self.assertEqual(_Handler.seen[-1][2]["Accept"], "application/x-ndjson")
        _Handler.script["/v1/sessions/s1/execute"] = (200, {}, (json.dumps({"type": "stdout", "text": "a"}) + "\n").encode())
        with self.assertRaises(airlock.ServerError):
            sbx.run_code("x", on_stdout=got.append)

    def test_env_defaults(self):
        import os
        from airlock._http import Transport
        old = dict(os.environ)
        try:
            os.environ["AIRLOCK_URL"] = "unix:///run/x/airlock.sock"
            os.environ["AIRLOCK_TOKEN"] = "from-env"
            t = Transport()
            self.assertEqual((t._kind, t._host, t.token), ("unix", "/run/x/airlock.sock", "from-env"))
            del os.environ["AIRLOCK_URL"], os.environ["AIRLOCK_TOKEN"]
            t = Transport()
            self.assertEqual((t.base_url, t.token), ("http://127.0.0.1:8080", None))
        finally:
            os.environ.clear()
            os.environ.update(old)

    def test_durations(self):
        from airlock.sandbox import _seconds
        for d, want in [("30s", 30), ("1m30s", 90), ("500ms", 0.5), ("1h0m0s", 3600), (12, 12), ("bogus", None),
                        ("", None), ("5", None)]:
            self.assertEqual(_seconds(d), want, d)


if __name__ == "__main__":
    unittest.main()
