"""Both sides: infos as data: each env's info values in a row of shared memory, vectorized by the caller.

Real envs return an info dict on every step (MuJoCo: ``x_position``, ``reward_ctrl``, ...;
Atari: ``lives``, ``frame_number``; ``RecordEpisodeStatistics``: ``episode = {r, l, t}``).
Pickling those dicts through a pipe and merging them env by env with
``VectorEnv._add_info`` costs more than the env steps of a fast env such as a MuJoCo one
(docs/benchmarks.md, "Figures behind the code"). Here:

**Signatures.** What an env contributed to the infos in one command is described by a
signature: the keys of its info dict(s) in order and, per value, its kind (a Python
float/int/bool, a NumPy scalar of some dtype, an array of some dtype and shape, a nested
dict, or anything else). A signature is registered once per worker: the worker sends it
on its pipe the first time it appears and from then on writes only a small id
(``info_ids[env]``) and the values themselves into the env's row of ``info_rows``.
Values with no fixed numeric form (strings, lists, objects) and values that do not fit the
row still travel on the pipe, next to the id.

**Vectorizing.** The caller turns the ids and rows of a step into the vector infos. For
each combination of signatures (in the order envs first show them) it builds a plan once,
by running Gymnasium's ``VectorEnv._add_info`` rules over the signatures instead of the
values: which keys appear in which order, which array each gets (dtype and shape from the
first env that has the key, zeros or ``None`` elsewhere), which masks. Executing a plan
allocates the arrays and copies each env's values from its row with one ``memcpy`` per key
(:mod:`fastvec.vector._infos.kernels`). A value whose kind differs from the array's (a Python int
into a float array, say) is stored by NumPy's own item assignment, as ``_add_info`` does.
Anything the plan cannot express exactly (an info that is not a dict, a key that is a dict
in one env and a number in another, a value key that collides with a mask name) falls
back to rebuilding each env's info dicts and calling ``_add_info`` itself, so the result
always equals SyncVectorEnv's: keys, order, values, dtypes, masks and nesting.

In ``SAME_STEP`` mode an env that ended contributes two dicts, in SyncVectorEnv's order:
``{"final_obs": obs, "final_info": info}`` and its reset info.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from gymnasium.vector import VectorEnv

from fastvec.vector._infos import kernels as _kernel

__all__ = ["InfoWriter", "InfoAssembler", "InfoBatch", "row_bytes_for"]

# Value kinds (the first item of a kind tuple), as plain ints: stored in the row ...
FLOAT, INT, BOOL, NPSCALAR, NDARRAY = (int(_kernel.InfoKind.FLOAT), int(_kernel.InfoKind.INT),
                                       int(_kernel.InfoKind.BOOL), int(_kernel.InfoKind.NPSCALAR),
                                       int(_kernel.InfoKind.NDARRAY))
# ... or not: on the pipe, or a nested dict.
PIPE, DICT = int(_kernel.InfoKind.PIPE), int(_kernel.InfoKind.DICT)
#: The signature of "no info" (one empty dict): id 0 everywhere, never sent.
EMPTY: tuple = ((),)
#: The signature of an info that is not a dict: the whole value travels on the pipe.
NOT_A_DICT = "not a dict"

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_ALIGN = 8
_NUMERIC = "biufc"


def row_bytes_for(obs_fixed_bytes: int) -> int:
    """Bytes of each env's info row: room for a few dozen numbers and one observation
    (the ``final_obs`` of ``SAME_STEP`` mode), rounded up to a cache line."""
    return -(-(512 + obs_fixed_bytes) // 64) * 64


# ---------------------------------------------------------------------------------------
# Signatures (worker side: computed from values; both sides lay them out the same way)
# ---------------------------------------------------------------------------------------
# A value's kind: (FLOAT,), (INT,), (BOOL,), (NPSCALAR, dtype), (NDARRAY, dtype, shape),
# (PIPE, type, dtype or None, shape or None), or (DICT,) with the nested entries beside it.

def _kind(value) -> tuple:
    """The kind of one info value, as the signature records it."""
    t = type(value)
    if t is float:
        return (FLOAT,)
    if t is bool:
        return (BOOL,)
    if t is int:
        return (INT,) if _INT64_MIN <= value <= _INT64_MAX else (PIPE, int, None, None)
    if isinstance(value, np.ndarray):
        d = value.dtype
        if t is np.ndarray and d.kind in _NUMERIC and d.isnative and d.fields is None:
            return (NDARRAY, d, value.shape)
        return (PIPE, t, d, value.shape)  # (its dtype and shape decide the vector array)
    if isinstance(value, np.generic) and value.dtype.kind in _NUMERIC and value.dtype.isnative:
        return (NPSCALAR, value.dtype)
    return (PIPE, t, None, None)


def describe_dict(info: dict) -> tuple:
    """The signature of one info dict: ``((key, kind, children), ...)`` in key order."""
    entries = []
    for key, value in info.items():
        if key != "final_obs" and isinstance(value, dict):
            entries.append((key, (DICT,), describe_dict(value)))
        else:
            entries.append((key, _kind(value), None))
    return tuple(entries)


def describe(additions: Sequence) -> tuple | str:
    """The signature of what one env adds to the infos in one command (one or two dicts)."""
    if not all(isinstance(info, dict) for info in additions):
        return NOT_A_DICT
    return tuple(describe_dict(info) for info in additions)


def _stored_bytes(kind: tuple) -> int:
    code = kind[0]
    if code in (FLOAT, INT):
        return 8
    if code == BOOL:
        return 1
    if code == NPSCALAR:
        return kind[1].itemsize
    if code == NDARRAY:
        return int(np.prod(kind[2], dtype=np.int64)) * kind[1].itemsize
    return -1


def _as_piped(kind: tuple) -> tuple:
    """The PIPE kind of a value kind that did not fit in the row."""
    code = kind[0]
    if code == NDARRAY:
        return (PIPE, np.ndarray, kind[1], kind[2])
    if code == NPSCALAR:
        return (PIPE, kind[1].type, None, None)
    return (PIPE, {FLOAT: float, INT: int, BOOL: bool}[code], None, None)


class Template:
    """A signature laid out in an info row.

    ``nodes``: one tuple per dict (addition), each a tuple of nodes
    ``(key, kind, offset, nbytes, children)`` in key order: where each value stored in the
    row sits. A value that does not fit in ``row_bytes`` is given the PIPE kind instead.
    """

    __slots__ = ("signature", "nodes", "pipe_count", "generic")

    def __init__(self, signature, row_bytes: int):
        self.signature = signature
        self.generic = signature == NOT_A_DICT
        self.pipe_count = 0
        self.nodes: tuple = ()
        if self.generic:
            return
        offset = 0

        def lay(entries) -> tuple:
            nonlocal offset
            nodes = []
            for key, kind, children in entries:
                if kind[0] == DICT:
                    nodes.append((key, kind, 0, 0, lay(children)))
                    continue
                nbytes = _stored_bytes(kind)
                start = -(-offset // _ALIGN) * _ALIGN
                if nbytes >= 0 and start + nbytes <= row_bytes:
                    nodes.append((key, kind, start, nbytes, None))
                    offset = start + nbytes
                else:
                    nodes.append((key, kind if kind[0] == PIPE else _as_piped(kind), 0, 0, None))
                    self.pipe_count += 1
            return tuple(nodes)

        self.nodes = tuple(lay(entries) for entries in signature)


# ---------------------------------------------------------------------------------------
# Worker side
# ---------------------------------------------------------------------------------------

class InfoWriter:
    """Writes the infos of a worker's envs into their ids and rows (one per worker).

    The env loop first tries :attr:`kernel` (the same keys and kinds as the env's previous
    command: one call, no allocation) and calls :meth:`capture` when that fails.
    :meth:`take_message` returns what must go on the pipe with the command's result.

    Args:
        ids: the worker's rows of the ``info_ids`` slab.
        rows: the worker's rows of the ``info_rows`` slab.
    """

    def __init__(self, ids: np.ndarray, rows: np.ndarray):
        self.row_bytes = rows.shape[1]
        self.templates: list[Template] = [Template(EMPTY, self.row_bytes)]
        self._ids_of: dict = {EMPTY: 0}
        self._new: list = []
        self._piped: list = []
        self.kernel = _kernel.Writer(ids, rows, self)
        self.kernel.add_template((), 0, False)

    def capture(self, j: int, additions: tuple) -> None:
        """Store env ``j``'s info dicts for this command (registering a new signature)."""
        signature = describe(additions)
        sid = self._ids_of.get(signature)
        if sid is None:
            sid = self._ids_of[signature] = len(self.templates)
            template = Template(signature, self.row_bytes)
            self.templates.append(template)
            self.kernel.add_template(template.nodes, template.pipe_count, template.generic)
            self._new.append((sid, signature))
            self.kernel.has_message = True
        if self.templates[sid].generic:
            self.kernel.set_id(j, sid)
            self._piped.append((j, list(additions)))
            self.kernel.has_message = True
        elif not self.kernel.write(j, sid, additions):  # pragma: no cover - describe() and the kernel disagree
            raise AssertionError(f"info of env {j} does not match its own signature {signature!r}")

    def add_piped(self, j: int, values: list) -> None:
        """Values of env ``j``'s info that travel on the pipe (called by the kernel)."""
        self._piped.append((j, values))
        self.kernel.has_message = True

    def take_message(self) -> tuple | None:
        """(new signatures, piped values) for the pipe, or None when there are none."""
        if not self.kernel.has_message:
            return None
        message = (self._new, self._piped)
        self._new, self._piped = [], []
        self.kernel.has_message = False
        return message

    @property
    def has_message(self) -> bool:
        """Whether :meth:`take_message` has something to return (the kernel keeps the flag:
        the compiled step path reads it on every step)."""
        return self.kernel.has_message


# ---------------------------------------------------------------------------------------
# Caller side
# ---------------------------------------------------------------------------------------

class InfoAssembler:
    """Builds vector infos from the workers' info ids, rows and pipe messages.

    Args:
        ids: the ``info_ids`` slab (one uint32 per env).
        rows: the ``info_rows`` slab (``[num_envs, row_bytes]`` uint8).
        worker_of_env: the worker index of each env.
        first_env: the first env index of each worker.
    """

    def __init__(self, ids: np.ndarray, rows: np.ndarray, worker_of_env: np.ndarray, first_env: Sequence[int]):
        self.ids = ids
        self.rows = rows
        self.row_bytes = rows.shape[1]
        self.worker_of_env = np.ascontiguousarray(worker_of_env, dtype=np.int64)
        self.first_env = list(first_env)
        self.templates: list[Template] = [Template(EMPTY, self.row_bytes)]
        self._global_of: dict = {EMPTY: 0}
        # local signature id -> global id, per worker (row w); grown as signatures arrive
        self.table = np.zeros((len(first_env), 8), dtype=np.int64)
        self._plans: dict = {}
        self._piped: dict[int, list] = {}

    def receive(self, w: int, message: tuple) -> None:
        """Take worker ``w``'s (new signatures, piped values) of the current command."""
        new, piped = message
        for local, signature in new:
            gid = self._global_of.get(signature)
            if gid is None:
                gid = self._global_of[signature] = len(self.templates)
                self.templates.append(Template(signature, self.row_bytes))
            if local >= self.table.shape[1]:
                grown = np.zeros((self.table.shape[0], max(2 * self.table.shape[1], local + 1)), np.int64)
                grown[:, : self.table.shape[1]] = self.table
                self.table = grown
            self.table[w, local] = gid
        first = self.first_env[w]
        for j, values in piped:
            self._piped[first + j] = values

    def build(self, env_rows: np.ndarray, num_out: int) -> dict[str, Any]:
        """The vector infos of the envs ``env_rows`` (int64, one per output row)."""
        slots, order = _kernel.signature_slots(self.ids, self.worker_of_env, self.table, env_rows)
        piped = self._piped
        if piped:
            self._piped = {}
        if not order:
            return {}
        plan = self._plans.get(order)
        if plan is None:
            if len(self._plans) >= 4096:  # (each plan is small; this only bounds pathological runs)
                self._plans.clear()
            plan = self._plans[order] = _Plan([self.templates[g] for g in order])
        return plan.run(self, slots, env_rows, num_out, piped)


def _rebuild_dict(nodes, row: np.ndarray, values) -> dict:
    out = {}
    for key, kind, offset, nbytes, children in nodes:
        if kind[0] == DICT:
            out[key] = _rebuild_dict(children, row, values)
        else:
            out[key] = _rebuild_value(kind, offset, nbytes, row, values)
    return out


def _rebuild_value(kind: tuple, offset: int, nbytes: int, row: np.ndarray, values):
    """A value as the env returned it (type, dtype, shape), from its row or the pipe."""
    code = kind[0]
    if code == PIPE:
        return next(values)
    raw = row[offset: offset + nbytes]
    if code == FLOAT:
        return float(raw.view(np.float64)[0])
    if code == INT:
        return int(raw.view(np.int64)[0])
    if code == BOOL:
        return bool(raw[0])
    if code == NPSCALAR:
        return raw.view(kind[1])[0]
    return raw.view(kind[1]).reshape(kind[2]).copy()


def _target_of(key, kind: tuple) -> tuple:
    """(shape, dtype) of the array ``_add_info`` makes for a key's first value; dtype
    ``object`` for an object array (filled with None)."""
    code = kind[0]
    if key == "final_obs":
        return (), np.dtype(object)
    if code == FLOAT:
        return (), np.dtype(float)
    if code == INT:
        return (), np.dtype(int)
    if code == BOOL:
        return (), np.dtype(bool)
    if code == NPSCALAR:
        return ((), kind[1]) if issubclass(kind[1].type, np.number) else ((), np.dtype(object))
    if code == NDARRAY:
        return tuple(kind[2]), kind[1]
    t = kind[1]
    if t in (int, float, bool) or issubclass(t, np.number):
        return (), np.dtype(t)
    if issubclass(t, np.ndarray):
        return tuple(kind[3]), kind[2]
    return (), np.dtype(object)


def _stored_as(kind: tuple) -> tuple | None:
    """(shape, dtype) a value of this kind has in its row (None: it is piped)."""
    code = kind[0]
    if code == FLOAT:
        return (), np.dtype(np.float64)
    if code == INT:
        return (), np.dtype(np.int64)
    if code == BOOL:
        return (), np.dtype(np.bool_)
    if code == NPSCALAR:
        return (), kind[1]
    if code == NDARRAY:
        return tuple(kind[2]), kind[1]
    return None


class _Generic(Exception):
    """The plan cannot express this combination exactly: use ``_add_info`` itself."""


class _Plan:
    """How one combination of signatures (in the order envs first show them) becomes infos.

    ``targets``: the arrays to allocate, (shape after the batch axis, dtype). Per signature:
    ``fast`` copies (target, offset, nbytes) from the env's row, ``masks`` (targets set to
    True) and ``slow`` stores (target, node) done by NumPy item assignment.
    """

    def __init__(self, templates: list[Template]):
        self.templates = templates
        self.generic = any(t.generic for t in templates)
        self.targets: list[tuple] = []
        self.structure: dict = {}
        self.slow: list[list] = []
        self.kernel = None
        if self.generic:
            return
        fast_ops, mask_ops = [], []
        try:
            for template in templates:
                fast, masks, slow, seen = [], [], [], set()
                for nodes in template.nodes:
                    self._simulate(nodes, self.structure, fast, masks, slow, seen)
                fast_ops.append(np.array(fast, dtype=np.int64).reshape(-1, 3))
                mask_ops.append(np.array(masks, dtype=np.int64))
                self.slow.append(slow)
        except _Generic:
            self.generic = True
            return
        self.kernel = _kernel.Plan([(np.dtype(dtype), shape) for shape, dtype in self.targets], fast_ops, mask_ops)
        self.any_slow = any(self.slow)
        self.fill = _builder(self.structure)

    def _new_target(self, shape: tuple, dtype: np.dtype) -> int:
        self.targets.append((shape, dtype))
        return len(self.targets) - 1

    def _simulate(self, nodes, structure: dict, fast: list, masks: list, slow: list, seen: set) -> None:
        """Apply ``_add_info``'s rules to one dict's nodes, recording what a run must do."""
        for node in nodes:
            key, kind, offset, nbytes, children = node
            mask_name = f"_{key}"
            if (id(structure), key) in seen:
                raise _Generic  # one env writes a key twice (its two dicts share it)
            seen.add((id(structure), key))
            entry = structure.get(key)
            is_dict = key != "final_obs" and kind[0] == DICT
            if entry is None:
                if mask_name in structure:
                    raise _Generic  # a mask name that is also a value key
                if is_dict:
                    entry = ("dict", {}, self._new_target((), np.dtype(bool)))
                else:
                    entry = ("leaf", self._new_target(*_target_of(key, kind)), self._new_target((), np.dtype(bool)))
                structure[key] = entry
                structure[mask_name] = ("mask", entry[2])
            elif entry[0] != ("dict" if is_dict else "leaf") or structure.get(mask_name, (None, None))[1] != entry[2]:
                raise _Generic  # a dict in one env, a value in another; or a mask-name clash
            if is_dict:
                self._simulate(children, entry[1], fast, masks, slow, seen)
            else:
                target = entry[1]
                if _stored_as(kind) == self.targets[target] and self.targets[target][1] != object:
                    fast.append((target, offset, nbytes))
                else:
                    slow.append((target, node))
            masks.append(entry[2])

    def run(self, assembler: InfoAssembler, slots: np.ndarray, env_rows: np.ndarray, num_out: int,
            piped: dict) -> dict:
        if self.generic:
            return self._run_generic(assembler, slots, env_rows, num_out, piped)
        arrays = self.kernel.run(assembler.rows, slots, env_rows)
        if self.any_slow:
            rows = assembler.rows
            for k, (slot, env) in enumerate(zip(slots.tolist(), env_rows.tolist())):
                if slot < 0 or not self.slow[slot]:
                    continue
                values = iter(piped.get(env, ()))
                for target, (key, kind, offset, nbytes, _) in self.slow[slot]:
                    arrays[target][k] = _rebuild_value(kind, offset, nbytes, rows[env], values)
        return self.fill(arrays)

    def _run_generic(self, assembler: InfoAssembler, slots: np.ndarray, env_rows: np.ndarray, num_out: int,
                     piped: dict) -> dict:
        batch = InfoBatch(num_out)
        infos: dict = {}
        for k, (slot, env) in enumerate(zip(slots.tolist(), env_rows.tolist())):
            if slot < 0:
                continue
            template = self.templates[slot]
            if template.generic:
                additions = piped[env]
            else:
                values = iter(piped.get(env, ()))
                additions = [_rebuild_dict(nodes, assembler.rows[env], values) for nodes in template.nodes]
            for info in additions:
                infos = batch._add_info(infos, info, k)
        return infos


class InfoBatch:
    """Gymnasium's ``VectorEnv._add_info`` over ``num_envs`` rows: ``_add_info(infos, info, k)``
    adds row ``k``'s info dict to the vector infos as SyncVectorEnv does."""

    _add_info = VectorEnv._add_info

    def __init__(self, num_envs: int):
        self.num_envs = num_envs


def _builder(structure: dict):
    """A function that builds the nested infos dict of ``structure`` from the plan's arrays:
    one dict display, compiled once per plan (keys are passed in, so any hashable works)."""
    keys: list = []

    def display(node: dict) -> str:
        items = []
        for key, entry in node.items():
            keys.append(key)
            name = f"k[{len(keys) - 1}]"
            value = display(entry[1]) if entry[0] == "dict" else f"a[{entry[1]}]"
            items.append(f"{name}: {value}")
        return "{" + ", ".join(items) + "}"

    body = display(structure)
    return eval(f"lambda a, k=k: {body}", {"k": tuple(keys)})
