"""Both sides: words the caller and the workers agree on: control-row layout, commands, statuses
(``cpdef enum``s in ``_block/protocol.pxd``, one source for Cython and Python), autoreset codes
(the native-env kit's), and the pipe's message encoding.

The hot path (step) moves no Python objects: the caller writes actions into the shared
buffer and bumps a worker's CMD_SEQ; the worker writes results (info values included) and
sets DONE_SEQ. Everything else (reset seeds and options, call/get_attr/set_attr, new info
signatures, values without a fixed-size form, errors) travels on the worker's pipe,
announced by the STATUS word.
"""
from multiprocessing.reduction import ForkingPickler

from gymnasium.vector import AutoresetMode

from fastvec.native.kit import fv_autoreset

# Commands whose errors leave the envs as they were, so the vector env stays usable.
RECOVERABLE = ("call", "setattr")

#: ``1 << status`` of the statuses a finished command leaves with nothing on its pipe (OK,
#: INFOS): a wait that ORs its workers' bits reads no pipe when the result has no others.
QUIET_BITS = (1 << Status.OK) | (1 << Status.INFOS)

# The members the per-step paths compare with, as plain module globals: on Python 3.11
# reading an enum member (``Status.OK``, an attribute of the enum class) goes through the
# enum's metaclass, a module global is one dict lookup. Import these (``from ... import STATUS_OK as _OK``) there.
CMD_STEP, CMD_STEP_PIPE, CMD_PIPE = int(Command.STEP), int(Command.STEP_PIPE), int(Command.PIPE)
STATUS_OK, STATUS_MESSAGE, STATUS_CALL_ERROR, STATUS_INFOS = (int(Status.OK), int(Status.MESSAGE),
                                                              int(Status.CALL_ERROR), int(Status.INFOS))

# Seconds a waiter blocks before it checks that the other side still lives.
LIVENESS_INTERVAL = 0.1

#: Gymnasium's autoreset modes as the compiled env loop takes them (the native-env kit's codes).
AUTORESET_CODES = {mode: fv_autoreset[f"FV_{mode.name}"] for mode in AutoresetMode}


def send(conn, obj) -> int:
    """``conn.send(obj)`` with pickle protocol 5 (``conn.recv()`` reads it as usual); returns
    the message's size in bytes.

    Under the default protocol 4, NumPy pickles an array of non-native byte order
    (``>f4``) so that it comes back native (``float32``): a big-endian observation in
    an info, or on the pipe with ``shared_memory=False``, would not be what
    SyncVectorEnv returns. Protocol 5 keeps the dtype.
    """
    data = ForkingPickler.dumps(obj, 5)
    conn.send_bytes(data)
    return len(data)


def receive(conn) -> tuple:
    """``conn.recv()``, and the message's size in bytes: ``(obj, size)``."""
    data = conn.recv_bytes()
    return ForkingPickler.loads(data), len(data)
