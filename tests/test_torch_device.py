"""Device safety of the torch path (TorchCartPole, examples/ppo.py), checked on the CPU.

Every test here runs on the CPU except the ones marked ``cuda``: they run where
``torch.cuda.is_available()``, the day the project has a GPU.

* A tensor made without ``device=`` lands on torch's default device. On the CPU that is
  where everything else is, so nothing fails; on a GPU the op that mixes it with a CUDA
  tensor fails (or copies it every step). Running with ``torch.set_default_device("meta")``
  makes such a tensor a meta tensor, and mixing it with a CPU tensor fails at once.
* The source check reads the torch path's files and asks that every tensor factory call
  (``torch.zeros``, ``torch.tensor``, ``torch.Generator``, ``nn.Linear``, ...) names its device.
* The host-read spy records the Tensor methods that copy device data to the host
  (``tolist``, ``cpu``, ``numpy``, ``item``, ``bool()``/``float()``/``int()``), which the
  dispatch-level sync spies in the other test files do not see.
"""
from __future__ import annotations

import ast
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch.overrides import TorchFunctionMode  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from fastvec.torch import TorchCartPole, resolve_device  # noqa: E402
from torch_helpers import PPO_PATH, ROOT, load_ppo_example, package_root  # noqa: E402

TORCH_PATH_SOURCES = [ROOT / "src" / "fastvec" / "torch" / "cartpole.py",
                      ROOT / "src" / "fastvec" / "torch" / "__init__.py",
                      ROOT / "src" / "fastvec" / "_bench" / "torch.py",
                      ROOT / "asv_benchmarks" / "bench_torch.py",
                      PPO_PATH]
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture(scope="module")
def ppo():
    return load_ppo_example("ppo_example_device")


@pytest.fixture(autouse=True)
def _restore_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def meta_default():
    """Tensors made without device= land on the meta device for the test's duration."""
    torch.set_default_device("meta")
    try:
        yield
    finally:
        torch.set_default_device(None)


# ----------------------------------------------------------------------------- source check
# torch.<name>(...) calls that make a tensor (or a generator) on a device; *_like calls take
# their input's device and from_numpy is always on the CPU, so neither is listed.
TENSOR_FACTORIES = {"zeros", "ones", "empty", "full", "arange", "range", "linspace", "logspace", "eye", "rand",
                    "randn", "randint", "randperm", "normal", "tensor", "as_tensor", "scalar_tensor",
                    "empty_strided", "Generator"}
MODULE_FACTORIES = {"Linear", "Conv1d", "Conv2d", "Embedding", "LayerNorm", "Bilinear"}  # nn.X(..., device=)


def _call_name(func: ast.expr) -> str | None:
    """'torch.zeros', 'nn.Linear', 'torch.nn.Linear' for such calls, else None."""
    parts = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if not isinstance(func, ast.Name):
        return None
    parts.append(func.id)
    return ".".join(reversed(parts))


def _kwargs_dict_has_device(name: str, scope: ast.AST) -> bool:
    """Whether `name = dict(..., device=...)` (or a dict literal with a "device" key) is in scope."""
    for node in ast.walk(scope):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            value = node.value
            if isinstance(value, ast.Call) and _call_name(value.func) == "dict":
                if any(k.arg == "device" for k in value.keywords):
                    return True
            if isinstance(value, ast.Dict):
                if any(isinstance(k, ast.Constant) and k.value == "device" for k in value.keys):
                    return True
    return False


def calls_without_device(source: str, filename: str = "<source>") -> list[str]:
    """Every tensor or module factory call in `source` that does not name its device."""
    tree = ast.parse(source, filename)
    scopes: dict[ast.AST, ast.AST] = {}  # call -> enclosing function (or the module)

    def visit(node: ast.AST, scope: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            scopes[child] = scope
            visit(child, child if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else scope)

    visit(tree, tree)
    bad = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _call_name(node.func)
        if name is None:
            continue
        head, _, last = name.rpartition(".")
        is_factory = (head == "torch" and last in TENSOR_FACTORIES) or (
            head in ("nn", "torch.nn") and last in MODULE_FACTORIES)
        if not is_factory:
            continue
        if any(k.arg == "device" for k in node.keywords):
            continue
        splats = [k.value for k in node.keywords if k.arg is None]
        if any(isinstance(s, ast.Name) and _kwargs_dict_has_device(s.id, scopes[node]) for s in splats):
            continue
        bad.append(f"{filename}:{node.lineno}: {name}(...) without device=")
    return bad


def test_source_check_finds_a_missing_device():
    """The check itself: it flags what it should and passes what it should."""
    source = """
import torch
import torch.nn as nn
def f(d):
    kw = dict(device=d, dtype=torch.float32)
    a = torch.zeros(3, device=d)
    b = torch.zeros(3, **kw)
    c = torch.empty_like(a)
    g = torch.Generator(device=d)
    x = torch.zeros(3)
    y = torch.tensor(1.0, dtype=torch.float64)
    z = nn.Linear(2, 3)
    return torch.randperm(4, generator=g)
"""
    bad = calls_without_device(source)
    assert [b.split(": ", 1)[1] for b in bad] == ["torch.zeros(...) without device=",
                                                 "torch.tensor(...) without device=",
                                                 "nn.Linear(...) without device=",
                                                 "torch.randperm(...) without device="]


@pytest.mark.parametrize("path", TORCH_PATH_SOURCES, ids=lambda p: p.name)
def test_every_tensor_factory_names_its_device(path):
    bad = calls_without_device(path.read_text(), str(path.relative_to(ROOT)))
    assert bad == [], "\n".join(bad)


# ----------------------------------------------------------------------------- resolve_device
def test_resolve_device_fills_in_the_current_cuda_index(monkeypatch):
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("meta") == torch.device("meta")
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    assert resolve_device(torch.device("cuda", 0)) == torch.device("cuda", 0)
    # A CUDA torch: "cuda" becomes "cuda:<current device>", which is what tensors report.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 2)
    assert resolve_device("cuda") == torch.device("cuda", 2)
    assert resolve_device("cuda") != torch.device("cuda")  # why it matters: the bare name never matches
    # Without CUDA the name is left as it is (TorchCartPole then fails where torch does).
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("cuda") == torch.device("cuda")


# ----------------------------------------------------------------------------- spies
class HostReadSpy(TorchFunctionMode):
    """Records Tensor methods that copy device data to the host (a sync on a GPU)."""

    HOST_READS = {"tolist", "cpu", "numpy", "item", "__bool__", "__float__", "__int__", "__index__",
                  "__array__", "pin_memory"}

    def __init__(self):
        super().__init__()
        self.reads: list[str] = []
        self.copies: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", str(func))
        if name in self.HOST_READS:
            self.reads.append(name)
        if name == "to":
            self.copies.append(name)
        return func(*args, **(kwargs or {}))


class OpSpy(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


# ----------------------------------------------------------------------------- TorchCartPole
@pytest.mark.parametrize("exact", [True, False], ids=["exact", "fast"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cartpole_makes_nothing_on_the_default_device(meta_default, dtype, exact):
    n = 16
    env = TorchCartPole(n, device="cpu", dtype=dtype, seed=0, exact=exact, copy=False)
    obs, _ = env.reset(seed=1)
    gen = torch.Generator(device="cpu").manual_seed(0)
    for i in range(60):
        actions = torch.randint(0, 2, (n,), generator=gen, device="cpu", dtype=torch.int32 if i % 2 else torch.int64)
        obs, reward, terminated, truncated, info = env.step(actions)
    env.step(np.ones(n, dtype=np.int64))
    env.reset(options={"reset_mask": torch.arange(n, device="cpu") % 2 == 0})
    env.state = np.zeros((n, 4))
    for tensor in (obs, reward, terminated, truncated, info["final_obs"], info["_final_obs"], env.state,
                   env.elapsed_steps):
        assert tensor.device.type == "cpu"
    copied = TorchCartPole(n, device="cpu", seed=0, exact=exact, copy=True)
    copied.reset(seed=0)
    out = copied.step(torch.zeros(n, dtype=torch.int64, device="cpu"))
    assert all(t.device.type == "cpu" for t in out[:4])


@pytest.mark.parametrize("exact", [True, False], ids=["exact", "fast"])
@pytest.mark.parametrize("copy", [False, True], ids=["views", "copies"])
def test_cartpole_step_reads_nothing_on_the_host(exact, copy):
    env = TorchCartPole(32, seed=0, exact=exact, copy=copy)
    env.reset(seed=0)
    actions = torch.randint(0, 2, (32,))
    env.step(actions)
    with HostReadSpy() as spy:
        for _ in range(30):
            env.step(actions)
    assert spy.reads == []
    assert spy.copies == []  # actions already on the env's device: no .to()


def test_cartpole_step_ops_do_not_depend_on_the_action_dtype():
    """1 in each common integer dtype is made in __init__, never in step() (a host copy on a GPU)."""
    for dtype in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        env = TorchCartPole(8, seed=0)
        env.reset()
        with OpSpy() as spy:
            env.step(torch.ones(8, dtype=dtype))
        assert not [op for op in spy.ops if "lift_fresh" in op or "scalar_tensor" in op or "_to_copy" in op], dtype


# ----------------------------------------------------------------------------- examples/ppo.py
def _ppo_argv(*extra: str, n: int = 16, t: int = 8, iterations: int = 2) -> list[str]:
    return ["--num-envs", str(n), "--num-steps", str(t), "--total-timesteps", str(n * t * iterations),
            "--quiet", "--no-save", *extra]


@pytest.mark.parametrize("extra", [(), ("--exact-env",), ("--backend", "native")], ids=["torch", "torch-exact", "native"])
def test_ppo_makes_nothing_on_the_default_device(ppo, meta_default, extra):
    summary = ppo.main(ppo.parse_args(_ppo_argv(*extra)))
    assert summary["iterations"] == 2


def test_ppo_reads_the_device_once_per_iteration(ppo):
    """Host reads (tolist, cpu, numpy, item, bool(), ...) on the torch backend: exactly one per
    iteration (the finished episodes' returns), whatever the number of steps per rollout."""
    counts = {}
    for t in (4, 16):
        with HostReadSpy() as spy:
            summary = ppo.main(ppo.parse_args(_ppo_argv(t=t, iterations=3)))
        counts[t] = spy.reads
        # 3 iterations and the warm-up iteration.
        assert summary["iterations"] == 3
    assert counts[4] == counts[16] == ["tolist"] * 4


# ----------------------------------------------------------------------------- --cuda-graphs, emulated on the CPU
class _RecordedGraph:
    """A stand-in for torch.cuda.CUDAGraph on the CPU with a CUDA graph's semantics.

    Inside ``with torch.cuda.graph(g)`` every aten op is recorded with its tensors (by
    reference: fixed addresses, as a graph's memory pool). ``replay()`` runs the recorded ops
    again, and nothing of the Python that issued them; an op's fresh outputs are copied into
    the tensors it made at capture time, which later ops read. Ops that read the device on
    the host or copy from the host, which a real capture refuses, raise here too.
    """

    REFUSED = ("_local_scalar_dense", "nonzero", "masked_select", "lift_fresh", "_to_copy", "is_nonzero", "unique")

    def __init__(self):
        self.ops: list = []
        self.generators: list = []
        self.replays = 0

    def register_generator_state(self, generator):
        self.generators.append(generator)

    def replay(self):
        from torch.utils._pytree import tree_leaves

        self.replays += 1
        with torch.no_grad():  # a graph replays kernels: no autograd
            for func, args, kwargs, outputs in self.ops:
                fresh = func(*args, **kwargs)
                for old, new in zip(tree_leaves(outputs), tree_leaves(fresh)):
                    if isinstance(old, torch.Tensor) and old is not new and old.data_ptr() != new.data_ptr():
                        old.copy_(new)


class _Recorder(TorchDispatchMode):
    def __init__(self, graph: _RecordedGraph):
        super().__init__()
        self.graph = graph

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if any(name in str(func) for name in _RecordedGraph.REFUSED):
            raise AssertionError(f"{func} inside a CUDA graph capture")
        out = func(*args, **kwargs)
        self.graph.ops.append((func, args, kwargs, out))
        return out


@pytest.fixture
def emulated_cuda_graphs(monkeypatch):
    """torch.cuda's graph API (and the streams around it) emulated on the CPU."""
    import contextlib

    class Stream:
        def __init__(self, *args, **kwargs):
            pass

        def wait_stream(self, other):
            pass

    @contextlib.contextmanager
    def graph(cuda_graph, *args, **kwargs):
        with _Recorder(cuda_graph):
            yield

    graphs = []

    def make_graph():
        graphs.append(_RecordedGraph())
        return graphs[-1]

    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a, **k: Stream())
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", make_graph)
    monkeypatch.setattr(torch.cuda, "graph", graph)
    return graphs


def _eager_and_graphed(ppo, make_args, iterations: int):
    """Run `iterations` iterations eagerly and with --cuda-graphs (after the warm-up); for each:
    (the finished episodes' returns per iteration, the weights, the envs' state), on the CPU."""
    results = []
    for graphs in (False, True):
        run = ppo.PPO(make_args(graphs))
        run.warm_up(1)
        returns = []
        for _ in range(iterations):
            run.iteration()
            returns.append(run.finished_returns())
        results.append((returns, [p.detach().cpu() for p in run.params], run.envs.state.cpu()))
    return results


def test_cuda_graph_path_replays_what_eager_computes(ppo, emulated_cuda_graphs, monkeypatch):
    """The --cuda-graphs code path, with capture emulated on the CPU: the replayed rollout and
    update epochs give exactly the eager run's episodes and weights. This checks that nothing
    the captured bodies need is decided in Python per iteration (a replay re-runs none of it),
    that the generators are registered, and that warm-up and capture are undone."""
    monkeypatch.setattr(ppo, "check_args", lambda args: None)  # --cuda-graphs is refused on the CPU
    make_args = lambda graphs: ppo.Args(num_envs=32, num_steps=8, num_minibatches=2, cuda_graphs=graphs,  # noqa: E731
                                        quiet=True, save=False)
    eager, graphed = _eager_and_graphed(ppo, make_args, iterations=4)
    collect_graph, epoch_graph = emulated_cuda_graphs
    assert collect_graph.replays == 4 and epoch_graph.replays == 4 * ppo.Args.update_epochs
    assert len(collect_graph.generators) == 2 and epoch_graph.generators == []
    (eager_returns, eager_params, eager_state), (graph_returns, graph_params, graph_state) = eager, graphed
    assert sum(map(len, eager_returns)) > 0
    assert graph_returns == eager_returns
    assert torch.equal(graph_state, eager_state)
    for a, b in zip(graph_params, eager_params):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)  # the graph path has lr as a float32 tensor


# ----------------------------------------------------------------------------- CUDA (skipped without a GPU)
@needs_cuda
def test_cuda_device_is_resolved_and_actions_are_not_copied():
    env = TorchCartPole(64, device="cuda", seed=0, copy=False)
    assert env.device == torch.device("cuda", torch.cuda.current_device())
    env.reset(seed=0)
    actions = torch.randint(0, 2, (64,), device="cuda")  # made on the bare name, reports cuda:N
    assert actions.device == env.device
    env.step(actions)
    with OpSpy() as spy, HostReadSpy() as host:
        env.step(actions)
    assert not [op for op in spy.ops if "_to_copy" in op]
    assert host.reads == [] and host.copies == []


@needs_cuda
@pytest.mark.parametrize("exact", [True, False], ids=["exact", "fast"])
def test_cuda_step_equals_cpu_step(exact):
    """From the same states with the same actions, a CUDA step equals the CPU step (float32)."""
    torch.set_num_threads(1)  # see _one_torch_thread in test_torch_cartpole.py
    rng = np.random.default_rng(0)
    n = 4096
    state = np.stack([rng.uniform(-2.4, 2.4, n), rng.uniform(-3, 3, n), rng.uniform(-0.21, 0.21, n),
                      rng.uniform(-3, 3, n)], axis=1).astype(np.float32)
    envs = {d: TorchCartPole(n, device=d, seed=0, exact=exact) for d in ("cpu", "cuda")}
    for env in envs.values():
        env.reset(seed=0)
    for step in range(20):
        actions = rng.integers(0, 2, n)
        out = {}
        for d, env in envs.items():
            env.state = torch.from_numpy(state)
            out[d] = env.step(torch.from_numpy(actions).to(d))
        cpu, cuda = out["cpu"], out["cuda"]
        final_cpu, final_cuda = cpu[4]["final_obs"], cuda[4]["final_obs"].cpu()
        torch.testing.assert_close(final_cuda, final_cpu, rtol=1e-5, atol=1e-6)
        # Termination agrees except within float32 rounding of a threshold.
        f = final_cpu.double().numpy()
        near = (np.abs(np.abs(f[:, 0]) - 2.4) < 1e-5) | (np.abs(np.abs(f[:, 2]) - 0.2094395) < 1e-5)
        np.testing.assert_array_equal(cuda[2].cpu().numpy()[~near], cpu[2].numpy()[~near])
        assert torch.equal(cuda[1].cpu(), cpu[1]) and torch.equal(cuda[3].cpu(), cpu[3])
        state = final_cpu.numpy()  # continue from the CPU's states (autoreset draws differ by device)
        state[np.abs(state[:, 0]) > 2.4] = 0.0
        state[np.abs(state[:, 2]) > 0.2] = 0.0


@needs_cuda
@pytest.mark.parametrize("exact", [True, False], ids=["exact", "fast"])
@pytest.mark.parametrize("copy", [False, True], ids=["views", "copies"])
def test_cuda_100_steps_without_a_host_sync(exact, copy):
    env = TorchCartPole(1024, device="cuda", seed=0, exact=exact, copy=copy)
    env.reset(seed=0)
    actions = torch.randint(0, 2, (1024,), device="cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(100):
            env.step(actions)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert int(env.elapsed_steps.max()) <= 500


def test_host_sync_leaves_the_sync_debug_mode_alone_when_it_is_off(ppo, monkeypatch):
    """Without --sync-debug, a CUDA run never sets the mode (torch warns each time it is set)."""
    modes = {"now": 0}
    monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", lambda: modes["now"])
    set_to = []
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", lambda mode: set_to.append(mode))
    with ppo.allow_host_sync(torch.device("cuda", 0)):
        pass
    assert set_to == []
    modes["now"] = 2  # "error", as --sync-debug sets it: lifted for the sync, then restored
    with ppo.allow_host_sync(torch.device("cuda", 0)):
        pass
    assert set_to == [0, 2]


@needs_cuda
@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "cuda-graphs"])
def test_cuda_rollout_and_update_without_a_host_sync(ppo, graphs):
    """One rollout plus update under set_sync_debug_mode("error"); only finished_returns() syncs."""
    args = ppo.parse_args(_ppo_argv("--device", "cuda", *(["--cuda-graphs"] if graphs else []), n=256, t=16))
    run = ppo.PPO(args)
    run.warm_up(1)
    torch.cuda.set_sync_debug_mode("error")
    try:
        run.iteration()
        returns = run.finished_returns()  # the documented sync lifts the mode for itself
        run.iteration()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert isinstance(returns, list)


@needs_cuda
def test_cuda_graphs_equal_eager(ppo):
    """The replayed graphs compute what the eager code does: the same episodes (the generators
    advance identically) and the same weights to float rounding, over two iterations."""
    make_args = lambda graphs: ppo.parse_args(  # noqa: E731
        _ppo_argv("--device", "cuda", *(["--cuda-graphs"] if graphs else []), n=256, t=16))
    (eager_returns, eager_params, eager_state), (graph_returns, graph_params, graph_state) = _eager_and_graphed(
        ppo, make_args, iterations=2)
    assert graph_returns == eager_returns
    torch.testing.assert_close(graph_state, eager_state, rtol=1e-5, atol=1e-6)
    for a, b in zip(graph_params, eager_params):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    # And main() runs with --cuda-graphs end to end.
    summary = ppo.main(ppo.parse_args(_ppo_argv("--device", "cuda", "--cuda-graphs", n=256, t=16, iterations=3)))
    assert summary["cuda_graphs"] is True and summary["iterations"] == 3


@needs_cuda
def test_cuda_cpu_backend_pins_its_host_storage(ppo):
    run = ppo.PPO(ppo.parse_args(_ppo_argv("--device", "cuda", "--backend", "native")))
    assert run.all_obs.is_pinned() and run.rewards.is_pinned() and run.actions_host.is_pinned()
    assert run.agent.critic[0].weight.device == run.device


@needs_cuda
@pytest.mark.parametrize("extra", [(), ("--cuda-graphs",)], ids=["eager", "cuda-graphs"])
def test_cuda_ppo_script_two_iterations(tmp_path, extra):
    out = subprocess.run([sys.executable, str(PPO_PATH), "--device", "cuda", "--sync-debug",
                          *_ppo_argv(*extra, n=1024, t=16)], capture_output=True, text=True, timeout=600,
                         cwd=tmp_path, env=dict(os.environ, PYTHONPATH=package_root()))
    assert out.returncode == 0, out.stderr


@needs_cuda
def test_cuda_ppo_script_warns_nothing_without_sync_debug(tmp_path):
    out = subprocess.run([sys.executable, str(PPO_PATH), "--device", "cuda",
                          *_ppo_argv(n=1024, t=16)], capture_output=True, text=True, timeout=600,
                         cwd=tmp_path, env=dict(os.environ, PYTHONPATH=package_root()))
    assert out.returncode == 0, out.stderr
    assert "Warning" not in out.stderr, out.stderr
