"""Headless Chromium driven over the DevTools protocol, for checking, timing and photographing the viewer page.

The browser is Debian's `chromium` (scripts/install_browser.sh). It is spoken to over `--remote-debugging-pipe`:
commands go in on its file descriptor 3 and replies come out on 4, each a JSON object ended by a NUL byte, so no
port is opened and no client library is needed. Used by the viewer's browser tests, the B18 benchmark
(scripts/bench/viewer_scale.py) and scripts/make_viewer_screenshots.py; the page itself never needs it.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Self

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--mute-audio", "--hide-scrollbars"]


class BrowserError(RuntimeError):
    """The browser is missing, died, or answered a command with an error; the message says which."""


def _above_four(fd: int) -> int:
    """`fd` moved to a number above 9 (the browser's ends must not sit where they are put: 3 and 4)."""
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return moved


def chromium_binary() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Chromium:
    """One headless browser with one page (a tab) attached: `open`, `evaluate`, `wait_for`, `click`, `screenshot`.

    Use as a context manager; the browser process and its profile folder go away on exit.
    """

    def __init__(self, width: int = 1280, height: int = 900, binary: str | None = None):
        binary = binary or chromium_binary()
        if binary is None:
            raise BrowserError("chromium is not installed (bash scripts/install_browser.sh)")
        self.profile = tempfile.mkdtemp(prefix="cader-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        to_browser_r, from_browser_w = _above_four(to_browser_r), _above_four(from_browser_w)
        # the protocol's descriptors are 3 (commands in) and 4 (replies out): bash puts the pipe ends there (and
        # closes their first numbers) as it becomes the browser, so no Python runs between fork and exec
        place = f'exec "$@" 3<&{to_browser_r} 4>&{from_browser_w} {to_browser_r}<&- {from_browser_w}>&-'
        self.process = subprocess.Popen(
            ["bash", "-c", place, "chromium", binary, *FLAGS, f"--user-data-dir={self.profile}",
             f"--window-size={width},{height}", "--remote-debugging-pipe", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            pass_fds=(to_browser_r, from_browser_w))
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._next_id = 0
        self._document: str | None = None
        self._replies: dict[int, queue.Queue] = {}
        self._events: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime"):
            self.send(f"{domain}.enable", session=True)
        self.resize(width, height)

    # ---- transport ------------------------------------------------------------------------------------------------
    def _read(self) -> None:
        buffer = b""
        while True:
            try:
                chunk = os.read(self._from_browser, 1 << 20)
            except OSError:
                chunk = b""
            if not chunk:
                for waiting in list(self._replies.values()):
                    waiting.put({"error": {"message": "the browser closed its pipe"}})
                return
            buffer += chunk
            while b"\0" in buffer:
                raw, buffer = buffer.split(b"\0", 1)
                message = json.loads(raw)
                if "id" in message and message["id"] in self._replies:
                    self._replies[message["id"]].put(message)
                else:
                    self._events.put(message)

    def send(self, method: str, params: dict | None = None, session: bool = False, timeout: float = 120.0) -> dict:
        """One protocol command; its result, or BrowserError with the browser's message."""
        with self._lock:
            self._next_id += 1
            ident = self._next_id
            self._replies[ident] = queue.Queue()
        message = {"id": ident, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        try:
            reply = self._replies[ident].get(timeout=timeout)
        except queue.Empty:
            raise BrowserError(f"{method}: no reply in {timeout:.0f} s") from None
        finally:
            self._replies.pop(ident, None)
        if "error" in reply:
            raise BrowserError(f"{method}: {reply['error'].get('message')}")
        return reply.get("result", {})

    # ---- the page -------------------------------------------------------------------------------------------------
    def resize(self, width: int, height: int) -> None:
        self.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1,
                                                         "mobile": False}, session=True)

    def open(self, url: str, timeout: float = 120.0) -> float:
        """Load `url` afresh (a page already open is left first, so that another #fragment loads it anew rather
        than scrolling it) and wait for the load event; returns the seconds that took as seen from here."""
        if self._document is not None and self._document == url.split("#", 1)[0]:
            self._document = None
            self.open("about:blank", timeout)
        while not self._events.empty():
            self._events.get_nowait()
        started = time.perf_counter()
        self.send("Page.navigate", {"url": url}, session=True)
        self._document = url.split("#", 1)[0]
        deadline = started + timeout
        while time.perf_counter() < deadline:
            try:
                event = self._events.get(timeout=0.5)
            except queue.Empty:
                continue
            if event.get("method") == "Page.loadEventFired":
                return time.perf_counter() - started
        raise BrowserError(f"{url}: no load event in {timeout:.0f} s")

    def evaluate(self, expression: str, timeout: float = 120.0):
        """The value of a JavaScript expression in the page (a promise is awaited); a thrown error is raised."""
        result = self.send("Runtime.evaluate", {"expression": expression, "awaitPromise": True,
                                                "returnByValue": True}, session=True, timeout=timeout)
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            text = (details.get("exception") or {}).get("description") or details.get("text")
            raise BrowserError(f"script error: {text}")
        return result.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout: float = 60.0, every: float = 0.05):
        """Poll `expression` until it is truthy; returns its value."""
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(every)
        raise BrowserError(f"waited {timeout:.0f} s for {expression}")

    def click(self, selector: str) -> None:
        """A real mouse click (pressed and released) at the centre of the first element matching `selector`,
        scrolled into view first."""
        box = self.evaluate(f"""(() => {{ const el = document.querySelector({json.dumps(selector)});
            if (!el) return null; el.scrollIntoView({{block: "center"}}); const r = el.getBoundingClientRect();
            return [r.left + r.width / 2, r.top + r.height / 2]; }})()""")
        if box is None:
            raise BrowserError(f"nothing on the page matches {selector}")
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", {"type": kind, "x": box[0], "y": box[1], "button": "left",
                                                   "clickCount": 1}, session=True)

    def screenshot(self, path: str | Path, full_height: bool = False, max_height: int = 4000,
                   selector: str | None = None) -> Path:
        """A PNG of the viewport, of the whole page (up to `max_height` px) with `full_height`, or of the first
        element matching `selector`."""
        params: dict = {"format": "png"}
        if selector is not None:
            box = self.evaluate(f"""(() => {{ const el = document.querySelector({json.dumps(selector)});
                if (!el) return null; const r = el.getBoundingClientRect();
                return [r.left + scrollX, r.top + scrollY, r.width, r.height]; }})()""")
            if box is None:
                raise BrowserError(f"nothing on the page matches {selector}")
            params |= {"captureBeyondViewport": True, "clip": {"x": box[0], "y": box[1], "width": box[2],
                                                               "height": min(box[3], max_height), "scale": 1}}
        elif full_height:
            size = self.evaluate("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
            params |= {"captureBeyondViewport": True,
                       "clip": {"x": 0, "y": 0, "width": size[0], "height": min(size[1], max_height), "scale": 1}}
        data = self.send("Page.captureScreenshot", params, session=True)["data"]
        path = Path(path)
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=10)
        except BrowserError:
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for fd in (self._to_browser, self._from_browser):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
