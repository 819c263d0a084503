"""A Milvus server seen through its public API: pymilvus 2.3 runs in its own environment
(.dev/milvus-venv: it pins grpcio 1.58 and marshmallow<4, which clash with this one), driven
through scripts/milvus_client.py, one subprocess per batch of ops, JSON on stdin/stdout.

Credentials (user/password) travel on the subprocess's stdin only: never argv, env or logs.
Every failure is a typed `MilvusError` (`MilvusUnreachable` when it cannot connect).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from seglake.errors import SeglakeError, Unavailable

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "scripts" / "milvus_client.py"


class MilvusError(SeglakeError):
    """Milvus refused or failed an operation."""


class MilvusUnreachable(MilvusError, Unavailable):
    """No Milvus answers at the address."""


def client_python() -> Path:
    """The Milvus venv's python: $MILVUS_VENV (default .dev/milvus-venv of the repo)."""
    venv = Path(os.environ.get("MILVUS_VENV", REPO / ".dev" / "milvus-venv"))
    py = venv / "bin" / "python"
    if not py.exists():
        raise MilvusError(f"no pymilvus environment at {venv} (run `make setup`, or set MILVUS_VENV)")
    return py


@dataclass
class MilvusClient:
    address: str                                   # host:port of the proxy
    user: str = ""
    password: str = field(default="", repr=False)
    timeout: float = 600.0                         # one batch of ops, bounded
    connect_timeout: float = 15.0

    _proc: object = field(default=None, repr=False, compare=False)

    @contextmanager
    def session(self):
        """One client process for every call inside (pymilvus imported and connected once,
        not per call: ~1 s each on this machine). Nested sessions reuse the outer one."""
        if self._proc is not None:
            yield self
            return
        req = {"address": self.address, "session": True, "connect_timeout": self.connect_timeout}
        if self.user:
            req.update(user=self.user, password=self.password)
        proc = subprocess.Popen([str(client_python()), str(SCRIPT)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            self._proc = proc
            first = self._exchange(proc, req, ("connect",))
            if "error" in first:
                raise MilvusUnreachable(self._scrub(first["error"]))
            yield self
        finally:
            self._proc = None
            try:
                proc.stdin.close()
                proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                proc.kill()
                proc.wait()
            proc.stdout.close()
            proc.stderr.close()

    def _exchange(self, proc, msg: dict, what) -> dict | list:
        """One line out, one line back, within self.timeout (else the process is killed)."""
        timer = threading.Timer(self.timeout, proc.kill)
        timer.start()
        try:
            proc.stdin.write(json.dumps(msg) + "\n")
            proc.stdin.flush()
            line = proc.stdout.readline()
        except OSError:
            line = ""
        finally:
            timer.cancel()
        if not line:
            proc.kill()
            err = proc.stderr.read()[-1500:]
            raise MilvusError(f"Milvus client session at {self.address} ended ({', '.join(what)}): "
                              f"{self._scrub(err) or 'no answer within the timeout'}")
        return json.loads(line)

    def call(self, *ops: dict) -> list:
        if self._proc is not None:
            out = self._exchange(self._proc, {"ops": list(ops)}, [o["op"] for o in ops])
            if isinstance(out, dict) and "error" in out:
                raise MilvusError(f"Milvus at {self.address}, op {ops[out['op']]['op']!r}: {self._scrub(out['error'])}")
            return out
        req = {"address": self.address, "ops": list(ops), "errors_as_data": True,
               "connect_timeout": self.connect_timeout}
        if self.user:
            req.update(user=self.user, password=self.password)
        try:
            r = subprocess.run([str(client_python()), str(SCRIPT)], input=json.dumps(req),
                               capture_output=True, text=True, timeout=self.timeout)
        except subprocess.TimeoutExpired:
            raise MilvusError(f"Milvus at {self.address}: no answer within {self.timeout:.0f} s "
                              f"({', '.join(o['op'] for o in ops)})") from None
        try:
            out = json.loads(r.stdout) if r.stdout.strip() else None
        except ValueError:
            out = None
        if isinstance(out, dict) and "error" in out:
            msg = self._scrub(out["error"])
            if out.get("op") == -1:
                raise MilvusUnreachable(msg)
            raise MilvusError(f"Milvus at {self.address}, op {ops[out['op']]['op']!r}: {msg}")
        if r.returncode != 0 or not isinstance(out, list):
            raise MilvusError(f"Milvus client failed (rc {r.returncode}): {self._scrub(r.stderr[-1500:])}")
        return out

    def one(self, op: dict):
        return self.call(op)[0]

    def _scrub(self, text: str) -> str:
        return text.replace(self.password, "***") if self.password else text
