"""Worker side: what runs in a FastVectorEnv worker process: its main and Python command loop
(:mod:`.process`), the compiled command loop (``command_loop.pyx``), the per-env step loop
(``env_loop.pyx``), the parent watch (``fv_parent_watch.h``) and a PettingZoo Parallel env
seen as one env of agent rows (:mod:`.agent_rows`)."""
