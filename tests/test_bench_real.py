"""The `real` bench section's machinery, on a tiny size (needs the `real` extra)."""
import re

import pytest

pytest.importorskip("mujoco", reason="the real bench needs gymnasium[mujoco] (pip install \"fastvec[real]\")")
pytest.importorskip("ale_py", reason="the real bench needs ale-py (pip install \"fastvec[real]\")")
pytest.importorskip("cv2", reason="the real bench needs OpenCV for AtariPreprocessing (pip install \"fastvec[real]\")")

from fastvec._bench import real  # noqa: E402

TINY = dict(sizes=(2,), scale=0.02, rounds=1, limit_s=0.02)


def _tables(out: str) -> dict[str, list[list[str]]]:
    """Title -> rows (header first, separator dropped) of every Markdown table printed."""
    tables, title = {}, None
    for line in out.splitlines():
        if line.startswith("### "):
            title = line[4:]
            tables[title] = []
        elif line.startswith("| ") and title is not None:
            tables[title].append([c.strip() for c in line.strip("|").split("|")])
    return tables


def _main_table(out: str) -> list[list[str]]:
    (title,) = [t for t in _tables(out) if t.startswith("Real workloads")]
    return _tables(out)[title]


@pytest.mark.parametrize("workload", real.WORKLOADS, ids=lambda w: w.label.split(",")[0])
def test_limit_returns_a_positive_rate(workload):
    # spawn: the constructors must be importable by reference in a fresh interpreter.
    with real.CoreLimit(workload.make, processes=2, context="spawn") as limit:
        assert limit.processes == 2
        rates = [limit.rate(0.05) for _ in range(2)]
    assert all(rate > 0 for rate in rates)


@pytest.mark.parametrize("workload", [w for w in real.WORKLOADS if w.ale_game], ids=lambda w: w.label.split("N")[0])
def test_emulator_ceiling_steps_the_games_emulator(workload):
    """The Atari ceiling drives the same game's emulator, 4 frames a step, with no screen."""
    from fastvec._bench.envs import EmulatorOnly

    env = workload.emulator()
    python = workload.make()
    try:
        assert isinstance(env, EmulatorOnly) and env.frame_skip == 4 and env.noop_max == 30
        assert env.action_space == python.action_space  # the game's minimal action set
        env.reset(seed=0)
        frames = env._ale.getEpisodeFrameNumber()
        assert 1 <= frames <= 30  # the no-ops
        obs, reward, terminated, truncated, info = env.step(env.action_space.n - 1)
        assert obs is None and env._ale.getEpisodeFrameNumber() == frames + 4
        assert isinstance(reward, float) and terminated is False and truncated is False
    finally:
        env.close()
        python.close()
    with real.CoreLimit(workload.emulator, processes=2, context="spawn") as ceiling:
        assert ceiling.rate(0.05) > 0


def test_emulator_ceiling_reaches_game_over():
    from fastvec._bench.envs import EmulatorOnly

    env = EmulatorOnly("Breakout", frame_skip=8)
    env.reset(seed=0)
    env.action_space.seed(0)
    for _ in range(20_000):
        terminated = env.step(env.action_space.sample())[2]
        if terminated:
            break
    assert terminated and env._ale.game_over()
    env.reset()
    assert not env._ale.game_over()
    env.close()


def test_table_has_every_row_and_column(capsys):
    real.run(quick=True, **TINY)
    out = capsys.readouterr().out
    header, *rows = _main_table(out)
    peers = ["SyncVectorEnv", "AsyncVectorEnv", "fastvec default"]
    if "SB3 SubprocVecEnv" not in real.missing_columns():
        peers.append("SB3 SubprocVecEnv")
    for column in peers + ["limit (2 processes)", "default vs Sync", "default % of limit"]:
        assert column in header, (column, header)
    # The other stepping mode beside the default, and its share of the limit.
    assert any(c.startswith("fastvec step_in_caller=") for c in header)
    assert any(c.startswith("step_in_caller=") and c.endswith("% of limit") for c in header)
    assert [(r[0], r[1]) for r in rows] == [(w.label, "2") for w in real.WORKLOADS]
    shares = [k for k, c in enumerate(header) if c.endswith("% of limit")]
    for row in rows:
        assert len(row) == len(header)
        assert all(cell not in ("", "–", "0") for cell in row), row
        # shares of the limit with one decimal (a rounded whole percent could cross a target)
        assert all(re.fullmatch(r"\d+\.\d %", row[k]) for k in shares), row
    assert "fastvec default: FastVectorEnv(env_fns), here num_workers=2" in out
    # The Atari ceiling: a row for each Atari workload, every backend's share of it.
    (title,) = [t for t in _tables(out) if t.startswith("Atari: the emulator's ceiling")]
    header, *rows = _tables(out)[title]
    assert header[:3] == ["env", "num_envs", "emulator only"] and "fastvec default" in header
    assert [r[0] for r in rows] == [w.label for w in real.WORKLOADS if w.ale_game]
    shares = [k for k, c in enumerate(header) if c == "% of emulator"]
    assert shares and all(re.fullmatch(r"\d+\.\d %", row[k]) for row in rows for k in shares), rows
    # which screen conversion the figures were measured with (it differs by CPU)
    assert f"fastvec default's Atari screens, on this CPU: {real.atari_screen_conversion()}." in out


def test_missing_columns_are_skipped_with_a_reason(capsys, monkeypatch):
    reasons = {
        "SB3 SubprocVecEnv": "stable-baselines3 is not installed (test)",
        "EnvPool": "envpool is not installed (test)",
        "ale-py AtariVectorEnv": "no vector env (test)",
    }
    monkeypatch.setattr(real, "missing_columns", lambda: dict(reasons))
    real.run(quick=True, workloads=real.WORKLOADS[:1], **TINY)
    out = capsys.readouterr().out
    header, *rows = _main_table(out)
    assert "SB3 SubprocVecEnv" not in header and len(rows) == 1
    assert not any(t.startswith("References") for t in _tables(out))
    for name, why in reasons.items():
        assert f"{name}: skipped, {why}." in out


@pytest.mark.parametrize("game", [w for w in real.WORKLOADS if w.ale_game], ids=lambda w: w.label.split("N")[0])
def test_references_build_like_the_python_pipeline(game):
    """ale-py's vector env and EnvPool (where installed) take the same actions and give the
    Python pipeline's shapes, for each Atari game of the section."""
    missing = real.missing_columns()
    pong = game
    actions = real.workload_actions(pong, 2, 12)
    assert actions.shape == (12, 2) and actions.dtype.kind == "i"
    built = 0
    for name in real.REFERENCES:
        if name in missing:
            continue
        env = real.make_backend(name, pong, 2)
        try:
            own = real.own_actions(name, env, actions)
            real.warm_up(name, env, own)
            obs = env.step(own[0])[0]
            assert obs.shape == (2, 4, 84, 84) and obs.dtype.name == "uint8"
            built += 1
        finally:
            env.close()
    if not built:
        pytest.skip("neither ale-py's AtariVectorEnv nor EnvPool is installed")
    with pytest.raises(ValueError, match="Atari games only"):
        real.make_backend("ale-py AtariVectorEnv", real.WORKLOADS[0], 2)
