"""fastvec.spaces flatten/unflatten against gymnasium.spaces.flatten/unflatten, exactly."""
from __future__ import annotations

import inspect

import numpy as np
import pytest
from gymnasium import spaces as gs
from gymnasium.spaces import flatten as gflatten
from gymnasium.spaces import unflatten as gunflatten
from gymnasium.vector.utils import concatenate, create_empty_array
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastvec.spaces import Layout, flatten, flatten_sample, unflatten, unflatten_sample

INT_DTYPES = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64]
FLOAT_DTYPES = [np.float16, np.float32, np.float64]

#: Discrete(n, start, dtype=...) arrived in gymnasium 1.2; before it every Discrete is int64.
DISCRETE_HAS_DTYPE = "dtype" in inspect.signature(gs.Discrete.__init__).parameters
needs_discrete_dtype = pytest.mark.skipif(
    not DISCRETE_HAS_DTYPE, reason="Discrete(dtype=...) needs gymnasium >= 1.2 (always int64 before)")


def _discrete(n, start=0, dtype=np.int64):
    """gs.Discrete with a dtype; only int64 on gymnasium < 1.2, which has no dtype argument."""
    if DISCRETE_HAS_DTYPE:
        return gs.Discrete(n, start=start, dtype=dtype)
    assert np.dtype(dtype) == np.int64, "Discrete(dtype=...) needs gymnasium >= 1.2"
    return gs.Discrete(n, start=start)


# --------------------------------------------------------------------------- strategies


@st.composite
def shapes(draw, max_dims=3):
    return tuple(draw(st.lists(st.integers(1, 3), max_size=max_dims)))


@st.composite
def boxes(draw):
    dtype = np.dtype(draw(st.sampled_from(INT_DTYPES + FLOAT_DTYPES + [np.bool_])))
    shape = draw(shapes())
    if dtype.kind == "b":
        return gs.Box(0, 1, shape, dtype=dtype)
    if dtype.kind == "f":
        return gs.Box(-100.0, 100.0, shape, dtype=dtype)
    info = np.iinfo(dtype)
    # Half the range: float32 rounding of the largest values stays inside the dtype, so
    # unflattening them (a C cast) is defined.
    if draw(st.booleans()):
        # (gymnasium cannot sample 64-bit Boxes whose high - low overflows int64.)
        low, high = max(info.min // 2, -(2**61)), min(info.max // 2, 2**61)
    else:
        low, high = max(info.min, -5), 20
    return gs.Box(low, high, shape, dtype=dtype)


@st.composite
def discretes(draw):
    dtype = np.dtype(draw(st.sampled_from(INT_DTYPES if DISCRETE_HAS_DTYPE else [np.int64])))
    low = 0 if dtype.kind == "u" else -3
    return _discrete(draw(st.integers(1, 6)), start=draw(st.integers(low, 3)), dtype=dtype)


@st.composite
def multidiscretes(draw):
    # gymnasium's flatten fails for uint64 MultiDiscrete (uint64 - int32 offsets -> float index).
    dtype = np.dtype(draw(st.sampled_from([d for d in INT_DTYPES if d is not np.uint64])))
    shape = draw(st.sampled_from([(1,), (3,), (2, 2), (2, 3)]))
    nvec = draw(st.lists(st.integers(1, 4), min_size=int(np.prod(shape)),
                         max_size=int(np.prod(shape))))
    low = 0 if dtype.kind == "u" else -3
    start = draw(st.lists(st.integers(low, 3), min_size=len(nvec), max_size=len(nvec)))
    return gs.MultiDiscrete(np.array(nvec).reshape(shape), dtype=dtype,
                            start=np.array(start).reshape(shape))


@st.composite
def multibinaries(draw):
    return gs.MultiBinary(draw(st.sampled_from([1, 4, [2, 3], [1, 2, 2]])))


leaf_spaces = st.one_of(boxes(), discretes(), multidiscretes(), multibinaries())


def _containers(children):
    keys = st.text("abcdefgh", min_size=1, max_size=3)
    return st.one_of(
        st.dictionaries(keys, children, min_size=1, max_size=4).map(gs.Dict),
        st.lists(children, min_size=1, max_size=4).map(lambda xs: gs.Tuple(tuple(xs))),
    )


nested_spaces = st.recursive(leaf_spaces, _containers, max_leaves=8)


# --------------------------------------------------------------------------- helpers


def _samples(space, seed, n):
    space.seed(seed)
    return [space.sample() for _ in range(n)]


def _batch(space, samples):
    return concatenate(space, samples, create_empty_array(space, len(samples)))


def _assert_same(ours, ref):
    """Equal values and dtypes; np scalars and 0-d arrays are compared as such."""
    ours_dtype = np.asarray(ours).dtype
    ref_dtype = np.asarray(ref).dtype
    assert ours_dtype == ref_dtype, (ours_dtype, ref_dtype)
    np.testing.assert_array_equal(ours, ref, strict=False)
    assert np.shape(ours) == np.shape(ref)


def _assert_tree_same(space, ours, ref):
    if isinstance(space, gs.Dict):
        assert list(ours) == list(space.spaces)
        for k, sub in space.spaces.items():
            _assert_tree_same(sub, ours[k], ref[k])
    elif isinstance(space, gs.Tuple):
        assert isinstance(ours, tuple) and len(ours) == len(space.spaces)
        for sub, o, r in zip(space.spaces, ours, ref):
            _assert_tree_same(sub, o, r)
    else:
        _assert_same(ours, ref)


def _assert_batch_matches(space, ours, refs):
    """ours: a batched tree; refs: per-sample trees from gymnasium (dtypes checked per sample)."""
    if isinstance(space, gs.Dict):
        for k, sub in space.spaces.items():
            _assert_batch_matches(sub, ours[k], [r[k] for r in refs])
    elif isinstance(space, gs.Tuple):
        for i, sub in enumerate(space.spaces):
            _assert_batch_matches(sub, ours[i], [r[i] for r in refs])
    else:
        assert isinstance(ours, np.ndarray) and ours.shape[0] == len(refs)
        for b, r in enumerate(refs):
            _assert_same(ours[b], r)


# --------------------------------------------------------------------------- parity


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(space=nested_spaces, seed=st.integers(0, 2**31 - 1), n=st.integers(1, 4))
def test_flatten_matches_gymnasium(space, seed, n):
    layout = Layout(space)
    samples = _samples(space, seed, n)
    refs = [gflatten(space, s) for s in samples]
    assert layout.flat_dim == refs[0].shape[0]
    assert layout.flat_dtype == refs[0].dtype
    for s, ref in zip(samples, refs):
        _assert_same(flatten_sample(layout, s), ref)
    ref2 = np.stack(refs)
    batch = _batch(space, samples)
    _assert_same(flatten(layout, batch), ref2)
    for dtype in (np.float32, np.float64, np.float16, np.int64):
        _assert_same(flatten(layout, batch, dtype=dtype), ref2.astype(dtype))
        _assert_same(flatten_sample(layout, samples[0], dtype=dtype), refs[0].astype(dtype))
    out = np.full(ref2.shape, -7, np.float32)
    assert flatten(layout, batch, out=out) is out
    _assert_same(out, ref2.astype(np.float32))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(space=nested_spaces, seed=st.integers(0, 2**31 - 1), n=st.integers(1, 4))
def test_unflatten_matches_gymnasium(space, seed, n):
    layout = Layout(space)
    samples = _samples(space, seed, n)
    flat_default = np.stack([gflatten(space, s) for s in samples])
    for flat in (flat_default, flat_default.astype(np.float32), flat_default.astype(np.float64)):
        refs = [gunflatten(space, row) for row in flat]
        _assert_batch_matches(space, unflatten(layout, flat), refs)
        for row, ref in zip(flat, refs):
            _assert_tree_same(space, unflatten_sample(layout, row), ref)


@settings(max_examples=60, deadline=None)
@given(space=nested_spaces, seed=st.integers(0, 2**31 - 1), n=st.integers(1, 5))
def test_round_trip(space, seed, n):
    # float64 holds every sampled value exactly except 64-bit integers beyond 2**53.
    layout = Layout(space)
    samples = _samples(space, seed, n)
    batch = _batch(space, samples)
    back = unflatten(layout, flatten(layout, batch, dtype=np.float64))
    for leaf, ours, orig in zip(layout.leaves, layout.split(back), layout.split(batch)):
        assert ours.dtype == orig.dtype and ours.shape == orig.shape
        if leaf.kind == "box" and leaf.dtype.itemsize == 8 and leaf.dtype.kind in "iu":
            continue
        np.testing.assert_array_equal(ours, orig)


# --------------------------------------------------------------------------- targeted cases


def test_nested_promotion_is_applied_container_by_container():
    # gymnasium concatenates the inner Dict first: int64 -> float64 (rounds), then -> float32.
    # Casting int64 -> float32 directly rounds differently for this value (double rounding).
    value = np.int64(2**62 + 2**38 + 1)
    assert np.float32(np.float64(value)) != np.float32(value)
    space = gs.Dict({"inner": gs.Dict({"a": gs.Box(-(2**62), 2**63 - 1, (1,), np.int64),
                                       "b": gs.Box(-1, 1, (1,), np.float32)}),
                     "c": gs.Discrete(2)})
    layout = Layout(space)
    sample = {"inner": {"a": np.array([value]), "b": np.array([0.5], np.float32)}, "c": 1}
    ref = gflatten(space, sample)
    _assert_same(flatten_sample(layout, sample), ref)
    _assert_same(flatten_sample(layout, sample, dtype=np.float32), ref.astype(np.float32))
    batch = _batch(space, [sample, sample])
    _assert_same(flatten(layout, batch, dtype=np.float32), np.stack([ref, ref]).astype(np.float32))
    # Non-associative promotion: {{float16, int8}, uint8} is float16, {int8, uint8, float16} float32.
    nested = gs.Dict({"x": gs.Dict({"f": gs.Box(0, 1, (1,), np.float16), "i": gs.Box(0, 1, (1,), np.int8)}),
                      "u": gs.Box(0, 255, (1,), np.uint8)})
    assert Layout(nested).flat_dtype == np.float16
    flat3 = gs.Dict({"f": gs.Box(0, 1, (1,), np.float16), "i": gs.Box(0, 1, (1,), np.int8),
                     "u": gs.Box(0, 255, (1,), np.uint8)})
    assert Layout(flat3).flat_dtype == gflatten(flat3, flat3.sample()).dtype


@needs_discrete_dtype
def test_discrete_start_and_dtypes_single():
    space = gs.Tuple((gs.Discrete(4, start=-2, dtype=np.int32),
                      gs.MultiDiscrete([[2, 3], [4, 1]], start=[[1, -1], [0, 5]], dtype=np.int16),
                      gs.MultiBinary(3), gs.Box(0, 255, (2, 2), np.uint8),
                      gs.Box(0, 1, (2,), np.bool_)))
    layout = Layout(space)
    sample = (np.int32(1), np.array([[2, 0], [3, 5]], np.int16), np.array([1, 0, 1], np.int8),
              np.array([[0, 255], [7, 9]], np.uint8), np.array([True, False]))
    ref = gflatten(space, sample)
    _assert_same(flatten_sample(layout, sample), ref)
    back = unflatten_sample(layout, ref.astype(np.float32))
    _assert_tree_same(space, back, gunflatten(space, ref.astype(np.float32)))
    assert type(back[0]) is np.int32 and back[0] == 1


def test_top_level_leaf_spaces():
    for space in (gs.Discrete(5, start=3), gs.Box(-1, 1, (2, 3)), gs.MultiBinary(4),
                  gs.MultiDiscrete([3, 2])):
        layout = Layout(space)
        samples = _samples(space, 0, 3)
        ref = np.stack([gflatten(space, s) for s in samples])
        _assert_same(flatten(layout, _batch(space, samples)), ref)
        _assert_batch_matches(space, unflatten(layout, ref), [gunflatten(space, r) for r in ref])


def test_python_values_and_non_contiguous_inputs():
    space = gs.Dict({"a": gs.Box(-5, 5, (3,), np.float32), "d": gs.Discrete(3)})
    layout = Layout(space)
    ref = gflatten(space, {"a": np.array([1, 2, 3], np.float32), "d": 2})
    _assert_same(flatten_sample(layout, {"a": [1.0, 2.0, 3.0], "d": 2}), ref)
    big = np.arange(24, dtype=np.float32).reshape(4, 6) / 10
    batch = {"a": big[:, ::2], "d": np.array([0, 1, 2, 1, 0, 2])[::-1][:4]}  # strided views
    samples = [{"a": batch["a"][b], "d": batch["d"][b]} for b in range(4)]
    _assert_same(flatten(layout, batch), np.stack([gflatten(space, s) for s in samples]))
    # float64 values for a float32 Box are cast first, as gymnasium does.
    b64 = {"a": batch["a"].astype(np.float64) + 1e-9, "d": batch["d"]}
    ref64 = np.stack([gflatten(space, {"a": b64["a"][b], "d": b64["d"][b]}) for b in range(4)])
    _assert_same(flatten(layout, b64), ref64)
    # Non-contiguous out and flat.
    out = np.zeros((4, 2 * layout.flat_dim), np.float32)[:, ::2]
    flatten(layout, batch, out=out)
    _assert_same(out, flatten(layout, batch, dtype=np.float32))
    flat = np.asfortranarray(flatten(layout, batch))
    _assert_batch_matches(space, unflatten(layout, flat), [gunflatten(space, r) for r in flat])


def test_empty_batch():
    layout = Layout(gs.Dict({"a": gs.Box(0, 1, (2,)), "d": gs.Discrete(2)}))
    flat = flatten(layout, {"a": np.zeros((0, 2), np.float32), "d": np.zeros(0, np.int64)})
    assert flat.shape == (0, 4)
    back = unflatten(layout, flat)
    assert back["a"].shape == (0, 2) and back["d"].shape == (0,)


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize("bad, name", [
    (gs.Text(5), "Text"),
    (gs.Graph(gs.Box(0, 1, (2,)), None), "Graph"),
    (gs.Sequence(gs.Discrete(2)), "Sequence"),
    (gs.Dict({"ok": gs.Discrete(2), "t": gs.Text(3)}), "Text"),
    (gs.OneOf((gs.Discrete(2), gs.Box(0, 1))), "OneOf"),
])
def test_unsupported_spaces(bad, name):
    with pytest.raises(ValueError, match=name):
        Layout(bad)


@pytest.fixture
def dict_layout():
    space = gs.Dict({"a": gs.Box(-1, 1, (2,), np.float32), "d": gs.Discrete(3, start=1),
                     "m": gs.MultiDiscrete([2, 3])})
    return Layout(space)


def _good_batch(n=2):
    return {"a": np.zeros((n, 2), np.float32), "d": np.ones(n, np.int64),
            "m": np.zeros((n, 2), np.int64)}


def test_batch_errors(dict_layout):
    layout = dict_layout
    flatten(layout, _good_batch())
    with pytest.raises(ValueError, match=r"leaf a .*expected shape \(2, 2\).*got \(2, 3\)"):
        flatten(layout, {**_good_batch(), "a": np.zeros((2, 3), np.float32)})
    with pytest.raises(ValueError, match=r"leaf d .*expected shape \(2,\)"):
        flatten(layout, {**_good_batch(), "d": np.ones(3, np.int64)})
    with pytest.raises(TypeError, match=r"leaf d .*int64.*float64"):
        flatten(layout, {**_good_batch(), "d": np.ones(2)})
    with pytest.raises(TypeError, match=r"leaf a .*float32.*<U1"):
        flatten(layout, {**_good_batch(), "a": np.full((2, 2), "x")})
    with pytest.raises(ValueError, match="structured like"):
        flatten(layout, {"a": np.zeros((2, 2), np.float32)})
    with pytest.raises(ValueError, match="flatten_sample"):
        flatten(layout, {"a": np.zeros(2, np.float32), "d": 1, "m": np.zeros(2, np.int64)})
    with pytest.raises(ValueError, match=r"leaf d .*value 0 at batch index 1 is outside"):
        flatten(layout, {**_good_batch(), "d": np.array([1, 0])})
    with pytest.raises(ValueError, match=r"leaf d .*outside"):
        flatten(layout, {**_good_batch(), "d": np.array([4, 1])}, dtype=np.int32)  # NumPy path
    with pytest.raises(ValueError, match=r"leaf m .*\[0, 3\] at batch index 0"):
        flatten(layout, {**_good_batch(), "m": np.array([[0, 3], [0, 0]])})
    with pytest.raises(ValueError, match=r"leaf m .*outside"):
        flatten(layout, {**_good_batch(), "m": np.array([[0, 0], [-1, 0]])}, dtype=np.float16)
    with pytest.raises(ValueError, match=r"out must have shape \(2, 10\)"):
        flatten(layout, _good_batch(), out=np.zeros((2, 6), np.float32))
    with pytest.raises(TypeError, match="out has dtype float32 but dtype=float64"):
        flatten(layout, _good_batch(), out=np.zeros((2, 10), np.float32), dtype=np.float64)
    with pytest.raises(TypeError, match="numeric"):
        flatten(layout, _good_batch(), dtype=np.complex64)
    with pytest.raises(ValueError, match="expected shape .* for one sample"):
        flatten_sample(layout, _good_batch())


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_an_empty_first_leaf_still_checks_the_others(dict_layout, dtype):
    """A batch whose first leaf has 0 rows and another leaf 2 (or strings) raises as any
    batch of leaves that disagree does; with a compiled output dtype it gave an empty array."""
    empty = _good_batch(0)
    assert flatten(dict_layout, empty, dtype=dtype).shape == (0, 10)
    with pytest.raises(ValueError, match=r"leaf d .*expected shape \(0,\) for a batch of 0, got \(2,\)"):
        flatten(dict_layout, {**empty, "d": np.array([1, 2])}, dtype=dtype)
    with pytest.raises(TypeError, match=r"leaf d "):
        flatten(dict_layout, {**empty, "d": np.array(["x", "y"])}, dtype=dtype)


def test_unflatten_errors(dict_layout):
    layout = dict_layout
    flat = flatten(layout, _good_batch(), dtype=np.float32)
    unflatten(layout, flat)
    with pytest.raises(ValueError, match=r"flat_dim=10 .*got shape \(2, 6\)"):
        unflatten(layout, flat[:, :6])
    with pytest.raises(ValueError, match="unflatten_sample"):
        unflatten(layout, flat[0])
    with pytest.raises(ValueError, match=r"\[flat_dim\]"):
        unflatten_sample(layout, flat)
    with pytest.raises(TypeError, match="numeric"):
        unflatten(layout, flat.astype(np.complex64))
    for dtype in (np.float32, np.float64, np.int64):
        bad = flat.astype(dtype)
        bad[1, 2:5] = 0  # Discrete "d" segment of row 1
        with pytest.raises(ValueError, match="leaf d .*batch index 1 are not a one-hot"):
            unflatten(layout, bad)
        bad = flat.astype(dtype)
        bad[0, 7:] = 0  # second MultiDiscrete component of row 0
        with pytest.raises(ValueError, match="leaf m .*batch index 0"):
            unflatten(layout, bad)


def test_layout_keeps_leaf_order_and_offsets():
    space = gs.Dict({"z": gs.Discrete(3), "a": gs.Tuple((gs.Box(0, 1, (2, 2)), gs.MultiBinary(3)))})
    layout = Layout(space)
    assert [leaf.path for leaf in layout.leaves] == [("a", 0), ("a", 1), ("z",)]
    assert layout.flat_offsets == (0, 4, 7) and layout.flat_sizes == (4, 3, 3)
    assert layout.flat_dim == 10
    assert [leaf.kind for leaf in layout.leaves] == ["box", "multibinary", "discrete"]


@needs_discrete_dtype
def test_discrete_scalars_and_narrowing_casts():
    space = gs.Tuple((gs.Discrete(300, start=-5, dtype=np.int16), gs.Discrete(4, dtype=np.uint8),
                      gs.Box(0, 10, (2,), np.uint8)))
    layout = Layout(space)
    for sample in [(250, 3, np.array([1, 2], np.uint8)),
                   (np.int64(-5), np.uint8(0), np.array([0, 10], np.uint8)),
                   (np.int16(294), True, np.array([3, 4], np.uint8))]:
        ref = gflatten(space, sample)
        _assert_same(flatten_sample(layout, sample), ref)
        _assert_same(flatten_sample(layout, sample, dtype=np.float32), ref.astype(np.float32))
    # Default flat dtype int16: the NumPy path; float32: the kernels (ints read directly).
    for dtype in (None, np.float32):
        with pytest.raises(ValueError, match=r"leaf 0 .*value 295 is outside"):
            flatten_sample(layout, (295, 0, np.zeros(2, np.uint8)), dtype=dtype)
        with pytest.raises(ValueError, match=r"leaf 1 .*value -1 (is outside|does not fit)"):
            flatten_sample(layout, (0, -1, np.zeros(2, np.uint8)), dtype=dtype)
        with pytest.raises(ValueError, match=r"leaf 1 .*value 4 is outside"):
            flatten_sample(layout, (0, np.int64(4), np.zeros(2, np.uint8)), dtype=dtype)
        with pytest.raises((ValueError, TypeError), match=r"leaf 0 "):
            flatten_sample(layout, (2**70, 0, np.zeros(2, np.uint8)), dtype=dtype)
    # A batch whose int64 values do not fit the leaf's uint8 must not wrap into range.
    batch = (np.array([0, 1]), np.array([1, 260]), np.zeros((2, 2), np.uint8))
    with pytest.raises(ValueError, match=r"leaf 1 .*value 260 does not fit .*uint8"):
        flatten(layout, batch)
    with pytest.raises(ValueError, match=r"leaf 2 .*value -1 does not fit"):
        flatten(layout, (np.array([0, 1]), np.array([1, 2]), np.full((2, 2), -1)))


@settings(max_examples=40, deadline=None)
@given(space=nested_spaces, seed=st.integers(0, 2**31 - 1))
def test_compiled_split_join_equal_layout_methods(space, seed):
    from fastvec.spaces._flatten_api import _codegen

    layout = Layout(space)
    split, join = _codegen(layout)
    sample = _samples(space, seed, 1)[0]
    ours, ref = split(sample), layout.split(sample)
    assert len(ours) == len(ref) and all(a is b for a, b in zip(ours, ref))
    _assert_tree_same(space, join(ref), layout.join(ref))


def test_non_literal_dict_keys_fall_back_to_layout_methods():
    class Key(str):
        pass

    space = gs.Dict({Key("a"): gs.Discrete(2), "b": gs.Box(0, 1, (1,))})
    layout = Layout(space)
    sample = {Key("a"): 1, "b": np.array([0.5], np.float32)}
    _assert_same(flatten_sample(layout, sample), gflatten(space, sample))
    back = unflatten_sample(layout, gflatten(space, sample))
    assert back["a"] == 1 and back["b"][0] == np.float32(0.5)


def test_bench_section_runs(capsys):
    from fastvec._bench import flatten as bench

    # The bench asserts fastvec == gymnasium on its own space before timing; keep it runnable.
    space = bench.make_space()
    layout = Layout(space)
    samples, batch = bench.make_batch(space, 16)
    ref = np.stack([gflatten(space, s) for s in samples])
    _assert_same(bench.numpy_flatten(layout, batch, np.empty_like(ref)), ref)
    _assert_same(flatten(layout, batch), ref)
    assert layout.flat_dim == 150


def test_torch_out():
    torch = pytest.importorskip("torch")
    space = gs.Dict({"a": gs.Box(-1, 1, (3,), np.float32), "d": gs.Discrete(4, start=2)})
    layout = Layout(space)
    samples = _samples(space, 3, 5)
    ref = np.stack([gflatten(space, s) for s in samples]).astype(np.float32)
    out = torch.zeros((5, layout.flat_dim), dtype=torch.float32)
    assert flatten(layout, _batch(space, samples), out=out) is out
    np.testing.assert_array_equal(out.numpy(), ref)
    one = torch.zeros(layout.flat_dim, dtype=torch.float64)
    assert flatten_sample(layout, samples[0], out=one) is one
    np.testing.assert_array_equal(one.numpy(), ref[0].astype(np.float64))
    with pytest.raises(TypeError, match="out cannot be written"):
        flatten(layout, _batch(space, samples), out=out.clone().requires_grad_())
    with pytest.raises(TypeError, match="numpy.ndarray or a CPU torch tensor"):
        flatten(layout, _batch(space, samples), out=[[0.0] * 7] * 5)


def test_space_without_leaves():
    layout = Layout(gs.Dict({}))
    assert layout.flat_dim == 0 and layout.flat_dtype is None
    with pytest.raises(ValueError, match="no Box, Discrete"):
        flatten(layout, {})
    with pytest.raises(ValueError, match="no Box, Discrete"):
        flatten_sample(layout, {})


def test_layout_pickles_after_use():
    import pickle

    space = gs.Dict({"a": gs.Box(-1, 1, (2,), np.float32), "d": gs.MultiDiscrete([2, 3])})
    layout = Layout(space)
    batch = _batch(space, _samples(space, 0, 3))
    ref = flatten(layout, batch)
    unflatten(layout, ref)
    clone = pickle.loads(pickle.dumps(layout))
    assert [leaf.path for leaf in clone.leaves] == [leaf.path for leaf in layout.leaves]
    _assert_same(flatten(clone, batch), ref)


@pytest.mark.parametrize("last_discrete", [
    pytest.param(np.uint8, marks=needs_discrete_dtype, id="uint8"), pytest.param(np.int64, id="int64")])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_unflatten_non_one_hot_values_like_gymnasium(dtype, last_discrete):
    # Beyond round trips: several nonzeros in a Discrete segment (gymnasium takes the first),
    # NaN / -0.0 / fractions into bool and integer Boxes (NumPy's casts), float16 leaves.
    space = gs.Tuple((gs.Discrete(4, start=2), gs.Box(0, 1, (4,), np.bool_),
                      gs.Box(-100, 100, (3,), np.int16), gs.Box(-1, 1, (2,), np.float16),
                      _discrete(3, dtype=last_discrete)))
    layout = Layout(space)
    rows = np.array([
        [0, 0.5, 1, 0, 0.5, np.nan, -0.0, 0, 3.7, -2.5, 99, 0.1, -1e-5, 0, 0, 2],
        [1, 1, 1, 1, 0, 1, 0, 2, -0.9, 0.9, -100, 1e-3, 3, 1, -1, 0],
        [0, 0, 0, -3, 1, 1, 1, 1, 0, 0, 0, 0.333, 0.25, 5, 0, 0],
    ], dtype=dtype)
    refs = [gunflatten(space, r) for r in rows]
    _assert_batch_matches(space, unflatten(layout, rows), refs)
    for r, ref in zip(rows, refs):
        _assert_tree_same(space, unflatten_sample(layout, r), ref)


def test_large_batches_cross_row_blocks():
    # The kernels work in blocks of rows (32 KiB of the flat buffer); 1000 rows of 150 values
    # span many blocks with a remainder, in both float types.
    from fastvec._bench.flatten import make_batch, make_space

    space = make_space()
    layout = Layout(space)
    samples, batch = make_batch(space, 1000, seed=7)
    ref = np.stack([gflatten(space, s) for s in samples])
    _assert_same(flatten(layout, batch), ref)
    for dtype in (np.float32, np.float64):
        flat = flatten(layout, batch, dtype=dtype)
        _assert_same(flat, ref.astype(dtype))
        back = unflatten(layout, flat)
        for leaf, ours, orig in zip(layout.leaves, layout.split(back), layout.split(batch)):
            _assert_same(ours, orig)
        bad = flat.copy()
        off = layout.flat_offsets[[leaf.path for leaf in layout.leaves].index(("mode",))]
        bad[997, off:off + 4] = 0
        with pytest.raises(ValueError, match="leaf mode .*batch index 997 "):
            unflatten(layout, bad)
    wrong = dict(batch, mode=batch["mode"].copy())
    wrong["mode"][998] = 0  # Discrete(4, start=1)
    with pytest.raises(ValueError, match="leaf mode .*value 0 at batch index 998 "):
        flatten(layout, wrong, dtype=np.float32)
