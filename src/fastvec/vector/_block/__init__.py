"""Both sides: the shared block and what the caller and the workers agree on about it: the
words of the control rows (:mod:`.protocol`), the hand-off of commands and answers
(:mod:`.handoff`), the pipe's messages (:mod:`.messages`), the block's layout (:mod:`.shared_buffer`), its statistics region
(:mod:`.stats`), observation rows (``obs_rows.pxd``), batches as trees (:mod:`.batch_tree`)
and the restart bookkeeping both sides keep (:mod:`.restarts`)."""
