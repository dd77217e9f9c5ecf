"""``parplan search``: the candidate space (:mod:`.space`) and its vectorized evaluation (:mod:`.vector`)."""
