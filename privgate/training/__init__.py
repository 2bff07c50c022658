"""Training models like the target: the plan (who trains on what), the vectorised engine and its kernels,
the optimisers, the DP-SGD step, the content-hashed cache and the thread budget.

:func:`privgate.training.engine.train_ensemble` is the entry the attacks use.
"""
