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
from gymnasium.vector import AutoresetMode

from fastvec import MultiAgentVectorEnv
from toy_envs import Arena

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

    def _reset_env(self, e: int, seed):
        obs, _ = self.envs[e].reset(seed=seed)
        return [obs.get(a, self.absent) for a in self.agents], [a in obs for a in self.agents]

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
            o, r, te, tr, _ = env.step(acts)
            rows = [o.get(a, self.absent) for a in self.agents]
            rew = [float(r.get(a, 0.0)) for a in self.agents]
            ter = [bool(te[a]) if a in o else True for a in self.agents]
            tru = [bool(tr[a]) if a in o else False for a in self.agents]
            m = [a in o for a in self.agents]
            done = not env.agents or all(ter[i] or tru[i] for i in range(A) if m[i])
            if done and self.mode is AutoresetMode.SAME_STEP:
                for i in range(A):
                    final_obs[e * A + i] = rows[i]
                rows, m = self._reset_env(e, None)
            elif done and self.mode is AutoresetMode.NEXT_STEP:
                self.needs_reset[e] = True
            obs += rows
            rewards += rew
            terminated += ter
            truncated += tru
            mask += m
        return obs, rewards, terminated, truncated, mask, final_obs


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


def _run_against_reference(make, n, mode, steps, dict_obs, sample):
    """Step MultiAgentVectorEnv and the reference side by side; returns (absent rows seen,
    final observations seen)."""
    ref = Reference(make, n, mode)
    A = len(ref.agents)
    with MultiAgentVectorEnv([make] * n, num_workers=2, autoreset_mode=mode) as envs:
        assert envs.num_envs == n * A and envs.num_agents == A and envs.possible_agents == ref.agents
        obs, infos = envs.reset(seed=11)
        rows, mask = ref.reset(11)
        _assert_obs(obs, rows, dict_obs, "reset")
        assert envs.agent_mask.tolist() == mask and infos["agent_mask"].tolist() == mask
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
            seen_absent += mask.count(False)
            if mode is AutoresetMode.SAME_STEP:
                got_final = {int(i) for i in np.flatnonzero(infos.get("_final_obs", np.zeros(n * A, bool)))}
                assert got_final == set(final_obs), where
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


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP], ids=lambda m: m.value)
def test_knights_archers_zombies_rows_equal_the_reference_loop(mode):
    """PettingZoo's KAZ: agents die (killed by zombies, or shot) and stay absent until reset."""
    kaz = pytest.importorskip("pettingzoo.butterfly.knights_archers_zombies_v11")
    rng = np.random.default_rng(1)
    make = functools.partial(kaz.parallel_env, max_cycles=200, spawn_delay=1, max_zombies=20, line_death=True)
    absent, _ = _run_against_reference(make, 3, mode, 300, False, lambda k: rng.integers(0, 6, k))
    assert absent > 0


def test_absent_rows_ignore_their_actions():
    """An out-of-range action for an absent row is never passed to the env."""
    with MultiAgentVectorEnv([Arena, Arena], num_workers=1) as envs:
        envs.reset(seed=0)
        assert envs.agent_mask.tolist() == [True, True, False] * 2
        actions = np.array([0, 1, 99, 2, 0, 99])  # (a2 is absent before step 2)
        _, _, terminated, truncated, _ = envs.step(actions)
        assert terminated.tolist()[2::3] == [True, True] and not truncated.any()


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


def test_bad_input_is_refused_clearly():
    with pytest.raises(TypeError, match="ParallelEnv"):
        MultiAgentVectorEnv([lambda: object()])
    with pytest.raises(ValueError, match="observation space .* differs"):
        MultiAgentVectorEnv([lambda: Arena(spaces_differ=True)])

    class Other(Arena):
        possible_agents = ["x", "y", "z"]

    with pytest.raises(ValueError, match="possible_agents"):
        MultiAgentVectorEnv([Arena, Other])
    with pytest.raises(TypeError, match="batch_size"):
        MultiAgentVectorEnv([Arena], batch_size=1)
    with MultiAgentVectorEnv([Arena, Arena]) as envs:
        envs.reset(seed=0)
        with pytest.raises(ValueError, match="one action per row"):
            envs.step(np.zeros(5, np.int64))


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
