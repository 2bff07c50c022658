"""``assert_exposure_below`` in a user's test suite, run with pytester on a saved tiny LM (tests/tiny_lm.py)."""

from __future__ import annotations

import json

import pytest
from tiny_lm import INSERTED, NEVER

pytestmark = pytest.mark.slow
pytest_plugins = ["pytester"]

USER_TESTS = """
import pytest
from pytest_privgate import assert_exposure_below

MODEL, BOTH, NEVER = {model!r}, {both!r}, {never!r}


def test_fresh_canary_is_not_exposed():
    report = assert_exposure_below(MODEL, NEVER, bits=8, batch_size=1024)
    assert report.canaries[0].method == "exact" and report.max_exposure < 8


def test_inserted_canary_fails():
    assert_exposure_below(MODEL, BOTH, bits=8, batch_size=1024)


def test_sampled_estimate_that_cannot_decide_skips():
    assert_exposure_below(
        MODEL, BOTH, bits=10, batch_size=1024, max_exact=1000, samples=400, bootstrap=0, on_inconclusive="skip"
    )
"""


@pytest.fixture(scope="module")
def saved_lm(tiny_lm_dir, tmp_path_factory):
    d = tmp_path_factory.mktemp("canaries")
    both, never = d / "both.jsonl", d / "never.jsonl"
    both.write_text(json.dumps(INSERTED) + "\n" + json.dumps(NEVER) + "\n")
    never.write_text(json.dumps(NEVER) + "\n")
    return tiny_lm_dir, both, never


def test_assert_exposure_below_in_a_user_suite(pytester: pytest.Pytester, saved_lm):
    model, both, never = saved_lm
    pytester.makepyfile(test_user=USER_TESTS.format(model=str(model), both=str(both), never=str(never)))
    result = pytester.runpytest("-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(passed=1, failed=1, skipped=1)
    out = result.stdout.str()
    assert (
        "assert_exposure_below failed: canary 0 (prefix 'canary 0: the secret number is ') has exposure 13.29 bits "
        "(exact; rank 1 of 10,000 candidates, at most 13.3 bits), bound 8 bits; 2 canaries measured" in out
    )
    # 0 of 400 sampled candidates beat the secret: the sample proves exposure > 6.5 bits, not > 10
    skipped = next(line for line in out.splitlines() if line.startswith("SKIPPED"))
    assert "assert_exposure_below inconclusive: canary 0" in skipped and ", 13.29] at 95%;" in skipped


def test_a_directory_without_config_is_one_sentence(tmp_path):
    from privgate import assert_exposure_below
    from privgate.errors import TargetError

    with pytest.raises(TargetError, match=r"not a Hugging Face model directory \(no config.json\)\.$"):
        assert_exposure_below(tmp_path, [NEVER], bits=8)
