"""Planning: which kernels become which device tasks, on which streams, ordered by which events.

The SuperKernel planner (:mod:`.superkernel`) turns scopes into SuperKernel tasks or reports why not
(bypassed, aborted, hang); :mod:`.streams` assigns streams and events; :mod:`.options` parses the
SuperKernel options strings. Nothing here imports torch."""
