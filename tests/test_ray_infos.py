"""The merge of shard infos (fastvec.ray._infos) against Gymnasium's VectorEnv._add_info.

No Ray cluster: the shards' infos are built here with ``_add_info`` over each shard's envs,
merged, and compared with ``_add_info`` over all envs (keys, key order, dtypes, values,
masks, nesting), for hypothesis-drawn info schedules and shard splits.
"""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("ray", reason="fastvec.ray needs Ray (pip install 'fastvec[ray]')")

from gymnasium.vector import VectorEnv  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from fastvec.ray._infos import merge_infos  # noqa: E402
from fastvec.ray._shard import shard_ranges  # noqa: E402
from helpers import assert_same  # noqa: E402


def add_infos(infos_per_env: list[dict]) -> dict:
    """What a Gymnasium vector env of these envs returns as infos (_add_info env after env)."""
    vector = VectorEnv.__new__(VectorEnv)
    vector.num_envs = len(infos_per_env)
    out: dict = {}
    for i, info in enumerate(infos_per_env):
        out = vector._add_info(out, info, i)
    return out


def merged(infos_per_env: list[dict], num_shards: int) -> dict:
    """Shard by shard: each shard's _add_info infos, merged."""
    out: dict = {}
    for start, stop in shard_ranges(len(infos_per_env), num_shards):
        shard = add_infos(infos_per_env[start:stop])
        if shard:
            merge_infos(out, shard, np.arange(start, stop), len(infos_per_env))
    return out


# One kind per key (what envs give): a draw fixes each key's kind, then each env draws
# whether it has the key and a value of that kind.
KINDS = {
    "int": st.integers(-2**40, 2**40),
    "float": st.floats(allow_nan=False, width=64),
    "bool": st.booleans(),
    "f32": st.floats(-1e6, 1e6, width=32).map(np.float32),
    "i8": st.integers(-128, 127).map(np.int8),
    "u64": st.integers(0, 2**64 - 1).map(np.uint64),
    "array": st.lists(st.floats(-10, 10, width=32), min_size=3, max_size=3).map(lambda v: np.array(v, np.float32)),
    "iarray": st.lists(st.integers(-9, 9), min_size=4, max_size=4).map(lambda v: np.array(v, np.int16).reshape(2, 2)),
    "str": st.text(max_size=3),
    "tuple": st.tuples(st.integers(0, 3), st.text(max_size=2)),
    "none": st.none(),
    "npbool": st.booleans().map(np.bool_),
}
KEYS = ["a", "b", "c", "d", "final_obs", "x_y"]


@st.composite
def schedules(draw, nested=True):
    kinds = {key: draw(st.sampled_from(sorted(KINDS))) for key in KEYS}
    sub_kinds = {key: draw(st.sampled_from(sorted(KINDS))) for key in ("p", "q")} if nested else {}
    num_envs = draw(st.integers(1, 9))
    infos = []
    for _ in range(num_envs):
        keys = draw(st.lists(st.sampled_from(KEYS + (["nested"] if nested else [])), unique=True, max_size=5))
        info = {}
        for key in keys:
            if key == "nested":
                sub_keys = draw(st.lists(st.sampled_from(["p", "q"]), unique=True, max_size=2))
                info[key] = {k: draw(KINDS[sub_kinds[k]]) for k in sub_keys}
            else:
                info[key] = draw(KINDS[kinds[key]])
        infos.append(info)
    return infos


@settings(max_examples=300, deadline=None)
@given(infos=schedules(), data=st.data())
def test_merge_equals_add_info_over_all_envs(infos, data):
    num_shards = data.draw(st.integers(1, len(infos)))
    assert_same(add_infos(infos), merged(infos, num_shards), f"{num_shards} shards")


def test_key_order_follows_first_appearance_across_shards():
    infos = [{"b": 1}, {}, {"a": 2.0, "b": 3}, {"c": "x", "a": 1.5}]
    out = merged(infos, 2)
    assert list(out) == ["b", "_b", "a", "_a", "c", "_c"]
    assert_same(add_infos(infos), out)


def test_nested_dicts_and_final_info_of_same_step_mode():
    # SAME_STEP: an env that ended adds final_obs / final_info, then its reset info.
    infos = [
        {},
        {"final_obs": np.zeros(2, np.float32), "final_info": {"episode": {"r": 1.5, "l": 3}}, "start": 4},
        {"start": 7},
        {"final_obs": np.ones(2, np.float32), "final_info": {"episode": {"r": 2.0, "l": 5}, "why": "x"}},
    ]
    for shards in (1, 2, 3, 4):
        assert_same(add_infos(infos), merged(infos, shards), f"{shards} shards")


def test_object_arrays_keep_their_fill():
    # A non-number key starts an object array of None; an object ndarray one of zeros.
    infos = [{"o": "text"}, {}, {"o": "more"}, {}, {"z": np.array([object(), 1], dtype=object)}, {}]
    shared = object()
    infos[4]["z"][0] = shared
    for shards in (1, 2, 3, 6):
        ref, out = add_infos(infos), merged(infos, shards)
        assert list(ref) == list(out)
        assert ref["o"].tolist() == out["o"].tolist()
        assert ref["z"].shape == out["z"].shape and ref["z"].tolist() == out["z"].tolist()


def test_mixed_types_across_shards_that_convert_exactly():
    # The first env decides the dtype; later envs' values convert into it. Exact when each
    # shard's own array holds its values exactly (here: not with 3 shards, whose last one
    # stores 2.5 in the int64 array its 3 started).
    infos = [{"k": 1}, {"k": 2.0}, {"k": True}, {"s": "a"}, {"s": 3}, {"s": 2.5}]
    for shards in (1, 2, 6):
        assert_same(add_infos(infos), merged(infos, shards), f"{shards} shards")


def test_the_documented_limit_of_mixed_types_within_a_shard():
    # Shard 1's array is bool (its first env gave True): 0.5 is stored there as True before
    # the merge puts it into the batch's float64 array; _add_info puts 0.5 there directly.
    infos = [{"k": 1.0}, {}, {"k": True}, {"k": 0.5}]
    ref, out = add_infos(infos), merged(infos, 2)
    assert ref["k"].dtype == out["k"].dtype == np.float64
    assert ref["k"].tolist() == [1.0, 0.0, 1.0, 0.5]
    assert out["k"].tolist() == [1.0, 0.0, 1.0, 1.0]
    assert_same(ref, merged(infos, 1))  # one shard: exact


def test_import_fastvec_never_imports_ray():
    import subprocess
    import sys

    code = ("import sys, fastvec, gymnasium as gym; from fastvec import bench; "
            "gym.make_vec('CartPole-v1', 2, vectorization_mode='fastvec').close(); "
            "print('ray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False"


def test_runs_natively_follows_make_vec_routing():
    import gymnasium as gym

    from fastvec.registration import runs_natively

    cases = [
        (("CartPole-v1",), {}, True),
        (("CartPole-v1",), {"vector_kwargs": {"native": False}}, False),
        (("CartPole-v1",), {"vector_kwargs": {"num_workers": 2}}, False),
        (("CartPole-v1",), {"vector_kwargs": {"backend": "ray"}}, False),
        (("CartPole-v1",), {"wrappers": [gym.wrappers.RecordEpisodeStatistics]}, False),
        (("Acrobot-v1", {"max_episode_steps": 9}), {}, True),
        (("FrozenLake-v1",), {}, False),
    ]
    for args, kwargs, expected in cases:
        assert runs_natively(*args, **kwargs) is expected, (args, kwargs)
        env_kwargs = args[1] if len(args) > 1 else {}
        built = gym.make_vec(args[0], 2, vectorization_mode="fastvec", wrappers=kwargs.get("wrappers"),
                             vector_kwargs={k: v for k, v in kwargs.get("vector_kwargs", {}).items()
                                            if k != "backend"}, **env_kwargs)
        if "backend" not in kwargs.get("vector_kwargs", {}):
            assert (type(built).__name__ == "NativeVectorEnv") is expected, (args, kwargs)
        built.close()
