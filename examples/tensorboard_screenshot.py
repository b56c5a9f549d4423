"""Screenshot a run's TensorBoard scalars in headless Chromium (docs/running.md's figure).

    python examples/tensorboard_screenshot.py --logdir runs/demo --out scalars.png

Serves ``--logdir`` with TensorBoard on 127.0.0.1 (a free port), opens its Scalars
dashboard filtered to ``--tags`` with no smoothing in Chromium (``chromium`` on the PATH,
``apt-get install chromium``), turns off "ignore outliers" (a local-storage setting, so
through Chrome's DevTools protocol over aiohttp's websocket) and saves a PNG. It waits
for the page by fixed pauses: a loaded machine may need a longer ``--wait``. With Pillow
(matplotlib brings it) the PNG is saved with a 64-colour palette, to keep it small.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

TAGS = (
    "reward/reward_mean|success_rate|eval/eval_reward$|rollout/rollout_s|throughput"
    "|train/train_loss"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(url: str, timeout_s: float = 120.0) -> Any:
    """The JSON at ``url`` once it answers."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url) as response:
                return json.load(response)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


async def capture(page: str, ws_url: str, out: Path, size: tuple[int, int], wait_s: float) -> None:
    import aiohttp

    async with aiohttp.ClientSession() as session, session.ws_connect(ws_url, max_msg_size=0) as ws:
        num_calls = 0

        async def call(method: str, **params: Any) -> dict[str, Any]:
            nonlocal num_calls
            num_calls += 1
            await ws.send_json({"id": num_calls, "method": method, "params": params})
            while True:
                msg = await ws.receive_json()
                if msg.get("id") == num_calls:
                    return dict(msg.get("result", {}))

        width, height = size
        await call(
            "Emulation.setDeviceMetricsOverride",
            width=width, height=height, deviceScaleFactor=1, mobile=False,
        )  # fmt: skip
        await call("Page.navigate", url=page)
        await asyncio.sleep(wait_s / 2)
        await call(
            "Runtime.evaluate", expression="localStorage.setItem('_ignoreYOutliers','false')"
        )
        await call("Page.reload")
        await asyncio.sleep(wait_s)
        shot = await call("Page.captureScreenshot", format="png")
        out.write_bytes(base64.b64decode(shot["data"]))
    try:  # 64 colours: a screenshot of flat UI keeps its looks at a third of the bytes
        from PIL import Image
    except ImportError:
        return
    Image.open(out).convert("RGB").quantize(colors=64).save(out, optimize=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logdir", required=True, help="run folder(s) with tensorboard/ inside")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--tags", default=TAGS, help="a regular expression of tags to show")
    parser.add_argument("--size", default="1500x730", help="window WIDTHxHEIGHT")
    parser.add_argument("--wait", type=float, default=15.0, help="seconds for the page to draw")
    args = parser.parse_args()
    width, height = (int(x) for x in args.size.split("x"))
    tb_port, debug_port = free_port(), free_port()
    board = subprocess.Popen(
        [sys.executable, "-m", "tensorboard.main", "--logdir", args.logdir,
         "--host", "127.0.0.1", "--port", str(tb_port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    browser = subprocess.Popen(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--remote-debugging-port={debug_port}", f"--user-data-dir={tempfile.mkdtemp()}",
         f"--window-size={width},{height}", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_for(f"http://127.0.0.1:{tb_port}/data/runs")
        targets = wait_for(f"http://127.0.0.1:{debug_port}/json")
        ws_url = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
        tags = urllib.parse.quote(args.tags, safe="")
        page = f"http://127.0.0.1:{tb_port}/#scalars&_smoothingWeight=0&tagFilter={tags}"
        asyncio.run(capture(page, ws_url, args.out, (width, height), args.wait))
    finally:
        browser.terminate()
        board.terminate()
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
