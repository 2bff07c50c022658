"""Training models like the target: the plan (who trains on what), the vectorised engine and its kernels,
the optimisers, the DP-SGD step, the content-hashed cache and the thread budget.

:func:`privgate.training.references.trainer_for` is the entry the attacks use: a trainer per recipe kind, each
returning a :class:`~privgate.training.trained.TrainedReferences`.
"""
