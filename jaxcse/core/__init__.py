"""The ground floor every other folder stands on; imports nothing of jaxcse above it.

errors.py      one-line user errors (the base class and the commands' handler)
files.py       whole-or-nothing writes, sha256 records, torn-line reads
compat.py      library-version differences and private APIs, each behind one function
platforms.py   no accelerator here: jax's CPU only (runs before jax starts)
progress.py    progress bars and lines
interrupts.py  Ctrl-C acted on at a long-running command's safe points, or at once in one line
registry.py    named entries of one kind (objectives, poolers, encoder families)
provenance.py  versions, commit, device, data digests of a result
"""
