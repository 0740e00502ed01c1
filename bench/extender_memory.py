"""Memory of gpushare-extender for the largest realistic request bodies.

Starts the extender on loopback with N realistic GPU nodes
(tests/extender/realistic_nodes.py), then posts one filter with all N nodes in
full (ExtenderArgs for nodeCacheCapable: false) and reports the body size,
the filter's latency, the server's RSS before, its peak during (VmHWM, reset
through /proc/PID/clear_refs first) and its RSS afterwards.

  python3 bench/extender_memory.py --binary build/extender/gpushare-extender --nodes 10000
"""

import argparse
import http.client
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "extender"))
import realistic_nodes  # noqa: E402


def status_kib(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--binary", required=True)
    p.add_argument("--nodes", type=int, default=10000)
    p.add_argument("--requests", type=int, default=2, help="filters posted one after another")
    p.add_argument("extra", nargs="*", help="more flags for the extender")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        nodes = os.path.join(tmp, "nodes.json")
        pods = os.path.join(tmp, "pods.json")
        with open(nodes, "wb") as f:
            f.write(realistic_nodes.node_list(a.nodes))
        with open(pods, "w") as f:
            f.write('{"kind":"List","apiVersion":"v1","items":[]}')
        body = realistic_nodes.extender_args(a.nodes)
        port_file = os.path.join(tmp, "port")
        server = subprocess.Popen([a.binary, "--nodes", nodes, "--pods", pods, "--address",
                                   "127.0.0.1", "--port", "0", "--port-file", port_file] + a.extra,
                                  stdout=subprocess.DEVNULL)
        try:
            deadline = time.time() + 300
            while not os.path.exists(port_file) and time.time() < deadline:
                assert server.poll() is None, "extender exited"
                time.sleep(0.2)
            port = int(open(port_file).read())
            time.sleep(1)
            print("%d nodes; body %d bytes (%.1f MiB)" % (a.nodes, len(body), len(body) / 2**20))
            for i in range(a.requests):
                with open("/proc/%d/clear_refs" % server.pid, "w") as f:
                    f.write("5")  # Resets VmHWM to the current RSS.
                before = status_kib(server.pid, "VmRSS")
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
                t = time.time()
                conn.request("POST", "/gpushare-scheduler/filter", body=body,
                             headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                out = resp.read()
                ms = (time.time() - t) * 1000
                conn.close()
                time.sleep(0.5)
                print("request %d: HTTP %d, reply %d bytes, %.0f ms; RSS before %.0f MiB, "
                      "peak %.0f MiB, after %.0f MiB" %
                      (i + 1, resp.status, len(out), ms, before / 1024,
                       status_kib(server.pid, "VmHWM") / 1024,
                       status_kib(server.pid, "VmRSS") / 1024))
        finally:
            server.terminate()
            server.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
