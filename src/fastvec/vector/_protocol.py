"""Words the parent and the workers agree on: commands, statuses, control-row layout.

The hot path (step) moves no Python objects: the caller writes actions into the
shared buffer and bumps a worker's CMD_SEQ; the worker writes results (info values
included) and sets DONE_SEQ. Everything else (reset seeds and options,
call/get_attr/set_attr, new info signatures, values without a fixed-size form,
errors) travels on the worker's pipe, announced by the STATUS word.
"""
from enum import IntEnum
from multiprocessing.reduction import ForkingPickler

# Word indices in a worker's control row (fastvec/_ext/_sync.pyx uses the same).
CMD_SEQ, CMD, DONE_SEQ, STATUS, WORKER_SLEEPING, PARENT_SLEEPING = range(6)
# Words in the last, shared row: finished-command counter, caller-sleeps-on-it flag.
ANY_DONE, ANY_SLEEPING = range(2)
ROW_WORDS = 16  # 64 bytes per worker: no two workers share a cache line


class Command(IntEnum):
    """What a worker is asked to do."""

    STEP = 1  # actions are in the buffer; no pipe message
    PIPE = 2  # a (name, payload) message waits on the pipe
    CLOSE = 3  # close the envs and exit
    STEP_PIPE = 4  # step with the per-env actions waiting on the pipe (what has no place in the buffer)


class Status(IntEnum):
    """What a worker left beside a finished command."""

    OK = 0  # results are in the buffer, nothing on the pipe, no env produced an info
    MESSAGE = 1  # a reply (info signatures or values, call results, observations) follows on the pipe
    INFOS = 4  # results and info values are in the buffer, nothing on the pipe
    ERROR = 2  # an error report follows on the pipe; the worker has stopped
    CALL_ERROR = 3  # call/get_attr/set_attr raised: a report follows; the worker serves on


# Commands whose errors leave the envs as they were, so the vector env stays usable.
RECOVERABLE = ("call", "setattr")

# Seconds a waiter blocks before it checks that the other side still lives.
LIVENESS_INTERVAL = 0.1


def send(conn, obj) -> None:
    """``conn.send(obj)`` with pickle protocol 5 (``conn.recv()`` reads it as usual).

    Under the default protocol 4, NumPy pickles an array of non-native byte order
    (``>f4``) so that it comes back native (``float32``): a big-endian observation in
    an info, or on the pipe with ``shared_memory=False``, would not be what
    SyncVectorEnv returns. Protocol 5 keeps the dtype.
    """
    conn.send_bytes(ForkingPickler.dumps(obj, 5))
