"""fastvec.gae / gae_sb3 / gae_terminated_truncated / vtrace against plain float64 loops.

The reference loops here are written independently of the kernel (NumPy rows for
the CleanRL convention, scalar per-env loops for the others) and always run in
float64. float64 kernels must match them to ~1e-12, float32 kernels to float32
rounding. SB3 and the CleanRL torch loop are compared on the same data.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fastvec
import fastvec.advantages

FLOATS = [np.float32, np.float64]
FLAGS = [bool, np.uint8, np.float32, np.float64, np.int64, np.int8]


# ----------------------------------------------------------------------------
# References (float64, plain loops)
# ----------------------------------------------------------------------------

def ref_gae(rewards, values, dones, next_value, next_done, gamma, lam):
    """CleanRL's recurrence, one NumPy row at a time, in float64."""
    r, v, d = (np.asarray(x, np.float64) for x in (rewards, values, dones))
    nv, nd = np.asarray(next_value, np.float64), np.asarray(next_done, np.float64)
    T = r.shape[0]
    adv = np.zeros_like(r)
    last = np.zeros(r.shape[1])
    for t in reversed(range(T)):
        if t == T - 1:
            nonterminal, v_next = 1.0 - nd, nv
        else:
            nonterminal, v_next = 1.0 - d[t + 1], v[t + 1]
        delta = r[t] + gamma * v_next * nonterminal - v[t]
        last = delta + gamma * lam * nonterminal * last
        adv[t] = last
    return adv, adv + v


def ref_gae_tt(rewards, values, terminated, truncated, next_value, next_values, gamma, lam):
    """Separate terminated/truncated flags, scalar loop per env, in float64."""
    r, v = np.asarray(rewards, np.float64), np.asarray(values, np.float64)
    T, N = r.shape
    adv = np.zeros((T, N))
    for i in range(N):
        last = 0.0
        for t in reversed(range(T)):
            term, trunc = bool(terminated[t, i]), bool(truncated[t, i])
            if term:
                bootstrap = 0.0
            elif trunc:
                bootstrap = float(next_values[t, i]) if next_values is not None else 0.0
            else:
                bootstrap = float(next_value[i]) if t == T - 1 else v[t + 1, i]
            if term or trunc:
                last = 0.0  # the trace does not cross an episode end
            last = r[t, i] + gamma * bootstrap - v[t, i] + gamma * lam * last
            adv[t, i] = last
    return adv, adv + v


def ref_vtrace(rewards, values, dones, next_value, next_done, ratios, gamma, rho_bar, c_bar,
               pg_rho_bar, lam):
    """IMPALA V-trace (Espeholt et al. 2018, eq. 1 and the scan of vs - V), scalar loops."""
    r, v = np.asarray(rewards, np.float64), np.asarray(values, np.float64)
    ratios = np.asarray(ratios, np.float64)
    T, N = r.shape
    vs = np.zeros((T, N))
    pg = np.zeros((T, N))
    for i in range(N):
        acc = 0.0
        for t in reversed(range(T)):
            done_next = float(next_done[i]) if t == T - 1 else float(dones[t + 1, i])
            v_next = float(next_value[i]) if t == T - 1 else v[t + 1, i]
            disc = gamma * (1.0 - done_next)
            rho = np.minimum(rho_bar, ratios[t, i])  # (NumPy's: a NaN ratio stays NaN)
            c = lam * np.minimum(c_bar, ratios[t, i])
            acc = rho * (r[t, i] + disc * v_next - v[t, i]) + disc * c * acc
            vs[t, i] = v[t, i] + acc
        for t in range(T):
            done_next = float(next_done[i]) if t == T - 1 else float(dones[t + 1, i])
            vs_next = float(next_value[i]) if t == T - 1 else vs[t + 1, i]
            disc = gamma * (1.0 - done_next)
            pg[t, i] = np.minimum(pg_rho_bar, ratios[t, i]) * (r[t, i] + disc * vs_next - v[t, i])
    return vs, pg


# ----------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------

def make_rollout(rng, T, N, ftype=np.float32, flag=np.float32, p_done=0.1):
    rewards = rng.standard_normal((T, N)).astype(ftype)
    values = rng.standard_normal((T, N)).astype(ftype)
    dones = (rng.random((T, N)) < p_done).astype(flag)
    next_value = rng.standard_normal(N).astype(ftype)
    next_done = (rng.random(N) < p_done).astype(flag)
    return rewards, values, dones, next_value, next_done


def assert_close(actual, expected, ftype):
    """float64: ~1e-12; float32: float32 rounding of O(1) values accumulated over T steps."""
    actual = np.asarray(actual)
    if ftype == np.float64:
        np.testing.assert_allclose(actual, expected, rtol=1e-12, atol=1e-12)
    else:
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=2e-5)


# ----------------------------------------------------------------------------
# CleanRL convention: fastvec.gae
# ----------------------------------------------------------------------------

@pytest.mark.parametrize("ftype", FLOATS)
@pytest.mark.parametrize("flag", FLAGS)
@pytest.mark.parametrize("shape", [(1, 1), (1, 7), (9, 1), (37, 23), (128, 8), (64, 300)])
def test_gae_matches_reference(ftype, flag, shape):
    rng = np.random.default_rng(hash((shape, np.dtype(ftype).name, np.dtype(flag).name)) % 2**32)
    data = make_rollout(rng, *shape, ftype=ftype, flag=flag)
    adv, ret = fastvec.gae(*data, gamma=0.99, gae_lambda=0.95)
    assert adv.dtype == ftype and ret.dtype == ftype and adv.shape == shape
    e_adv, e_ret = ref_gae(*data, 0.99, 0.95)
    assert_close(adv, e_adv, ftype)
    assert_close(ret, e_ret, ftype)


# A random GAE problem, but for its width N.
GAE_PROBLEM = dict(T=st.integers(1, 40), ftype=st.sampled_from(FLOATS), flag=st.sampled_from(FLAGS),
                   next_flag=st.sampled_from(FLAGS), gamma=st.floats(0.0, 1.0), lam=st.floats(0.0, 1.0),
                   p_done=st.sampled_from([0.0, 0.2, 1.0]), seed=st.integers(0, 2**32 - 1))


@settings(max_examples=60, deadline=None)
@given(N=st.integers(1, 40), **GAE_PROBLEM)
def test_gae_hypothesis(T, N, ftype, flag, next_flag, gamma, lam, p_done, seed):
    rng = np.random.default_rng(seed)
    r, v, d, nv, _ = make_rollout(rng, T, N, ftype, flag, p_done)
    nd = (rng.random(N) < p_done).astype(next_flag)  # next_done may have its own dtype
    adv, ret = fastvec.gae(r, v, d, nv, nd, gamma=gamma, gae_lambda=lam)
    e_adv, e_ret = ref_gae(r, v, d, nv, nd, gamma, lam)
    assert_close(adv, e_adv, ftype)
    assert_close(ret, e_ret, ftype)


@settings(max_examples=60, deadline=None)
@given(N=st.integers(1, 9), **GAE_PROBLEM)
def test_gae_narrow_kernel_equals_row_kernel(T, N, ftype, flag, next_flag, gamma, lam, p_done, seed):
    """Up to 8 envs run column by column (the advantage kept in a register); wider
    buffers row by row. The same operations in the same order: the narrow
    buffer's results equal, bit for bit, those of its columns inside a wide one."""
    rng = np.random.default_rng(seed)
    r, v, d, nv, _ = make_rollout(rng, T, 24, ftype, flag, p_done)
    nd = (rng.random(24) < p_done).astype(next_flag)
    wide = fastvec.gae(r, v, d, nv, nd, gamma=gamma, gae_lambda=lam)
    narrow = fastvec.gae(*(np.ascontiguousarray(x[..., :N]) for x in (r, v, d, nv, nd)),
                         gamma=gamma, gae_lambda=lam)
    np.testing.assert_array_equal(narrow[0], wide[0][:, :N])
    np.testing.assert_array_equal(narrow[1], wide[1][:, :N])


def test_gae_edge_cases():
    rng = np.random.default_rng(0)
    # all dones: every advantage is the one-step TD error without bootstrap
    r, v, d, nv, nd = make_rollout(rng, 16, 5, np.float64, bool, p_done=1.0)
    adv, ret = fastvec.gae(r, v, d, nv, nd, gamma=0.9, gae_lambda=0.8)
    np.testing.assert_allclose(adv, r - v, rtol=1e-12, atol=1e-12)
    # no dones, gamma = lambda = 1: advantage = reward-to-go + bootstrap - value
    r, v, d, nv, nd = make_rollout(rng, 16, 5, np.float64, bool, p_done=0.0)
    adv, ret = fastvec.gae(r, v, d, nv, nd, gamma=1.0, gae_lambda=1.0)
    np.testing.assert_allclose(ret, np.cumsum(r[::-1], axis=0)[::-1] + nv, rtol=1e-12, atol=1e-12)
    # gamma = 0: one-step reward
    adv, ret = fastvec.gae(r, v, d, nv, nd, gamma=0.0, gae_lambda=0.95)
    np.testing.assert_allclose(ret, r, rtol=1e-12, atol=1e-12)  # (r - v) + v, rounded
    # empty buffers
    for T, N in ((0, 4), (4, 0)):
        r, v, d, nv, nd = make_rollout(rng, T, N)
        adv, ret = fastvec.gae(r, v, d, nv, nd, gamma=0.9, gae_lambda=0.9)
        assert adv.shape == (T, N) and ret.shape == (T, N)


def test_gae_non_contiguous_inputs_are_copied():
    rng = np.random.default_rng(1)
    big = make_rollout(rng, 30, 24, np.float32, np.float32)
    strided = (big[0][::2, ::3], np.asfortranarray(big[1][::2, ::3]), big[2][::2, ::3],
               big[3][::3], big[4][::3])
    assert not strided[0].flags.c_contiguous and not strided[3].flags.c_contiguous
    contiguous = [np.ascontiguousarray(x) for x in strided]
    adv, ret = fastvec.gae(*strided, gamma=0.99, gae_lambda=0.95)
    e_adv, e_ret = fastvec.gae(*contiguous, gamma=0.99, gae_lambda=0.95)
    np.testing.assert_array_equal(adv, e_adv)
    np.testing.assert_array_equal(ret, e_ret)


def test_gae_byteswapped_and_misaligned_inputs():
    rng = np.random.default_rng(20)
    data = make_rollout(rng, 11, 5, np.float64, np.float64)
    expected = fastvec.gae(*data, gamma=0.9, gae_lambda=0.8)
    swapped = [x.astype(x.dtype.newbyteorder(">" if np.little_endian else "<")) for x in data]
    got = fastvec.gae(*swapped, gamma=0.9, gae_lambda=0.8)
    assert got[0].dtype == np.float64 and got[0].dtype.isnative
    np.testing.assert_array_equal(got[0], expected[0])
    misaligned = []
    for x in data:  # same values, at an odd address
        buf = np.zeros(x.nbytes + 1, np.uint8)
        view = np.frombuffer(buf.data, dtype=x.dtype, count=x.size, offset=1).reshape(x.shape)
        view[...] = x
        assert not view.flags.aligned
        misaligned.append(view)
    got = fastvec.gae(*misaligned, gamma=0.9, gae_lambda=0.8)
    np.testing.assert_array_equal(got[0], expected[0])
    np.testing.assert_array_equal(got[1], expected[1])
    with pytest.raises(ValueError, match="native byte order"):
        fastvec.gae(*data, gamma=0.9, gae_lambda=0.8, out=(np.empty((11, 5), ">f8"),
                                                          np.empty((11, 5), ">f8")))


def test_gae_next_value_as_a_row_or_a_column():
    rng = np.random.default_rng(21)
    r, v, d, nv, nd = make_rollout(rng, 9, 4)
    expected = fastvec.gae(r, v, d, nv, nd, gamma=0.9, gae_lambda=0.9)
    for shaped in (nv[None, :], nv[:, None]):  # CleanRL's next_value.reshape(1, -1), SB3's [N, 1]
        got = fastvec.gae(r, v, d, shaped, nd[None, :], gamma=0.9, gae_lambda=0.9)
        np.testing.assert_array_equal(got[0], expected[0])


def test_gae_mixed_float_dtypes_promote():
    rng = np.random.default_rng(2)
    r, v, d, nv, nd = make_rollout(rng, 10, 3, np.float32)
    adv, ret = fastvec.gae(r, v.astype(np.float64), d, nv, nd, gamma=0.9, gae_lambda=0.9)
    assert adv.dtype == np.float64
    assert_close(adv, ref_gae(r, v, d, nv, nd, 0.9, 0.9)[0], np.float64)
    # integer rewards work too (converted)
    adv, _ = fastvec.gae(np.ones((3, 2), np.int64), np.zeros((3, 2), np.float32),
                         np.zeros((3, 2), bool), np.zeros(2, np.float32), np.zeros(2, bool),
                         gamma=0.5, gae_lambda=1.0)
    assert adv.dtype == np.float32
    np.testing.assert_array_equal(adv[:, 0], [1.75, 1.5, 1.0])


def test_gae_out_is_written_and_returned():
    rng = np.random.default_rng(3)
    data = make_rollout(rng, 12, 6, np.float32)
    out = (np.full((12, 6), np.nan, np.float32), np.full((12, 6), np.nan, np.float32))
    res = fastvec.gae(*data, gamma=0.99, gae_lambda=0.95, out=out)
    assert res[0] is out[0] and res[1] is out[1]
    e_adv, e_ret = fastvec.gae(*data, gamma=0.99, gae_lambda=0.95)
    np.testing.assert_array_equal(out[0], e_adv)
    np.testing.assert_array_equal(out[1], e_ret)
    # list accepted as well; reusing the same out arrays gives the same result
    fastvec.gae(*data, gamma=0.99, gae_lambda=0.95, out=list(out))
    np.testing.assert_array_equal(out[0], e_adv)


def test_gae_bad_inputs_raise_clear_errors():
    rng = np.random.default_rng(4)
    r, v, d, nv, nd = make_rollout(rng, 8, 4)
    kw = dict(gamma=0.9, gae_lambda=0.9)
    with pytest.raises(ValueError, match=r"rewards must be a 2-D \[T, N\].*\(8,\)"):
        fastvec.gae(r[:, 0], v, d, nv, nd, **kw)
    with pytest.raises(ValueError, match=r"values must have shape \[T, N\] = \(8, 4\).*\(8, 3\)"):
        fastvec.gae(r, v[:, :3], d, nv, nd, **kw)
    with pytest.raises(ValueError, match=r"dones must have shape"):
        fastvec.gae(r, v, d[:7], nv, nd, **kw)
    with pytest.raises(ValueError, match=r"next_value must have shape \[N\] = \(4,\)"):
        fastvec.gae(r, v, d, np.zeros((2, 2), np.float32), nd, **kw)
    with pytest.raises(ValueError, match=r"next_value must have shape \[N\] = \(4,\)"):
        fastvec.gae(r, v, d, nv[:3], nd, **kw)
    with pytest.raises(ValueError, match=r"next_done must have shape \[N\]"):
        fastvec.gae(r, v, d, nv, nd[:2], **kw)
    with pytest.raises(TypeError, match=r"rewards must hold real numbers.*complex"):
        fastvec.gae(r.astype(np.complex64), v, d, nv, nd, **kw)
    with pytest.raises(TypeError, match=r"dones must be bool, integer or float flags"):
        fastvec.gae(r, v, d.astype(object), nv, nd, **kw)
    with pytest.raises(TypeError, match=r"out must be a pair"):
        fastvec.gae(r, v, d, nv, nd, out=np.empty((8, 4), np.float32), **kw)
    with pytest.raises(TypeError, match=r"out advantages must have dtype float32.*float64"):
        fastvec.gae(r, v, d, nv, nd, out=(np.empty((8, 4)), np.empty((8, 4), np.float32)), **kw)
    with pytest.raises(ValueError, match=r"out returns must have shape"):
        fastvec.gae(r, v, d, nv, nd,
                    out=(np.empty((8, 4), np.float32), np.empty((4, 8), np.float32)), **kw)
    with pytest.raises(ValueError, match=r"writeable C-contiguous"):
        fastvec.gae(r, v, d, nv, nd,
                    out=(np.empty((8, 8), np.float32)[:, ::2], np.empty((8, 4), np.float32)), **kw)
    ro = np.empty((8, 4), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match=r"writeable C-contiguous"):
        fastvec.gae(r, v, d, nv, nd, out=(np.empty((8, 4), np.float32), ro), **kw)
    with pytest.raises(ValueError, match=r"must not share memory with the inputs"):
        fastvec.gae(r, v, d, nv, nd, out=(np.empty((8, 4), np.float32), v), **kw)
    both = np.empty((8, 4), np.float32)
    with pytest.raises(ValueError, match=r"share memory"):
        fastvec.gae(r, v, d, nv, nd, out=(both, both), **kw)
    with pytest.raises(ValueError, match=r"num_threads must be >= 1"):
        fastvec.gae(r, v, d, nv, nd, num_threads=0, **kw)
    with pytest.raises(TypeError):
        fastvec.gae(r, v, d, nv, nd, gamma=0.9)  # gae_lambda is required


def test_public_signatures():
    import inspect

    sig = inspect.signature(fastvec.gae)
    assert list(sig.parameters)[:5] == ["rewards", "values", "dones", "next_value", "next_done"]
    for name in ("gamma", "gae_lambda", "out"):
        assert sig.parameters[name].kind is inspect.Parameter.KEYWORD_ONLY
    assert sig.parameters["out"].default is None
    assert fastvec.gae is fastvec.advantages.gae
    assert {"gae", "gae_sb3", "gae_terminated_truncated", "vtrace"} <= set(fastvec.__all__)


@pytest.mark.parametrize("ftype", FLOATS)
@pytest.mark.parametrize("num_threads", [2, 3, None])
@pytest.mark.parametrize("shape", [(50, 333), (10, 100)])  # GIL released / kept
def test_gae_threads_equal_single_thread(ftype, num_threads, shape):
    rng = np.random.default_rng(5)
    data = make_rollout(rng, *shape, ftype, np.uint8)
    one = fastvec.gae(*data, gamma=0.99, gae_lambda=0.95, num_threads=1)
    many = fastvec.gae(*data, gamma=0.99, gae_lambda=0.95, num_threads=num_threads)
    np.testing.assert_array_equal(one[0], many[0])
    np.testing.assert_array_equal(one[1], many[1])
    assert_close(one[0], ref_gae(*data, 0.99, 0.95)[0], ftype)
    r, v, d, nv, _ = data
    tt_one = fastvec.gae_terminated_truncated(r, v, d, d[::-1].copy(), nv, gamma=0.9,
                                              gae_lambda=0.9, next_values=v[::-1].copy())
    tt_many = fastvec.gae_terminated_truncated(r, v, d, d[::-1].copy(), nv, gamma=0.9,
                                               gae_lambda=0.9, next_values=v[::-1].copy(),
                                               num_threads=num_threads)
    np.testing.assert_array_equal(tt_one[0], tt_many[0])


# ----------------------------------------------------------------------------
# CleanRL parity: the torch loop of ppo.py
# ----------------------------------------------------------------------------

def cleanrl_torch_gae(torch, rewards, values, dones, next_value, next_done, gamma, gae_lambda):
    """CleanRL ppo.py's advantage loop (torch, float32), as it is written there."""
    num_steps = rewards.shape[0]
    with torch.no_grad():
        next_value = next_value.reshape(1, -1)
        advantages = torch.zeros_like(rewards)
        lastgaelam = 0
        for t in reversed(range(num_steps)):
            if t == num_steps - 1:
                nextnonterminal = 1.0 - next_done
                nextvalues = next_value
            else:
                nextnonterminal = 1.0 - dones[t + 1]
                nextvalues = values[t + 1]
            delta = rewards[t] + gamma * nextvalues * nextnonterminal - values[t]
            advantages[t] = lastgaelam = delta + gamma * gae_lambda * nextnonterminal * lastgaelam
        returns = advantages + values
    return advantages, returns


@pytest.mark.parametrize("shape", [(128, 4), (33, 17), (1, 3)])
def test_cleanrl_parity_torch_in_torch_out(shape):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(6)
    data = [torch.from_numpy(x) for x in make_rollout(rng, *shape, np.float32, np.float32, 0.05)]
    adv, ret = fastvec.gae(*data, gamma=0.99, gae_lambda=0.95)
    assert isinstance(adv, torch.Tensor) and isinstance(ret, torch.Tensor)
    assert adv.dtype == torch.float32 and tuple(adv.shape) == shape
    e_adv, e_ret = cleanrl_torch_gae(torch, *data, 0.99, 0.95)
    torch.testing.assert_close(adv, e_adv, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(ret, e_ret, rtol=1e-6, atol=1e-6)
    # torch out= tensors are written in place and returned as given
    out = (torch.empty(shape), torch.empty(shape))
    res = fastvec.gae(*data, gamma=0.99, gae_lambda=0.95, out=out)
    assert res[0] is out[0] and res[1] is out[1]
    torch.testing.assert_close(out[0], adv, rtol=0, atol=0)
    torch.testing.assert_close(out[1], ret, rtol=0, atol=0)


def test_torch_bool_dones_and_inputs_not_copied():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    r, v, d, nv, nd = (torch.from_numpy(x) for x in make_rollout(rng, 20, 6, np.float32, bool))
    adv, _ = fastvec.gae(r, v, d, nv, nd, gamma=0.9, gae_lambda=0.9)
    e_adv, _ = cleanrl_torch_gae(torch, r, v, d.float(), nv, nd.float(), 0.9, 0.9)
    torch.testing.assert_close(adv, e_adv, rtol=1e-6, atol=1e-6)
    # the outputs are views of NumPy arrays: torch and NumPy share the memory
    assert np.shares_memory(np.asarray(adv), adv.numpy())


# ----------------------------------------------------------------------------
# SB3 convention and parity with RolloutBuffer.compute_returns_and_advantage
# ----------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(64, 8), (7, 3), (1, 2)])
@pytest.mark.parametrize("gamma,gae_lambda", [(0.99, 0.95), (0.9, 1.0), (0.5, 0.0)])
def test_sb3_parity(shape, gamma, gae_lambda):
    pytest.importorskip("stable_baselines3")
    torch = pytest.importorskip("torch")
    import gymnasium as gym
    from stable_baselines3.common.buffers import RolloutBuffer

    T, N = shape
    rng = np.random.default_rng(8)
    buf = RolloutBuffer(T, gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), device="cpu",
                        gae_lambda=gae_lambda, gamma=gamma, n_envs=N)
    buf.rewards[:] = rng.standard_normal((T, N))
    buf.values[:] = rng.standard_normal((T, N))
    buf.episode_starts[:] = rng.random((T, N)) < 0.1
    last_values = torch.from_numpy(rng.standard_normal((N, 1)).astype(np.float32))
    dones = rng.random(N) < 0.3

    adv, ret = fastvec.gae_sb3(buf.rewards, buf.values, buf.episode_starts, last_values, dones,
                               gamma=gamma, gae_lambda=gae_lambda)
    buf.compute_returns_and_advantage(last_values=last_values, dones=dones)
    np.testing.assert_allclose(adv, buf.advantages, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ret, buf.returns, rtol=1e-6, atol=1e-6)

    # writing straight into the buffer's own arrays
    expected_adv, expected_ret = buf.advantages.copy(), buf.returns.copy()
    buf.advantages[:] = np.nan
    buf.returns = np.full_like(buf.advantages, np.nan)
    fastvec.gae_sb3(buf.rewards, buf.values, buf.episode_starts, last_values, dones,
                    gamma=gamma, gae_lambda=gae_lambda, out=(buf.advantages, buf.returns))
    np.testing.assert_allclose(buf.advantages, expected_adv, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(buf.returns, expected_ret, rtol=1e-6, atol=1e-6)


def test_sb3_convention_is_cleanrl_convention():
    rng = np.random.default_rng(9)
    r, v, d, nv, nd = make_rollout(rng, 20, 5, np.float64, bool)
    a = fastvec.gae_sb3(r, v, d, nv[:, None], nd, gamma=0.97, gae_lambda=0.9)
    b = fastvec.gae(r, v, d, nv, nd, gamma=0.97, gae_lambda=0.9)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


# ----------------------------------------------------------------------------
# terminated / truncated flags (+ next_values for truncation bootstrap)
# ----------------------------------------------------------------------------

def make_tt(rng, T, N, ftype, flag, p=0.15):
    rewards = rng.standard_normal((T, N)).astype(ftype)
    values = rng.standard_normal((T, N)).astype(ftype)
    terminated = (rng.random((T, N)) < p).astype(flag)
    truncated = (rng.random((T, N)) < p).astype(flag)  # some steps are both
    next_value = rng.standard_normal(N).astype(ftype)
    next_values = rng.standard_normal((T, N)).astype(ftype)
    return rewards, values, terminated, truncated, next_value, next_values


@pytest.mark.parametrize("ftype", FLOATS)
@pytest.mark.parametrize("flag", FLAGS)
@pytest.mark.parametrize("with_next_values", [True, False])
@pytest.mark.parametrize("shape", [(1, 1), (1, 5), (29, 13), (64, 300)])
def test_gae_terminated_truncated_matches_reference(ftype, flag, with_next_values, shape):
    rng = np.random.default_rng(10)
    r, v, te, tr, nv, nvs = make_tt(rng, *shape, ftype, flag)
    nvs = nvs if with_next_values else None
    adv, ret = fastvec.gae_terminated_truncated(r, v, te, tr, nv, gamma=0.98, gae_lambda=0.9,
                                                next_values=nvs)
    e_adv, e_ret = ref_gae_tt(r, v, te, tr, nv, nvs, 0.98, 0.9)
    assert adv.dtype == ftype
    assert_close(adv, e_adv, ftype)
    assert_close(ret, e_ret, ftype)


@settings(max_examples=40, deadline=None)
@given(T=st.integers(1, 30), N=st.integers(1, 30), ftype=st.sampled_from(FLOATS),
       te_flag=st.sampled_from(FLAGS), tr_flag=st.sampled_from(FLAGS),
       p=st.sampled_from([0.0, 0.3, 1.0]), with_nvs=st.booleans(),
       seed=st.integers(0, 2**32 - 1))
def test_gae_terminated_truncated_hypothesis(T, N, ftype, te_flag, tr_flag, p, with_nvs, seed):
    rng = np.random.default_rng(seed)
    r, v, te, tr, nv, nvs = make_tt(rng, T, N, ftype, te_flag, p)
    tr = tr.astype(tr_flag)  # the two flag arrays may differ in dtype
    nvs = nvs if with_nvs else None
    adv, ret = fastvec.gae_terminated_truncated(r, v, te, tr, nv, gamma=0.95, gae_lambda=0.8,
                                                next_values=nvs)
    e_adv, e_ret = ref_gae_tt(r, v, te, tr, nv, nvs, 0.95, 0.8)
    assert_close(adv, e_adv, ftype)
    assert_close(ret, e_ret, ftype)


def test_terminated_truncated_without_next_values_is_cleanrl_with_shifted_dones():
    rng = np.random.default_rng(11)
    r, v, te, tr, nv, _ = make_tt(rng, 40, 9, np.float64, bool)
    done = te | tr  # CleanRL: next_done = terminated | truncated, stored at the next row
    dones = np.concatenate([np.zeros((1, 9), bool), done[:-1]])
    a = fastvec.gae_terminated_truncated(r, v, te, tr, nv, gamma=0.99, gae_lambda=0.95)
    b = fastvec.gae(r, v, dones, nv, done[-1], gamma=0.99, gae_lambda=0.95)
    np.testing.assert_allclose(a[0], b[0], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(a[1], b[1], rtol=1e-12, atol=1e-12)


def test_truncation_bootstraps_from_final_value_only_where_truncated():
    rng = np.random.default_rng(12)
    r, v, te, tr, nv, nvs = make_tt(rng, 25, 7, np.float64, bool)
    a = fastvec.gae_terminated_truncated(r, v, te, tr, nv, gamma=0.9, gae_lambda=0.9,
                                         next_values=nvs)
    garbage = nvs.copy()
    garbage[~tr.astype(bool)] = 1e9  # entries at non-truncated steps are never read
    b = fastvec.gae_terminated_truncated(r, v, te, tr, nv, gamma=0.9, gae_lambda=0.9,
                                         next_values=garbage)
    np.testing.assert_array_equal(a[0], b[0])
    # a step that is truncated and terminated does not bootstrap
    te[:] = 1
    tr[:] = 1
    c, _ = fastvec.gae_terminated_truncated(r, v, te, tr, nv, gamma=0.9, gae_lambda=0.9,
                                            next_values=nvs)
    np.testing.assert_allclose(c, r - v, rtol=1e-12, atol=1e-12)


def test_terminated_truncated_errors():
    rng = np.random.default_rng(13)
    r, v, te, tr, nv, nvs = make_tt(rng, 6, 3, np.float32, bool)
    with pytest.raises(ValueError, match=r"next_values must have shape \[T, N\] = \(6, 3\)"):
        fastvec.gae_terminated_truncated(r, v, te, tr, nv, gamma=0.9, gae_lambda=0.9,
                                         next_values=nvs[:5])
    with pytest.raises(ValueError, match=r"truncated must have shape"):
        fastvec.gae_terminated_truncated(r, v, te, tr.T, nv, gamma=0.9, gae_lambda=0.9)
    with pytest.raises(ValueError, match=r"must not share memory"):
        fastvec.gae_terminated_truncated(r, v, te, tr, nv, gamma=0.9, gae_lambda=0.9,
                                         next_values=nvs, out=(nvs, np.empty_like(r)))


# ----------------------------------------------------------------------------
# V-trace
# ----------------------------------------------------------------------------

@pytest.mark.parametrize("ftype", FLOATS)
@pytest.mark.parametrize("flag", [bool, np.float32])
@pytest.mark.parametrize("use_log", [True, False])
@pytest.mark.parametrize("bars", [(1.0, 1.0, None, 1.0), (2.0, 0.5, 1.5, 0.9),
                                  (np.inf, np.inf, None, 0.95)])
@pytest.mark.parametrize("shape", [(1, 1), (20, 7)])
def test_vtrace_matches_reference(ftype, flag, use_log, bars, shape):
    rho_bar, c_bar, pg_rho_bar, lam = bars
    rng = np.random.default_rng(14)
    r, v, d, nv, nd = make_rollout(rng, *shape, ftype, flag)
    log_rhos = (0.7 * rng.standard_normal(shape)).astype(ftype)
    ratios = np.exp(log_rhos.astype(np.float64))
    kw = dict(log_rhos=log_rhos) if use_log else dict(rhos=ratios.astype(ftype))
    vs, pg = fastvec.vtrace(r, v, d, nv, nd, gamma=0.97, rho_bar=rho_bar, c_bar=c_bar,
                            pg_rho_bar=pg_rho_bar, lambda_=lam, **kw)
    e_vs, e_pg = ref_vtrace(r, v, d, nv, nd, ratios, 0.97, rho_bar, c_bar,
                            rho_bar if pg_rho_bar is None else pg_rho_bar, lam)
    assert vs.dtype == ftype and pg.dtype == ftype
    tol = dict(rtol=1e-11, atol=1e-11) if ftype == np.float64 else dict(rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(vs, e_vs, **tol)
    np.testing.assert_allclose(pg, e_pg, **tol)


@pytest.mark.parametrize("ftype", FLOATS)
def test_vtrace_large_matches_reference(ftype):  # large enough to release the GIL
    test_vtrace_matches_reference(ftype, np.uint8, True, (1.0, 1.0, None, 0.95), (64, 300))


@pytest.mark.parametrize("ftype", FLOATS)
@pytest.mark.parametrize("use_log", [True, False])
def test_vtrace_keeps_a_nan_ratio(ftype, use_log):
    """A NaN importance ratio (a policy that diverged) gives NaN, as min(rho_bar, ratio) and
    the reference do, at its step and the ones before it; not the clip's bound."""
    rng = np.random.default_rng(16)
    r, v, d, nv, nd = make_rollout(rng, 6, 3, ftype, np.float32)
    d[:] = 0
    ratios = np.ones(r.shape)
    ratios[3, 1] = np.nan
    kw = dict(log_rhos=np.log(ratios).astype(ftype)) if use_log else dict(rhos=ratios.astype(ftype))
    vs, pg = fastvec.vtrace(r, v, d, nv, nd, gamma=0.97, **kw)
    e_vs, e_pg = ref_vtrace(r, v, d, nv, nd, ratios, 0.97, 1.0, 1.0, 1.0, 1.0)
    assert np.isnan(e_vs[:4, 1]).all() and np.isnan(e_pg[3, 1])
    np.testing.assert_array_equal(np.isnan(vs), np.isnan(e_vs))
    np.testing.assert_array_equal(np.isnan(pg), np.isnan(e_pg))


def test_vtrace_on_policy_is_gae():
    rng = np.random.default_rng(15)
    r, v, d, nv, nd = make_rollout(rng, 30, 11, np.float64, np.float64)
    vs, pg = fastvec.vtrace(r, v, d, nv, nd, gamma=0.99, rhos=np.ones_like(r), lambda_=0.9)
    adv, ret = fastvec.gae(r, v, d, nv, nd, gamma=0.99, gae_lambda=0.9)
    np.testing.assert_allclose(vs, ret, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(vs - v, adv, rtol=1e-12, atol=1e-12)


def test_vtrace_threads_and_out():
    rng = np.random.default_rng(16)
    r, v, d, nv, nd = make_rollout(rng, 100, 200, np.float32, np.uint8)
    lr = (0.5 * rng.standard_normal(r.shape)).astype(np.float32)
    one = fastvec.vtrace(r, v, d, nv, nd, gamma=0.99, log_rhos=lr, num_threads=1)
    out = (np.empty_like(r), np.empty_like(r))
    res = fastvec.vtrace(r, v, d, nv, nd, gamma=0.99, log_rhos=lr, num_threads=3, out=out)
    assert res[0] is out[0]
    np.testing.assert_array_equal(one[0], out[0])
    np.testing.assert_array_equal(one[1], out[1])


def test_vtrace_errors():
    rng = np.random.default_rng(17)
    r, v, d, nv, nd = make_rollout(rng, 5, 2)
    with pytest.raises(TypeError, match="exactly one of log_rhos= or rhos="):
        fastvec.vtrace(r, v, d, nv, nd, gamma=0.9)
    with pytest.raises(TypeError, match="exactly one of log_rhos= or rhos="):
        fastvec.vtrace(r, v, d, nv, nd, gamma=0.9, log_rhos=r, rhos=r)
    with pytest.raises(ValueError, match=r"log_rhos must have shape \[T, N\]"):
        fastvec.vtrace(r, v, d, nv, nd, gamma=0.9, log_rhos=r[:4])
