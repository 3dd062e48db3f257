"""The dashboard at `/` in a real browser (Debian's Chromium, driven by Playwright) while a real client trains.

It draws its six charts, logs no errors, and its numbers (env steps, policy version,
training steps, connected clients) move while the reference client trains over TCP and
end equal to GET /api/metrics; with one module its policies table has one row and no
per-module chart shows. The client trains until the dashboard has shown it (and its
numbers changing), however long that takes on this machine.

With two trainable modules, one of them self-play, fed real chunks over TCP (games
reported), the policies table shows every module and the opponent with the numbers
GET /api/policies gives, and the per-module charts (return, losses, version, ELO) have
points for each module, the ELO chart ending at the rating the REST API reports.

Skipped when Chromium (/usr/bin/chromium) or the npm packages (`npm ci`) are missing.
"""

from __future__ import annotations

import httpx

from .browser import NEEDS_BROWSER, BrowserPage, open_page, start_training
from .helpers import RunningGateway, TcpPeer, chunk, frame, gateway_settings, running_gateway, wait_until

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

POLICY_CHARTS = ["chart-policy-return", "chart-policy-loss", "chart-policy-version", "chart-elo"]

# The policies table: module_id -> {data-key of the cell: its text}, in the table's order.
READ_POLICIES_JS = """() => [...document.querySelectorAll('#policies tbody tr')].map((row) =>
  [row.dataset.moduleId, Object.fromEntries([...row.cells].map((cell) => [cell.dataset.key, cell.textContent]))])"""

# Each per-module chart: shown or hidden, drawn, its legend and the data it publishes.
POLICY_CHARTS_JS = """(ids) => Object.fromEntries(ids.map((id) => {
  const element = document.getElementById(id);
  return [id, {
    hidden: element.closest('.card').hidden,
    title: element.querySelector('.u-title')?.textContent ?? null,
    canvas: Boolean(element.querySelector('.uplot canvas')),
    legend: [...element.querySelectorAll('.u-legend .u-series .u-label')].map((label) => label.textContent),
    points: Number(element.dataset.points ?? 0),
    series: JSON.parse(element.dataset.series ?? '{}'),
    last: JSON.parse(element.dataset.last ?? '{}'),
  }];
}))"""

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


def _policies_polls(page: BrowserPage) -> int:
    return page.page.evaluate("() => Number(document.querySelector('#policies').dataset.polls)")


def _wait_for_policies_polls(page: BrowserPage, polls: int) -> None:
    """Wait for the `polls`th answer of /api/policies shown (it is asked for every other second)."""
    js = f"Number(document.querySelector('#policies').dataset.polls) >= {polls}"
    page.wait_until(js, 15, f"{polls} answers of /api/policies")


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
        _wait_for_policies_polls(page, _policies_polls(page) + 2)  # an answer asked for after the client left
        policies_table = page.page.evaluate(READ_POLICIES_JS)
        policy_charts = page.page.evaluate(POLICY_CHARTS_JS, POLICY_CHARTS)
        policies = httpx.get(f"{gateway.base_url}/api/policies", timeout=10).raise_for_status().json()
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
    # Every step the client took, its evaluation episodes' (every 10th, the gateway's default) apart.
    assert end["num_env_steps_sampled_lifetime"] + final["num_env_steps_evaluated_lifetime"] == result.env_steps > 0
    assert end["weights_seq_no"] == result.weights_seq_no >= 2  # the dashboard showed two versions
    assert all(s[name] <= end[name] for s in shown for name in COUNTERS)

    # One module: a one-row policies table, and no per-module chart (hidden, never drawn).
    assert [module_id for module_id, _ in policies_table] == [p["module_id"] for p in policies] == ["default_policy"]
    (_, row), (policy,) = policies_table[0], policies
    assert row["role"] == "trainable" and row["observation_space"] == "Box(4)" and row["action_space"] == "Discrete(2)"
    assert _number(row["weights_seq_no"]) == policy["weights_seq_no"] == final["weights_seq_no"]
    assert _number(row["num_env_steps_trained_lifetime"]) == policy["num_env_steps_trained_lifetime"] > 0
    assert all(c["hidden"] and not c["canvas"] for c in policy_charts.values()), policy_charts


# -- Several modules, one of them self-play ------------------------------------------------

CART = {"observation_space": {"type": "box", "shape": [4]}, "action_space": {"type": "discrete", "n": 2}}
DUEL = {  # every version plays a snapshot (none plays the latest weights), so every game is rated
    "observation_space": {"type": "box", "shape": [2]},
    "action_space": {"type": "discrete", "n": 3},
    "self_play": {"snapshot_every": 1, "play_against_latest_ratio": 0.0, "play_against_random_ratio": 0.0},
}
MAPPING = {"cart_*": "cart", "a": "duel", "b": "duel_opponent"}
# Each round: one EPISODES_AND_GET_STATE (one training step), with an episode of two cart
# agents and the duel games learner "a" played, each with its outcome. The last round has
# no game, so duel's version falls behind the gateway's (and no number equals another by chance).
ROUNDS = [["win"], ["win", "loss"], ["draw"], []]
GAMES = [outcome for games in ROUNDS for outcome in games]
REWARDS = {"win": 1.0, "loss": -1.0, "draw": 0.0}
SPACES = {  # the spaces in the table's short form
    "cart": ("Box(4)", "Discrete(2)"),
    "duel": ("Box(2)", "Discrete(3)"),
    "duel_opponent": ("Box(2)", "Discrete(3)"),
}


def _number(text: str) -> float | None:
    """A table cell as a number ("—" is None): "1,208" -> 1208.0, "50%" -> 50.0."""
    return None if text == "—" else float(text.replace(",", "").removesuffix("%"))


def _policy_charts(page: BrowserPage) -> dict:
    return page.page.evaluate(POLICY_CHARTS_JS, POLICY_CHARTS)


def _round(round_no: int, games: list[str], version: int) -> list[dict]:
    """The chunks of one round, collected with `version`."""
    episode = f"round{round_no}"
    episodes = [
        chunk(3 + round_no, agent_id="cart_0", episode_id=episode, weights_seq_no=version),
        chunk(10, agent_id="cart_1", episode_id=episode, weights_seq_no=version),
    ]
    for game, outcome in enumerate(games):
        episodes.append(chunk(2 + game, obs_dim=2, reward=REWARDS[outcome], agent_id="a", outcome=outcome,
                              episode_id=f"{episode}-game{game}", weights_seq_no=version))
    return episodes


def test_policies_table_and_per_module_charts_follow_two_modules_and_self_play(browser, tmp_path):
    # env_steps_per_sample 1: at the barrier every module with data trains, each round a step of both
    settings = gateway_settings(
        tmp_path, policies={"cart": CART, "duel": DUEL}, policy_mapping=MAPPING, env_steps_per_sample=1, best_model_episodes=1
    )
    with (
        running_gateway(settings) as gateway,
        open_page(browser, gateway.base_url) as page,
        TcpPeer.connect(gateway) as peer,
    ):
        _wait_for_polls(page, 1)
        version = 0
        for round_no, games in enumerate(ROUNDS):
            points = _policy_charts(page)["chart-policy-loss"]["points"]
            peer.send(frame({"type": "EPISODES_AND_GET_STATE", "episodes": _round(round_no, games, version)}))
            state = peer.receive()  # the lone client waits for it: one training step
            assert state["type"] == "SET_STATE" and state["weights_seq_no"] == version + 1, state
            version = state["weights_seq_no"]
            # The dashboard saw this step (its training steps moved the loss chart on) before the next round.
            page.wait_until(
                f"Number(document.querySelector('#chart-policy-loss').dataset.points) > {points}",
                15,
                f"the per-module charts to show round {round_no}",
            )

        # An evaluation episode of cart: its return is shown apart, never trained on; with a window of one, its version is cart's best.
        evaluated = chunk(6, agent_id="cart_0", episode_id="eval", evaluation=True, weights_seq_no=version)
        peer.send(frame({"type": "EPISODES", "episodes": [evaluated]}))
        peer.send(frame({"type": "PING"}))
        assert peer.receive()["type"] == "PONG"

        # Nothing changes any more: the table must show what the REST API says.
        policies = httpx.get(f"{gateway.base_url}/api/policies", timeout=10).raise_for_status().json()
        metrics = _metrics(gateway)
        _wait_for_policies_polls(page, _policies_polls(page) + 2)  # an answer asked for after the last round
        table = page.page.evaluate(READ_POLICIES_JS)
        charts = _policy_charts(page)
        errors = page.errors()
        console = page.console_text()

    by_id = {p["module_id"]: p for p in policies}
    cart, duel = by_id["cart"], by_id["duel"]
    assert list(by_id) == ["cart", "duel", "duel_opponent"]
    assert (cart["weights_seq_no"], duel["weights_seq_no"]) == (version, version - 1)  # duel: no game last round
    assert duel["self_play"]["rated_games"] == len(GAMES) and duel["elo"] != 1000  # rated: the ELO moved
    assert metrics["policies"]["duel"]["elo"] == duel["self_play"]["elo"] == duel["elo"]

    # The table: a row per module, the opponent too, in the gateway's order, with the REST numbers.
    assert [module_id for module_id, _ in table] == list(by_id), table
    for module_id, row in table:
        policy = by_id[module_id]
        assert (row["module_id"], row["observation_space"], row["action_space"]) == (module_id, *SPACES[module_id])
        for key in ("weights_seq_no", "num_env_steps_trained_lifetime"):
            assert _number(row[key]) == policy[key], (module_id, key, row[key], policy[key])
        for key, tolerance in (("episode_return_mean", 0.005), ("evaluation_return_mean", 0.005), ("elo", 0.5)):
            shown, rest = _number(row[key]), policy[key]
            assert shown == rest if rest is None else abs(shown - rest) <= tolerance, (module_id, key, row[key], rest)
        win_rate = _number(row["win_rate"])
        assert win_rate == policy["win_rate"] if policy["win_rate"] is None else win_rate == 100 * policy["win_rate"]
        assert row["games"] == "{win} / {loss} / {draw}".format(**policy["games"]), (module_id, row["games"])
    rows = dict(table)
    assert rows["cart"]["role"] == "trainable" and rows["duel"]["role"] == "trainable, self-play"
    assert rows["duel_opponent"]["role"] == f"opponent of duel: v{duel['self_play']['opponent_weights_seq_no']}"
    assert rows["duel"]["games"] == "2 / 1 / 1" and rows["duel"]["win_rate"] == "50%"
    assert rows["cart"]["elo"] == "—" and rows["duel_opponent"]["episode_return_mean"] == "—"
    assert rows["cart"]["evaluation_return_mean"] == "6" and rows["duel"]["evaluation_return_mean"] == "—"
    assert cart["best_model"]["weights_seq_no"] == version and rows["cart"]["best_model"] == f"v{version} (6)"
    assert rows["duel"]["best_model"] == rows["duel_opponent"]["best_model"] == "—"

    # The per-module charts: shown, drawn, a line for each trainable module (none for the
    # opponent) with a point from every round; losses only for the steps that trained the
    # module; the version and ELO charts end at the REST numbers.
    series = {
        "chart-policy-return": ["cart", "duel"],
        "chart-policy-loss": ["cart policy_loss", "cart vf_loss", "duel policy_loss", "duel vf_loss"],
        "chart-policy-version": ["cart", "duel"],
        "chart-elo": ["duel"],
    }
    for chart_id, labels in series.items():
        chart = charts[chart_id]
        assert not chart["hidden"] and chart["canvas"] and chart["title"], (chart_id, chart, console)
        assert list(chart["series"]) == labels, (chart_id, chart["series"])
        assert all(any(label in shown for shown in chart["legend"]) for label in labels), (chart_id, chart["legend"])
    steps_with_duel = sum(1 for games in ROUNDS if games)
    for chart_id in ("chart-policy-return", "chart-policy-version", "chart-elo"):
        assert all(n >= len(ROUNDS) for n in charts[chart_id]["series"].values()), (chart_id, charts[chart_id])
    assert charts["chart-policy-loss"]["series"] == {
        "cart policy_loss": len(ROUNDS), "cart vf_loss": len(ROUNDS),
        "duel policy_loss": steps_with_duel, "duel vf_loss": steps_with_duel,
    }
    assert charts["chart-policy-version"]["last"] == {"cart": version, "duel": duel["weights_seq_no"]}
    assert charts["chart-elo"]["last"] == {"duel": duel["elo"]}
    assert not errors, "\n".join(errors)


def test_the_policies_table_shows_win_draw_loss_against_each_reference_a_learner_played_per_seat(browser, tmp_path):
    # Every version plays the random reference; the scripted one (play_ratio 0) is never drawn.
    league = {"play_against_latest_ratio": 0.0, "play_against_random_ratio": 1.0,
              "scripted_references": {"lookahead": {"elo": 1500, "play_ratio": 0.0}}}  # fmt: skip
    settings = gateway_settings(tmp_path, policies={"duel": DUEL | {"self_play": league}}, policy_mapping={"a": "duel", "b": "duel"})
    games = [("a", "win"), ("a", "loss"), ("b", "draw"), ("b", "win"), ("b", "win")]  # seat (agent_id), outcome
    with running_gateway(settings) as gateway, open_page(browser, gateway.base_url) as page, TcpPeer.connect(gateway) as peer:
        episodes = [chunk(2, obs_dim=2, reward=REWARDS[outcome], agent_id=seat, module_id="duel", outcome=outcome,
                          episode_id=f"game{i}", weights_seq_no=0) for i, (seat, outcome) in enumerate(games)]  # fmt: skip
        # Two evaluation games (the learner's most likely moves): counted apart, never in the training records.
        episodes += [chunk(2, obs_dim=2, reward=REWARDS[outcome], agent_id="a", module_id="duel", outcome=outcome,
                           episode_id=f"eval{i}", weights_seq_no=0, evaluation=True)
                     for i, outcome in enumerate(["win", "draw"])]  # fmt: skip
        peer.send(frame({"type": "EPISODES_AND_GET_STATE", "episodes": episodes}))
        assert peer.receive()["type"] == "SET_STATE"
        (duel,) = [p for p in httpx.get(f"{gateway.base_url}/api/policies", timeout=10).json() if p["module_id"] == "duel"]
        _wait_for_policies_polls(page, _policies_polls(page) + 2)
        rows = dict(page.page.evaluate(READ_POLICIES_JS))
        errors = page.errors()
    records = {(r["opponent"], r["seat"]): (r["win"], r["draw"], r["loss"]) for r in duel["self_play"]["records"]}
    assert records == {("random", "a"): (1, 0, 1), ("random", "b"): (2, 1, 0)}
    assert rows["duel"]["vs_references"] == "random: a 1 / 0 / 1, b 2 / 1 / 0"  # lookahead: no games, not shown
    assert rows["duel"]["greedy_vs_references"] == "random: a 1 / 1 / 0"
    assert rows["duel_opponent"]["vs_references"] == rows["duel_opponent"]["greedy_vs_references"] == "—" and not errors, errors


def test_the_policies_table_shows_a_population_and_each_members_hyperparameters(browser, tmp_path):
    spaces = {"observation_space": {"type": "box", "shape": [2]}, "action_space": {"type": "discrete", "n": 2}}
    settings = gateway_settings(tmp_path, policies={"p": spaces | {"population": {"size": 2}}})
    with running_gateway(settings) as gateway, open_page(browser, gateway.base_url) as page:
        policies = {p["module_id"]: p for p in httpx.get(f"{gateway.base_url}/api/policies", timeout=10).json()}
        _wait_for_policies_polls(page, _policies_polls(page) + 1)
        rows = dict(page.page.evaluate(READ_POLICIES_JS))
        errors = page.errors()
    assert rows["p"]["role"] == "population of 2, serves p.0 (0 copies)"
    drawn = policies["p"]["population"]["members"]["p.1"]["hyperparameters"]  # member 1 starts on drawn values
    shown = ", ".join(f"{name} {value:.4f}".rstrip("0").rstrip(".") for name, value in drawn.items())
    assert rows["p.1"]["role"] == f"member of p: {shown}"
    assert rows["p.0"]["role"] == "member of p: learning_rate 0.003, ent_coef 0, clip_coef 0.2, gamma 0.995" and not errors, errors


def test_the_policies_table_shows_a_self_play_learners_exploiter(browser, tmp_path):
    spaces = {"observation_space": {"type": "box", "shape": [2]}, "action_space": {"type": "discrete", "n": 2}}
    self_play = {"exploiter": {"games": 2}, "play_against_random_ratio": 0.0}
    mapping = {"a": "duel", "b": "duel_opponent"}
    settings = gateway_settings(tmp_path, policies={"duel": spaces | {"self_play": self_play}}, policy_mapping=mapping)
    with running_gateway(settings) as gateway, TcpPeer.connect(gateway) as first:
        first.send(frame({"type": "GET_STATE"}))  # slot 0: the learner's seat; slot 1: the exploiter's
        first.receive()
        second = TcpPeer.connect(gateway)
        second.send(frame({"type": "GET_STATE"}))
        version = second.receive()["weights_seq_no"]
        episode = chunk(2, obs_dim=2, agent_id="a", module_id="duel", outcome="loss", episode_id="e1", weights_seq_no=version)
        second.send(frame({"type": "EPISODES_AND_GET_STATE", "episodes": [episode]}))
        second.receive()
        with open_page(browser, gateway.base_url) as page:
            _wait_for_policies_polls(page, _policies_polls(page) + 1)
            rows = dict(page.page.evaluate(READ_POLICIES_JS))
            errors = page.errors()
        second.close()
    role = "exploiter of duel: score — over 1 games, 0 joined the league, 0 restarts"
    assert rows["duel.exploiter"]["role"] == role and not errors, errors


HISTORY_STEPS = 30


def test_a_dashboard_opened_after_30_training_steps_draws_all_30_then_goes_on(browser, tmp_path):
    with running_gateway(gateway_settings(tmp_path)) as gateway, TcpPeer.connect(gateway) as peer:
        for step in range(1, HISTORY_STEPS + 1):  # a lone client waits for each: one training step each
            peer.send(frame({"type": "EPISODES_AND_GET_STATE", "episodes": [chunk(20, seed=step)]}))
            assert peer.receive()["weights_seq_no"] == step
        history = httpx.get(f"{gateway.base_url}/api/metrics/history", timeout=10).raise_for_status().json()
        with open_page(browser, gateway.base_url) as page:
            _wait_for_polls(page, 1)
            opened = page.page.evaluate(CHART_POINTS_JS)
            peer.send(frame({"type": "EPISODES_AND_GET_STATE", "episodes": [chunk(20, seed=99)]}))
            assert peer.receive()["weights_seq_no"] == HISTORY_STEPS + 1
            page.wait_until(
                f"Number(document.querySelector('#chart-losses').dataset.points) > {HISTORY_STEPS}",
                15,
                "the losses chart to go on after the history",
            )
            errors = page.errors()

    assert [point["num_training_steps"] for point in history["points"]] == list(range(1, HISTORY_STEPS + 1))
    assert history["stride"] == 1 and all(point["learner"]["policy_loss"] is not None for point in history["points"])
    assert opened["historyPoints"] == HISTORY_STEPS
    # Every training step is a point of the training-step charts, from the first one on.
    assert opened["chart-losses"] == opened["chart-entropy-kl"] == HISTORY_STEPS
    assert opened["chart-return"] >= HISTORY_STEPS  # env steps moved at every step (and maybe at the first poll)
    assert not errors


CHART_POINTS_JS = """() => ({
  historyPoints: Number(document.querySelector('#updated').dataset.historyPoints),
  ...Object.fromEntries(['chart-losses', 'chart-entropy-kl', 'chart-return']
    .map((id) => [id, Number(document.getElementById(id).dataset.points ?? 0)])),
})"""
