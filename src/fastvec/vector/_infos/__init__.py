"""Both sides: infos as data: each env's info dict written into its row of the shared block
by the worker and read back as vector infos by the caller (:mod:`.codec`, its kernels in
``kernels.pyx``)."""
