"""Hostile-traffic tests of gpushare-extender over loopback.

Each test starts servers of its own from samples/ (GPUSHARE_EXTENDER is the
binary) and attacks them the way a broken or malicious client would: bodies
too large, bad Content-Length, long request lines and headers, hundreds of
slow connections, many large bodies at once; and checks that the server
answers with the right status, that kube-scheduler's filter calls still
complete quickly, and that its memory (VmRSS / VmHWM from /proc) stays
bounded and returns afterwards. Then HTTPS (certificates made by the openssl
command) and the access log. Standard library only; every loop is bounded.

Run: GPUSHARE_EXTENDER=build/extender/gpushare-extender python3 tests/extender/hostile_test.py -v
"""

import http.client
import json
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.request

from e2e_test import (Client, FakeApiServer, SAMPLES, extender_args, make_pod, start_server,
                      stop_server, wait_for)
import realistic_nodes

HOST = "127.0.0.1"
NODES = os.path.join(SAMPLES, "nodes.json")
PODS = os.path.join(SAMPLES, "pods.json")
SAMPLE_NODES = ["sd-cluster-04", "sd-cluster-05", "v100-node"]
# kube-scheduler gives up on a filter after httpTimeout; a filter during an
# attack must stay far below it.
FILTER_DEADLINE_S = 2.0


def port_of(url):
    return int(url.rsplit(":", 1)[1])


def status_kib(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def reset_peak(pid):
    with open("/proc/%d/clear_refs" % pid, "w") as f:
        f.write("5")  # VmHWM := VmRSS


def filter_body():
    return json.dumps({"Pod": make_pod("hostile-probe", 1), "Nodes": None,
                       "NodeNames": SAMPLE_NODES}).encode()


def raw_exchange(port, data, timeout=5.0):
    """Sends `data` on a new connection; returns (status, headers, body bytes)
    of the reply, read until the server closes or `timeout` passes."""
    with socket.create_connection((HOST, port), timeout=timeout) as s:
        s.sendall(data)
        got = b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not chunk:
                break
            got += chunk
            head, sep, rest = got.partition(b"\r\n\r\n")
            if sep:
                lines = head.decode("latin-1").split("\r\n")
                headers = {k.strip().lower(): v.strip()
                           for k, _, v in (h.partition(":") for h in lines[1:])}
                if len(rest) >= int(headers.get("content-length", "-1")) >= 0:
                    return int(lines[0].split()[1]), headers, rest
    raise AssertionError("no complete reply to %r...: got %r" % (data[:80], got[:200]))


def timed_filter(port, context=None):
    """One filter on a new connection; returns (status, seconds)."""
    t = time.monotonic()
    if context is None:
        conn = http.client.HTTPConnection(HOST, port, timeout=10)
    else:
        conn = http.client.HTTPSConnection(HOST, port, timeout=10, context=context)
    try:
        conn.request("POST", "/gpushare-scheduler/filter", body=filter_body(),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        body = json.loads(resp.read())
        assert resp.status == 200 and body["Error"] == "", body
        return resp.status, time.monotonic() - t
    finally:
        conn.close()


class Slowloris:
    """`n` connections that send a request's headers a byte at a time."""

    def __init__(self, port, n):
        self.socks = []
        for _ in range(n):
            s = socket.create_connection((HOST, port), timeout=5)
            self.socks.append(s)
            try:
                s.sendall(b"POST /gpushare-scheduler/filter HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            except OSError:
                pass  # Refused by the server: not alive().
            s.setblocking(False)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._drip, daemon=True)
        self.thread.start()

    def _drip(self):
        for _ in range(60):  # At most a minute.
            if self.stop.wait(1.0):
                return
            for s in self.socks:
                try:
                    s.send(b"X")
                except OSError:
                    pass

    def alive(self):
        """How many of the connections the server has not closed."""
        n = 0
        for s in self.socks:
            try:
                n += s.recv(1) != b""
            except BlockingIOError:
                n += 1
            except OSError:
                pass
        return n

    def close(self):
        self.stop.set()
        self.thread.join()
        for s in self.socks:
            s.close()


class ServerCase(unittest.TestCase):
    """Starts a server with `FLAGS` for each test."""

    FLAGS = ()

    def setUp(self):
        self.binary = os.environ.get("GPUSHARE_EXTENDER")
        if not self.binary:
            self.skipTest("GPUSHARE_EXTENDER is not set")
        self.tmp = tempfile.mkdtemp(prefix="gpushare-hostile-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.start(self.FLAGS)

    def start(self, flags):
        self.proc, url = start_server(self.binary, NODES, PODS, self.tmp, extra=flags)
        self.addCleanup(stop_server, self.proc)
        self.port = port_of(url)
        time.sleep(0.2)
        self.base_kib = status_kib(self.proc.pid, "VmRSS")

    def rss_mib(self):
        return status_kib(self.proc.pid, "VmRSS") / 1024


class DefaultLimitsTest(ServerCase):
    """The default limits against malformed and oversized requests."""

    def assert_json_error(self, status, body, want_status, fragment):
        self.assertEqual(status, want_status, body)
        err = json.loads(body)
        self.assertIn(fragment, err["Error"])

    def test_content_length_over_the_limit_gets_413_before_the_body(self):
        for length in (1 << 30, 10 ** 15):
            head = ("POST /gpushare-scheduler/filter HTTP/1.1\r\nHost: x\r\n"
                    "Content-Length: %d\r\n\r\n" % length).encode()
            t = time.monotonic()
            status, headers, body = raw_exchange(self.port, head)  # No body sent.
            self.assertLess(time.monotonic() - t, 2.0)
            self.assert_json_error(status, body, 413, "too large")
            self.assertEqual(headers.get("connection"), "close")
        self.assertLess(self.rss_mib() - self.base_kib / 1024, 16)

    def test_bad_content_length_gets_400(self):
        for bad in (["-1"], ["99999999999999999999999"], ["12abc"], ["5", "7"], ["5, 7"]):
            head = "POST /gpushare-scheduler/filter HTTP/1.1\r\nHost: x\r\n"
            head += "".join("Content-Length: %s\r\n" % v for v in bad)
            status, _, body = raw_exchange(self.port, (head + "\r\n").encode() + b"{}")
            self.assert_json_error(status, body, 400, "Content-Length")

    def test_malformed_request_line_gets_400(self):
        status, _, body = raw_exchange(self.port, b"POST\x01 / HTTP/1.1\r\nHost: x\r\n\r\n")
        self.assert_json_error(status, body, 400, "malformed")

    def test_long_url_gets_414(self):
        path = "/gpushare-scheduler/inspect/" + "n" * (64 << 10)
        status, _, body = raw_exchange(
            self.port, ("GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path).encode())
        self.assert_json_error(status, body, 414, "request line")

    def test_one_long_header_value_gets_431_and_an_unknown_method_405(self):
        for size in (17 << 10, 20 << 10):
            status, _, body = raw_exchange(self.port, (
                "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: %s\r\n\r\n" % ("v" * size)).encode())
            self.assert_json_error(status, body, 431, "headers")
        status, _, body = raw_exchange(self.port, b"FOO /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        self.assert_json_error(status, body, 405, "method not allowed")

    def test_long_headers_get_431(self):
        headers = "".join("X-Filler-%d: %s\r\n" % (i, "v" * 1000) for i in range(64))
        status, _, body = raw_exchange(
            self.port, ("GET /healthz HTTP/1.1\r\nHost: x\r\n%s\r\n" % headers).encode())
        self.assert_json_error(status, body, 431, "headers")

    def test_slowloris_does_not_lock_kube_scheduler_out(self):
        # 600 slow connections: more than a thread-per-connection server's cap.
        attack = Slowloris(self.port, 600)
        try:
            time.sleep(1.5)
            worst = 0.0
            for _ in range(5):
                _, seconds = timed_filter(self.port)
                worst = max(worst, seconds)
            print("\n  600 slowloris connections: worst filter %.1f ms; server RSS %.1f MiB "
                  "(%.1f MiB before), %d attackers still connected" %
                  (worst * 1000, self.rss_mib(), self.base_kib / 1024, attack.alive()))
            self.assertLess(worst, FILTER_DEADLINE_S)
            self.assertLess(self.rss_mib() - self.base_kib / 1024, 64)
        finally:
            attack.close()


class TightLimitsTest(ServerCase):
    """Small limits, to test the deadlines, the budget and eviction quickly."""

    FLAGS = ("--max-body-bytes", "16Mi", "--body-budget-bytes", "16Mi",
             "--budget-wait-ms", "300", "--header-timeout-ms", "1000",
             "--min-body-rate", "1Mi", "--max-connections", "64", "--trim-bytes", "1Mi")

    def test_header_deadline_apart_from_the_idle_timeout(self):
        idle = socket.create_connection((HOST, self.port), timeout=5)
        partial = socket.create_connection((HOST, self.port), timeout=5)
        partial.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        t = time.monotonic()
        self.assertEqual(partial.recv(1024), b"")  # Closed at the header deadline.
        self.assertLess(time.monotonic() - t, 3.0)
        time.sleep(max(0.0, 2.0 - (time.monotonic() - t)))
        idle.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")  # Still open after 2 s.
        self.assertTrue(idle.recv(1024).startswith(b"HTTP/1.1 200"))
        idle.close()
        partial.close()

    def test_a_stalled_body_is_cut_at_the_header_timeout_not_the_whole_allowance(self):
        s = socket.create_connection((HOST, self.port), timeout=15)
        s.sendall(b"POST /gpushare-scheduler/filter HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Length: 16777216\r\n\r\n{")
        t = time.monotonic()
        # 1 s of allowance, not 1 s + 16 MiB at 1 MiB/s = 17 s.
        self.assertEqual(s.recv(1024), b"")
        self.assertLess(time.monotonic() - t, 3.0)
        self.assertGreater(time.monotonic() - t, 0.8)
        s.close()
        self.assertEqual(timed_filter(self.port)[0], 200)  # Its budget came back.

    def test_a_body_slower_than_the_minimum_rate_is_cut(self):
        s = socket.create_connection((HOST, self.port), timeout=15)
        s.sendall(b"POST /gpushare-scheduler/filter HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Length: 2097152\r\n\r\n")
        t = time.monotonic()
        sent = 0
        try:  # 200 KiB/s, a fifth of --min-body-rate: cut well before the 2 MiB are in.
            while sent < 2097152 and time.monotonic() - t < 8:
                s.sendall(b" " * (100 << 10))
                sent += 100 << 10
                time.sleep(0.5)
        except OSError:
            pass
        s.settimeout(5)
        try:
            self.assertEqual(s.recv(1024), b"")
        except ConnectionResetError:
            pass
        self.assertLess(sent, 2097152)
        self.assertLess(time.monotonic() - t, 4.0)
        s.close()
        timed_filter(self.port)

    def test_connections_that_send_only_headers_hold_no_budget(self):
        idle = []
        for _ in range(8):  # 8 x 16 MiB announced: 8 budgets' worth.
            c = socket.create_connection((HOST, self.port), timeout=5)
            c.sendall(b"POST /gpushare-scheduler/filter HTTP/1.1\r\nHost: x\r\n"
                      b"Content-Length: 16777216\r\n\r\n")
            idle.append(c)
        time.sleep(0.2)
        try:
            for _ in range(3):
                status, seconds = timed_filter(self.port)
                self.assertEqual(status, 200)
                self.assertLess(seconds, FILTER_DEADLINE_S)
        finally:
            for c in idle:
                c.close()

    def test_requests_beyond_the_budget_get_503_with_retry_after(self):
        hog = socket.create_connection((HOST, self.port), timeout=5)
        hog.sendall(b"POST /gpushare-scheduler/filter HTTP/1.1\r\nHost: x\r\n"
                    b"Content-Length: 16777216\r\n\r\n" + b" " * 4096)
        time.sleep(0.2)
        body = filter_body()
        status, headers, reply = raw_exchange(
            self.port, b"POST /gpushare-scheduler/filter HTTP/1.1\r\nHost: x\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        self.assertEqual(status, 503, reply)
        self.assertEqual(headers.get("retry-after"), "1")
        self.assertIn("retry", json.loads(reply)["Error"])
        hog.close()
        time.sleep(0.2)
        self.assertEqual(timed_filter(self.port)[0], 200)  # The hog's budget is back.

    def test_at_the_connection_cap_waiting_connections_make_room(self):
        attack = Slowloris(self.port, 150)  # More than --max-connections 64.
        try:
            time.sleep(0.3)
            for _ in range(3):
                _, seconds = timed_filter(self.port)
                self.assertLess(seconds, FILTER_DEADLINE_S)
            self.assertLessEqual(attack.alive(), 64)
        finally:
            attack.close()


class MemoryBudgetTest(ServerCase):
    """Many large but legal bodies at once stay within the budget's memory."""

    BODY = realistic_nodes.extender_args(950)  # ~12 MiB of full v1.Node objects.
    FLAGS = ("--max-body-bytes", "16Mi", "--body-budget-bytes", "16Mi",
             "--budget-wait-ms", "120000", "--trim-bytes", "1Mi")

    def post_large(self, results):
        conn = http.client.HTTPConnection(HOST, self.port, timeout=180)
        try:
            conn.request("POST", "/gpushare-scheduler/filter", body=self.BODY,
                         headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            resp.read()
            results.append(resp.status)
        except OSError as e:
            results.append(repr(e))
        finally:
            conn.close()

    def test_concurrent_large_bodies_stay_within_the_budget_and_memory_returns(self):
        base = self.base_kib / 1024
        # One body alone: what parsing it costs.
        reset_peak(self.proc.pid)
        self.post_large([])
        one = status_kib(self.proc.pid, "VmHWM") / 1024 - base
        reset_peak(self.proc.pid)
        results = []
        threads = [threading.Thread(target=self.post_large, args=(results,)) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        peak = status_kib(self.proc.pid, "VmHWM") / 1024 - base
        time.sleep(0.5)
        after = self.rss_mib() - base
        print("\n  %.1f MiB bodies: one costs %.0f MiB at peak; 8 at once %.0f MiB; "
              "%.0f MiB kept afterwards (over a %.0f MiB idle server)" %
              (len(self.BODY) / 2 ** 20, one, peak, after, base))
        self.assertEqual(results, [200] * 8)
        # The budget admits one 12 MiB body at a time: 8 at once cost about
        # as much as one, not 8 times as much.
        self.assertLess(peak, 2.0 * one + 32)
        # Most of the peak comes back: about 25 MiB is kept (the extender
        # fixes glibc's mmap and trim thresholds, extender/main.cc).
        self.assertLess(after, 48)


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(d):
    """A CA, a server certificate for 127.0.0.1, a client certificate, and an
    unrelated CA, in PEM files under `d`."""
    for ca in ("ca", "other-ca"):
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
                "/CN=gpushare test %s" % ca, "-keyout", ca + ".key", "-out", ca + ".crt", cwd=d)
    with open(os.path.join(d, "san.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    with open(os.path.join(d, "client.ext"), "w") as f:
        f.write("extendedKeyUsage=clientAuth\n")
    for name, ext in (("server", "san.ext"), ("client", "client.ext")):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=" + name, "-keyout",
                name + ".key", "-out", name + ".csr", cwd=d)
        openssl("x509", "-req", "-in", name + ".csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                "-CAcreateserial", "-days", "2", "-extfile", ext, "-out", name + ".crt", cwd=d)


@unittest.skipUnless(shutil.which("openssl"), "needs the openssl command")
class TlsTest(ServerCase):
    """HTTPS with --tls-cert-file, --tls-private-key-file, --client-ca-file."""

    def setUp(self):
        self.binary = os.environ.get("GPUSHARE_EXTENDER")
        if not self.binary:
            self.skipTest("GPUSHARE_EXTENDER is not set")
        self.tmp = tempfile.mkdtemp(prefix="gpushare-tls-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        make_pki(self.tmp)

    def pem(self, name):
        return os.path.join(self.tmp, name)

    def tls_flags(self, client_ca=False):
        flags = ["--tls-cert-file", self.pem("server.crt"),
                 "--tls-private-key-file", self.pem("server.key")]
        return flags + (["--client-ca-file", self.pem("ca.crt")] if client_ca else [])

    def context(self, ca="ca.crt", cert=None):
        ctx = ssl.create_default_context(cafile=self.pem(ca))
        if cert:
            ctx.load_cert_chain(self.pem(cert + ".crt"), self.pem(cert + ".key"))
        return ctx

    def test_a_client_verifying_the_ca_is_served(self):
        self.start(self.tls_flags())
        self.assertEqual(timed_filter(self.port, self.context())[0], 200)
        ctx = self.context()
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2  # TLS 1.2 is accepted too.
        self.assertEqual(timed_filter(self.port, ctx)[0], 200)

    def test_a_client_trusting_another_ca_refuses_the_server(self):
        self.start(self.tls_flags())
        with self.assertRaises(ssl.SSLCertVerificationError):
            timed_filter(self.port, self.context(ca="other-ca.crt"))

    def test_plain_http_to_the_tls_port_gets_no_reply(self):
        self.start(self.tls_flags())
        with self.assertRaises((http.client.HTTPException, ConnectionError)):
            timed_filter(self.port)

    def test_client_ca_requires_a_client_certificate_except_for_probes(self):
        self.start(self.tls_flags(client_ca=True))
        self.assertEqual(timed_filter(self.port, self.context(cert="client"))[0], 200)

        def call(method, path, cert=None, body=None):
            conn = http.client.HTTPSConnection(HOST, self.port, timeout=10,
                                               context=self.context(cert=cert))
            try:
                conn.request(method, path, body=body,
                             headers={"Content-Type": "application/json"} if body else {})
                resp = conn.getresponse()
                return resp.status, resp.read().decode()
            finally:
                conn.close()

        # Without a certificate: the kubelet's probes, and nothing else.
        self.assertEqual(call("GET", "/healthz")[0], 200)
        self.assertEqual(call("GET", "/readyz?verbose=1")[0], 200)
        for method, path in [("POST", "/gpushare-scheduler/filter"),
                             ("POST", "/gpushare-scheduler/bind"),
                             ("POST", "/gpushare-scheduler/release"),
                             ("POST", "/gpushare-scheduler/plan"),
                             ("GET", "/metrics"), ("GET", "/inspect"),
                             ("POST", "/healthz"), ("GET", "/healthz/../inspect")]:
            status, body = call(method, path, body="{}" if method == "POST" else None)
            self.assertEqual(status, 403, (method, path, body))
            self.assertIn("client certificate", json.loads(body)["Error"])
        # A certificate of another CA is refused at the handshake.
        other = self.pem("other.crt")
        if not os.path.exists(other):
            for args in (["req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=other",
                          "-keyout", "other.key", "-out", "other.csr"],
                         ["x509", "-req", "-in", "other.csr", "-CA", "other-ca.crt",
                          "-CAkey", "other-ca.key", "-CAcreateserial", "-days", "2",
                          "-extfile", "client.ext", "-out", "other.crt"]):
                openssl(*args, cwd=self.tmp)
        with self.assertRaises((ssl.SSLError, ConnectionError, http.client.HTTPException)):
            call("GET", "/healthz", cert="other")

    def test_renewed_files_are_served_without_a_restart(self):
        """The files swapped the way a Secret's volume swaps them (the ..data
        symbolic link): new connections get the new certificate within a few
        seconds, files that do not agree (a key of another certificate) keep
        the last good ones, and a new client CA takes effect too."""
        def issue(name, key_of=None):
            key = (key_of or name) + ".key"
            if key_of is None:
                openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=" + name,
                        "-keyout", key, "-out", name + ".csr", cwd=self.tmp)
            else:
                openssl("req", "-new", "-key", key, "-subj", "/CN=" + name,
                        "-out", name + ".csr", cwd=self.tmp)
            openssl("x509", "-req", "-in", name + ".csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                    "-CAcreateserial", "-days", "2", "-extfile", "san.ext",
                    "-out", name + ".crt", cwd=self.tmp)

        live = os.path.join(self.tmp, "live")
        os.mkdir(live)
        version = [0]

        def publish(crt, key, ca="ca.crt"):
            version[0] += 1
            d = os.path.join(live, "..v%d" % version[0])
            os.mkdir(d)
            for src, dst in ((crt, "tls.crt"), (key, "tls.key"), (ca, "ca.crt")):
                shutil.copy(self.pem(src), os.path.join(d, dst))
            tmp_link = os.path.join(live, "..data_tmp")
            os.symlink(os.path.basename(d), tmp_link)
            os.replace(tmp_link, os.path.join(live, "..data"))

        publish("server.crt", "server.key")
        for f in ("tls.crt", "tls.key", "ca.crt"):
            os.symlink(os.path.join("..data", f), os.path.join(live, f))
        self.start(["--tls-cert-file", os.path.join(live, "tls.crt"),
                    "--tls-private-key-file", os.path.join(live, "tls.key"),
                    "--client-ca-file", os.path.join(live, "ca.crt")])

        def der(name):
            with open(self.pem(name)) as f:
                return ssl.PEM_cert_to_DER_cert(f.read())

        def served():
            with socket.create_connection((HOST, self.port), timeout=10) as raw:
                with self.context(cert="client").wrap_socket(raw, server_hostname=HOST) as t:
                    return t.getpeercert(binary_form=True)

        def wait_for(want, seconds=10):
            deadline = time.monotonic() + seconds
            while served() != want:
                self.assertLess(time.monotonic(), deadline, "the renewed certificate never came")
                time.sleep(0.1)

        self.assertEqual(served(), der("server.crt"))
        keep_alive = http.client.HTTPSConnection(HOST, self.port, timeout=10,
                                                 context=self.context(cert="client"))
        keep_alive.request("GET", "/healthz")
        self.assertEqual(keep_alive.getresponse().read(), b'{"status":"ok"}')
        issue("renewed")
        publish("renewed.crt", "renewed.key")
        wait_for(der("renewed.crt"))
        self.assertEqual(timed_filter(self.port, self.context(cert="client"))[0], 200)
        # The connection opened before the renewal goes on.
        keep_alive.request("GET", "/healthz")
        self.assertEqual(keep_alive.getresponse().status, 200)
        keep_alive.close()
        # A certificate whose key is not the one published: the renewed pair stays.
        issue("mismatched")
        publish("mismatched.crt", "renewed.key")
        time.sleep(2.5)
        self.assertEqual(served(), der("renewed.crt"))
        # The client CA changes: the old clients' certificates no longer verify.
        publish("renewed.crt", "renewed.key", ca="other-ca.crt")
        deadline = time.monotonic() + 10
        while True:
            # TLS 1.3: the client's handshake ends before the server checks
            # its certificate; the refusal comes with the first read.
            try:
                timed_filter(self.port, self.context(cert="client"))
            except (ssl.SSLError, ConnectionError, http.client.HTTPException):
                break
            self.assertLess(time.monotonic(), deadline, "the new client CA was not used")
            time.sleep(0.1)
        self.proc.terminate()
        log = self.proc.stderr.read().decode()
        self.assertIn("the TLS files changed; new connections use them", log)
        self.assertEqual(log.count("cannot be used yet"), 1, log)

    def test_the_certificates_of_deploy_make_certs_work_as_deployed(self):
        """deploy/make-certs.sh's files, used as deploy/base names them:
        kube-scheduler's certificate and a replica's own certificate (bind
        forwarding) are served, under the DNS names the manifests use."""
        repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        certs = os.path.join(self.tmp, "deploy-certs")
        subprocess.run([os.path.join(repo, "deploy", "make-certs.sh"), certs], check=True,
                       capture_output=True, timeout=120)
        self.start(["--tls-cert-file", os.path.join(certs, "tls.crt"),
                    "--tls-private-key-file", os.path.join(certs, "tls.key"),
                    "--client-ca-file", os.path.join(certs, "ca.crt")])
        for host in ("gpushare-extender.kube-system.svc",
                     "gpushare-extender-7d9c-x2x.gpushare-extender-peers.kube-system.svc"):
            for client in ("scheduler", "tls"):
                ctx = ssl.create_default_context(cafile=os.path.join(certs, "ca.crt"))
                ctx.load_cert_chain(os.path.join(certs, client + ".crt"),
                                    os.path.join(certs, client + ".key"))
                with socket.create_connection((HOST, self.port), timeout=10) as raw:
                    with ctx.wrap_socket(raw, server_hostname=host) as tls:
                        tls.sendall(b"GET /readyz HTTP/1.1\r\nHost: x\r\n"
                                    b"Connection: close\r\n\r\n")
                        reply = b""
                        while True:
                            chunk = tls.recv(4096)
                            if not chunk:
                                break
                            reply += chunk
                self.assertTrue(reply.startswith(b"HTTP/1.1 200"), (host, client, reply[:80]))
        # A name the certificate does not carry is refused by the client.
        ctx = ssl.create_default_context(cafile=os.path.join(certs, "ca.crt"))
        with socket.create_connection((HOST, self.port), timeout=10) as raw:
            with self.assertRaises(ssl.SSLCertVerificationError):
                ctx.wrap_socket(raw, server_hostname="elsewhere.example.com")
        # Run again on the same folder (a renewal): the CA is kept, the
        # certificates are new, and the running extender serves the new one.
        def read(name):
            with open(os.path.join(certs, name)) as f:
                return f.read()
        ca, old = read("ca.crt"), read("tls.crt")
        subprocess.run([os.path.join(repo, "deploy", "make-certs.sh"), certs], check=True,
                       capture_output=True, timeout=120)
        self.assertEqual(read("ca.crt"), ca)
        self.assertNotEqual(read("tls.crt"), old)
        want = ssl.PEM_cert_to_DER_cert(read("tls.crt"))
        ctx = ssl.create_default_context(cafile=os.path.join(certs, "ca.crt"))
        ctx.load_cert_chain(os.path.join(certs, "scheduler.crt"), os.path.join(certs, "scheduler.key"))
        deadline = time.monotonic() + 10
        while True:
            with socket.create_connection((HOST, self.port), timeout=10) as raw:
                with ctx.wrap_socket(raw, server_hostname="gpushare-extender.kube-system.svc") as t:
                    if t.getpeercert(binary_form=True) == want:
                        break
            self.assertLess(time.monotonic(), deadline, "the renewed certificate was not served")
            time.sleep(0.1)

    def test_bad_certificate_files_are_clear_startup_errors(self):
        cases = [
            (["--tls-cert-file", self.pem("server.crt"),
              "--tls-private-key-file", self.pem("client.key")], "does not match"),
            (["--tls-cert-file", self.pem("missing.crt"),
              "--tls-private-key-file", self.pem("server.key")], "cannot be read"),
            (["--tls-cert-file", self.pem("san.ext"),
              "--tls-private-key-file", self.pem("server.key")], "not a PEM certificate"),
            (["--tls-cert-file", self.pem("server.crt")], "go together"),
        ]
        for flags, message in cases:
            r = subprocess.run([self.binary, "--nodes", NODES, "--pods", PODS, "--port", "0",
                                *flags], capture_output=True, timeout=30)
            self.assertNotEqual(r.returncode, 0, flags)
            self.assertIn(message, r.stderr.decode(), flags)


class AccessLogTest(ServerCase):
    """--access-log: one line per request, with the fields the harness reads."""

    def test_one_line_per_request(self):
        log = os.path.join(self.tmp, "access.log")
        self.start(["--access-log", log, "--max-body-bytes", "1Mi",
                    "--body-budget-bytes", "1Mi"])
        timed_filter(self.port)
        raw_exchange(self.port, b"POST /gpushare-scheduler/filter HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Length: 2000000\r\n\r\n")
        raw_exchange(self.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        # A line is written once its reply is: poll (bounded) for the last one.
        deadline = time.monotonic() + 10
        while True:
            with open(log) as f:
                lines = [line.split() for line in f]
            if len(lines) >= 3 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        self.assertEqual(len(lines), 3, lines)
        for fields in lines:
            self.assertEqual(len(fields), 8, fields)
            self.assertRegex(fields[0], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
            self.assertTrue(fields[1].startswith("127.0.0.1:"), fields)
            self.assertRegex(fields[7], r"^\d+us$")  # Microseconds, unit named.
        (_, _, method, path, status, bytes_in, bytes_out, _), big, health = lines
        self.assertEqual((method, path, status), ("POST", "/gpushare-scheduler/filter", "200"))
        self.assertEqual(int(bytes_in), len(filter_body()))
        self.assertGreater(int(bytes_out), 0)
        self.assertEqual(big[2:6], ["POST", "/gpushare-scheduler/filter", "413", "0"])
        self.assertEqual(health[2:5], ["GET", "/healthz", "200"])


class FlagsTest(unittest.TestCase):
    """Every serving flag is documented by --help and checked at startup."""

    FLAGS = ["--tls-cert-file", "--tls-private-key-file", "--client-ca-file", "--access-log",
             "--max-body-bytes", "--body-budget-bytes", "--budget-wait-ms", "--max-header-bytes",
             "--header-timeout-ms", "--idle-timeout-ms", "--min-body-rate", "--max-connections",
             "--trim-bytes", "--io-threads", "--worker-threads"]

    def setUp(self):
        self.binary = os.environ.get("GPUSHARE_EXTENDER")
        if not self.binary:
            self.skipTest("GPUSHARE_EXTENDER is not set")

    def run_with(self, *flags):
        return subprocess.run([self.binary, "--nodes", NODES, "--pods", PODS, "--port", "0",
                               *flags], capture_output=True, timeout=30, text=True)

    def test_help_lists_every_flag(self):
        r = subprocess.run([self.binary, "--help"], capture_output=True, timeout=30, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        for flag in self.FLAGS + ["--apiserver", "--nodes", "--pods", "--address", "--port",
                                  "--policy", "--ttl-ms", "--resync-ms", "--port-file"]:
            self.assertIn(flag, r.stdout)

    def test_bad_values_are_refused_naming_the_flag(self):
        for flags, message in [
                (["--max-body-bytes", "12abc"], "--max-body-bytes takes a byte count"),
                (["--max-body-bytes", "-5"], "--max-body-bytes takes a byte count"),
                (["--max-body-bytes", "64Mi", "--body-budget-bytes", "32Mi"], "smaller than"),
                (["--header-timeout-ms", "soon"], "--header-timeout-ms takes milliseconds"),
                (["--max-connections", "0"], "--max-connections takes a number in 1.."),
                (["--max-header-bytes", "10"], "--max-header-bytes takes a byte count in"),
                (["--client-ca-file", "/dev/null"], "needs --tls-cert-file"),
                (["--access-log", "/nonexistent-dir/access.log"], "cannot be opened"),
                (["--io-threads"], "--io-threads takes a number")]:
            r = self.run_with(*flags)
            self.assertNotEqual(r.returncode, 0, flags)
            self.assertIn(message, r.stderr, flags)

    def test_sizes_take_binary_suffixes(self):
        with tempfile.TemporaryDirectory() as tmp:
            proc, url = start_server(self.binary, NODES, PODS, tmp,
                                     extra=["--max-body-bytes", "1Ki", "--body-budget-bytes", "1Ki"])
            try:
                head = ("POST /gpushare-scheduler/filter HTTP/1.1\r\nHost: x\r\n"
                        "Content-Length: 1025\r\n\r\n").encode()
                self.assertEqual(raw_exchange(port_of(url), head)[0], 413)
                self.assertEqual(timed_filter(port_of(url))[0], 200)  # 1 KiB is enough.
            finally:
                stop_server(proc)


class ApiModeAttackTest(unittest.TestCase):
    """Attacks on an extender that follows an API server (the fake one of
    e2e_test.py): names that would smuggle a request into the API server with
    the extender's credentials, a release from a stranger, one bad Node."""

    def setUp(self):
        self.binary = os.environ.get("GPUSHARE_EXTENDER")
        if not self.binary:
            self.skipTest("GPUSHARE_EXTENDER is not set")
        with open(NODES) as f:
            self.nodes = json.load(f)["items"]
        with open(PODS) as f:
            self.pods = json.load(f)["items"]
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.proc = None
        self.addCleanup(lambda: self.proc and stop_server(self.proc))

    def start(self, nodes=None, extra=()):
        self.api = FakeApiServer(self.nodes if nodes is None else nodes, self.pods)
        self.addCleanup(self.api.stop)
        self.proc, self.url = start_server(
            self.binary, None, None, self.tmp.name,
            extra=("--apiserver", self.api.url, "--resync-ms", "600000") + tuple(extra))
        client = Client(self.url)
        self.addCleanup(client.close)
        self.assertTrue(wait_for(lambda: client.request("GET", "/readyz")[0] == 200, 15))
        return client

    def test_a_pod_name_cannot_smuggle_a_request_into_the_api_server(self):
        client = self.start()
        evil = ("x HTTP/1.1\r\nHost: x\r\n\r\n"
                "DELETE /api/v1/namespaces/default/pods/victim")
        before = client.inspect()
        pod = make_pod("x", 2)
        pod["metadata"]["name"] = evil
        status, reply = client.post("filter", extender_args(pod, ["sd-cluster-04"]))
        self.assertEqual(status, 400, reply)
        self.assertIn("ExtenderArgs.Pod metadata.name", reply["Error"])
        status, reply = client.post("bind", {"PodName": evil, "PodNamespace": "default",
                                             "PodUID": "uid-x", "Node": "sd-cluster-04"})
        self.assertEqual(status, 400, reply)
        self.assertIn("ExtenderBindingArgs.PodName", reply["Error"])
        self.assertNotIn("\r", reply["Error"])
        for ns in ["default/../kube-system", "a b", "UPPER"]:
            status, reply = client.post("bind", {"PodName": "p", "PodNamespace": ns,
                                                 "PodUID": "u", "Node": "sd-cluster-04"})
            self.assertEqual(status, 400, (ns, reply))
        # Nothing reached the API server, nothing is held.
        with self.api.lock:
            self.assertEqual(self.api.calls, [])
        self.assertEqual(client.inspect(), before)

    def test_a_release_from_anyone_cannot_free_a_running_pods_gpus(self):
        client = self.start()
        pod = make_pod("runner", 14)
        self.api.add_pod(json.loads(json.dumps(pod)))
        status, result = client.post("filter", extender_args(pod, ["sd-cluster-05"]))
        self.assertEqual((status, result["NodeNames"]), (200, ["sd-cluster-05"]), result)
        status, reply = client.post("bind", {"PodName": "runner", "PodNamespace": "default",
                                             "PodUID": pod["metadata"]["uid"],
                                             "Node": "sd-cluster-05"})
        self.assertEqual((status, reply["Error"]), (200, ""), reply)
        held = client.inspect("sd-cluster-05")
        for verb in ["release", "forget", "confirm"]:
            status, reply = client.post(verb, {"PodNamespace": "default", "PodName": "runner"})
            self.assertEqual(status, 403, (verb, reply))
            self.assertIn("is off", reply["Error"])
            self.assertEqual(client.inspect("sd-cluster-05"), held)
        # The GPU stays full: another 14-unit pod does not fit there.
        other = make_pod("second", 14)
        self.api.add_pod(json.loads(json.dumps(other)))
        status, result = client.post("filter", extender_args(other, ["sd-cluster-05"]))
        self.assertEqual((status, result["NodeNames"]), (200, []), result)

    def test_unreadable_nodes_do_not_stop_start_up(self):
        huge = json.loads(json.dumps(self.nodes[0]))
        huge["metadata"]["name"] = "sixty-five-gpus"
        huge["status"]["capacity"]["aliyun.com/gpu-count"] = "65"
        huge["status"]["capacity"]["aliyun.com/gpu-mem"] = str(65 * 16)
        # gpu-mem over an explicit gpu-count of 0 is not one GPU.
        none = json.loads(json.dumps(self.nodes[0]))
        none["metadata"]["name"] = "zero-gpus"
        none["status"]["capacity"]["aliyun.com/gpu-count"] = "0"
        none["status"]["capacity"]["aliyun.com/gpu-mem"] = "16"
        client = self.start(self.nodes + [huge, none])
        names = [n["name"] for n in client.inspect()["nodes"]]
        self.assertEqual(sorted(names), sorted(SAMPLE_NODES))
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as r:
            text = r.read().decode()
        self.assertIn('gpushare_extender_objects_skipped_total{kind="node"} 2', text)
        status, result = client.post("filter", extender_args(make_pod("z", 1), ["zero-gpus"]))
        self.assertEqual((status, result["NodeNames"]), (200, []), result)


    def test_memory_returns_after_a_large_cluster_is_relisted_away(self):
        client = self.start()
        base = status_kib(self.proc.pid, "VmRSS") / 1024

        def relist(nodes):
            # The watch ends and its resourceVersion is gone: the extender
            # lists the nodes again, as after an etcd compaction.
            with self.api.lock:
                self.api.nodes = {n["metadata"]["name"]: n for n in nodes}
                self.api.rv += 1
            self.api.drop_watches_and_compact()
            self.assertTrue(wait_for(lambda: len(client.inspect()["nodes"]) == len(nodes), 120))

        many = []
        for i in range(20000):
            node = json.loads(json.dumps(self.nodes[i % len(self.nodes)]))
            node["metadata"]["name"] = "churn-%05d" % i
            many.append(node)
        relist(self.nodes + many)
        peak = status_kib(self.proc.pid, "VmHWM") / 1024
        relist(self.nodes)
        time.sleep(0.5)
        after = status_kib(self.proc.pid, "VmRSS") / 1024
        print("\n  20,000 nodes relisted away: RSS %.0f MiB idle, %.0f MiB at peak, "
              "%.0f MiB afterwards" % (base, peak, after))
        self.assertGreater(peak - base, 50)  # The list did cost memory...
        self.assertLess(after - base, 0.25 * (peak - base))  # ...and most of it came back.

if __name__ == "__main__":
    unittest.main()
