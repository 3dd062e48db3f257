"""Shared by the browser tests: Debian's Chromium driven by Playwright, pages that keep their console.

Test modules mark themselves with `pytestmark = NEEDS_BROWSER` and take the `browser`
fixture (tests/conftest.py); `open_page` opens a page that records what it logs, so a
failing wait can show it. `playwright install` is never needed: Playwright drives the
system Chromium (`apt-get install -y chromium`), see shared/BROWSER.md.

Also a script: `python -m tests.browser --screenshot docs/dashboard.png` starts a
gateway, trains a reference client against it for a while, and saves the dashboard.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, sync_playwright
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from app.http.web import MISSING_VENDOR_HINT, missing_vendor_dirs
from rllink_clients import gym_client
from rllink_clients.gym_client import RunResult

from .helpers import RunningGateway, gateway_settings, running_gateway

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [  # see shared/BROWSER.md; --no-sandbox because tests run as root
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

NEEDS_BROWSER = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"no Chromium at {CHROMIUM}: apt-get install -y chromium"),
    pytest.mark.skipif(bool(missing_vendor_dirs()), reason=MISSING_VENDOR_HINT),
]


@contextmanager
def launch_browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class BrowserPage:
    """A page and everything it logged, so a failure can show what the page said."""

    page: Page
    console: list[str] = field(default_factory=list)

    def wait_for(self, selector: str, timeout_s: float) -> None:
        try:
            self.page.wait_for_selector(selector, state="attached", timeout=timeout_s * 1000)
        except PlaywrightTimeout:
            pytest.fail(f"{selector} did not appear within {timeout_s} s; the page's console:\n{self.console_text()}")

    def wait_until(self, js_predicate: str, timeout_s: float, what: str) -> None:
        """Wait until the JavaScript expression is truthy in the page."""
        try:
            self.page.wait_for_function(js_predicate, timeout=timeout_s * 1000)
        except PlaywrightTimeout:
            pytest.fail(f"{what}: not within {timeout_s} s; the page's console:\n{self.console_text()}")

    def demo_result(self, timeout_s: float) -> dict:
        """The CartPole demo page's (static/cartpole.html) #result once it ends; a failure with its #error if it fails."""
        self.wait_for("#result, #error", timeout_s)
        if self.page.query_selector("#error"):
            pytest.fail(f"the demo failed: {self.page.inner_text('#error')}\n{self.console_text()}")
        return json.loads(self.page.inner_text("#result"))

    def errors(self) -> list[str]:
        """Console errors and uncaught exceptions."""
        return [line for line in self.console if line.startswith(("error", "uncaught"))]

    def console_text(self) -> str:
        return "\n".join(self.console) or "(nothing)"


@contextmanager
def open_page(browser: Browser, url: str, **page_options) -> Iterator[BrowserPage]:
    """Open `url` in a fresh page that records its console and uncaught errors; close it on exit."""
    page = browser.new_page(**page_options)
    opened = BrowserPage(page)
    page.on("console", lambda message: opened.console.append(_describe(message)))
    page.on("pageerror", lambda error: opened.console.append(f"uncaught: {error}"))
    try:
        page.goto(url)
        yield opened
    finally:
        page.close()


def _describe(message: ConsoleMessage) -> str:
    location = message.location.get("url", "") if message.location else ""
    return f"{message.type}: {message.text}" + (f" ({location})" if message.type == "error" and location else "")


def module_page(browser: Browser, gateway: RunningGateway):
    """A page at the gateway's origin, for importing static/ modules in page.evaluate."""
    return open_page(browser, f"{gateway.base_url}/static/rllink.js")


GATEWAY_POLICY_ACTS_JS = """async ({ observations, masks = null }) => {
  const { RLlinkClient, decodeOnnxFile } = await import('/static/rllink.js');
  const { OnnxPolicy } = await import('/static/onnx_policy.js');
  const { createRandom } = await import('/static/random.js');
  const client = await RLlinkClient.connect();
  const config = await client.handshake();
  const state = await client.getState();
  client.close();
  const policy = await OnnxPolicy.create(await decodeOnnxFile(state.onnx_file), {
    inputName: config.onnx_input_name, actionSpace: config.action_space,
    distribution: config.action_distribution, maskInputName: config.onnx_action_mask_input_name ?? undefined,
    weightsSeqNo: state.weights_seq_no, random: createRandom(0) });
  const steps = [];
  for (let i = 0; i < observations.length; i++) steps.push(await policy.act(observations[i], masks?.[i] ?? undefined));
  policy.release();
  return { config, onnxFile: state.onnx_file, weights_seq_no: state.weights_seq_no, steps };
}"""


def gateway_policy_acts(page: BrowserPage, observations: list, masks: list | None = None) -> dict:
    """In the page: handshake with the gateway (WebSocket), load the current version's ONNX
    into static/onnx_policy.js and act on each observation (with its mask, if any; seeded
    sampling); the page's {config, onnxFile, weights_seq_no, steps}."""
    return page.page.evaluate(GATEWAY_POLICY_ACTS_JS, {"observations": observations, "masks": masks})


@dataclass
class TrainingThread:
    """A reference client training CartPole-v1 over TCP in a background thread."""

    thread: threading.Thread
    stop_event: threading.Event = field(default_factory=threading.Event)
    result: RunResult | None = None
    error: BaseException | None = None

    def stop(self) -> None:
        """Ask the client to end after its current SET_STATE."""
        self.stop_event.set()

    def join(self, timeout_s: float) -> RunResult:
        self.thread.join(timeout_s)
        if self.thread.is_alive():
            pytest.fail(f"the reference client did not finish within {timeout_s} s")
        if self.error is not None:
            raise self.error
        return self.result


def start_training(gateway: RunningGateway, **run_options) -> TrainingThread:
    """Start `gym_client.run(client, "CartPole-v1", **run_options)` over TCP in a thread;
    `TrainingThread.stop()` ends it early."""

    def train() -> None:
        try:
            with gateway.client("tcp") as client:
                training.result = gym_client.run(
                    client, "CartPole-v1", target_return=None, stop=training.stop_event, **run_options
                )
        except BaseException as error:  # noqa: BLE001 -- handed to the test by join()
            training.error = error

    training = TrainingThread(threading.Thread(target=train, name="reference-client", daemon=True))
    training.thread.start()
    return training


def screenshot_dashboard(path: Path, train_seconds: float) -> None:
    """Save the dashboard of a gateway while a reference client trains, `train_seconds` in."""
    viewport = {"width": 1200, "height": 900}
    with (
        tempfile.TemporaryDirectory() as tmp,
        running_gateway(gateway_settings(Path(tmp))) as gateway,
        launch_browser() as browser,
        open_page(browser, gateway.base_url, viewport=viewport) as page,
    ):
            training = start_training(gateway, max_seconds=train_seconds + 3)
            time.sleep(train_seconds)
            page.wait_until("Number(document.querySelector('#updated').dataset.polls) >= 3", 10, "three dashboard updates")
            path.parent.mkdir(parents=True, exist_ok=True)
            page.page.screenshot(path=str(path), full_page=True)
            training.join(60)
            if errors := page.errors():
                raise RuntimeError("the dashboard logged errors:\n" + "\n".join(errors))
    print(f"{path}: {path.stat().st_size // 1024} KB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--screenshot", type=Path, required=True, help="PNG file to write, e.g. docs/dashboard.png")
    parser.add_argument("--train-seconds", type=float, default=20.0, help="how long the client trains first")
    args = parser.parse_args()
    screenshot_dashboard(args.screenshot, args.train_seconds)


if __name__ == "__main__":
    main()
