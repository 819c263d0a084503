"""A headless Debian Chromium driven over the DevTools protocol (no Playwright: only the
`websockets` client the venv already has). Enough for the e2e tests to use Airflow's
real UI as an operator does: open a page, wait for text or an element, click, type.

The browser is started with its own profile in a temporary directory and stopped (its
whole process group) when the `with` block ends.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--window-size=1400,1000"]


class Browser:
    def __init__(self, timeout: float = 30.0, offline: bool = False):
        """offline: every request to anything but loopback fails (no name resolves but
        localhost, and any other host goes through a dead proxy): a machine without internet."""
        self.timeout = timeout
        self.flags = FLAGS + (["--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1",
                               "--proxy-server=http://127.0.0.1:9"]   # loopback bypasses a proxy by default
                              if offline else [])
        self._id = 0
        self.proc = None
        self.ws = None

    # -- life ---------------------------------------------------------------------------
    def __enter__(self) -> "Browser":
        import httpx
        from websockets.sync.client import connect

        exe = shutil.which("chromium") or shutil.which("chromium-browser")
        assert exe, "Debian's chromium is not installed (scripts/install_system.sh installs it)"
        self.profile = tempfile.TemporaryDirectory(prefix="seglake-cdp-")
        self.proc = subprocess.Popen([exe, *self.flags, "--remote-debugging-port=0", f"--user-data-dir={self.profile.name}",
                                      "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        port_file = Path(self.profile.name) / "DevToolsActivePort"
        deadline = time.time() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            assert self.proc.poll() is None, "chromium exited at start"
            assert time.time() < deadline, "chromium did not open its DevTools port"
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        pages = [t for t in httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=10).json() if t["type"] == "page"]
        self._conn = connect(pages[0]["webSocketDebuggerUrl"], max_size=64 << 20, open_timeout=30,
                             ping_interval=None)   # Chromium's DevTools socket: no keepalive needed
        self.ws = self._conn.__enter__()
        self.send("Page.enable")
        self.send("Runtime.enable")
        return self

    def __exit__(self, *exc) -> None:
        try:
            if self.ws is not None:
                self._conn.__exit__(None, None, None)
        finally:
            if self.proc is not None and self.proc.poll() is None:
                for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
                    try:
                        os.killpg(self.proc.pid, sig)
                    except ProcessLookupError:
                        break
                    try:
                        self.proc.wait(timeout=wait)
                        break
                    except subprocess.TimeoutExpired:
                        continue
            self.profile.cleanup()

    # -- protocol ---------------------------------------------------------------------------
    def send(self, method: str, params: dict | None = None) -> dict:
        self._id += 1
        my_id = self._id
        self.ws.send(json.dumps({"id": my_id, "method": method, "params": params or {}}))
        deadline = time.time() + self.timeout
        while True:
            msg = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.time())))
            if msg.get("id") == my_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def js(self, expression: str):
        """The value of a JavaScript expression in the page (promises awaited)."""
        r = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression[:200]}: {r['exceptionDetails'].get('exception', {}).get('description')}")
        return r.get("result", {}).get("value")

    # -- what a user does ---------------------------------------------------------------------
    def set_cookie(self, url: str, name: str, value: str) -> None:
        self.send("Network.setCookie", {"url": url, "name": name, "value": value})

    def open(self, url: str) -> None:
        self.send("Page.navigate", {"url": url})
        self.wait("document.readyState === 'complete'")

    def wait(self, condition: str, timeout: float | None = None, what: str = ""):
        """Poll a JavaScript expression until it is truthy; returns its value."""
        deadline = time.time() + (timeout or self.timeout)
        last = None
        while time.time() < deadline:
            try:
                last = self.js(condition)
            except RuntimeError as e:   # a navigation in between: try again
                last = str(e)
            if last:
                return last
            time.sleep(0.25)
        raise AssertionError(f"timed out waiting for {what or condition}; page text: {self.text()[:3000]!r}")

    def wait_text(self, text: str, timeout: float | None = None) -> None:
        self.wait(f"document.body && document.body.innerText.includes({json.dumps(text)})", timeout, repr(text))

    def text(self, selector: str = "body") -> str:
        try:
            return self.js(f"(document.querySelector({json.dumps(selector)}) || {{innerText: ''}}).innerText") or ""
        except RuntimeError:
            return ""

    def act_until(self, action: str, condition: str, timeout: float = 180.0, every: float = 20.0,
                  what: str = ""):
        """Run the JavaScript `action` (a click on a link, say) until `condition` holds, again every
        `every` s: under load a click can land while the page is reloading itself and be lost.
        Only for actions that are harmless to repeat (navigation), never for a form's submit."""
        deadline = time.time() + timeout
        while True:
            try:
                self.js(action)
            except RuntimeError:   # a navigation in between: the next round clicks again
                pass
            try:
                return self.wait(condition, max(1.0, min(every, deadline - time.time())), what)
            except AssertionError:
                if time.time() >= deadline:
                    raise

    def click(self, selector: str, timeout: float | None = None) -> None:
        self.wait(f"!!document.querySelector({json.dumps(selector)})", timeout, selector)
        self.js(f"document.querySelector({json.dumps(selector)}).click()")

    def type_into(self, selector: str, text: str) -> None:
        """Focus an input, clear it and type `text` as key input (React sees a real edit)."""
        self.wait(f"!!document.querySelector({json.dumps(selector)})", None, selector)
        self.js(f"(() => {{ const e = document.querySelector({json.dumps(selector)}); e.focus(); e.select(); }})()")
        self.send("Input.dispatchKeyEvent", {"type": "keyDown", "key": "Delete", "code": "Delete",
                                             "windowsVirtualKeyCode": 46})
        self.send("Input.dispatchKeyEvent", {"type": "keyUp", "key": "Delete", "code": "Delete",
                                             "windowsVirtualKeyCode": 46})
        self.send("Input.insertText", {"text": text})

    def screenshot(self, path: Path) -> None:
        import base64

        path.write_bytes(base64.b64decode(self.send("Page.captureScreenshot", {"format": "png"})["data"]))
