"""The sharded plan (``kind: sharded``): the device mesh (:mod:`.mesh`), per-stage costs
(:mod:`.costs` with :mod:`.comm` and :mod:`.sync`), memory (:mod:`.memory`) and the task graph."""
