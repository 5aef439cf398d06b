"""MultiAgentVectorEnv against a reference loop over the ParallelEnvs written here.

The reference implements the documented semantics row by row in plain Python: env-major rows
in ``possible_agents`` order; a present agent's row carries what the env returned for it; an
absent agent's row is zeros (an ``action_mask`` all ones), reward 0, terminated True,
truncated False; an env ends when no agent is left or all that reported ended, and then
autoresets as the mode says. ``Arena`` (tests/toy_envs.py) spawns an agent at step 2, ends
one at step 4, and truncates the rest at a seeded length, so every rule is exercised.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from fastvec import MultiAgentVectorEnv
from toy_envs import Arena, Mixed

AGENTS = Arena.possible_agents


def _absent_of(space):
    """An absent row's observation for one agent's ``space``: zeros, an action mask all ones."""
    from gymnasium import spaces

    if isinstance(space, spaces.Dict):
        return {k: (np.ones if k == "action_mask" else np.zeros)(v.shape, v.dtype) for k, v in space.spaces.items()}
    return np.zeros(space.shape, space.dtype)


class Reference:
    """The semantics, one env and one agent at a time, on envs built by ``make``."""

    def __init__(self, make, n: int, mode: AutoresetMode):
        self.envs = [make() for _ in range(n)]
        self.agents = list(self.envs[0].possible_agents)
        self.absent = _absent_of(self.envs[0].observation_space(self.agents[0]))
        self.mode = mode
        self.needs_reset = [False] * n
        #: each row's infos from the ParallelEnv after the last reset or step ({}: none), and
        #: SAME_STEP's final infos of the rows of the envs that step ended
        self.infos: list[dict] = [{} for _ in range(n * len(self.agents))]
        self.final_infos: dict[int, dict] = {}

    def _reset_env(self, e: int, seed):
        obs, infos = self.envs[e].reset(seed=seed)
        self._keep_infos(e, infos)
        return [obs.get(a, self.absent) for a in self.agents], [a in obs for a in self.agents]

    def _keep_infos(self, e: int, infos: dict) -> None:
        A = len(self.agents)
        self.infos[e * A:(e + 1) * A] = [dict(infos.get(a, {})) for a in self.agents]

    def reset(self, seed: int):
        out, mask = [], []
        for e in range(len(self.envs)):
            rows, m = self._reset_env(e, seed + e)
            out += rows
            mask += m
            self.needs_reset[e] = False
        return out, mask

    def step(self, actions):
        A = len(self.agents)
        obs, rewards, terminated, truncated, mask, final_obs = [], [], [], [], [], {}
        self.final_infos = {}
        for e, env in enumerate(self.envs):
            if self.needs_reset[e]:  # NEXT_STEP: this step is the env's reset
                rows, m = self._reset_env(e, None)
                obs += rows
                rewards += [0.0] * A
                terminated += [not x for x in m]
                truncated += [False] * A
                mask += m
                self.needs_reset[e] = False
                continue
            acts = {a: actions[e * A + i] for i, a in enumerate(self.agents) if a in env.agents}
            o, r, te, tr, step_infos = env.step(acts)
            self._keep_infos(e, step_infos)
            rows = [o.get(a, self.absent) for a in self.agents]
            rew = [float(r.get(a, 0.0)) for a in self.agents]
            ter = [bool(te[a]) if a in o else True for a in self.agents]
            tru = [bool(tr[a]) if a in o else False for a in self.agents]
            m = [a in o for a in self.agents]
            done = not env.agents or all(ter[i] or tru[i] for i in range(A) if m[i])
            if done and self.mode is AutoresetMode.SAME_STEP:
                for i in range(A):
                    final_obs[e * A + i] = rows[i]
                    self.final_infos[e * A + i] = self.infos[e * A + i]
                rows, m = self._reset_env(e, None)
            elif done and self.mode is AutoresetMode.NEXT_STEP:
                self.needs_reset[e] = True
            obs += rows
            rewards += rew
            terminated += ter
            truncated += tru
            mask += m
        return obs, rewards, terminated, truncated, mask, final_obs


#: the row infos MultiAgentVectorEnv adds of its own
OWN_KEYS = {"agent_mask", "action_mask", "final_obs", "final_info", "env_id", "env_restarted", "env_error"}


def _assert_agent_infos(got: dict, want: list[dict], where: str) -> None:
    """The ParallelEnvs' per-agent infos in ``got`` (row infos), against ``want`` (each row's
    info dict): each key's value where the agent gave it, and its mask."""
    keys = {key for info in want for key in info}
    for key in {key for key in got if not key.startswith("_")} - OWN_KEYS - keys:  # (other envs' keys)
        assert not got[f"_{key}"].any(), f"{where} {key}"
    for key in keys:
        assert got[f"_{key}"].tolist() == [key in info for info in want], f"{where} _{key}"
        for i, info in enumerate(want):
            if key in info:
                assert got[key][i] == info[key], f"{where} {key} row {i}"


def _stack(rows, dict_obs):
    if dict_obs:
        return {k: np.stack([r[k] for r in rows]) for k in rows[0]}
    return np.stack(rows)


def _assert_obs(got, rows, dict_obs, where):
    want = _stack(rows, dict_obs)
    if dict_obs:
        for k in want:
            np.testing.assert_array_equal(got[k], want[k], err_msg=f"{where} {k}")
    else:
        np.testing.assert_array_equal(got, want, err_msg=where)


def _run_against_reference(make, n, mode, steps, dict_obs, sample, reference_make=None, **kwargs):
    """Step MultiAgentVectorEnv (on envs built by ``make``) and the reference (on envs built by
    ``reference_make``, default ``make``) side by side; returns (absent rows seen, final
    observations seen)."""
    ref = Reference(reference_make or make, n, mode)
    A = len(ref.agents)
    with MultiAgentVectorEnv([make] * n, num_workers=2, autoreset_mode=mode, **kwargs) as envs:
        assert envs.num_envs == n * A and envs.num_agents == A and envs.possible_agents == ref.agents
        obs, infos = envs.reset(seed=11)
        rows, mask = ref.reset(11)
        _assert_obs(obs, rows, dict_obs, "reset")
        assert envs.agent_mask.tolist() == mask and infos["agent_mask"].tolist() == mask
        _assert_agent_infos(infos, ref.infos, "reset")
        seen_absent = seen_final = 0
        for t in range(steps):
            actions = sample(n * A)
            obs, rewards, terminated, truncated, infos = envs.step(actions)
            rows, rew, ter, tru, mask, final_obs = ref.step(actions)
            where = f"t={t}"
            _assert_obs(obs, rows, dict_obs, where)
            assert rewards.tolist() == rew, where
            assert terminated.tolist() == ter, where
            assert truncated.tolist() == tru, where
            assert envs.agent_mask.tolist() == mask, where
            _assert_agent_infos(infos, ref.infos, where)
            seen_absent += mask.count(False)
            if mode is AutoresetMode.SAME_STEP:
                got_final = {int(i) for i in np.flatnonzero(infos.get("_final_obs", np.zeros(n * A, bool)))}
                assert got_final == set(final_obs), where
                if final_obs:
                    rows_final = sorted(final_obs)
                    _assert_agent_infos({k: v[rows_final] for k, v in infos["final_info"].items()
                                         if k not in ("agent_mask", "_agent_mask")},
                                        [ref.final_infos[i] for i in rows_final], f"{where} final_info")
                for i, last in final_obs.items():
                    _assert_obs(_stack([infos["final_obs"][i]], dict_obs), [last], dict_obs, f"{where} final {i}")
                seen_final += len(final_obs)
    return seen_absent, seen_final


@pytest.mark.parametrize("dict_obs", [False, True], ids=["box", "dict"])
@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP], ids=lambda m: m.value)
def test_rows_equal_the_reference_loop(mode, dict_obs):
    rng = np.random.default_rng(0)
    absent, final = _run_against_reference(lambda: Arena(dict_obs=dict_obs), 5, mode, 40, dict_obs,
                                           lambda k: rng.integers(0, 3, k))
    assert absent > 0
    assert mode is AutoresetMode.NEXT_STEP or final > 0


@pytest.mark.parametrize("send_recv", [False, True], ids=["step", "send-recv"])
@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP], ids=lambda m: m.value)
def test_the_parallel_envs_own_infos_come_by_row(mode, send_recv):
    """Each agent's infos from the ParallelEnv (numbers, a float only one agent gives, a
    string on one step, a reset's) come by row, each key with its mask, as the reference's
    per-agent dicts hold them; with SAME_STEP the ended step's go to final_info."""
    make = functools.partial(Arena, with_infos=True)
    run = _send_recv_against_reference if send_recv else _run_against_reference
    if send_recv:
        run(make, 4, mode, 30, False, lambda rng, k: rng.integers(0, 3, k))
    else:
        rng = np.random.default_rng(3)
        run(make, 4, mode, 30, False, lambda k: rng.integers(0, 3, k))


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP], ids=lambda m: m.value)
def test_knights_archers_zombies_rows_equal_the_reference_loop(mode):
    """PettingZoo's KAZ: agents die (killed by zombies, or shot) and stay absent until reset."""
    kaz = pytest.importorskip("pettingzoo.butterfly.knights_archers_zombies_v11")
    rng = np.random.default_rng(1)
    make = functools.partial(kaz.parallel_env, max_cycles=200, spawn_delay=1, max_zombies=20, line_death=True)
    absent, _ = _run_against_reference(make, 3, mode, 300, False, lambda k: rng.integers(0, 6, k))
    assert absent > 0


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP], ids=lambda m: m.value)
def test_multiwalker_rows_equal_the_reference_loop(mode):
    """PettingZoo's multiwalker (Box2D) with ``terminate_on_fall=False``: a walker that falls
    leaves while the others walk on; continuous actions."""
    multiwalker = pytest.importorskip("pettingzoo.sisl.multiwalker_v9")
    rng = np.random.default_rng(2)
    make = functools.partial(multiwalker.parallel_env, terminate_on_fall=False, max_cycles=120)
    absent, final = _run_against_reference(make, 3, mode, 200, False,
                                           lambda k: rng.uniform(-1, 1, (k, 4)).astype(np.float32))
    assert absent > 0
    assert mode is AutoresetMode.NEXT_STEP or final > 0


def test_absent_rows_ignore_their_actions():
    """An out-of-range action for an absent row is never passed to the env."""
    with MultiAgentVectorEnv([Arena, Arena], num_workers=1) as envs:
        envs.reset(seed=0)
        assert envs.agent_mask.tolist() == [True, True, False] * 2
        actions = np.array([0, 1, 99, 2, 0, 99])  # (a2 is absent before step 2)
        _, _, terminated, truncated, _ = envs.step(actions)
        assert terminated.tolist()[2::3] == [True, True] and not truncated.any()
        assert envs.stats()["env_steps"] == [1, 1]  # (its FastVectorEnv's counters: envs, not rows)


class _EndsOnFirstStep:
    """Two agents, both gone after the first step, which ends each as ``ends`` says
    ("terminated", "truncated" or "both")."""

    possible_agents = ["a0", "a1"]
    metadata = {"name": "ends"}

    def __init__(self, ends):
        self.ends = dict(zip(self.possible_agents, ends))
        self.agents = []

    def observation_space(self, agent):
        return spaces.Box(-1.0, 1.0, (2,), np.float32)

    def action_space(self, agent):
        return spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        self.agents = list(self.possible_agents)
        return {a: np.zeros(2, np.float32) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        acting, self.agents = self.agents, []
        return ({a: np.ones(2, np.float32) for a in acting}, {a: 1.5 for a in acting},
                {a: self.ends[a] in ("terminated", "both") for a in acting},
                {a: self.ends[a] in ("truncated", "both") for a in acting},
                {a: {} for a in acting})


@pytest.mark.parametrize("ends, flags", [
    (("truncated", "truncated"), (False, True)),
    (("terminated", "truncated"), (True, False)),
    (("terminated", "terminated"), (True, False)),
    (("both", "truncated"), (True, False)),
])
def test_an_env_ends_truncated_only_when_every_agent_that_reported_was_truncated(ends, flags):
    from fastvec.vector._worker.agent_rows import AgentRows

    env = AgentRows(functools.partial(_EndsOnFirstStep, ends))
    env.reset(seed=0)
    obs, reward, terminated, truncated, infos = env.step(np.zeros(2, np.int64))
    assert (terminated, truncated) == flags
    assert reward == 3.0 and obs.tolist() == [[1.0, 1.0], [1.0, 1.0]]
    assert infos["agent_terminated"].tolist() == [e in ("terminated", "both") for e in ends]
    assert infos["agent_truncated"].tolist() == [e in ("truncated", "both") for e in ends]
    assert infos["agent_mask"].tolist() == [True, True] and infos["agent_rewards"].tolist() == [1.5, 1.5]


def test_observations_are_written_into_the_row_handed_over_except_on_a_step_that_ends():
    from fastvec.vector._worker.agent_rows import AgentRows

    env = AgentRows(Arena)
    row = np.full((3, 3), 7.0, np.float32)
    env.use_observation_row(row)
    obs, _ = env.reset(seed=3)
    assert obs is row and row[2].tolist() == [0.0, 0.0, 0.0]  # (a2 absent: zeros)
    for t in range(1, 9):
        before = row.copy()
        obs, _, terminated, truncated, infos = env.step(np.zeros(3, np.int64))
        if terminated or truncated:  # (its own array: SAME_STEP's final_obs outlives the reset)
            assert obs is not row and np.array_equal(row, before) and obs[infos["agent_mask"]].any()
            break
        assert obs is row
    else:
        raise AssertionError("Arena ends by step 8")
    with pytest.raises(AssertionError):  # (a row of another shape is not used)
        other = np.zeros((3, 4), np.float32)
        env.use_observation_row(other)
        assert env.reset(seed=3)[0] is other


class _FailsOnceAtStep3(Arena):
    """Arena whose step ``fail_at`` (the third) raises, the first time any env of its process
    gets there."""

    failed = False
    fail_at = 3

    def step(self, actions):
        cls = type(self)
        if self.t == cls.fail_at - 1 and not cls.failed:
            cls.failed = True
            raise RuntimeError(f"boom at step {cls.fail_at}")
        return super().step(actions)


@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP], ids=["SameStep", "NextStep"])
def test_a_restarted_env_reports_its_last_observation(mode):
    """env_failure="restart": the rows of an env rebuilt after its step raised carry its last
    observation (SAME_STEP: in final_obs, the new env's first one in the rows)."""
    with MultiAgentVectorEnv([_FailsOnceAtStep3] * 2, num_workers=1, autoreset_mode=mode,
                             env_failure="restart") as envs:
        envs.reset(seed=0)
        actions = np.zeros(6, np.int64)
        envs.step(actions)
        last, *_, last_infos = envs.step(actions)
        present = last_infos["agent_mask"][:3]
        assert present.all()  # (a2 has spawned)
        obs, rewards, terminated, truncated, infos = envs.step(actions)
        assert infos["_env_restarted"].tolist() == [True] * 3 + [False] * 3
        assert truncated[:3].tolist() == present.tolist() and not terminated[:3].any()
        assert rewards[:3].tolist() == [0.0] * 3 and rewards[3:].all()
        if mode == AutoresetMode.SAME_STEP:
            assert infos["_final_obs"].tolist() == [True] * 3 + [False] * 3
            assert np.array_equal(np.stack(infos["final_obs"][:3]), last[:3])
            assert not np.array_equal(obs[:3], last[:3])  # (the new env's first observation)
            assert infos["agent_mask"][:3].tolist() == [True, True, False]  # (its reset: a2 not yet)
            # (its last step's agents, those reported truncated)
            assert infos["final_info"]["agent_mask"][:3].tolist() == present.tolist()
            assert infos["final_info"]["_agent_mask"].tolist() == [True] * 3 + [False] * 3
        else:
            assert np.array_equal(obs[:3], last[:3]) and infos["agent_mask"][:3].tolist() == present.tolist()
            assert envs.agent_mask[:3].tolist() == present.tolist()


def test_envs_a_masked_async_reset_left_out_come_back_reset_when_their_worker_dies_in_it(tmp_path):
    """A masked async_reset resets env 1 alone, whose reset ends its worker's process: the new
    process builds and resets env 0 too (reported restarted), so env 0's rows are its reset's
    (a2 not yet spawned), not the agents it had before."""
    make = functools.partial(_SecondResetFails, str(tmp_path / "failed"), how="exit")
    with MultiAgentVectorEnv([make] * 4, num_workers=2, batch_size=2, env_failure="restart") as envs:
        envs.async_reset(seed=0)
        for _ in range(2):
            envs.recv()
        for _ in range(2):  # (two steps of every env: a2 has spawned)
            envs.send(np.zeros(12, np.int64), np.arange(12))
            for _ in range(2):
                envs.recv()
        assert envs.agent_mask.all()
        envs.async_reset(options={"reset_mask": np.repeat(np.arange(4) == 1, 3)})
        _, _, terminated, _, infos = envs.recv()
        assert infos["env_id"].tolist() == list(range(6)) and infos["env_restarted"].all()
        assert infos["agent_mask"].tolist() == [True, True, False] * 2  # (both envs reset)
        assert terminated.tolist() == [False, False, True] * 2
        assert envs.agent_mask[:6].tolist() == [True, True, False] * 2


class _FailsOnceAtStep5(_FailsOnceAtStep3):
    """Arena of 7 steps (a1 terminated at step 4) whose fifth step raises, the first time
    any env of its process gets there."""

    failed = False
    fail_at = 5

    def reset(self, seed=None, options=None):
        out = super().reset(seed=seed, options=options)
        self.length = 7
        return out


@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP], ids=["SameStep", "NextStep"])
def test_a_restart_after_an_agent_left_keeps_it_absent(mode):
    """a1 leaves on step 4; env 0's step 5 raises and the env is rebuilt: a1's row stays
    absent (terminated, not truncated), as in env 1, and only a0 and a2 are truncated."""
    with MultiAgentVectorEnv([_FailsOnceAtStep5] * 2, num_workers=1, autoreset_mode=mode,
                             env_failure="restart") as envs:
        envs.reset(seed=0)
        actions = np.zeros(6, np.int64)
        for _ in range(4):
            *_, infos = envs.step(actions)
        assert infos["agent_mask"].all()  # (a1's last step: present)
        obs, rewards, terminated, truncated, infos = envs.step(actions)
        assert infos["_env_restarted"].tolist() == [True] * 3 + [False] * 3
        assert terminated.tolist() == [False, True, False] * 2
        assert truncated.tolist() == [True, False, True, False, False, False]
        if mode is AutoresetMode.NEXT_STEP:
            assert envs.agent_mask.tolist() == [True, False, True] * 2
        else:
            assert infos["final_info"]["agent_mask"][:3].tolist() == [True, False, True]


def test_a_masked_async_reset_leaves_the_envs_of_other_workers_as_they_are():
    """async_reset whose mask leaves out every env of worker 1 (nothing sent there): env 1's
    next step is its own, a1 terminated on step 4 as the reference has it."""
    with MultiAgentVectorEnv([Arena] * 2, num_workers=2, batch_size=1) as envs:
        envs.async_reset(seed=0)
        envs.recv(), envs.recv()
        for _ in range(3):
            envs.send(np.zeros(6, np.int64))
            envs.recv(), envs.recv()
        envs.async_reset(options={"reset_mask": np.array([True, False])})
        assert envs.recv()[4]["env_id"].tolist() == [0, 1, 2]
        envs.send(np.zeros(3, np.int64), [3, 4, 5])
        _, _, terminated, _, infos = envs.recv()
        assert terminated.tolist() == [False, True, False] and infos["agent_mask"].all()
        assert envs.agent_mask[3:].tolist() == [True, True, True]


class _OddKeys(Arena):
    """Arena whose agents' infos use the vector env's own names and a leading "_"."""

    def _infos(self, agent):
        return {"final_obs": self.t, "agent_mask": 1, "_hidden": 7, "x": 1, "_x": "m"}


def test_info_keys_the_vector_env_uses_come_renamed():
    """A ParallelEnv's info keys named like the vector env's own, or starting with "_" (a
    mask's name), come as ``agent_<key>`` with their masks; the others as they are."""
    with MultiAgentVectorEnv([_OddKeys] * 2, num_workers=1) as envs:
        envs.reset(seed=0)
        infos = envs.step(np.zeros(6, np.int64))[4]
        present = [True, True, False] * 2
        for key, value in (("agent_final_obs", 1), ("agent_agent_mask", 1), ("agent__hidden", 7), ("x", 1),
                           ("agent__x", "m")):
            assert infos[f"_{key}"].tolist() == present, key
            assert [infos[key][i] for i in np.flatnonzero(present)] == [value] * 4, key
        assert infos["agent_mask"].tolist() == present and "final_obs" not in infos


@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP], ids=["SameStep", "NextStep"])
def test_a_restarted_env_reports_through_recv_as_through_step(mode):
    """The same through send/recv, one env per recv (each worker's env fails once): the
    agents present before the failed step come from the rows that recv hands back."""
    with MultiAgentVectorEnv([_FailsOnceAtStep3] * 2, num_workers=2, batch_size=1, autoreset_mode=mode,
                             env_failure="restart") as envs:
        envs.async_reset(seed=0)
        present, restarted = {}, []
        # (until both have failed: on 2 cores a worker asleep can sit out dozens of recvs of
        # this instant env while the other one, awake, answers each at once)
        for _ in range(5000):
            obs, rewards, terminated, truncated, infos = envs.recv()
            env = int(infos["env_id"][0]) // 3
            if "_env_restarted" in infos and infos["_env_restarted"].any():
                before = present[env]
                assert before.any()
                assert truncated.tolist() == before.tolist() and not terminated.any()
                assert rewards.tolist() == [0.0] * 3
                after = [True, True, False] if mode == AutoresetMode.SAME_STEP else before.tolist()
                assert infos["agent_mask"].tolist() == after
                assert envs.agent_mask[infos["env_id"]].tolist() == after
                restarted.append(env)
            present[env] = infos["agent_mask"].copy()
            envs.send(np.zeros(3, np.int64))
            if len(restarted) == 2:
                break
    assert sorted(restarted) == [0, 1]


def test_seeds_follow_seed_plus_i_whatever_the_workers():
    outs = []
    for workers in (1, 2, 3):
        with MultiAgentVectorEnv([Arena] * 3, num_workers=workers) as envs:
            obs, _ = envs.reset(seed=5)
            outs.append(obs)
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], outs[2])
    env1, _ = Arena().reset(seed=6)  # env 1 of reset(seed=5): rows 3-5, a2 absent
    np.testing.assert_array_equal(outs[0][3:6], np.stack([env1["a0"], env1["a1"], np.zeros(3, np.float32)]))


def test_an_aec_env_is_refused_at_construction_naming_aec_to_parallel():
    """A PettingZoo AEC env has every name of the ParallelEnv API (possible_agents, the spaces,
    reset, step); it must not get as far as a reset, whose None cannot be unpacked."""
    import multiprocessing

    rps = pytest.importorskip("pettingzoo.classic.rps_v2")
    from pettingzoo.utils.conversions import aec_to_parallel

    with pytest.raises(TypeError, match=r"AEC env .*aec_to_parallel") as info:
        MultiAgentVectorEnv([rps.env] * 2, num_workers=1)
    assert info.value.env_index == 0
    assert multiprocessing.active_children() == []
    with MultiAgentVectorEnv([lambda: aec_to_parallel(rps.env())] * 2, num_workers=1) as envs:
        obs, _ = envs.reset(seed=0)
        assert len(obs) == 2 * envs.num_agents


def test_bad_input_is_refused_clearly():
    with pytest.raises(TypeError, match="ParallelEnv"):
        MultiAgentVectorEnv([lambda: object()])
    with pytest.raises(ValueError, match="observation space .* differs"):
        MultiAgentVectorEnv([lambda: Arena(spaces_differ=True)])

    class Other(Arena):
        possible_agents = ["x", "y", "z"]

    with pytest.raises(ValueError, match="possible_agents"):
        MultiAgentVectorEnv([Arena, Other])
    with pytest.raises(TypeError, match="step_in_caller"):
        MultiAgentVectorEnv([Arena], step_in_caller=True)
    with MultiAgentVectorEnv([Arena, Arena]) as envs:
        envs.reset(seed=0)
        with pytest.raises(ValueError, match="one action per row"):
            envs.step(np.zeros(5, np.int64))

    class Pair(Arena):
        possible_agents = ["a0", "a1"]

    # (another number of agents; agents whose spaces, padded, differ from env 0's)
    for make, pad in ((Pair, False), (lambda: Arena(spaces_differ=True), True)):
        with pytest.raises(ValueError, match="env 1's agents differ from env 0's: its observation space"):
            MultiAgentVectorEnv([Arena, make], pad_spaces=pad)


@pytest.mark.parametrize("per", ["row", "env"])
def test_a_masked_reset_resets_only_its_envs_and_keeps_the_others_agents(per):
    """``reset_mask`` (one entry per row, as Gymnasium takes it, or per env): the envs it
    names reset (a2 absent again), the others keep their rows and agents, and the next step
    goes on from there."""
    with MultiAgentVectorEnv([Arena] * 2, num_workers=1) as envs:
        envs.reset(seed=0)
        for _ in range(2):
            obs, *_ = envs.step(np.zeros(6, np.int64))
        assert envs.agent_mask.all()  # (a2 came at step 2)
        mask = np.array([True] * 3 + [False] * 3) if per == "row" else np.array([True, False])
        after, infos = envs.reset(seed=3, options={"reset_mask": mask})
        assert envs.agent_mask.tolist() == [True, True, False, True, True, True]
        assert infos["agent_mask"].tolist() == envs.agent_mask.tolist()
        np.testing.assert_array_equal(after[3:], obs[3:])  # (env 1 untouched)
        fresh, _ = Arena().reset(seed=3)
        np.testing.assert_array_equal(after[:3], np.stack([fresh["a0"], fresh["a1"], np.zeros(3, np.float32)]))
        _, rewards, terminated, _, _ = envs.step(np.zeros(6, np.int64))
        assert rewards[2] == 0 and terminated[2] and rewards[5] > 0  # (env 0's a2 absent; env 1's present)
        with pytest.raises(ValueError, match=r"resets whole envs: env 0's rows \[0, 1, 2\]"):
            envs.reset(options={"reset_mask": np.array([True, False, True, False, False, False])})
        with pytest.raises(ValueError, match=r"shape `\(6,\)` \(one entry per row\) or `\(2,\)`"):
            envs.reset(options={"reset_mask": np.ones(5, bool)})


def test_a_masked_async_reset_keeps_the_agents_of_the_envs_it_left():
    """async_reset with a ``reset_mask``, then recv (one worker's two envs): env 0 is reset
    (a2 absent again), env 1, in the same worker, keeps its three agents, present and not
    terminated, as the synchronous masked reset keeps them."""
    with MultiAgentVectorEnv([Arena] * 4, num_workers=2, batch_size=2) as envs:
        envs.reset(seed=0)
        for _ in range(2):  # (a2 comes at step 2)
            envs.send(np.zeros(12, np.int64))
            envs.recv(), envs.recv()
        assert envs.agent_mask.all()
        envs.async_reset(seed=100, options={"reset_mask": np.array([True, False, False, False])})
        _, _, terminated, _, infos = envs.recv()  # (worker 1 has nothing to reset: nothing to recv)
        mask = infos["agent_mask"]
        assert infos["env_id"].tolist() == list(range(6)) and mask.tolist() == [True, True, False, True, True, True]
        assert terminated.tolist() == [False, False, True, False, False, False]
        assert envs.agent_mask.tolist() == [True, True, False] + [True] * 9


def test_a_masked_reset_that_leaves_out_envs_in_flight_raises():
    """A reset whose mask leaves out an env still stepping (send/recv) would drop that
    step's results: it raises AlreadyPendingCallError, and the env's step still arrives."""
    from gymnasium.error import AlreadyPendingCallError

    with MultiAgentVectorEnv([Arena] * 4, num_workers=2, batch_size=2) as envs:
        envs.reset(seed=0)
        envs.send(np.zeros(12, np.int64))
        first = envs.recv()[4]["env_id"].tolist()
        mask = np.zeros(4, bool)
        mask[first[0] // 3] = True
        with pytest.raises(AlreadyPendingCallError, match="recv"):
            envs.reset(options={"reset_mask": mask})
        rest = envs.recv()
        assert sorted(first + rest[4]["env_id"].tolist()) == list(range(12)) and rest[1].any()
        envs.reset(options={"reset_mask": mask})  # (nothing in flight now)


def test_same_step_final_info_holds_each_rows_agent_mask_on_the_last_step():
    """SAME_STEP: the step that ends an env has ``final_info`` (and ``_final_info``) by row,
    with each agent's presence on that step: a1, terminated at step 4, is absent from it."""
    with MultiAgentVectorEnv([Arena] * 2, num_workers=1, autoreset_mode=AutoresetMode.SAME_STEP) as envs:
        envs.reset(seed=0)
        lengths = envs.get_attr("length")
        for t in range(1, 9):
            obs, rewards, terminated, truncated, infos = envs.step(np.zeros(6, np.int64))
            ended = [e for e in range(2) if lengths[3 * e] == t]
            if not ended:
                assert "final_info" not in infos
                continue
            rows = [3 * e + a for e in ended for a in range(3)]
            assert np.flatnonzero(infos["_final_info"]).tolist() == rows
            final = infos["final_info"]
            assert np.flatnonzero(final["_agent_mask"]).tolist() == rows
            assert final["agent_mask"][rows].tolist() == [True, t < 4, True] * len(ended)
            lengths = [n if n != t else None for n in lengths]


def test_a_masked_reset_keeps_checking_padded_actions_of_the_envs_it_left():
    """After a reset of env 0 alone, env 1's agents are still there: a padding action given to
    one of them is refused (ValueError), not passed to the env."""
    with MultiAgentVectorEnv([Mixed, Mixed], num_workers=1, pad_spaces=True) as envs:
        envs.reset(seed=0)
        envs.reset(options={"reset_mask": np.array([True, False])})
        assert envs.agent_mask.all()
        limits = envs.action_mask.sum(axis=1)
        actions = np.zeros(envs.num_envs, np.int64)
        row = int(np.flatnonzero(limits < envs.action_mask.shape[1])[-1])  # (env 1's row with padding)
        actions[row] = limits[row]
        with pytest.raises(ValueError, match="padding"):
            envs.step(actions)


def test_seeds_as_an_array_are_read_as_a_list():
    with MultiAgentVectorEnv([Arena] * 2, num_workers=1) as envs:
        by_list, _ = envs.reset(seed=[4, 4, 4, 9, 9, 9])
        by_array, _ = envs.reset(seed=np.array([4, 4, 4, 9, 9, 9]))
        np.testing.assert_array_equal(by_array, by_list)
        with pytest.raises(ValueError, match="one seed per row"):
            envs.reset(seed=np.array([4, 9]))


def test_call_get_attr_and_set_attr_go_to_the_parallel_envs_one_value_per_row():
    with MultiAgentVectorEnv([Arena] * 2, num_workers=2) as envs:
        envs.reset(seed=0)
        assert envs.get_attr("possible_agents") == (["a0", "a1", "a2"],) * 6
        assert envs.get_attr("agent_observation_space")[0] == spaces.Box(-1.0, 1.0, (3,), np.float32)  # (the bridge's)
        envs.set_attr("dict_obs", [False] * 3 + [True] * 3)
        assert envs.call("observation_space", "a0")[3] == spaces.Dict(
            {"observation": spaces.Box(-1.0, 1.0, (3,), np.float32), "action_mask": spaces.MultiBinary(3)})
        envs.set_attr("length", 99)
        assert envs.get_attr("length") == (99,) * 6
        with pytest.raises(ValueError, match=r"sets whole envs: env 1's rows \[3, 4, 5\]"):
            envs.set_attr("length", [1, 1, 1, 1, 2, 1])
        with pytest.raises(ValueError, match="one value per row, 6"):
            envs.set_attr("length", [1, 2])


def test_set_attr_compares_an_envs_values_by_value_arrays_inside_containers_too():
    with MultiAgentVectorEnv([Arena] * 2, num_workers=1) as envs:
        goals = [{"goal": np.array([k, 1.0])} for k in (0.0, 5.0) for _ in range(3)]  # (fresh objects per row)
        envs.set_attr("goal", goals)
        got = envs.get_attr("goal")
        np.testing.assert_array_equal(got[3]["goal"], [5.0, 1.0])
        np.testing.assert_array_equal(got[0]["goal"], [0.0, 1.0])
        ragged = [np.array([np.zeros(2), np.ones(k)], dtype=object) for k in (3, 4) for _ in range(3)]
        envs.set_attr("shapes", ragged)  # (object arrays: compared item by item)
        assert [len(v[1]) for v in envs.get_attr("shapes")] == [3] * 3 + [4] * 3
        # (an array broadcast to the same values is not the same value)
        with pytest.raises(ValueError, match=r"sets whole envs: env 0's rows \[0, 1, 2\]"):
            envs.set_attr("goal", [np.array([1.0]), np.array([1.0, 1.0]), np.array([1.0])] + [np.array([2.0])] * 3)


def _take(obs, rows: slice):
    return {k: v[rows] for k, v in obs.items()} if isinstance(obs, dict) else obs[rows]


def _send_recv_against_reference(make, n, mode, steps, dict_obs, sample, **kwargs):
    """Step MultiAgentVectorEnv with send/recv (two workers, one worker's envs per recv) and a
    reference per env side by side: whichever envs a recv hands back, each env's rows must be
    the next ones of its own reference, on its own seed and actions. ``sample(rng, k)`` draws
    k rows' actions; each env has its own generator, so that its episodes do not depend on the
    order in which recv hands the envs back. Returns (absent rows seen, final observations seen)."""
    refs = [Reference(make, 1, mode) for _ in range(n)]
    rngs = [np.random.default_rng(e) for e in range(n)]
    A = len(refs[0].agents)
    seen_absent = seen_final = 0
    with MultiAgentVectorEnv([make] * n, num_workers=2, batch_size=n // 2, autoreset_mode=mode, **kwargs) as envs:
        envs.async_reset(seed=11)
        expected = {}
        for e, ref in enumerate(refs):
            rows, mask = ref.reset(11 + e)
            expected[e] = (rows, [0.0] * A, [not m for m in mask], [False] * A, mask, {})
        stepped = [0] * n
        while min(stepped) < steps:
            obs, rewards, terminated, truncated, infos = envs.recv()
            ids = infos["env_id"]
            assert len(ids) == n // 2 * A and len(rewards) == len(ids)
            for k, e in enumerate((ids[::A] // A).tolist()):
                assert ids[k * A:(k + 1) * A].tolist() == list(range(e * A, (e + 1) * A))
                rows, rew, ter, tru, mask, final_obs = expected[e]
                local = slice(k * A, (k + 1) * A)
                where = f"env {e} after {stepped[e]} steps"
                _assert_obs(_take(obs, local), rows, dict_obs, where)
                assert rewards[local].tolist() == rew, where
                assert terminated[local].tolist() == ter, where
                assert truncated[local].tolist() == tru, where
                assert infos["agent_mask"][local].tolist() == mask, where
                assert envs.agent_mask[e * A:(e + 1) * A].tolist() == mask, where
                _assert_agent_infos({key: value[local] for key, value in infos.items()
                                     if isinstance(value, np.ndarray) and key != "env_id"}, refs[e].infos, where)
                seen_absent += mask.count(False)
                if mode is AutoresetMode.SAME_STEP:
                    got_final = np.flatnonzero(infos.get("_final_obs", np.zeros(len(ids), bool))[local]).tolist()
                    assert got_final == sorted(final_obs), where
                    for i, last in final_obs.items():
                        _assert_obs(_stack([infos["final_obs"][k * A + i]], dict_obs), [last], dict_obs,
                                    f"{where} final {i}")
                    seen_final += len(final_obs)
            envs_stepped = (ids[::A] // A).tolist()
            actions = np.concatenate([sample(rngs[e], A) for e in envs_stepped])
            for k, e in enumerate(envs_stepped):
                expected[e] = refs[e].step(actions[k * A:(k + 1) * A])
                stepped[e] += 1
            envs.send(actions, ids)
    return seen_absent, seen_final


class _SecondResetFails(Arena):
    """Arena whose second reset (its first autoreset, or a reset asked for) fails, once for
    all instances (a marker file): it raises, or with ``how="exit"`` ends its worker's
    process (``os._exit``)."""

    def __init__(self, marker, how="raise"):
        super().__init__()
        self.marker, self.how, self.resets = marker, how, 0

    def reset(self, seed=None, options=None):
        import os

        self.resets += 1
        if self.resets == 2 and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            if self.how == "exit":
                os._exit(4)
            raise ValueError("boom in reset")
        return super().reset(seed, options)


def test_a_same_step_autoreset_that_raises_keeps_the_step_that_ended_the_episode(tmp_path):
    """Env 0's episode ends (its agents truncated at its drawn length) and the SAME_STEP reset
    after that step raises: the env is rebuilt, and its rows report the step as it came, as in
    a vector env where nothing failed: rewards, flags, final observations."""
    failing = functools.partial(_SecondResetFails, str(tmp_path / "failed"))
    actions = np.zeros(6, np.int64)
    with MultiAgentVectorEnv([failing, Arena], num_workers=1, autoreset_mode=AutoresetMode.SAME_STEP,
                             env_failure="restart") as envs, \
            MultiAgentVectorEnv([Arena, Arena], num_workers=1, autoreset_mode=AutoresetMode.SAME_STEP) as reference:
        envs.reset(seed=0)
        reference.reset(seed=0)
        for t in range(1, 12):
            got, want = envs.step(actions), reference.step(actions)
            restarted = got[4].get("env_restarted", np.zeros(6, bool))
            rows = slice(3, 6) if restarted[0] else slice(0, 6)
            for k in range(4):
                np.testing.assert_array_equal(got[k][rows], want[k][rows], err_msg=f"step {t}, result {k}")
            if restarted[0]:
                break
        else:
            pytest.fail("env 0 was never rebuilt")
        assert restarted.tolist() == [True] * 3 + [False] * 3
        for k in (1, 2, 3):  # (the step's own rewards and flags: truncated, a1 gone since step 4)
            np.testing.assert_array_equal(got[k][:3], want[k][:3], err_msg=f"step {t}, result {k}")
        assert want[3][:3].tolist() == [True, False, True]
        for row in (0, 2):
            np.testing.assert_array_equal(got[4]["final_obs"][row], want[4]["final_obs"][row])
        assert got[4]["agent_mask"][:3].tolist() == [True, True, False]  # (the new episode's)


@pytest.mark.parametrize("dict_obs", [False, True], ids=["box", "dict"])
@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP], ids=lambda m: m.value)
def test_send_recv_rows_equal_the_reference_loop(mode, dict_obs):
    """send/recv with batch_size = one worker's envs: each worker's envs step on their own,
    and every env's rows are still its reference's, spawns, deaths and autoresets included."""
    absent, final = _send_recv_against_reference(functools.partial(Arena, dict_obs=dict_obs), 4, mode, 25,
                                                  dict_obs, lambda rng, k: rng.integers(0, 3, k))
    assert absent > 0
    assert final > 0 or mode is AutoresetMode.NEXT_STEP


def test_send_recv_knights_archers_zombies_rows_equal_the_reference_loop():
    module = pytest.importorskip("pettingzoo.butterfly.knights_archers_zombies_v11")
    absent, _ = _send_recv_against_reference(module.parallel_env, 4, AutoresetMode.NEXT_STEP, 200, False,
                                             lambda rng, k: rng.integers(0, 6, k))
    assert absent > 0  # (agents killed by zombies)


def test_send_recv_refuses_bad_input_clearly():
    from gymnasium.error import NoAsyncCallError

    with pytest.raises(ValueError, match="batch_size"):
        MultiAgentVectorEnv([Arena] * 4, num_workers=2, batch_size=3)
    with MultiAgentVectorEnv([Arena] * 4, num_workers=2, batch_size=2) as envs:
        A = envs.num_agents
        with pytest.raises(NoAsyncCallError):
            envs.recv()
        with pytest.raises(ValueError, match=r"recv\(\) first"):
            envs.send(np.zeros(2 * A, np.int64))
        envs.reset(seed=0)
        with pytest.raises(RuntimeError, match=r"MultiAgentVectorEnv has batch_size=2 < 4 envs: step it with send\(actions, env_ids\)"):
            envs.step(np.zeros(4 * A, np.int64))
        with pytest.raises(ValueError, match="not whole envs' rows"):
            envs.send(np.zeros(A - 1, np.int64), np.arange(A - 1))
        with pytest.raises(ValueError, match="split"):  # (one env of a worker that holds two)
            envs.send(np.zeros(A, np.int64), np.arange(A))
        with pytest.raises(ValueError, match="one action per row"):
            envs.send(np.zeros(A, np.int64), np.arange(2 * A))
        envs.send(np.zeros(4 * A, np.int64))  # (by default: every row that reset returned)
        _, rewards, _, _, infos = envs.recv()
        assert len(rewards) == 2 * A and len(infos["env_id"]) == 2 * A
        rows = infos["env_id"]
        rows[0] = rows[1]  # (rows that recv handed out, then changed: checked again)
        with pytest.raises(ValueError, match="not whole envs' rows"):
            envs.send(np.zeros(2 * A, np.int64), rows)


@pytest.mark.parametrize("name, kwargs", [("pistonball_v6", {"max_cycles": 25}), ("cooperative_pong_v6", {"max_cycles": 25})])
def test_butterfly_image_envs_rows_equal_the_reference_loop(name, kwargs):
    """Image observations (20 pistons of 457x120x3, 2 paddles of 280x480x3) through the block;
    short episodes, so that the SAME_STEP autoreset comes."""
    module = pytest.importorskip(f"pettingzoo.butterfly.{name}")
    make = functools.partial(module.parallel_env, **kwargs)
    space = make().action_space(make().possible_agents[0])
    rng = np.random.default_rng(2)

    def sample(k):
        if hasattr(space, "n"):
            return rng.integers(0, space.n, k)
        return rng.uniform(space.low, space.high, (k, *space.shape)).astype(space.dtype)

    _, final = _run_against_reference(make, 2, AutoresetMode.SAME_STEP, 30, False, sample)
    assert final > 0


@pytest.mark.parametrize("name, kwargs", [("pistonball_v6", {"max_cycles": 20}), ("cooperative_pong_v6", {"max_cycles": 20})])
def test_rows_equal_supersuits_pipeline(name, kwargs):
    """Parity with what users run today: SuperSuit's ``pettingzoo_env_to_vec_env_v1`` and
    ``concat_vec_envs_v1(num_cpus=0)`` on the same seeds and actions. Both autoreset in the
    step an env ends (SAME_STEP here), so observations, rewards and flags agree row for row
    over several episodes, and SuperSuit's ``terminal_observation`` is fastvec's ``final_obs``."""
    module = pytest.importorskip(f"pettingzoo.butterfly.{name}")
    ss = pytest.importorskip("supersuit")
    make = functools.partial(module.parallel_env, **kwargs)
    n = 2
    reference = ss.concat_vec_envs_v1(ss.pettingzoo_env_to_vec_env_v1(make()), n, num_cpus=0, base_class="gymnasium")
    space = reference.action_space
    rng = np.random.default_rng(3)
    episodes_ended = 0
    with MultiAgentVectorEnv([make] * n, num_workers=2, autoreset_mode=AutoresetMode.SAME_STEP) as envs:
        assert envs.num_envs == reference.num_envs
        obs, _ = envs.reset(seed=7)
        want_obs, _ = reference.reset(seed=7)
        np.testing.assert_array_equal(obs, want_obs, err_msg="reset")
        for t in range(42):
            if hasattr(space, "n"):
                actions = rng.integers(0, space.n, envs.num_envs)
            else:
                actions = rng.uniform(space.low, space.high, (envs.num_envs, *space.shape)).astype(space.dtype)
            obs, rewards, terminated, truncated, infos = envs.step(actions)
            want_obs, want_rewards, want_terminated, want_truncated, want_infos = reference.step(actions)
            where = f"{name} t={t}"
            np.testing.assert_array_equal(obs, want_obs, err_msg=where)
            # (SuperSuit stores rewards as float32; fastvec keeps the env's float64)
            np.testing.assert_array_equal(rewards.astype(np.float32), want_rewards, err_msg=where)
            assert terminated.tolist() == want_terminated.astype(bool).tolist(), where
            assert truncated.tolist() == want_truncated.astype(bool).tolist(), where
            ended = [i for i, info in enumerate(want_infos) if "terminal_observation" in info]
            assert np.flatnonzero(infos.get("_final_obs", np.zeros(envs.num_envs, bool))).tolist() == ended, where
            for i in ended:
                np.testing.assert_array_equal(infos["final_obs"][i], want_infos[i]["terminal_observation"], err_msg=where)
            episodes_ended += len(ended) // envs.num_agents
    reference.close()
    assert episodes_ended >= 2 * n  # (each env ended two episodes, autoreset each time)


class PaddedByHand:
    """The reference for ``pad_spaces``: ``Mixed`` with its spaces padded in plain Python, each
    observation zero-padded to the tank's shape, each action row cut to the agent's own."""

    possible_agents = Mixed.possible_agents

    def __init__(self, **kwargs):
        self.env = Mixed(**kwargs)

    @property
    def agents(self):
        return self.env.agents

    def observation_space(self, agent):
        return self.env.observation_space("tank")  # (the largest: what a padded row's zeros look like)

    def _pad(self, obs):
        if isinstance(obs, dict):
            return {"observation": np.pad(obs["observation"], (0, 5 - len(obs["observation"]))),
                    "action_mask": np.pad(obs["action_mask"], (0, 4 - len(obs["action_mask"])))}
        return np.pad(obs, (0, 5 - len(obs)))

    def reset(self, seed=None, options=None):
        obs, infos = self.env.reset(seed=seed, options=options)
        return {a: self._pad(o) for a, o in obs.items()}, infos

    def step(self, actions):
        own = {a: x[: self.env.action_space(a).shape[0]] if self.env.continuous else x for a, x in actions.items()}
        obs, rewards, terminations, truncations, infos = self.env.step(own)
        return {a: self._pad(o) for a, o in obs.items()}, rewards, terminations, truncations, infos


@pytest.mark.parametrize("continuous, dict_obs", [(False, False), (False, True), (True, False)],
                         ids=["discrete", "discrete-dict", "box"])
@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP], ids=lambda m: m.value)
def test_padded_rows_equal_the_reference_loop(mode, continuous, dict_obs):
    """pad_spaces: each agent's observation in the leading corner of its row, zeros after;
    each agent given the leading part of its action row (Mixed asserts that its actions are
    in its own space, and rewards each agent with what it was given)."""
    rng = np.random.default_rng(4)
    n = 3
    if continuous:
        def sample(k):
            return rng.uniform(-1, 1, (k, 3)).astype(np.float32)
    else:
        limits = np.tile([2, 4], n)

        def sample(k):
            return rng.integers(0, limits)
    make = functools.partial(Mixed, continuous=continuous, dict_obs=dict_obs)
    _, final = _run_against_reference(make, n, mode, 12, dict_obs, sample,
                                      reference_make=functools.partial(PaddedByHand, continuous=continuous,
                                                                       dict_obs=dict_obs), pad_spaces=True)
    assert mode is AutoresetMode.NEXT_STEP or final > 0


def test_padded_spaces_and_the_action_mask():
    from gymnasium import spaces

    with MultiAgentVectorEnv([Mixed, Mixed], pad_spaces=True) as envs:
        assert envs.single_observation_space == spaces.Box(-2.0, 2.0, (5,), np.float32)
        assert envs.single_action_space == spaces.Discrete(4)
        mask = [[True, True, False, False], [True, True, True, True]] * 2
        assert envs.action_mask.tolist() == mask
        _, infos = envs.reset(seed=0)
        assert infos["action_mask"].tolist() == mask
        _, rewards, _, _, infos = envs.step(np.array([1, 3, 0, 2]))
        assert rewards.tolist() == [1.0, 3.0, 0.0, 2.0] and infos["action_mask"].tolist() == mask
        with pytest.raises(ValueError, match=r"row 2 \(agent 'scout', actions 0 to 1\) was given action 2.*action_mask"):
            envs.step(np.array([1, 3, 2, 2]))  # (2: the scout's first padded action)
    with MultiAgentVectorEnv([lambda: Mixed(dict_obs=True)], pad_spaces=True) as envs:
        assert envs.single_observation_space["action_mask"] == spaces.MultiBinary(4)
        obs, _ = envs.reset(seed=0)
        assert obs["action_mask"].tolist() == [[1, 1, 0, 0], [1, 1, 1, 1]]  # (the padding is no action)
    with MultiAgentVectorEnv([lambda: Mixed(continuous=True)], pad_spaces=True) as envs:
        assert envs.single_action_space == spaces.Box(-1.0, 1.0, (3,), np.float32) and envs.action_mask is None


def test_spaces_that_differ_are_refused_unless_padded_and_unpaddable_ones_always():
    from gymnasium import spaces

    with pytest.raises(ValueError, match="observation space .* differs.*pad_spaces=True"):
        MultiAgentVectorEnv([Mixed])

    class BoxAndDiscrete(Mixed):
        def action_space(self, agent):
            return Mixed(continuous=agent == "tank").action_space(agent)

    with pytest.raises(ValueError, match="cannot pad the agents' action spaces.*'scout': Discrete"):
        MultiAgentVectorEnv([BoxAndDiscrete], pad_spaces=True)

    class NestedDiscrete(Mixed):  # (only a Discrete action space as a whole gets a mask)
        def action_space(self, agent):
            return spaces.Dict({"move": Mixed.action_space(self, agent)})

    with pytest.raises(ValueError, match="Discrete actions of different n inside a Dict"):
        MultiAgentVectorEnv([NestedDiscrete], pad_spaces=True)


def test_to_sb3_resets_disabled_rows_takes_per_row_options_copies_and_reads_attributes():
    """What SB3's code asks of a VecEnv besides stepping, on agent rows: DISABLED envs reset by
    the adapter (a reset_mask per row), per-row options, observations that a copy=False
    vector env would overwrite, get_attr / env_method and evaluate_policy."""
    sb3 = pytest.importorskip("stable_baselines3")
    from stable_baselines3.common.evaluation import evaluate_policy

    from fastvec.integrations.sb3 import to_sb3

    make = functools.partial(Mixed, continuous=True)
    venv = to_sb3(MultiAgentVectorEnv([make] * 2, autoreset_mode=AutoresetMode.DISABLED, pad_spaces=True))
    try:
        venv.seed(0)
        first = venv.reset()
        for t in range(4):
            obs, _, dones, infos = venv.step(np.zeros((4, 3), np.float32))
        assert dones.all() and all(info["terminal_observation"].shape == (5,) for info in infos)
        _, _, dones, _ = venv.step(np.zeros((4, 3), np.float32))  # (the first step of the new episodes)
        assert not dones.any()
        venv.set_options([{"x": 1}, {"x": 1}, {"x": 2}, {"x": 2}])
        venv.reset()
    finally:
        venv.close()
    venv = to_sb3(MultiAgentVectorEnv([make] * 2, autoreset_mode=AutoresetMode.SAME_STEP, pad_spaces=True,
                                      copy=False))
    try:
        assert venv.copy_obs
        first = venv.reset()
        kept = first.copy()
        venv.step(np.ones((4, 3), np.float32))
        np.testing.assert_array_equal(first, kept)
        assert venv.get_attr("possible_agents") == [["scout", "tank"]] * 4
        assert venv.env_method("action_space", "tank")[2] == spaces.Box(-1.0, 1.0, (3,), np.float32)
        model = sb3.PPO("MlpPolicy", venv, n_steps=8, batch_size=16, n_epochs=1, seed=0)
        mean, _ = evaluate_policy(model, venv, n_eval_episodes=4)
        assert np.isfinite(mean)
    finally:
        venv.close()


def test_to_sb3_runs_sb3s_ppo_on_agent_rows_and_refuses_agents_that_leave_early():
    """SB3's PettingZoo recipe with fastvec in place of SuperSuit: to_sb3 of a SAME_STEP
    MultiAgentVectorEnv, one SB3 env per row. Terminal observations are the rows' own; an
    agent that is absent while its env goes on (Arena's a2 before it comes, a1 after it leaves)
    has no place in SB3's VecEnv, and the adapter says so."""
    sb3 = pytest.importorskip("stable_baselines3")
    from fastvec.integrations.sb3 import to_sb3

    same_step = AutoresetMode.SAME_STEP
    venv = to_sb3(MultiAgentVectorEnv([Mixed] * 2, autoreset_mode=same_step, pad_spaces=True))
    try:
        assert venv.num_envs == 4
        venv.seed(0)  # (one seed per row, 0 to 3: each env takes its first row's, 0 and 2)
        first = venv.reset()
        reference = [PaddedByHand() for _ in range(2)]
        want = np.concatenate([np.stack(list(env.reset(seed=2 * k)[0].values())) for k, env in enumerate(reference)])
        np.testing.assert_array_equal(first, want)
        for t in range(4):
            actions = np.array([1, 3, 0, 2])
            obs, rewards, dones, infos = venv.step(actions)
            assert rewards.tolist() == [1.0, 3.0, 0.0, 2.0]
            assert dones.tolist() == [t == 3] * 4
        for i, info in enumerate(infos):  # (Mixed truncates every agent at step 4)
            assert info["TimeLimit.truncated"] and info["episode"]["l"] == 4
            assert info["terminal_observation"].shape == (5,)
    finally:
        venv.close()
    # (Box actions: SB3's PPO samples no masked actions; with padded Discrete ones it would
    # need a masking PPO, sb3-contrib's MaskablePPO)
    venv = to_sb3(MultiAgentVectorEnv([functools.partial(Mixed, continuous=True)] * 2, autoreset_mode=same_step,
                                      pad_spaces=True))
    try:
        sb3.PPO("MlpPolicy", venv, n_steps=16, batch_size=32, n_epochs=1, seed=0).learn(64)
    finally:
        venv.close()
    venv = to_sb3(MultiAgentVectorEnv([Arena] * 2, autoreset_mode=same_step))
    try:
        venv.reset()
        with pytest.raises(RuntimeError, match="row 2 finished while its env goes on: its agent left, or has not come"):
            venv.step(np.zeros(6, np.int64))  # (a2 comes at step 2: until then its row is absent, terminated)
        # Also on the steps where one env ends (its rows have final_obs) and the other has an
        # absent row: no finished row is ever handed to SB3 without its terminal observation.
        refused = 0
        for _ in range(16):
            try:
                _, _, dones, infos = venv.step(np.zeros(6, np.int64))
            except RuntimeError as error:
                assert "finished while its env goes on" in str(error)
                refused += 1
                continue
            for i in np.flatnonzero(dones):
                assert infos[i]["terminal_observation"] is not None
        assert refused > 0
    finally:
        venv.close()
