"""The ``stats`` bench section: one row per case, each measured."""
from __future__ import annotations

from fastvec._bench import stats


def test_table_has_the_three_cases(capsys, monkeypatch):
    monkeypatch.setattr(stats, "NUM_ENVS", 4)
    stats.run(quick=True)
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| stats=")]
    assert [r.split("|")[1].strip() for r in rows] == [
        "stats=False", "stats=True (default)", "stats=True, monitor reading every 1 s"]
    assert rows[0].split("|")[3].strip() == "1.000x"
