"""pytest plugin and assertions for privgate.

>>> from pytest_privgate import assert_mia_below
>>> assert_mia_below(model, (x_train, y_train), (x_test, y_test), accuracy=0.6)

The plugin itself (``pytest_privgate.plugin``, registered through the
``pytest11`` entry point; disable with ``-p no:privgate``) adds the
``privgate_policy`` and ``privgate_audit`` fixtures, the ``privacy`` marker,
``--privgate-policy``/``--privgate-report`` and a terminal summary of every
privacy check. Importing this package imports neither pytest nor torch.
"""

from __future__ import annotations

from privgate.assertions import (
    PrivacyAssertionError,
    assert_epsilon_below,
    assert_exposure_below,
    assert_inversion_below,
    assert_mia_below,
    assert_policy,
)

__all__ = [
    "PrivacyAssertionError",
    "assert_epsilon_below",
    "assert_exposure_below",
    "assert_inversion_below",
    "assert_mia_below",
    "assert_policy",
]
