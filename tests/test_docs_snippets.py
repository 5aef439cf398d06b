"""Every code block a user would copy runs: the ```python blocks of README.md and docs/*.md,
and the scripts in examples/ (``--help`` and a tiny run of each).

The convention for the pages (a mark is an HTML comment on the line right before a block's
opening fence; GitHub does not show it):

- A ```python block is a script: it runs alone, saved as a file (``python snippet.py``, so
  that a missing ``if __name__ == "__main__":`` guard fails here as it fails a user), in a
  fresh process, from an empty temporary directory, within ``BLOCK_TIMEOUT_S``. It imports
  what it uses.
- ``<!-- snippet: continue -->``: the block goes on from the page's last block before it that
  runs (skipped ones are passed over): it uses its names, so they (two or more) run as one
  file, in page order; the test is named after the first block's line.
- ``<!-- snippet: skip (reason) -->``: not run, the reason says why (a CUDA GPU, a cluster,
  a long training, a fragment of a bigger program). It is still compiled, and what it
  imports is imported, in a fresh process, and the names it imports looked up: a renamed
  module or function fails the test. fastvec's modules must import; a third-party module
  that does not import here (RLlib outside its own venv) is listed in the skip's message.
  The test then reports the block as skipped, with its reason.
- A ```python block whose first line starts with ``>>>`` is a doctest session: run by
  ``python -m doctest`` (ELLIPSIS, NORMALIZE_WHITESPACE) in a fresh process.
- Anything not meant to run (output, shell commands, C, Cython, file trees) takes another
  info string: ```text, ```bash, ```console, ```c, or a bare ```. Those are not collected.

A runnable block that imports a module that is not installed (an extra left out) is skipped
with the module's name; CI's test venv has every extra, so there they all run. The
subprocesses get ``RAY_ADDRESS=local``: a ``ray.init()`` starts a Ray of its own rather than
joining one that another test left running on the machine.
"""
from __future__ import annotations

import ast
import importlib.util
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
EXAMPLES = ROOT / "examples"
BLOCK_TIMEOUT_S = 120
MARK = re.compile(r"^\s*<!--\s*snippet:\s*(?P<kind>[\w-]+)\s*(?:\((?P<reason>.*)\))?\s*-->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
MARK_KINDS = ("skip", "continue")


@dataclass
class Block:
    page: str  # relative to the repository root
    line: int  # the opening fence's line, 1-based
    code: str
    mark: str | None = None
    reason: str | None = None


@dataclass
class Snippet:
    """One test: a block, or a block and its continuations."""

    blocks: list[Block] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.blocks[0].page}:{self.blocks[0].line}"

    @property
    def doctest(self) -> bool:
        return self.blocks[0].code.lstrip().startswith(">>>")

    @property
    def skip_reason(self) -> str | None:
        return next((b.reason or "no reason given" for b in self.blocks if b.mark == "skip"), None)

    def script(self) -> str:
        parts = [f"# {b.page}, the block at line {b.line}\n{b.code}" for b in self.blocks]
        return "\n".join(parts)


def python_blocks(path: Path) -> tuple[list[Block], list[str]]:
    """The page's ```python blocks, with the mark right before each; and the problems found
    (a mark of an unknown kind, a skip without a reason, a mark before no python block)."""
    page = str(path.relative_to(ROOT))
    lines = path.read_text().splitlines()
    blocks, problems = [], []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            mark = MARK.match(lines[i])
            if mark:
                following = lines[i + 1] if i + 1 < len(lines) else ""
                f = FENCE.match(following)
                if not f or f["info"].strip().split()[:1] not in (["python"], ["py"]):
                    problems.append(f"{page}:{i + 1}: a snippet mark not right before a ```python block")
            i += 1
            continue
        fence, info = m["fence"], m["info"].strip()
        start = i
        i += 1
        body = []
        while i < len(lines) and not re.match(rf"^\s*{re.escape(fence[0])}{{{len(fence)},}}\s*$", lines[i]):
            body.append(lines[i])
            i += 1
        i += 1  # the closing fence
        if info.split()[:1] not in (["python"], ["py"]):
            continue
        block = Block(page, start + 1, textwrap.dedent("\n".join(body)) + "\n")
        mark = MARK.match(lines[start - 1]) if start > 0 else None
        if mark:
            block.mark, block.reason = mark["kind"], mark["reason"]
            if block.mark not in MARK_KINDS:
                problems.append(f"{page}:{start}: unknown snippet mark {block.mark!r} (known: {MARK_KINDS})")
            if block.mark == "skip" and not (block.reason or "").strip():
                problems.append(f"{page}:{start}: a skip needs its reason: <!-- snippet: skip (why) -->")
        blocks.append(block)
    return blocks, problems


def collect() -> tuple[list[Snippet], list[str]]:
    snippets, problems = [], []
    for path in PAGES:
        blocks, page_problems = python_blocks(path)
        problems += page_problems
        for block in blocks:
            if block.mark == "continue":
                runs = [s for s in snippets if s.blocks[0].page == block.page and s.skip_reason is None]
                if not runs:
                    problems.append(f"{block.page}:{block.line}: 'continue' with no block that runs before it")
                    continue
                runs[-1].blocks.append(block)
            else:
                snippets.append(Snippet([block]))
    for snippet in snippets:
        if snippet.doctest and len(snippet.blocks) > 1:
            problems.append(f"{snippet.id}: a doctest session cannot be continued")
    return snippets, problems


SNIPPETS, PROBLEMS = collect()


def _imports(code: str) -> list[tuple[str, list[str]]]:
    """(module, names imported from it) for every import statement of ``code``, nested ones too."""
    found = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module, [alias.name for alias in node.names if alias.name != "*"]))
    return found


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(RAY_ADDRESS="local", RAY_USAGE_STATS_ENABLED="0", MPLBACKEND="Agg", SDL_VIDEODRIVER="dummy",
               PYTHONUNBUFFERED="1")
    env.pop("PYTHONPATH", None)  # the installed fastvec, not the tests' helpers
    return env


def run_python(args: list[str], cwd: Path, timeout: float = BLOCK_TIMEOUT_S) -> tuple[int | None, str, float]:
    """Run ``python *args`` in its own session from ``cwd``: (exit code or None on timeout,
    stdout and stderr together, seconds). Whatever it leaves running is killed."""
    out_path = cwd / "output.txt"
    start = time.monotonic()
    with open(out_path, "wb") as out:  # a file, not a pipe: a left-over child cannot hold the read open
        proc = subprocess.Popen([sys.executable, *args], cwd=cwd, env=_env(), stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the process, or what it left in its session
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
    return code, out_path.read_text(errors="replace"), time.monotonic() - start


def _fail_message(what: str, code: int | None, output: str, seconds: float, script: str | None = None) -> str:
    result = f"timed out after {seconds:.0f} s" if code is None else f"exited with {code} after {seconds:.1f} s"
    text = f"{what} {result}\n--- output (last 6000 characters) ---\n{output[-6000:]}"
    if script is not None:
        numbered = "\n".join(f"{n:4d}  {line}" for n, line in enumerate(script.splitlines(), 1))
        text += f"\n--- the script ---\n{numbered}"
    return text


def _missing_modules(code: str, top_level_only: bool = False) -> list[str]:
    """The top packages of what ``code`` imports (at its top level only, if asked) that are
    not installed."""
    missing = []
    imports = _imports(code)
    if top_level_only:
        imports = [item for node in ast.parse(code).body for item in _imports(ast.unparse(node))
                   if isinstance(node, (ast.Import, ast.ImportFrom))]
    for module, _ in imports:
        top = module.split(".")[0]
        if importlib.util.find_spec(top) is None and top not in missing:
            missing.append(top)
    return missing


CHECK_IMPORTS = """
import importlib, sys
unavailable = []
for module, names in {imports!r}:
    try:
        m = importlib.import_module(module)
    except ImportError as exc:
        if module.split(".")[0] == "fastvec":
            raise
        unavailable.append(f"{{module}} ({{type(exc).__name__}}: {{exc}})")
        continue
    for name in names:
        if not hasattr(m, name):
            try:
                importlib.import_module(module + "." + name)
            except ImportError:
                raise ImportError(f"cannot import name {{name!r}} from {{module!r}}") from None
print("UNAVAILABLE:", "; ".join(unavailable))
"""


def test_marks_are_well_formed():
    assert not PROBLEMS, "\n".join(PROBLEMS)
    assert len(SNIPPETS) > 20  # the collection found the pages' blocks


@pytest.mark.parametrize("snippet", SNIPPETS, ids=[s.id for s in SNIPPETS])
def test_snippet(snippet: Snippet, tmp_path: Path):
    script = snippet.script()
    for block in snippet.blocks:  # every block at least compiles
        if not snippet.doctest:
            compile(block.code, f"{block.page}:{block.line}", "exec")
    reason = snippet.skip_reason
    if reason is not None:
        imports = _imports(script)
        (tmp_path / "check_imports.py").write_text(CHECK_IMPORTS.format(imports=imports))
        code, output, seconds = run_python(["check_imports.py"], tmp_path)
        assert code == 0, _fail_message(f"importing what {snippet.id} imports", code, output, seconds, script)
        unavailable = output.rsplit("UNAVAILABLE:", 1)[-1].strip()
        pytest.skip(f"{reason} (compiled; {len(imports)} imports checked"
                    + (f"; not importable here: {unavailable})" if unavailable else ")"))
    if snippet.doctest:
        (tmp_path / "snippet.txt").write_text(snippet.blocks[0].code)
        args = ["-m", "doctest", "-o", "ELLIPSIS", "-o", "NORMALIZE_WHITESPACE", "snippet.txt"]
    else:
        missing = _missing_modules(script)
        if missing:
            pytest.skip(f"needs {', '.join(missing)} (not installed)")
        (tmp_path / "snippet.py").write_text(script)
        args = ["snippet.py"]
    code, output, seconds = run_python(args, tmp_path)
    assert code == 0, _fail_message(snippet.id, code, output, seconds, script)


# -- examples/ ---------------------------------------------------------------------------------
# script: (the arguments of a run of a few seconds, the modules it needs). None: --help only.
EXAMPLE_RUNS = {
    "ppo.py": (["--total-timesteps", "2048", "--num-envs", "32", "--num-steps", "16", "--warmup-iterations", "0",
                "--quiet"], ["torch"]),
    "cleanrl_ppo.py": (["--total-timesteps", "512", "--num-envs", "4", "--num-steps", "64", "--log-every", "1"],
                       ["torch"]),
    "cleanrl_ppo_atari.py": (["--total-timesteps", "128", "--num-envs", "2", "--num-steps", "32", "--log-every", "1"],
                             ["torch", "ale_py", "stable_baselines3", "cv2"]),
    "cleanrl_ppo_continuous.py": (["--total-timesteps", "512", "--num-envs", "2", "--num-steps", "64",
                                   "--num-minibatches", "4", "--log-every", "1"], ["torch", "mujoco"]),
    "sb3_ppo.py": (["--budget", "512"], ["torch", "stable_baselines3"]),
    "ppo_multiagent.py": (["--num-envs", "2", "--num-steps", "32", "--total-timesteps", "512", "--max-cycles", "30",
                           "--log-every", "1"], ["torch", "pettingzoo"]),
    "survive_crashes.py": (["--num-envs", "4", "--steps", "60", "--every", "20"], ["mujoco"]),
}
SCRIPTS = sorted(p.name for p in EXAMPLES.glob("*.py"))


def test_every_example_is_listed():
    assert set(SCRIPTS) == set(EXAMPLE_RUNS), "add the new example's tiny run to EXAMPLE_RUNS (None: --help only)"


@pytest.mark.parametrize("script", SCRIPTS)
def test_example_help(script: str, tmp_path: Path):
    missing = _missing_modules((EXAMPLES / script).read_text(), top_level_only=True)
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (not installed)")
    code, output, seconds = run_python([str(EXAMPLES / script), "--help"], tmp_path, timeout=60)
    assert code == 0 and "usage:" in output, _fail_message(f"{script} --help", code, output, seconds)


@pytest.mark.parametrize("script", [s for s in SCRIPTS if EXAMPLE_RUNS.get(s)])
def test_example_tiny_run(script: str, tmp_path: Path):
    args, needs = EXAMPLE_RUNS[script]
    missing = [m for m in needs if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)}")
    code, output, seconds = run_python([str(EXAMPLES / script), *args], tmp_path)
    assert code == 0, _fail_message(f"{script} {' '.join(args)}", code, output, seconds)
