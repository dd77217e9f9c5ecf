"""``parplan search``: find the fastest sharded plan that fits, rather than check the ones typed.

- :mod:`.space`: the candidate table (one row per plan, numpy columns), its size before
  enumeration, enumeration and divisibility pruning.
- :mod:`.vector`: the closed-form step time and memory of every candidate at once (numpy), equal
  to :func:`parplan.api.sharded_analytic.evaluate_sharded` plan by plan.
- :mod:`.run`: :func:`~parplan.api.search.run.search_scenario`, the command as one call: size
  check, enumeration, evaluation in chunks (here or on Ray), ranking, the Pareto front, the best
  plans re-simulated with the event engine, and the scenario's own plans beside them.
- :mod:`.spread`: the evaluation cut into chunks, run here or on Ray, and joined in table order.
"""
