"""Language models through the CLI: a memorising causal LM fails, one trained on other records does not.

The models are built once per session by the clinical-notes example's own
builder (``examples/clinical_notes/build.py``, profile ``test``): a tiny
Llama-style model trained from a seed on the CPU, no download. The memorising
model is checked by ``privgate check`` in a subprocess (exit code, JSON report);
the other audits, whose point is the report's content, run in process through
``privgate.api`` (``tests/test_front_door.py`` proves both doors give the same report).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from cases import run_cli
from conftest import clinical_builder as _builder
from test_lm_harden_more import clf  # noqa: F401 — the example's sequence classifier (a session fixture)

ROOT = Path(__file__).resolve().parent.parent


def _check(d: Path, model: str, tmp: Path, policy: str, *extra: str):
    out = tmp / f"{model}.json"
    r = run_cli(
        "check",
        str(d / model),
        "--policy",
        policy,
        "--members",
        str(d / "members.jsonl"),
        "--nonmembers",
        str(d / "nonmembers.jsonl"),
        "--reference-model",
        str(d / "base"),
        "--canaries",
        str(d / "canaries.jsonl"),
        "--json",
        str(out),
        "--threads",
        "1",
        *extra,
    )
    return r, (json.loads(out.read_text()) if out.exists() else None)


def _check_in_process(d: Path, model: str, policy: str):
    """:func:`_check`'s audit in process through ``privgate.api``: (exit code, the report as the CLI's JSON)."""
    from inproc import check

    from privgate.settings import TextOptions

    text = TextOptions(reference_model=str(d / "base"), canaries=str(d / "canaries.jsonl"))
    report = check(d / model, policy, d / "members.jsonl", d / "nonmembers.jsonl", text=text, threads=1)
    return report.exit_code, json.loads(report.to_json())


def test_memorising_lm_fails_and_other_records_lm_passes(clinical, tmp_path):
    """``privgate check`` fails the memorising model (exit 1); the model of other records passes (in process)."""
    policy = str(ROOT / "examples" / "clinical_notes" / "policy.yaml")  # internal + canary exposure + extraction
    r, rep = _check(clinical, "memorised", tmp_path, policy)
    assert r.returncode == 1, r.stdout + r.stderr
    assert rep["verdict"] == "fail" and rep["target"]["format"] == "huggingface"
    assert rep["target"]["kind"] == "causal_lm" and rep["target"]["architecture"] == "LlamaForCausalLM"
    checks = {c["id"]: c for c in rep["checks"]}
    acc = checks["internal:mia-accuracy"]  # internal's check, decided verbatim
    assert acc["status"] == "fail" and acc["ci"][0] > 0.8  # a proven violation
    attacks = {a["name"]: a for a in rep["attacks"]}
    for name in ("lm_loss", "zlib", "min_k", "min_k_pp", "reference_ratio", "lm_learned"):
        assert attacks[name]["status"] == "ran", name
        assert attacks[name]["auc"] > 0.9 and attacks[name]["n_members"] == 60, name
    assert acc["details"]["bonferroni"]["attacks"] == 6  # the best of six language-model attacks
    # the inserted canaries (repeated 10 times in training) are ranked first of 10^4 candidates: 13.3 bits
    exposure = checks["canary-exposure"]
    assert exposure["status"] == "fail" and exposure["value"] > 13 and exposure["ci"][0] > 6
    # greedy decoding reproduces members verbatim, far more often than non-members
    extraction = checks["extraction"]
    assert extraction["status"] == "fail" and extraction["ci"][0] > 0.02
    extracted = attacks["extraction"]["extras"]["extracted"]
    members = [json.loads(line)["text"] for line in (clinical / "members.jsonl").read_text().splitlines()]
    assert all(e["text"] == members[e["member_index"]][:200] for e in extracted)
    duplicated = _builder().PROFILES["test"].duplicated  # the first 12 members, each 10 times in the training text
    assert set(range(duplicated)) <= {e["member_index"] for e in extracted}  # all of them
    # the exposed members are shown as their text, and are members
    for rec in rep["exposed"]["records"]:
        assert rec["text"] == members[rec["member_index"]][:200]
    assert rep["data"]["members"]["n"] == 120 and rep["data"]["truncated"] == 0
    # one seeded generator: no shift between members and non-members, so no warning (the guard's false alarms: 2 of
    # 150 audits, docs/lm-leakage.md); seeds 0-3: [0.32, 0.57], [0.34, 0.58], [0.42, 0.66], [0.42, 0.66]
    shift = attacks["distribution_shift"]
    assert shift["status"] == "ran" and shift["auc_ci"][0] < 0.5 and not rep["warnings"]

    code, rep = _check_in_process(clinical, "other", "internal")
    assert code == 0 and rep["verdict"] == "pass", rep["summary"]
    attacks = {a["name"]: a for a in rep["attacks"]}
    assert attacks["lm_loss"]["auc_ci"][0] < 0.5 < attacks["lm_loss"]["auc_ci"][1]  # never saw the members
    # the same canaries, never inserted into this model's training text: each one's rank among the 10^4 candidates
    # is uniform, so exposure ≥ 10 bits (rank ≤ 9) has probability 9/10^4 per canary: the larger of the two is
    # below 10 bits but for 1 fixture (builder seed) in 550; the memorised model's are 13.3
    assert attacks["canary_exposure"]["extras"]["metrics"]["exposure"]["value"] < 10


def _bad(args, cwd: Path) -> str:
    r = run_cli("check", *args, "--policy", "internal", cwd=cwd)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    lines = [line for line in r.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1, r.stderr
    return lines[0]


def _refused(model: Path, members: Path, nonmembers: Path, **text) -> str:
    """The one sentence privgate.api.check raises (the CLI prints it and exits 2, as the CLI cases show)."""
    from privgate import PrivgateError, check
    from privgate.settings import TextOptions

    with pytest.raises(PrivgateError) as err:
        check(str(model), "internal", str(members), str(nonmembers), text=TextOptions(**text))
    msg = str(err.value)
    assert "\n" not in msg and msg.endswith(".")
    return msg


def test_bad_language_model_inputs_are_one_sentence(clinical, tmp_path):
    d = clinical
    members, nonmembers = d / "members.jsonl", d / "nonmembers.jsonl"
    data = ["--members", str(members), "--nonmembers", str(nonmembers)]
    empty = tmp_path / "empty_dir"
    empty.mkdir()
    assert "without config.json" in _bad([str(empty), *data], tmp_path)  # through the CLI: exit 2, one line

    mismatch = tmp_path / "mismatch"
    shutil.copytree(d / "memorised", mismatch)
    builder = _builder()
    big = builder.make_tokenizer(builder.public_text(800), 1200)
    assert len(big) > builder.PROFILES["test"].vocab
    big.save_pretrained(mismatch)
    assert "tokenizer does not match" in _refused(mismatch, members, nonmembers)

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(
        json.dumps({"peft_type": "LORA", "base_model_name_or_path": str(tmp_path / "gone")})
    )
    msg = _refused(adapter, members, nonmembers)
    assert "base model" in msg and "--base-model" in msg and str(adapter) in msg

    unknown = tmp_path / "unknown"
    shutil.copytree(d / "memorised", unknown)
    cfg = json.loads((unknown / "config.json").read_text())
    cfg["architectures"] = ["LlamaForTokenJuggling"]
    (unknown / "config.json").write_text(json.dumps(cfg))
    assert "unknown architecture 'LlamaForTokenJuggling'" in _refused(unknown, members, nonmembers)

    pickled = tmp_path / "pickled"
    shutil.copytree(d / "memorised", pickled)
    (pickled / "model.safetensors").rename(pickled / "pytorch_model.bin")
    assert "--trust-checkpoint" in _refused(pickled, members, nonmembers)

    msg = _refused(d / "memorised", members, nonmembers, text_field="body")
    assert "no field 'body'" in msg and str(members) in msg

    dup = tmp_path / "dup.jsonl"
    dup.write_text(nonmembers.read_text() + members.read_text().splitlines()[3] + "\n")
    msg = _refused(d / "memorised", members, dup)
    assert "also a member" in msg and "line 4" in msg and f"line {121}" in msg


def test_scoring_equals_a_plain_transformers_forward_loop(clinical):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from privgate.lm.scoring import score_texts

    path = clinical / "memorised"
    model = AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True).eval()
    tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    texts = [json.loads(line)["text"] for line in (clinical / "nonmembers.jsonl").read_text().splitlines()[:9]]
    texts += ["short one", "a record much longer than the others " * 3]
    got = score_texts(model, tok, texts, context=128, batch_size=4)  # padded, length-sorted batches
    for text, lp, mu, sd in zip(texts, got.logprob, got.mu, got.sigma):
        ids = tok(text, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].double(), -1)
        want = logp.gather(-1, ids[0, 1:, None])[:, 0].numpy()
        np.testing.assert_allclose(lp, want, atol=2e-4)
        p = logp.exp()
        want_mu = (p * logp).sum(-1)
        want_sd = ((p * logp**2).sum(-1) - want_mu**2).sqrt()
        np.testing.assert_allclose(mu, want_mu.numpy(), atol=2e-4)
        np.testing.assert_allclose(sd, want_sd.numpy(), atol=2e-3)
    assert got.truncated == 0
    cut = score_texts(model, tok, texts, context=16, batch_size=4)
    assert cut.truncated == sum(len(tok(t)["input_ids"]) > 16 for t in texts) > 0
    assert max(cut.n_tokens) == 15


def test_lora_adapter_loads_on_its_base(clinical, tmp_path):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from privgate.inputs.targets.hf import load_model_dir

    base = AutoModelForCausalLM.from_pretrained(str(clinical / "base"), local_files_only=True)
    torch.manual_seed(0)
    peft_model = get_peft_model(base, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    peft_model.save_pretrained(tmp_path / "adapter")
    cfg = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    cfg["base_model_name_or_path"] = str(clinical / "base")
    (tmp_path / "adapter" / "adapter_config.json").write_text(json.dumps(cfg))
    lm = load_model_dir(tmp_path / "adapter")
    assert lm.extra["base_model"] == str(clinical / "base") and lm.kind == "causal_lm"
    ids = torch.tensor([[0, 5, 9, 17, 3]])
    with torch.no_grad():
        want = peft_model(input_ids=ids).logits
        got = lm.model(input_ids=ids).logits
        plain = AutoModelForCausalLM.from_pretrained(str(clinical / "base"), local_files_only=True)(
            input_ids=ids
        ).logits
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    assert (got - plain).abs().max() > 1e-3  # the adapter changed the model


def test_builtin_policies_map_to_the_language_model_family():
    from privgate import load_policy
    from privgate.lm.family import LM_FAMILY, lm_policy, skipped_attacks

    internal = lm_policy(load_policy("internal"))
    assert set(internal.attacks_to_run()) == set(LM_FAMILY)  # loss, entropy, … learned → the LM family
    assert [c.id for c in internal.checks] == ["mia-accuracy"] and internal.confidence == 0.99
    conf = load_policy("confidential")
    mapped = lm_policy(conf)
    assert set(mapped.attacks_to_run()) == set(LM_FAMILY) and mapped.parent.name == "internal"
    assert [c.id for c in mapped.checks] == [c.id for c in conf.checks] and mapped.own_alpha == conf.own_alpha
    why = skipped_attacks(conf)
    assert set(why) == {"rmia"} and "--reference-model" in why["rmia"]
    strict = skipped_attacks(load_policy("strict"))
    assert {"gradient", "inversion", "lira", "learned_reference", "rmia"} <= set(strict)
    assert "does not apply to a causal language model" in strict["gradient"]


def test_sequence_classifier_is_attacked_by_the_black_box_family(clf):  # noqa: F811
    """The example's classifier (the ``clf`` session fixture), checked in process through ``privgate.api``.

    Each set of records runs through the model once: internal's attacks ask for the outputs of the 240 members and
    non-members seven times (1,925 records scored before the answers were kept)."""
    import torch
    from inproc import check

    scored = []

    def count(module, args, kwargs, output):  # noqa: ANN001, ANN202
        if type(module).__name__ == "LlamaForSequenceClassification":
            scored.append(len(kwargs["input_ids"]))

    hook = torch.nn.modules.module.register_module_forward_hook(count, with_kwargs=True)
    try:
        report = check(clf / "classifier", "internal", clf / "clf_members.jsonl", clf / "clf_nonmembers.jsonl")
    finally:
        hook.remove()
    assert 480 <= sum(scored) <= 500, sum(scored)  # the 240 together, the 120 of each, a few single rows: 484
    assert report.exit_code in (1, 3), report.summary  # it memorised noisy labels: never a pass
    rep = json.loads(report.to_json())
    assert rep["target"]["kind"] == "sequence_classifier" and rep["target"]["format"] == "huggingface"
    attacks = {a["name"]: a for a in rep["attacks"]}
    assert {"loss", "entropy", "modified_entropy", "correctness", "learned"} <= set(attacks)
    assert attacks["loss"]["auc_ci"][0] > 0.6  # leakage proven on its logits
    assert rep["target"]["accuracy"]["members"]["value"] > rep["target"]["accuracy"]["nonmembers"]["value"]
    texts = [json.loads(line)["text"] for line in (clf / "clf_members.jsonl").read_text().splitlines()]
    assert rep["exposed"]["records"] and all(r["text"] == texts[r["member_index"]] for r in rep["exposed"]["records"])


def test_shifted_audit_data_cannot_pass(clinical, tmp_path):
    """Non-members from another distribution (the example's public text): the blind guard says so; nothing passes."""
    from privgate import check

    shifted = tmp_path / "shifted.jsonl"
    public = _builder().public_text(400)[-120:]
    shifted.write_text("".join(json.dumps({"text": t}) + "\n" for t in public))
    rep = check(str(clinical / "other"), "internal", str(clinical / "members.jsonl"), str(shifted))
    shift = next(a for a in rep.attacks if a.name == "distribution_shift")
    assert shift.auc_ci[0] > 0.9  # n-grams alone tell patient records from encyclopaedic paragraphs
    assert rep.verdict != "pass" and any(w.startswith("audit data biased") for w in rep.warnings)
    assert all(c.status != "pass" for c in rep.checks)
