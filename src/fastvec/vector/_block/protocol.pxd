# The words the caller and the workers agree on, defined once: the Cython modules
# (handoff) cimport them, Python reads them from fastvec.vector._block.protocol.

cpdef enum Word:
    # Word indices in a worker's control row (64 bytes: no two workers share a cache line).
    CMD_SEQ = 0          # the caller bumps it to hand the worker a new command
    CMD = 1              # which command (Command)
    DONE_SEQ = 2         # the worker sets it to CMD_SEQ once the command's results are written
    STATUS = 3           # what the worker left beside the results (Status)
    WORKER_SLEEPING = 4  # set by a waiter before it blocks, so that the other side only pays
    PARENT_SLEEPING = 5  # for a wake-up system call when someone sleeps
    CURRENT_ENV = 6      # the env the worker is stepping, its index + 1 (0: none), so that a
                         # step that outlasts step_timeout names the env
    WORKER_CPU = 7       # the CPU the worker last waited for a command on, plus one (0: unknown):
                         # the caller wakes a sleeper on its own CPU last
    ROW_WORDS = 16       # words per row


cpdef enum SharedWord:
    # Words of the last control row, shared by all workers.
    ANY_DONE = 0         # counts finished commands (the caller can block until *some* worker is done)
    ANY_SLEEPING = 1     # the caller sleeps on ANY_DONE
    CALLER_THINK_US = 2  # the caller's time between a step's results and its next step (µs,
                         # a running mean): waiting workers spin only while it is short
    RESTARTS_LEFT = 3    # env_failure="restart": failures that may still be recovered from; a
                         # worker takes one before it rebuilds an env, the caller before it
                         # restarts a worker (so the budget is one, whoever recovers)
    CALLER_CPU = 4       # the CPU the caller ran on when it sent the last step, plus one (0:
                         # unknown): a waiting worker on another CPU may spin longer
    CALLER_GAP_US = 5    # the caller's time between a step's results and its next step, however
                         # many cores it kept busy (µs, a running mean): a waiting worker on the
                         # caller's CPU spins only while it is short


cpdef enum StatsLayout:
    # The statistics region (fastvec.vector._block.stats): uint64 counters at the start of the block.
    STATS_HEADER = 8     # words of its header (magic, version, workers, envs, the caller's pid)
    STATS_ROW = 8        # words of the caller's row and of each worker's row
    STATS_BUCKETS = 24   # a worker's step-time histogram: bucket k counts [2**(k-1), 2**k) µs


cpdef enum CallerStat:
    # Words of the caller's row of the statistics region (the caller writes them).
    CALLER_STEPS = 0         # vector steps (lockstep step calls, and recv)
    CALLER_TRANSITIONS = 1   # the env transitions they returned
    CALLER_IN_STEP_NS = 2    # time inside them: handing out actions, waiting, reading results
    CALLER_BETWEEN_NS = 3    # time between them: the trainer's
    CALLER_RESTARTS = 4      # failures recovered (env_failure="restart"): envs rebuilt, worker processes replaced


cpdef enum WorkerStat:
    # Words of a worker's row of the statistics region. The worker writes the first three;
    # the caller, which is at the other end of every pipe and replaces a failed process, the rest.
    WORKER_COMMANDS = 0      # plain step commands served
    WORKER_STEP_NS = 1       # time its envs took to step them
    WORKER_WAIT_NS = 2       # time spent waiting for a command (spinning or asleep)
    WORKER_ENVS = 3          # how many envs it steps (written once)
    WORKER_PIPE_MESSAGES = 4 # messages over its pipe, both ways, since the block was made
    WORKER_PIPE_BYTES = 5    # their pickled bytes
    WORKER_RESTARTS = 6      # times its process failed and was replaced


cpdef enum Command:
    STEP = 1             # actions are in the buffer; no pipe message
    PIPE = 2             # a (name, payload) message waits on the pipe
    CLOSE = 3            # close the envs and exit
    STEP_PIPE = 4        # step with the per-env actions waiting on the pipe (what has no place in the buffer)


cpdef enum Status:
    OK = 0               # results are in the buffer, nothing on the pipe, no env produced an info
    MESSAGE = 1          # a reply (info signatures or values, call results, observations) follows on the pipe
    ERROR = 2            # an error report follows on the pipe; the worker has stopped
    CALL_ERROR = 3       # call/get_attr/set_attr raised: a report follows; the worker serves on
    INFOS = 4            # results and info values are in the buffer, nothing on the pipe

# (Gymnasium's autoreset modes have their codes in the native-env kit's fv_env.h, which the
# compiled env loop shares: fastvec.native.kit's fv_autoreset.)
