"""Processes of a benchmark run: start them on free loopback ports, wait for them with a deadline,
read their memory, and stop them (also on Ctrl-C or a failure: `Procs.stop_all` runs at exit).

Nothing here sleeps blindly: every wait polls a condition and gives up at a deadline, naming what
it waited for and the tail of the process's log.
"""

import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request


class StartError(RuntimeError):
    pass


def free_port():
    """A port the OS had free a moment ago (for servers that cannot listen on port 0 and say
    which port they got: nginx and LiteLLM)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def poll(what, condition, timeout, interval=0.1, proc=None):
    """Calls `condition()` until it returns something truthy (returned) or `timeout` seconds pass
    (StartError). A `proc` that exits meanwhile fails the wait at once."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if proc is not None and proc.popen.poll() is not None:
            raise StartError(f"{proc.name} exited (status {proc.popen.returncode}) while waiting for {what}\n"
                             + proc.log_tail())
        if time.monotonic() > deadline:
            tail = proc.log_tail() if proc is not None else ""
            raise StartError(f"gave up waiting for {what} after {timeout:.0f} s\n{tail}")
        time.sleep(interval)


def http(method, url, body=None, headers=None, timeout=30):
    """(status, bytes) of one request; (0, error text) when it could not be made."""
    data = body.encode() if isinstance(body, str) else body
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()
    except (urllib.error.URLError, OSError) as err:
        return 0, str(err).encode()


def http_json(method, url, payload=None, headers=None, timeout=60):
    headers = dict(headers or {})
    body = None
    if payload is not None:
        body = json.dumps(payload)
        headers.setdefault("content-type", "application/json")
    status, data = http(method, url, body, headers, timeout)
    try:
        parsed = json.loads(data) if data else None
    except ValueError:
        parsed = {"raw": data[:500].decode(errors="replace")}
    return status, parsed


def rss_kb(pid):
    """Resident set of a process and all its descendants, in KiB (0 when gone)."""
    total = 0
    for p in [pid] + descendants(pid):
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
                        break
        except OSError:
            pass
    return total


def hwm_kb(pid):
    """Peak resident set (VmHWM) of one process, in KiB."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def descendants(pid):
    found = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                for child in f.read().split():
                    found.append(int(child))
                    found.extend(descendants(int(child)))
    except OSError:
        pass
    return found


CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """User + system CPU time of a process and its descendants, in seconds."""
    total = 0
    for p in [pid] + descendants(pid):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
        except (OSError, IndexError, ValueError):
            pass
    return total / CLK_TCK


def busy_cpu_seconds():
    """CPU time the whole machine spent busy (all cores), in seconds."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / CLK_TCK


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


class Proc:
    def __init__(self, name, popen, out_path, err_path):
        self.name = name
        self.popen = popen
        self.out_path = out_path
        self.err_path = err_path
        self.url = None

    @property
    def pid(self):
        return self.popen.pid

    def log_tail(self, lines=25):
        text = []
        for path in (self.out_path, self.err_path):
            try:
                with open(path, errors="replace") as f:
                    tail = f.read().splitlines()[-lines:]
                if tail:
                    text.append(f"--- {path} (last {len(tail)} lines)\n" + "\n".join(tail))
            except OSError:
                pass
        return "\n".join(text)

    def rss_mb(self):
        return rss_kb(self.pid) / 1024

    def stop(self, grace=10):
        if self.popen.poll() is not None:
            return
        # The whole process group: LiteLLM and nginx have children.
        try:
            os.killpg(self.popen.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            self.popen.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.popen.wait(timeout=10)


class Procs:
    """The processes of a run, stopped together."""

    def __init__(self, workdir):
        self.workdir = workdir
        self.running = []

    def spawn(self, name, argv, env=None, cwd=None):
        out_path = os.path.join(self.workdir, f"{name}.out")
        err_path = os.path.join(self.workdir, f"{name}.err")
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            # A session of its own, so that stopping it stops its children and a Ctrl-C in the
            # terminal reaches only this script, which then stops everything in order.
            popen = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                     env=env, cwd=cwd, start_new_session=True)
        proc = Proc(name, popen, out_path, err_path)
        self.running.append(proc)
        return proc

    def wait_listening(self, proc, prefix, timeout=120):
        """Waits for a `PREFIX listening on http://ADDR` line on the process's stdout."""
        pattern = re.compile(rf"^{re.escape(prefix)} listening on (http://127\.0\.0\.1:\d+)", re.M)

        def found():
            try:
                with open(proc.out_path, errors="replace") as f:
                    match = pattern.search(f.read())
                return match.group(1) if match else None
            except OSError:
                return None

        proc.url = poll(f"{proc.name} to say where it listens", found, timeout, proc=proc)
        return proc.url

    def stop(self, proc):
        proc.stop()
        if proc in self.running:
            self.running.remove(proc)

    def stop_all(self):
        for proc in reversed(list(self.running)):
            try:
                proc.stop()
            except Exception as err:  # keep stopping the others
                print(f"stopping {proc.name}: {err}", flush=True)
        self.running.clear()
