"""``python -m fastvec.monitor PID``: watch the FastVectorEnvs of a running process from outside.

Every FastVectorEnv made with ``stats=True`` (the default) keeps counters at the start of its
shared block (:mod:`fastvec.vector._block.stats`), and its process keeps the block's descriptor open.
This monitor finds those blocks in ``/proc/PID/fd`` (Linux; the same user's processes, as for
``ps`` or ``py-spy``), maps each read-only, and prints what two readings ``--interval`` seconds
apart say: env transitions per second, the trainer's share of the time, each worker's
utilisation, step-time percentiles, pipe traffic and restarts, each env's steps, resets and
restarts, and advice. It writes
nothing and holds no lock: the job runs on as if it were not there, and goes on when the
monitor stops. It follows the process's vector envs as they come and go (one closed, another
made: an evaluation env, a new run), and stops by itself when the process ends, or when it has
had no vector env for ``--grace`` seconds (default 5: the gap between closing one vector env
and making the next is shorter).

    python -m fastvec.monitor 12345                   # live, refreshed every second (rich: the
                                                      # `monitor` extra; else plain text)
    python -m fastvec.monitor 12345 --once --json     # one reading, as JSON, for scripts
    python -m fastvec.monitor 12345 --png view.png    # one reading drawn into a PNG

Example (this process's own vector env):
    >>> import os, gymnasium as gym, numpy as np
    >>> from fastvec import FastVectorEnv
    >>> from fastvec.monitor import attach
    >>> envs = FastVectorEnv([lambda: gym.make("CartPole-v1")] * 2, num_workers=1)
    >>> _ = envs.reset(seed=0)
    >>> _ = envs.step(np.zeros(2, dtype=np.int64))
    >>> [block] = attach(os.getpid())
    >>> block.snapshot()["caller"]["steps"]
    1
    >>> block.close(); envs.close()
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import mmap
import os
import sys
import time
from typing import Any, Sequence

import numpy as np

from fastvec.vector._block.shared_buffer import BLOCK_NAME_PREFIX
from fastvec.vector._block.stats import HEADER, MAGIC, VERSION, StatsRegion, summarize, words

__all__ = ["AttachedBlock", "attach", "job_runs", "readings", "render", "rich_view", "save_png", "main"]

_BLOCK_NAME = "/memfd:" + BLOCK_NAME_PREFIX  # (how Linux shows a memfd's name)


class AttachedBlock:
    """One FastVectorEnv's statistics region in another (or this) process, mapped read-only.

    Attributes:
        pid: the process that holds the vector env; fd: its descriptor of the block.
    """

    def __init__(self, pid: int, fd: int, region: StatsRegion, mapping: mmap.mmap):
        self.pid, self.fd = pid, fd
        self.key: tuple[int, int] | None = None  # (the block's device and inode: one per block)
        self._region, self._mapping = region, mapping

    @property
    def num_workers(self) -> int:
        return self._region.num_workers

    @property
    def num_envs(self) -> int:
        return self._region.num_envs

    def snapshot(self) -> dict[str, Any]:
        """Every counter now (see :meth:`fastvec.vector._block.stats.StatsRegion.snapshot`)."""
        return self._region.snapshot()

    @property
    def in_use(self) -> bool:
        """Whether the vector env still runs: closing it clears the block's magic word (and a
        process that ended leaves the block as it was, so ask :func:`job_runs` too)."""
        return self._region is not None and int(self._region.region[0]) == MAGIC

    def close(self) -> None:
        """Unmap the region (the job is not affected)."""
        self._region = None
        self._mapping.close()


def attach(pid: int, skip: Sequence[AttachedBlock] = ()) -> list[AttachedBlock]:
    """The statistics regions of every FastVectorEnv (with ``stats=True``) of process ``pid``
    (but the blocks ``skip`` already maps).

    Raises:
        ProcessLookupError: no process ``pid``.
        PermissionError: its descriptors cannot be read (another user's process).
        LookupError: it has no FastVectorEnv with statistics.
    """
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        raise ValueError(f"pid must be a positive int, got {pid!r}")
    fd_dir = f"/proc/{pid}/fd"
    if not os.path.isdir(f"/proc/{pid}"):
        raise ProcessLookupError(f"no process {pid} (or no /proc: the monitor needs Linux)")
    try:
        fds = os.listdir(fd_dir)
    except FileNotFoundError:  # (it ended meanwhile)
        raise ProcessLookupError(f"no process {pid}") from None
    except PermissionError:
        raise PermissionError(f"cannot read process {pid}'s file descriptors: the monitor attaches to "
                              "processes of the same user only") from None
    blocks = []
    # (a process may hold a block through several descriptors: Python's mmap keeps a dup)
    seen = {block.key for block in skip}
    for name in sorted(fds, key=int):
        path = f"{fd_dir}/{name}"
        try:
            if not os.readlink(path).startswith(_BLOCK_NAME):
                continue
            info = os.stat(path)
            if (info.st_dev, info.st_ino) in seen:
                continue
            block = _map(pid, int(name), path)
        except (OSError, ValueError):
            continue  # (closed meanwhile, or not a statistics region)
        if block is not None:
            block.key = (info.st_dev, info.st_ino)
            seen.add(block.key)
            blocks.append(block)
    if not blocks and not skip:
        raise LookupError(f"process {pid} has no FastVectorEnv with statistics (made with stats=True, the "
                          "default, and not closed)")
    return blocks


def job_runs(pid: int, blocks: Sequence[AttachedBlock]) -> bool:
    """Whether process ``pid`` still runs (not a zombie) and one of its ``blocks`` is in use."""
    return _process_runs(pid) and any(block.in_use for block in blocks)


def _process_runs(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _follow(pid: int, blocks: list[AttachedBlock]) -> list[AttachedBlock]:
    """``blocks`` without those whose vector env has closed (unmapped), with the blocks of
    vector envs ``pid`` has made since (an evaluation env, a new run)."""
    kept = []
    for block in blocks:
        if block.in_use:
            kept.append(block)
        else:
            block.close()
    try:
        return kept + attach(pid, skip=kept)
    except (ProcessLookupError, PermissionError, LookupError):
        return kept


def _map(pid: int, fd: int, path: str) -> AttachedBlock | None:
    with open(path, "rb") as file:
        header = np.frombuffer(os.pread(file.fileno(), 8 * HEADER, 0), dtype=np.uint64)
        if len(header) < HEADER or header[0] != MAGIC or header[1] != VERSION:
            return None
        size = 8 * words(int(header[2]), int(header[3]))
        mapping = mmap.mmap(file.fileno(), size, prot=mmap.PROT_READ)
    region = StatsRegion(np.frombuffer(mapping, dtype=np.uint64, count=size // 8))
    return AttachedBlock(pid, fd, region, mapping)


def readings(blocks: Sequence[AttachedBlock], interval: float) -> list[dict[str, Any]]:
    """Each block's :func:`fastvec.vector._block.stats.summarize` over ``interval`` seconds, with
    its ``totals`` since the vector env was made (vector steps, env steps, env resets,
    restarts, pipe messages and bytes)."""
    before = [(time.perf_counter(), block.snapshot()) for block in blocks]
    time.sleep(interval)
    out = []
    for block, (then, old) in zip(blocks, before):
        now = block.snapshot()
        summary = summarize(now, old, time.perf_counter() - then)
        totals = {"steps": now["caller"]["steps"], "env_steps": sum(now["env_steps"]),
                  "env_resets": sum(now["env_resets"]), "restarts": now["caller"]["restarts"],
                  "pipe_messages": sum(w["pipe_messages"] for w in now["workers"]),
                  "pipe_bytes": sum(w["pipe_bytes"] for w in now["workers"])}
        out.append({"pid": block.pid, "fd": block.fd, "num_workers": block.num_workers,
                    "num_envs": block.num_envs, "totals": totals, **summary})
    return out


def render(reading: dict[str, Any], width: int = 30) -> str:
    """A reading as text: the vector env's line, a bar per worker, the advice."""
    lines = [f"pid {reading['pid']} fd {reading['fd']}: {reading['num_envs']} envs, {reading['num_workers']} workers | "
             f"{reading['sps']:,.0f} env steps/s | {_split(reading)} | pipe {_pipe_rate(reading, reading)} | "
             f"{reading['totals']['restarts']} restarts"]
    for k, worker in enumerate(reading["workers"]):
        used = _busy(worker)
        bar = "#" * round(used * width) + "." * (width - round(used * width))
        p50, p99 = worker["step_us_p50"], worker["step_us_p99"]
        lines.append(f"  worker {k:>2} [{bar}] {100 * used:5.1f} % busy | {worker['envs']} envs | step p50 "
                     f"<{'-' if p50 is None else f'{p50:.0f}'} µs, p99 <{'-' if p99 is None else f'{p99:.0f}'} µs | "
                     f"pipe {_pipe_rate(reading, worker)} | {worker['restarts']} restarts")
    lines.extend(f"  ! {line}" for line in reading["advice"])
    return "\n".join(lines)


def rich_view(readings_now: Sequence[dict[str, Any]]):
    """The readings as a ``rich`` renderable (the live view; the ``monitor`` extra): per
    vector env a table of its workers (a utilisation bar each, step-time percentiles, env
    steps per second), its rates in the title and its advice underneath."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    parts = []
    for r in readings_now:
        table = Table(title=f"pid {r['pid']} · {r['num_envs']} envs · {r['num_workers']} workers · "
                            f"{r['sps']:,.0f} env steps/s · {_split(r)} · {r['totals']['restarts']} restarts",
                      title_justify="left", expand=False)
        for column, justify in (("worker", "right"), ("envs", "right"), ("busy", "left"), ("", "right"),
                                ("step p50", "right"), ("step p99", "right"), ("env steps/s", "right"),
                                ("pipe msg/s", "right"), ("pipe KiB/s", "right"), ("restarts", "right")):
            table.add_column(column, justify=justify)
        per_worker_steps = _env_steps_per_worker(r)
        for k, w in enumerate(r["workers"]):
            used = _busy(w)
            filled = round(used * 24)
            bar = Text("█" * filled, style="green" if used < 0.8 else "red") + Text("░" * (24 - filled), style="dim")
            p50, p99 = w["step_us_p50"], w["step_us_p99"]
            table.add_row(str(k), str(w["envs"]), bar, f"{100 * used:.0f} %",
                          "-" if p50 is None else f"<{p50:,.0f} µs", "-" if p99 is None else f"<{p99:,.0f} µs",
                          f"{per_worker_steps[k] / r['wall_s']:,.0f}", *_pipe_rates(r, w), str(w["restarts"]))
        parts.append(table)
        parts.extend(Text(f"! {line}", style="bold yellow") for line in r["advice"])
    return Group(*parts)


def _split(reading: dict[str, Any]) -> str:
    """Where the caller's time went: envs, hand-offs, trainer (see ``_stats.summarize``)."""
    if reading["trainer_share"] is None:
        return "no steps"
    return (f"envs {100 * reading['env_share']:.0f} % · hand-off {100 * reading['handoff_share']:.0f} % · "
            f"trainer {100 * reading['trainer_share']:.0f} %")


def _busy(worker: dict[str, Any]) -> float:
    """A worker's utilisation, within [0, 1] for its bar."""
    return min(max(worker["utilisation"], 0.0), 1.0)


def _pipe_rates(reading: dict[str, Any], counts: dict[str, Any]) -> tuple[str, str]:
    """``counts``' pipe messages and KiB in the reading's window, per second, formatted."""
    wall = reading["wall_s"]
    return f"{counts['pipe_messages'] / wall:,.0f}", f"{counts['pipe_bytes'] / wall / 1024:,.1f}"


def _pipe_rate(reading: dict[str, Any], counts: dict[str, Any]) -> str:
    """The same, as one phrase of the text view."""
    messages, kib = _pipe_rates(reading, counts)
    return f"{messages} msg/s, {kib} KiB/s"


def _env_steps_per_worker(reading: dict[str, Any]) -> list[int]:
    out, at = [], 0
    for w in reading["workers"]:
        out.append(sum(reading["env_steps"][at:at + w["envs"]]))
        at += w["envs"]
    return out


def save_png(readings_now: Sequence[dict[str, Any]], path: str, width: int = 124) -> None:
    """Draw the live view of ``readings_now`` into a PNG at ``path``, headless (``rich`` lays
    it out, Pillow draws its characters in their colours in DejaVu Sans Mono): for docs and
    bug reports."""
    from PIL import Image, ImageDraw, ImageFont
    from rich.console import Console

    console = Console(width=width, color_system="truecolor", file=io.StringIO())
    lines = [[(segment.text, segment.style) for segment in line if segment.text]
             for line in console.render_lines(rich_view(readings_now), console.options.update(width=width), pad=False)]
    try:
        font = ImageFont.truetype("DejaVuSansMono.ttf", 15)
    except OSError:
        font = ImageFont.load_default()
    cell_w, cell_h = font.getbbox("M")[2], 20
    image = Image.new("RGB", (cell_w * width + 24, cell_h * len(lines) + 24), (24, 24, 28))
    draw = ImageDraw.Draw(image)
    for row, line in enumerate(lines):
        x = 12
        for text, style in line:
            color = (220, 220, 220)
            if style is not None and style.color is not None:
                triplet = style.color.get_truecolor()
                color = (triplet.red, triplet.green, triplet.blue)
            if style is not None and style.dim:
                color = tuple(c // 2 for c in color)
            draw.text((x, 12 + row * cell_h), text, font=font, fill=color)
            x += cell_w * len(text)
    image.save(path)


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m fastvec.monitor", description=__doc__.split("\n\n")[0])
    parser.add_argument("pid", type=int, help="the process that runs the FastVectorEnvs")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between two readings (default 1)")
    parser.add_argument("--once", action="store_true", help="print one reading and exit")
    parser.add_argument("--json", action="store_true", help="print readings as JSON (one line each)")
    parser.add_argument("--plain", action="store_true", help="plain text, even where rich is installed")
    parser.add_argument("--png", metavar="PATH", help="draw one reading into a PNG image (needs rich and Pillow)")
    parser.add_argument("--grace", type=float, default=5.0,
                        help="seconds to wait for a new vector env once the process has none open, before "
                             "stopping (default 5)")
    args = parser.parse_args(argv)
    if args.interval <= 0:
        parser.error(f"--interval must be > 0, got {args.interval}")
    if args.grace < 0:
        parser.error(f"--grace must be >= 0, got {args.grace}")
    try:
        blocks = attach(args.pid)
    except (ProcessLookupError, PermissionError, LookupError, ValueError) as error:
        print(f"fastvec.monitor: {error}", file=sys.stderr)
        return 1
    try:
        if args.png:
            try:
                save_png(readings(blocks, args.interval), args.png)
            except ImportError as error:
                print(f"fastvec.monitor: --png needs rich and Pillow (pip install 'fastvec[monitor]'): {error}",
                      file=sys.stderr)
                return 1
            return 0
        live = None
        if not (args.json or args.once or args.plain):
            try:
                from rich.live import Live
            except ImportError:
                print("(pip install 'fastvec[monitor]' for the live view; plain text here)", file=sys.stderr)
            else:
                live = Live(refresh_per_second=4)
        none_open_since = None
        with live if live is not None else contextlib.nullcontext():
            while True:
                blocks = _follow(args.pid, blocks)
                live_blocks = [block for block in blocks if block.in_use]
                if not job_runs(args.pid, live_blocks):
                    # (A job that closes one vector env and makes the next, for an evaluation or a
                    # new run, has none open for a moment: only a longer gap means it has finished.)
                    now = time.monotonic()
                    none_open_since = now if none_open_since is None else none_open_since
                    if not _process_runs(args.pid) or now - none_open_since >= args.grace:
                        print(f"fastvec.monitor: process {args.pid} ended, or closed its vector envs",
                              file=sys.stderr)
                        return 0
                    time.sleep(min(args.interval, 0.1))
                    continue
                none_open_since = None
                current = readings(live_blocks, args.interval)
                if live is not None:
                    live.update(rich_view(current))
                elif args.json:
                    print(json.dumps(current), flush=True)  # (a list: one reading per vector env)
                else:
                    if not args.once:
                        print("\x1b[H\x1b[2J", end="")
                    print("\n".join(render(r) for r in current), flush=True)
                if args.once:
                    return 0
    except KeyboardInterrupt:
        return 0
    finally:
        for block in blocks:
            block.close()



if __name__ == "__main__":
    sys.exit(main())
