"""Caller side: what runs in the trainer's process of a FastVectorEnv: the worker pool
(:mod:`.pool`), one worker as the caller sees it (:mod:`.remote_worker`), the caller's own
share (:mod:`.caller_share`), the step's inputs and results (:mod:`.step_io`), the compiled
step (``compiled_step.pyx``), faults turned into exceptions (:mod:`.worker_faults`), argument
checks (:mod:`.arguments`), slow-settings warnings (:mod:`.slow_settings`), which backend a
``make_vec`` request gets (:mod:`.backend_choice`) and the API FastVectorEnv and RayVectorEnv
share (:mod:`.worker_vector_env`)."""
