"""Canary exposure and verbatim extraction on a tiny causal LM trained here (tests/tiny_lm.py).

The LM memorised its 24 member records and one canary repeated in training; a
second canary and 24 non-member records of the same form it never saw.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from tiny_lm import INSERTED, NEVER, load_tiny_lm, tiny_lm_records

from privgate.inputs.canaries import Canary
from privgate.lm.canary_exposure import measure_exposure, score_continuations
from privgate.lm.extraction import measure_extraction

pytestmark = pytest.mark.slow
CANARIES = [Canary(**INSERTED), Canary(**NEVER)]


# transformers 5.24 renamed the key/value cache argument to `cache` (`past_key_values` goes in 5.40): the scoring
# path must use whichever name the installed version takes, so the old name's deprecation fails these tests
CACHE_NAME = pytest.mark.filterwarnings("error:.*past_key_values.*:FutureWarning")


@pytest.fixture(scope="module")
def lm(tiny_lm_dir):
    return load_tiny_lm(tiny_lm_dir)


@pytest.fixture(scope="module")
def exact(lm):
    return measure_exposure(lm.model, lm.tokenizer, CANARIES, batch_size=1024)


def test_inserted_canary_is_exposed_and_a_fresh_one_is_not(exact):
    inserted, never = exact.canaries
    assert inserted.space == never.space == 10**4
    assert inserted.method == never.method == "exact"
    # memorised: the secret is the model's favourite of all 10^4 candidates, log2 10^4 = 13.3 bits
    assert inserted.rank == 1 and inserted.exposure == pytest.approx(math.log2(10**4))
    # never inserted: its rank is uniform over R, P(exposure >= x) = 2^-x; a value this seed gives
    assert never.exposure < 6 and never.rank > 150
    assert never.exposure == pytest.approx(math.log2(10**4) - math.log2(never.rank))
    assert (never.lo, never.hi) == (never.exposure, never.exposure)  # exact: no sampling error
    assert exact.worst == 0 and exact.max_exposure == inserted.exposure and exact.hi == inserted.exposure


def test_extrapolation_agrees_with_exact_enumeration(lm, exact):
    extra = measure_exposure(
        lm.model, lm.tokenizer, CANARIES, batch_size=1024, max_exact=1000, samples=2000, bootstrap=20, seed=3
    )
    assert [c.method for c in extra.canaries] == ["extrapolated", "extrapolated"]
    # two extrapolated canaries: each interval at 1 - 0.05/2 so that both hold at 0.95 (Bonferroni)
    assert [c.confidence for c in extra.canaries] == [pytest.approx(0.975)] * 2
    for e, x in zip(exact.canaries, extra.canaries):
        assert x.lo <= e.exposure <= x.hi, (e.exposure, x.lo, x.hi)
        assert x.lo <= x.exposure <= x.hi
        assert x.log_perplexity == pytest.approx(e.log_perplexity, abs=1e-3)
    inserted, never = extra.canaries
    # no sampled candidate beats the memorised secret: the sample alone proves it is in the top ~0.2 %
    assert inserted.below == 0 and inserted.hi == pytest.approx(math.log2(10**4))
    assert inserted.lo > 8.5 and inserted.exposure > 12
    assert abs(never.exposure - exact.canaries[1].exposure) < 0.5
    assert never.hi - never.lo < 1.0  # ~400 of 2000 sampled candidates beat it: a tight interval
    assert never.fit_lo <= never.fit_hi and set(never.fit) == {"shape", "loc", "scale"}
    assert extra.lo == max(c.lo for c in extra.canaries) and extra.hi == max(c.hi for c in extra.canaries)


class _Counting:
    """A tokenizer's Rust backend that counts the texts it encodes in batches of a thousand or more (candidates)."""

    def __init__(self, inner):  # noqa: ANN001
        self.inner, self.batches = inner, 0

    def encode_batch(self, texts, **kw):  # noqa: ANN001, ANN201
        self.batches += len(texts) >= 1000
        return self.inner.encode_batch(texts, **kw)

    def __getattr__(self, name):  # noqa: ANN001, ANN204
        return getattr(self.inner, name)


def test_a_second_audit_with_the_same_tokenizer_reuses_the_candidates_tokens(lm, exact, tiny_lm_dir):
    """A harden audits the original model and each candidate with the same tokenizer (a fresh load of it): the 2 × 10^4
    candidates are tokenised once (three quarters of an exact exposure's CPU), the exposures are the same; a tokenizer
    that tokenises differently gets its own token ids."""
    from transformers import PreTrainedTokenizerFast

    from privgate.lm.continuations import token_lists

    tok = PreTrainedTokenizerFast.from_pretrained(str(tiny_lm_dir), local_files_only=True)
    tok._tokenizer = counting = _Counting(tok._tokenizer)
    again = measure_exposure(lm.model, tok, CANARIES, batch_size=1024)
    assert [(c.rank, c.log_perplexity) for c in again.canaries] == [(c.rank, c.log_perplexity) for c in exact.canaries]
    assert counting.batches == 0
    tok._tokenizer = counting.inner
    before = token_lists(tok, ["secret 12"])
    tok.add_tokens(["secret"])
    assert token_lists(tok, ["secret 12"]) == tok(["secret 12"])["input_ids"] != before


def test_exact_enumeration_in_chunks_ranks_as_in_one_pass(lm, exact):
    """Memory bounded by the chunk (1,000 candidates of the 10^4), not by |R|: the same log-perplexities and ranks."""
    chunked = measure_exposure(lm.model, lm.tokenizer, CANARIES, batch_size=1024, chunk=1000)
    for a, b in zip(exact.canaries, chunked.canaries):
        assert a.method == b.method == "exact" and a.rank == b.rank
        assert a.log_perplexity == pytest.approx(b.log_perplexity, abs=1e-6)


def test_a_large_space_is_sampled_by_default_with_its_interval(lm, exact):
    """10^6 candidates (one more digit than the inserted 4821…): above the default max_exact of 10^5, so 10^4 are
    sampled (Carlini et al. 2019, §4) — never all 10^6 held at once (5.3 GB and 48 s before; issue 36)."""
    from privgate.lm.canary_exposure import MAX_EXACT, SAMPLES

    six = Canary(prefix=INSERTED["prefix"], secret=INSERTED["secret"] + "93", alphabet="0123456789")
    assert six.space == 10**6 > MAX_EXACT == 10**5
    (got,) = measure_exposure(lm.model, lm.tokenizer, [six], batch_size=256).canaries
    assert got.method == "extrapolated" and got.samples == SAMPLES == 10_000 and got.confidence == 0.95
    # the memorised prefix 4821 makes it a favourite: few of the 10^4 sampled beat it, and the distribution-free
    # interval says so — an exposure of at least ~11 bits, at most the 19.9 possible
    assert got.below < 20 and 10.5 < got.lo < got.exposure <= got.hi == pytest.approx(math.log2(10**6))


def test_a_policy_sets_how_exposure_is_measured_and_sampling_holds_the_exact_value(tiny_lm_dir, exact, tmp_path):
    """``canary_exposure: {max_exact: 1000, samples: 2000}`` in a policy: both 4-digit canaries are sampled, the
    report says so, and each stated interval holds the exact exposure of the enumeration."""
    import json

    from inproc import check

    from privgate.settings import TextOptions

    members, nonmembers = (tmp_path / "m.txt", tmp_path / "n.txt")
    members.write_text("\n".join(tiny_lm_records()[0]) + "\n")
    nonmembers.write_text("\n".join(tiny_lm_records()[1]) + "\n")
    canaries = tmp_path / "canaries.jsonl"
    canaries.write_text("".join(json.dumps(c.model_dump()) + "\n" for c in CANARIES))
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "name: sampled\nextends: public\nsensitivity: public\nrelease: api\nconfidence: 0.9\n"
        "attacks:\n  canary_exposure: {max_exact: 1000, samples: 2000}\n"
        "checks:\n  - {id: exposure, attack: canary_exposure, metric: exposure, max: 6}\n"
    )
    report = check(tiny_lm_dir, policy, members, nonmembers, text=TextOptions(canaries=str(canaries)), threads=1)
    attack = next(a for a in report.attacks if a.name == "canary_exposure")
    rows = attack.extras["canaries"]
    assert [r["method"] for r in rows] == ["extrapolated", "extrapolated"] and [r["samples"] for r in rows] == [
        2000
    ] * 2
    for row, e in zip(rows, exact.canaries):
        assert row["lo"] <= e.exposure <= row["hi"], (row["lo"], e.exposure, row["hi"])
    assert attack.extras["metrics"]["exposure"]["details"]["methods"] == {"exact": 0, "extrapolated": 2}
    assert any(
        "2 of 2 canaries have more than max_exact = 1,000 candidates and were extrapolated" in n for n in attack.notes
    )
    (decided,) = report.checks
    assert decided.status == "fail" and decided.ci[0] > 6  # the memorised canary: proven above 6 bits by sampling


@CACHE_NAME
def test_cached_scoring_equals_a_plain_forward_pass(lm):
    tok = lm.tokenizer
    context = tok(INSERTED["prefix"])["input_ids"]
    conts = [tok(s, add_special_tokens=False)["input_ids"] for s in ("4821", "0000", "9", "12345")]
    got = score_continuations(lm.model, context, conts, device="cpu", batch_size=2)
    for c, bits in zip(conts, got):
        ids = torch.tensor([context + c])
        with torch.no_grad():
            logp = torch.log_softmax(lm.model(input_ids=ids).logits[0, :-1].double(), -1)
        want = -float(logp[len(context) - 1 :].gather(-1, ids[0, len(context) :, None]).sum()) / math.log(2)
        assert bits == pytest.approx(want, rel=1e-4)
    assert got[0] < 1.0 < got[1]  # the memorised secret costs under a bit, another one many


def test_extraction_finds_the_memorised_members_and_no_nonmember(lm):
    short = "record 99: too short"
    lm.model.train()
    report = measure_extraction(
        lm.model, lm.tokenizer, [*lm.members, short], lm.nonmembers, prefix_tokens=16, suffix_tokens=16, batch_size=10
    )
    assert lm.model.training  # the model's mode is put back
    lm.model.eval()
    m, n = report.members, report.nonmembers
    assert (m.tested, m.skipped, n.tested, n.skipped) == (24, 1, 24, 0)
    assert m.extracted >= 22 and n.extracted == 0
    hits = report.extracted_members  # indices into the members given; the short record (24) was never tested
    assert len(hits) == m.extracted and hits == sorted(set(hits)) and set(hits) <= set(range(24))
    assert report.extracted_nonmembers == []
    assert 0.0 <= m.lo <= m.rate <= m.hi <= 1.0 and n.lo == 0.0 and n.hi == pytest.approx(1 - 0.025 ** (1 / 24))
    assert report.excess == pytest.approx(m.rate - n.rate)
    assert 0.6 < report.lo < report.excess <= report.hi <= 1.0
    assert report.p_value < 1e-9


def test_a_fluent_completion_is_not_leakage(lm):
    # the same memorised texts as members and non-members: equal rates, no excess
    report = measure_extraction(lm.model, lm.tokenizer, lm.members, lm.members, prefix_tokens=16, suffix_tokens=16)
    assert report.members.rate == report.nonmembers.rate > 0.9
    assert report.excess == 0.0 and report.lo < 0 < report.hi and report.p_value > 0.5
    assert np.isclose(report.lo, -report.hi)


@pytest.mark.parametrize("chunk", [8192, 10])
def test_tokens_merging_across_the_prefix_boundary_are_scored_right(chunk):
    """A BPE tokenizer that merges " 1" and "12": candidates differ in token count and in the prefix's last token.

    In chunks of 10 the secret's own chunk ("10" … "19") shares the merged " 1" as context, the next ("00" …)
    does not: the shared context is shortened and every chunk scored again, to the same rank as in one chunk.
    """
    from tokenizers import Tokenizer, models
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    chars = list("abcdefghijklmnopqrstuvwxyz 0123456789:")
    vocab = {t: i for i, t in enumerate(["<unk>", *chars, " 1", "12"])}
    bpe = Tokenizer(models.BPE(vocab=vocab, merges=[(" ", "1"), ("1", "2")], unk_token="<unk>"))
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, unk_token="<unk>")
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2
    )
    model = LlamaForCausalLM(cfg).eval()
    canary = Canary(prefix="pin is ", secret="12", alphabet="0123456789")
    assert tok(canary.prefix + "12")["input_ids"][-2:] == [vocab[" 1"], vocab["2"]]
    report = measure_exposure(model, tok, [canary], batch_size=7, chunk=chunk)
    # brute force: every candidate's whole sequence through a plain forward pass, scored from the first
    # token where candidates differ (the tokens before it are common to all, a constant)
    full = [tok(canary.prefix + f"{i:02d}")["input_ids"] for i in range(100)]
    start = min(next(j for j, (a, b) in enumerate(zip(f, full[0])) if a != b) for f in full[1:])
    bits = []
    with torch.no_grad():
        for f in full:
            logp = torch.log_softmax(model(input_ids=torch.tensor([f])).logits[0, :-1].double(), -1)
            bits.append(-float(logp[start - 1 :].gather(-1, torch.tensor(f[start:])[:, None]).sum()) / math.log(2))
    bits = np.asarray(bits)
    (got,) = report.canaries
    assert got.log_perplexity == pytest.approx(bits[12], rel=1e-4)
    assert got.rank == 1 + np.sum(bits < bits[12])


def test_secrets_the_tokenizer_cannot_tell_apart_are_refused(lm):
    from privgate.errors import DataError

    unseen = Canary(prefix="canary 0: the secret is ", secret="äö", alphabet="äöü")  # not in the vocabulary
    with pytest.raises(DataError, match=r"the tokenizer gives different secrets the same tokens .*vocabulary\?\)\.$"):
        measure_exposure(lm.model, lm.tokenizer, [unseen])


@CACHE_NAME
def test_gpt2_without_a_start_token_scores_like_a_plain_forward_pass():
    """Another architecture (absolute positions, no ``<s>``): the cached, last-token-shared scoring is exact."""
    from tiny_lm import CHARS
    from tokenizers import Tokenizer, models
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(["<unk>", *CHARS])}
    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>")), unk_token="<unk>"
    )
    torch.manual_seed(1)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(vocab), n_embd=32, n_layer=2, n_head=2, n_positions=64)).eval()
    canary = Canary(prefix="pin: ", secret="271", alphabet="0123456789")
    (got,) = measure_exposure(model, tok, [canary], batch_size=16).canaries
    ids = [tok(canary.prefix + f"{i:03d}")["input_ids"] for i in range(1000)]
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=torch.tensor(ids)).logits[:, :-1].double(), -1)
    target = torch.tensor(ids)[:, 1:, None]
    bits = (-logp.gather(-1, target)[:, -3:, 0].sum(-1) / math.log(2)).numpy()
    assert got.log_perplexity == pytest.approx(bits[271], rel=1e-4)
    assert got.rank == 1 + np.sum(bits < bits[271])
