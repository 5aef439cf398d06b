"""The ``stats`` bench section: one row per case, each measured."""
from __future__ import annotations

from fastvec._bench import stats


def test_table_has_the_three_cases(capsys, monkeypatch):
    monkeypatch.setattr(stats, "NUM_ENVS", 4)
    monkeypatch.setattr(stats, "MONITOR_INTERVAL_S", 0.2)
    stats.run(quick=True)
    out = capsys.readouterr().out
    rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in out.splitlines() if line.startswith("| stats=")]
    assert [r[0] for r in rows] == [
        "stats=False", "stats=True (default)", "stats=True, monitor attached (reading every 0.2 s)"]
    assert rows[0][2:] == ["-", "-"]
    for row in rows[1:]:  # (a median ratio, and the rounds' range around it)
        low, high = (float(x.rstrip("x")) for x in row[3].split(" .. "))
        assert low <= float(row[2].rstrip("x")) <= high
