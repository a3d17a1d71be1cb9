"""RLlib's matched baseline reports the return every other system does: the mean of its last 100
training episodes, from each episode's own return — not RLlib 2.60's ``episode_return_mean``,
whose window is emptied at every ``train()``."""

from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks import rllib_ppo  # noqa: E402


def test_episodes_of_lists_the_episodes_that_ended_in_an_iteration() -> None:
    res = {"env_runners": {rllib_ppo.EPISODE_RETURNS: [10.5, 20.0],
                           rllib_ppo.EPISODE_LENGTHS: [11, 21]}}
    assert rllib_ppo.episodes_of(res) == ([10.5, 20.0], [11, 21])
    # no episode ended: RLlib reports nan, or leaves the key out
    assert rllib_ppo.episodes_of({"env_runners": {rllib_ppo.EPISODE_RETURNS: math.nan}}) == ([], [])
    assert rllib_ppo.episodes_of({}) == ([], [])
    # returns without matching lengths keep the returns
    res = {"env_runners": {rllib_ppo.EPISODE_RETURNS: [1.0, 2.0], rllib_ppo.EPISODE_LENGTHS: [3]}}
    assert rllib_ppo.episodes_of(res) == ([1.0, 2.0], [])


@pytest.mark.timeout(300)
def test_a_real_rllib_run_counts_every_episode_and_reports_the_last_100s_mean(
        tmp_path: Path) -> None:
    summary = rllib_ppo.train("Hopper-v5", 3, tmp_path, total_steps=3 * 2048)
    with open(tmp_path / "rllib_returns.csv") as fh:
        own = list(csv.DictReader(fh))
    with open(tmp_path / "metrics.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(own) >= 3
    # every episode RLlib counted is in our window's stream, none twice
    seen = 0
    for it, row in zip(own, rows, strict=False):
        seen += int(it["episodes_this_iter"])
        assert int(it["rllib_num_episodes_lifetime"]) == seen
        assert int(row["episodes"]) == seen
    # Hopper's first episodes are short: well over 100 end in the first iterations, so the
    # reported return is a 100-episode mean, and the summary carries the last row's
    assert seen > 100 and summary["episodes"] == seen
    assert summary["mean_return"] == pytest.approx(float(rows[-1]["episodic_return"]), rel=1e-5)
    assert 0 < float(rows[-1]["episodic_length"]) < 1000
    assert json.loads((tmp_path / "config.json").read_text())["system"] == "rllib"
