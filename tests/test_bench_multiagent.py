"""The ``multiagent`` bench section: its table, and a skip with a reason where an extra is missing."""
from __future__ import annotations

import pytest

from fastvec._bench import multiagent


def test_table_has_a_row_per_env_each_measured_or_skipped_with_a_reason(capsys, monkeypatch):
    pytest.importorskip("pettingzoo.butterfly.cooperative_pong_v6")
    pytest.importorskip("supersuit")
    monkeypatch.setattr(multiagent, "ENVS", [("pettingzoo.butterfly.cooperative_pong_v6", {}),
                                             ("no_such_module.parallel_env_v0", {})])
    monkeypatch.setattr(multiagent, "NUM_ENVS", 2)
    multiagent.run(quick=True)
    out = capsys.readouterr().out
    pong = next(line for line in out.splitlines() if line.startswith("| cooperative_pong_v6"))
    cells = [c.strip() for c in pong.strip("|").split("|")]
    assert cells[1] == "4" and all(cells[2:]), cells  # 2 envs x 2 paddles, every column filled
    assert "skipped: ModuleNotFoundError" in out
