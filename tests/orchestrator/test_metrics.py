"""metrics.csv: a resumed run appends under the header its file already has."""

from __future__ import annotations

import csv
from pathlib import Path

from orchestrator.metrics import CSV_COLUMNS, MetricsLog


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_a_new_log_writes_every_column(tmp_path: Path) -> None:
    log = MetricsLog(tmp_path, tensorboard=False)
    log.row({"wall_s": 1.0, "env_steps": 10, "losses/update_epochs": 7})
    log.close()
    rows = _rows(tmp_path / "metrics.csv")
    assert list(rows[0]) == CSV_COLUMNS and rows[0]["losses/update_epochs"] == "7"


def test_a_resumed_log_keeps_an_older_header_and_its_rows_aligned(tmp_path: Path) -> None:
    older = CSV_COLUMNS[:-1]  # a run begun before the last column existed
    with open(tmp_path / "metrics.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=older)
        w.writeheader()
        w.writerow({"wall_s": "1.0", "env_steps": "10"})
    log = MetricsLog(tmp_path, tensorboard=False)
    newest = CSV_COLUMNS[-1]
    log.row({"wall_s": 2.0, "env_steps": 20, "episodic_return": 5.0, newest: 3})
    log.close()
    lines = (tmp_path / "metrics.csv").read_text().splitlines()
    assert len(lines) == 3 and lines[0].split(",") == older  # one header, the old one
    rows = _rows(tmp_path / "metrics.csv")
    assert rows[1]["env_steps"] == "20" and rows[1]["episodic_return"] == "5"
    assert newest not in rows[1] and None not in rows[1]
