"""The dashboard at `/` in a real browser (Debian's Chromium, driven by Playwright) while a real client trains.

It draws its six charts, logs no errors, and its numbers (env steps, policy version,
training steps, connected clients) move while the reference client trains over TCP and
end equal to GET /api/metrics. The client trains until the dashboard has shown it (and
its numbers changing), however long that takes on this machine.

Skipped when Chromium (/usr/bin/chromium) or the npm packages (`npm ci`) are missing.
"""

from __future__ import annotations

import httpx

from .browser import NEEDS_BROWSER, BrowserPage, open_page, start_training
from .helpers import RunningGateway, gateway_settings, running_gateway, wait_until

pytestmark = NEEDS_BROWSER

COUNTERS = [  # tiles showing one integer each, by id stat-<metric in /api/metrics>
    "weights_seq_no",
    "num_training_steps",
    "num_env_steps_sampled_lifetime",
    "num_env_steps_trained_lifetime",
    "num_episodes_lifetime",
]
CHANGING = ("num_env_steps_sampled_lifetime", "weights_seq_no", "num_training_steps")  # seen to move while training
TRAINING_BOUND_S = 180  # a bound for a hung gateway or page, not a measure of speed
CHARTS = ["chart-return", "chart-length", "chart-throughput", "chart-clients", "chart-losses", "chart-entropy-kl"]

READ_DASHBOARD_JS = """() => ({
  polls: Number(document.querySelector('#updated').dataset.polls),
  tiles: Object.fromEntries([...document.querySelectorAll('#stats .stat[id]')]
    .map((tile) => [tile.id.replace(/^stat-/, ''), tile.querySelector('.value').textContent])),
  clientsTable: document.querySelector('#clients').textContent,
  banner: document.querySelector('#banner').textContent,
})"""

CHARTS_JS = """(ids) => ids.map((id) => {
  const canvas = document.querySelector(`#${id} .uplot canvas`);
  return { id, title: document.querySelector(`#${id} .u-title`)?.textContent ?? null,
           pixels: canvas ? canvas.toDataURL() : null };
})"""


def _shown(dashboard: dict) -> dict:
    """The dashboard's numbers as Python values: counters as ints, clients as (tcp, ws)."""
    tiles = dashboard["tiles"]
    shown = {name: int(tiles[name].replace(",", "")) for name in COUNTERS}
    shown["clients"] = tuple(int(part) for part in tiles["clients"].split(" / "))
    return shown


def _read(page: BrowserPage) -> dict:
    return page.page.evaluate(READ_DASHBOARD_JS)


def _metrics(gateway: RunningGateway) -> dict:
    return httpx.get(f"{gateway.base_url}/api/metrics", timeout=10).raise_for_status().json()


def _wait_for_polls(page: BrowserPage, polls: int) -> None:
    page.wait_until(f"Number(document.querySelector('#updated').dataset.polls) >= {polls}", 15, f"{polls} polls")


def test_dashboard_draws_charts_and_its_numbers_follow_training_to_the_metrics(browser, tmp_path):
    with running_gateway(gateway_settings(tmp_path)) as gateway, open_page(browser, gateway.base_url) as page:
        _wait_for_polls(page, 1)
        before = _read(page)
        charts_before = page.page.evaluate(CHARTS_JS, CHARTS)

        training = start_training(gateway, max_seconds=TRAINING_BOUND_S)
        seen = []  # what the dashboard showed while the client trained

        def showed_training() -> bool:
            seen.append(_read(page))
            shown = [_shown(d) for d in seen]
            return (
                all(len({s[name] for s in shown} - {0}) >= 2 for name in CHANGING)
                and (1, 0) in {s["clients"] for s in shown}
                and any("tcp" in d["clientsTable"] for d in seen)
            )

        try:
            what = "the dashboard to show the client and its numbers moving"
            wait_until(showed_training, TRAINING_BOUND_S, what, interval_s=0.2)
        finally:
            training.stop()
        result = training.join(timeout_s=60)

        # Once the client has gone, nothing changes: the dashboard must catch up exactly.
        wait_until(lambda: sum(_metrics(gateway)["clients"].values()) == 0, 10, "the client to be gone")
        final = _metrics(gateway)
        _wait_for_polls(page, _read(page)["polls"] + 2)  # a poll that started after the client left
        after = _read(page)
        charts_after = page.page.evaluate(CHARTS_JS, CHARTS)
        errors = page.errors()
        console = page.console_text()

    # Rendered: six titled charts, no banner, no console errors.
    assert [c["title"] for c in charts_before] == [c["title"] for c in charts_after]
    assert all(c["title"] and c["pixels"] for c in charts_after), f"charts missing: {charts_after}\n{console}"
    redrawn = [b["id"] for b, a in zip(charts_before, charts_after, strict=True) if b["pixels"] != a["pixels"]]
    assert {"chart-return", "chart-losses"} <= set(redrawn), f"charts not redrawn with data: {redrawn}"
    assert not errors, "\n".join(errors)
    assert not before["banner"] and not after["banner"], after["banner"]

    # Before the client: a fresh gateway.
    assert _shown(before) == dict.fromkeys(COUNTERS, 0) | {"clients": (0, 0)}

    # While it trained: the numbers moved (what the wait above waited for), only up.
    shown = [_shown(d) for d in seen]
    print(f"dashboard readings while training: {len(shown)}, polls {seen[0]['polls']}..{seen[-1]['polls']}")
    for name in CHANGING:
        values = [s[name] for s in shown]
        assert values == sorted(values), f"{name} went down: {values}"

    # At the end: exactly what the REST API and the client say.
    end = _shown(after)
    assert end == {name: final[name] for name in COUNTERS} | {"clients": (0, 0)}, (end, final)
    assert end["num_env_steps_sampled_lifetime"] == result.env_steps > 0
    assert end["weights_seq_no"] == result.weights_seq_no >= 2  # the dashboard showed two versions
    assert all(s[name] <= end[name] for s in shown for name in COUNTERS)
