"""A web viewer against the live view (issue 25): Foxglove Studio 1.48, the open-source web
app, in headless Chromium opens ``hil run rrr3_pd --live``, and its plot panels show data.

Studio 1.x comes from npm: ``@foxglove/studio-base`` 1.48.0 ships Studio's prebuilt web bundle
(assets/, UMD, react and react-dom outside it), which tests/viewer_host/ renders as Studio's
own web entry does (its Foxglove WebSocket data source, the layout given in the URL). npm
installs it, with react 17, once into ``~/.cache/hilrig/viewer-studio1`` (182 MB, seconds);
Chromium is Debian's (``apt-get install chromium``). The test drives Chromium through its
DevTools protocol (on ``websockets``), takes screenshots and reads the pixels of a plot.
Without Chromium or npm the browser test is skipped, saying why.
"""
from __future__ import annotations

import asyncio
import base64
import http.server
import importlib.util
import io
import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.parse
from pathlib import Path

import numpy as np
import pytest
import websockets
from hilrig.live.foxglove import CHANNELS, EVENT_SCHEMA

from rt_helpers import ROOT, SHARED_CPU, hil

HOST = Path(__file__).with_name("viewer_host")          # index.html, boot.js
LAYOUTS = ROOT / "docs" / "foxglove"
STUDIO_PACKAGES = ["@foxglove/studio-base@1.48.0", "react@17.0.2", "react-dom@17.0.2"]
STUDIO_BUNDLE = Path("node_modules/@foxglove/studio-base/assets/index.js")
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
WINDOW = (1600, 900)          # px, the page's size (device scale 1: a CSS px is a pixel)
PLOT = "joints q (rad)"       # the shipped layout's plot of q and r(t)
# Share of the chart's pixel columns with a coloured pixel (outside the legend) that counts
# as "the plot shows data": an empty chart has none (grey grid, axes and labels), a series
# across the 5 s window has nearly all; a few % is a drawn series however little of the
# window it fills yet (on a busy machine the first messages come late, in bursts)
PLOTTED = 0.05
LISTED = (*CHANNELS, "/hil/event", "/hil/frames", "/hil/scene")   # the run's topics


def make_layout():
    """docs/foxglove/make_layout.py as a module (it is a script, not part of the package)."""
    spec = importlib.util.spec_from_file_location("make_layout", LAYOUTS / "make_layout.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_studio1_layout_is_the_shipped_layout_in_studio1s_format():
    """hilrig-layout-studio1.json is hilrig-layout.json converted (make_layout.py writes
    both): the same panels, configs and titles, the splits' shares kept."""
    sdk = json.loads((LAYOUTS / "hilrig-layout.json").read_text())
    studio = json.loads((LAYOUTS / "hilrig-layout-studio1.json").read_text())
    assert studio == make_layout().studio_layout(sdk)

    sdk_panels = []

    def walk(node, share):
        if node["type"] == "panel":
            sdk_panels.append((node["panelType"], node["title"], node.get("config", {}), share))
            return
        total = sum(item["proportion"] for item in node["items"])
        for item in node["items"]:
            walk(item["content"], share * item["proportion"] / total)

    walk(sdk["content"], 1.0)
    studio_panels = []

    def walk_studio(node, share):
        if isinstance(node, str):
            config = dict(studio["configById"][node])
            title = config.pop("foxglovePanelTitle")
            studio_panels.append((node.split("!")[0], title, config, share))
            return
        first = node["splitPercentage"] / 100.0
        walk_studio(node["first"], share * first)
        walk_studio(node["second"], share * (1.0 - first))

    walk_studio(studio["layout"], 1.0)
    assert [p[0] for p in studio_panels] == [
        {"ThreeDee": "3D"}.get(p[0], p[0]) for p in sdk_panels]
    assert [p[1:3] for p in studio_panels] == [p[1:3] for p in sdk_panels]
    # each panel's share of the window (the product of its splits) is the SDK layout's
    np.testing.assert_allclose([p[3] for p in studio_panels], [p[3] for p in sdk_panels],
                               rtol=1e-12)


def test_every_json_channel_has_a_schema_studio1_and_lichtblick_read():
    """Foxglove Studio 1.x and Lichtblick (their parseJsonSchema) take one type per field
    and per array item; a union such as ["number", "null"] made them refuse the channel
    ("Unsupported type ... for array item q"), so the joint plots showed nothing."""
    readable = {"boolean", "string", "number", "integer", "object", "array"}

    def check(schema, where):
        assert schema["type"] == "object", where
        for name, field in schema["properties"].items():
            assert isinstance(field["type"], str) and field["type"] in readable, (where, name)
            if field["type"] == "array":
                item = field["items"]["type"]
                assert isinstance(item, str) and item in readable - {"array"}, (where, name)
            if field["type"] == "object":
                check(field, f"{where}.{name}")

    for topic, (schema, _) in CHANNELS.items():
        check(schema, topic)
    check(EVENT_SCHEMA, "/hil/event")


def _browser() -> str | None:
    for name in BROWSERS:
        if shutil.which(name):
            return shutil.which(name)
    return None


@pytest.fixture(scope="session")
def studio_host():
    """(Chromium, the npm folder with Studio 1.48 and react 17), installed by npm once;
    skipped, with the reason, without Chromium or npm."""
    browser, npm = _browser(), shutil.which("npm")
    if browser is None:
        pytest.skip(f"no Chromium ({', '.join(BROWSERS)}) on PATH for the web viewer "
                    "test (Debian: apt-get install chromium)")
    if npm is None:
        pytest.skip("npm is needed to install Foxglove Studio 1.48 (@foxglove/studio-base)")
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    folder = cache / "hilrig" / "viewer-studio1"
    umd = folder / "node_modules" / "react-dom" / "umd" / "react-dom.production.min.js"
    if not (folder / STUDIO_BUNDLE).is_file() or not umd.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        # --ignore-scripts: the packages run none that the page needs
        done = subprocess.run([npm, "install", "--ignore-scripts", "--no-audit", "--no-fund",
                               "--prefix", str(folder), *STUDIO_PACKAGES],
                              capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr
    return browser, folder


class Handler(http.server.SimpleHTTPRequestHandler):
    """The viewer's page: tests/viewer_host/ at /, node_modules/ from the npm folder,
    /layout.json the shipped Studio 1.x layout."""

    npm_folder: Path

    def translate_path(self, path: str) -> str:
        clean = urllib.parse.urlsplit(path).path
        if clean == "/layout.json":
            return str(LAYOUTS / "hilrig-layout-studio1.json")
        self.directory = str(self.npm_folder if clean.startswith("/node_modules/") else HOST)
        return super().translate_path(path)

    def log_message(self, *args) -> None:    # the test's output stays readable
        pass


def _lines(stream, into: queue.Queue) -> None:
    for line in stream:
        into.put(line)
    into.put(None)


def _wait_for(lines: queue.Queue, pattern: str, timeout: float, seen: list) -> re.Match:
    """The first line matching ``pattern``; the lines read are kept in ``seen``."""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        try:
            line = lines.get(timeout=left)
        except queue.Empty:
            break
        if line is None:
            break
        seen.append(line)
        if found := re.search(pattern, line):
            return found
    raise AssertionError(f"no line matching {pattern!r}:\n{''.join(seen)}")


def _console_text(arg: dict) -> str:
    """A console argument as text: a value, or an object's preview (its fields)."""
    if "value" in arg:
        return str(arg["value"])
    fields = arg.get("preview", {}).get("properties", [])
    if fields:
        return "{" + ", ".join(f"{f['name']}: {f.get('value')}" for f in fields) + "}"
    return arg.get("description", "")


class DevTools:
    """A page of Chromium through its DevTools protocol: commands, and the console's
    errors and warnings collected as they come."""

    def __init__(self, ws, session: str):
        self.ws, self.session, self.count, self.console = ws, session, 0, []

    @classmethod
    async def open_page(cls, ws) -> "DevTools":
        browser = cls(ws, None)
        target = await browser.call("Target.createTarget", url="about:blank")
        attached = await browser.call("Target.attachToTarget", targetId=target["targetId"],
                                      flatten=True)
        page = cls(ws, attached["sessionId"])
        page.count = browser.count
        await page.call("Runtime.enable")
        await page.call("Emulation.setDeviceMetricsOverride", width=WINDOW[0],
                        height=WINDOW[1], deviceScaleFactor=1, mobile=False)
        return page

    async def call(self, method: str, **params) -> dict:
        self.count += 1
        request = {"id": self.count, "method": method, "params": params}
        if self.session:
            request["sessionId"] = self.session
        await self.ws.send(json.dumps(request))
        while True:
            message = json.loads(await asyncio.wait_for(self.ws.recv(), 300))  # a busy page
            if message.get("id") == self.count:
                assert "error" not in message, (method, message["error"])
                return message["result"]
            if message.get("method") == "Runtime.consoleAPICalled" and \
                    message["params"]["type"] in ("error", "warning"):
                self.console.append(" ".join(
                    _console_text(a) for a in message["params"]["args"]))

    async def evaluate(self, expression: str):
        result = await self.call("Runtime.evaluate", expression=expression,
                                 returnByValue=True)
        return result["result"].get("value")

    async def screenshot(self) -> bytes:
        return base64.b64decode((await self.call("Page.captureScreenshot",
                                                 format="png"))["data"])


# The plot titled TITLE: its chart's canvas and its legend (a box over the canvas, with
# the series' colours), as [x, y, width, height] in CSS px; null until it is drawn.
PLOT_BOXES = """(() => {
  const box = (e) => { const r = e.getBoundingClientRect(); return [r.x, r.y, r.width, r.height]; };
  for (const w of document.querySelectorAll(".mosaic-window")) {
    if (w.innerText.split("\\n")[0].trim() !== TITLE) continue;
    const canvas = w.querySelector("canvas");
    const names = [...w.querySelectorAll("*")].filter(
      (e) => e.children.length === 0 && e.textContent.startsWith("/hil/"));
    if (!canvas || names.length === 0) return null;
    let legend = names[0];
    while (!names.every((n) => legend.contains(n))) legend = legend.parentElement;
    return {canvas: box(canvas), legend: box(legend)};
  }
  return null;
})()"""


def plotted_columns(png: bytes, boxes: dict) -> tuple[float, np.ndarray]:
    """The share of the chart's pixel columns that hold a coloured pixel outside the
    legend, and the chart's pixels. The chart's background, grid, axes and labels are
    grey; the series are drawn in colour (Studio's palette), so a column with colour
    holds a plotted series."""
    from PIL import Image

    image = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(int)
    x, y, w, h = (int(round(v)) for v in boxes["canvas"])
    chart = image[y:y + h, x:x + w]
    colour = chart.max(axis=2) - chart.min(axis=2) > 60      # saturated, not grey
    lx, ly, lw, lh = (int(round(v)) for v in boxes["legend"])
    colour[max(ly - y, 0):max(ly + lh - y, 0), max(lx - x, 0):max(lx + lw - x, 0)] = False
    return float(colour.any(axis=0).mean()), chart


async def _watch(devtools_url: str, page_url: str, shots: Path) -> dict:
    """Open the viewer; wait until the plot shows data; then for a later screenshot that
    shows data too and differs (3 s later, or within 60 s)."""
    async with websockets.connect(devtools_url, max_size=2 ** 28) as ws:
        page = await DevTools.open_page(ws)
        await page.call("Page.navigate", url=page_url)
        expression = PLOT_BOXES.replace("TITLE", json.dumps(PLOT))
        deadline = time.monotonic() + 300.0     # the 56 MB bundle, a busy machine
        share, chart, boxes, shares = 0.0, None, None, []
        while time.monotonic() < deadline:
            await asyncio.sleep(1.0)
            boxes = await page.evaluate(expression)
            if boxes is None:
                continue
            png = await page.screenshot()
            share, chart = plotted_columns(png, boxes)
            shares.append(round(share, 3))
            if share >= PLOTTED:
                (shots / "viewer-1.png").write_bytes(png)
                break
        else:
            png = await page.screenshot()
            (shots / "viewer-1.png").write_bytes(png)
            return {"share": share, "shares": shares, "console": page.console}
        # still live: a later screenshot plotted and changed (the time axis slid), 3 s on
        # or, on a busy machine whose Studio redraws or reconnects meanwhile, within 60 s
        later, changed, until = 0.0, False, time.monotonic() + 60.0
        await asyncio.sleep(3.0)
        while True:
            png = await page.screenshot()
            later_boxes = await page.evaluate(expression)      # None: the plot not drawn
            if later_boxes is not None:
                later, chart_later = plotted_columns(png, later_boxes)
                changed = chart.shape == chart_later.shape and bool((chart != chart_later).any())
            if later >= PLOTTED and changed or time.monotonic() > until:
                break
            await asyncio.sleep(1.0)
        (shots / "viewer-2.png").write_bytes(png)
        # the data source's topic list (its tab, had a problem turned to Problems)
        await page.evaluate("""[...document.querySelectorAll('[role="tab"], button')]
            .find((e) => e.textContent.trim() === "Topics")?.click()""")
        text, until = "", time.monotonic() + 60.0       # until the list is drawn
        while time.monotonic() < until and not all(topic in text for topic in LISTED):
            await asyncio.sleep(0.5)
            text = await page.evaluate("document.body.innerText")
        return {"share": share, "later": later, "changed": changed, "console": page.console,
                "text": text}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.system
def test_foxglove_studio_in_chromium_plots_the_live_view(tmp_path, studio_host):
    """Studio 1.48 opens the live view from its URL (?ds=foxglove-websocket&ds.url=...,
    as a person's link would), with the shipped layout: it lists the run's channels with
    no problem, and the joints' plot draws the series (coloured pixels in the chart, the
    legend masked: PLOTTED), still live 3 s later (the chart changed as the time axis
    slid). The screenshots, Studio's console and the run's stderr stay in tmp_path."""
    browser, npm_folder = studio_host
    port = _free_port()
    # a browser rendering Studio (WebGL in software) shares this machine's two cores with
    # the run: its log writer may fall seconds behind, which would stop the run (the
    # default telemetry.on_overrun); a 60 s ring, and go on saying so, keep it live
    run = subprocess.Popen(hil("run", "rrr3_pd", "--duration", "1800", "--no-plot", "--live",
                               f"127.0.0.1:{port}", "--set", "telemetry.ring_rows=60000",
                               "--set", "telemetry.on_overrun='warn'", *SHARED_CPU),
                           cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True)
    run_lines: queue.Queue = queue.Queue()
    threading.Thread(target=_lines, args=(run.stderr, run_lines), daemon=True).start()
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), type("Host", (Handler,), {"npm_folder": npm_folder}))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    chrome = None
    run_seen: list = []
    try:
        _wait_for(run_lines, r"live view: foxglove ws://", 600.0, run_seen)  # cold kernels
        chrome = subprocess.Popen(
            [browser, "--headless", "--no-sandbox", "--remote-debugging-port=0",
             f"--user-data-dir={tmp_path / 'profile'}", "--no-first-run",
             "--enable-unsafe-swiftshader", f"--window-size={WINDOW[0]},{WINDOW[1]}",
             "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        chrome_lines: queue.Queue = queue.Queue()
        threading.Thread(target=_lines, args=(chrome.stderr, chrome_lines),
                         daemon=True).start()
        devtools = _wait_for(chrome_lines, r"DevTools listening on (ws://\S+)", 60.0, [])
        page_url = (f"http://127.0.0.1:{server.server_address[1]}/index.html?"
                    f"ds=foxglove-websocket&ds.url=ws://127.0.0.1:{port}&layoutId=hilrig")
        seen = asyncio.run(_watch(devtools.group(1), page_url, tmp_path))
    finally:
        if chrome is not None:
            chrome.terminate()
            chrome.wait(30)
        server.shutdown()
        server.server_close()
        if run.poll() is None:
            run.send_signal(signal.SIGINT)     # one Ctrl-C: the run's orderly stop
        run.wait(120)
        while (line := run_lines.get(timeout=10)) is not None:
            run_seen.append(line)
        (tmp_path / "run-stderr.txt").write_text("".join(run_seen))
    (tmp_path / "console.txt").write_text("\n".join(seen["console"]))
    # Studio gives up a connection attempt not open within 10 s (its socket lives in a
    # worker, slow to start on a busy machine) and tries again 3 s later: such a
    # ws:connection-failed is Studio's, and passes once connected; any other problem
    # (a channel's schema it cannot read, ...) is the live view's
    problems = [line for line in seen["console"] if "Player problem" in line
                and "Player problem ws:connection-failed" not in line]
    assert problems == [], (problems, "".join(run_seen))
    assert "Waiting for connection" not in seen["text"], seen["text"]
    assert seen["share"] >= PLOTTED, (seen, f"screenshot: {tmp_path / 'viewer-1.png'}")
    assert seen["later"] >= PLOTTED and seen["changed"], seen
    for topic in LISTED:
        assert topic in seen["text"], topic           # the data source's topic list
