"""Hardening a text classifier, and ``privgate audit dpsgd`` on a language-model recipe, through the CLI.

The sequence classifier of the clinical-notes example (``build_classifier``) memorised noisy labels; its
public base (``clf_base/``) was trained on other, correctly labelled records. ``privgate harden`` fine-tunes
that base with DP-SGD (the classification head included) until the black-box family passes, with held-out
accuracy (Clopper-Pearson interval) as the floor, exactly as for a tabular model. Ladders are one or two rungs.
User-level DP fine-tuning of the language model runs in process through ``privgate.api`` (its report is the
point); its bad input is refused by the CLI.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from cases import run_cli
from conftest import built_once, clinical_builder

CLF_POLICY = """\
name: clf-harden-test
sensitivity: internal
release: api
confidence: 0.9
decision: upper_bound
attacks:
  loss: {}
checks:
  - {id: mia-auc, attack: loss, metric: auc, max: 0.65}
utility: {min: 0.55}
remediation:
  enabled: true
  epsilons: [8]
"""

CLF_RECIPE = "base: {base}\nmode: full\nepochs: 3\nlearning_rate: 0.003\n"


_BUILT: dict[str, Path] = {}


@pytest.fixture(scope="session")
def clf(tmp_path_factory) -> Path:
    """The example's memorising classifier, its members/non-members and its public base (a few seconds, once).

    ``tests/test_lm.py`` imports this fixture too: the folder is built once per process (and, through
    :func:`conftest.built_once`, once per session across xdist workers).
    """
    if "clf" not in _BUILT:
        _BUILT["clf"] = built_once(tmp_path_factory, "clf", lambda d: clinical_builder().build_classifier(d, seed=0))
    return _BUILT["clf"]


def test_harden_sequence_classifier_from_its_public_base(clf, tmp_path):
    (tmp_path / "policy.yaml").write_text(CLF_POLICY)
    (tmp_path / "recipe.yaml").write_text(CLF_RECIPE.format(base=clf / "clf_base"))
    out, rep_path = tmp_path / "hardened", tmp_path / "report.json"
    r = run_cli(
        "harden", str(clf / "classifier"), "--policy", str(tmp_path / "policy.yaml"),
        "--recipe", str(tmp_path / "recipe.yaml"), "--members", str(clf / "clf_members.jsonl"),
        "--nonmembers", str(clf / "clf_nonmembers.jsonl"), "--json", str(rep_path), "--output-model", str(out),
        "--threads", "1",
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    rep = json.loads(rep_path.read_text())
    rem = rep["remediation"]
    assert rem["status"] == "hardened" and rep["verdict"] == "pass" and rem["original"]["verdict"] == "fail"
    orig = {c["id"]: c for c in rem["original"]["checks"]}
    now = {c["id"]: c for c in rep["checks"]}
    assert orig["mia-auc"]["value"] > 0.7 and now["mia-auc"]["value"] < 0.65  # memorised labels → DP fine-tune
    # utility: held-out accuracy with its Clopper-Pearson interval and the policy's floor, as for tabular models
    u = rem["utility"]
    assert u["metric"] == "accuracy" and u["floor"] == 0.55 and "non-members (120 records" in u["data"]
    lo, hi = rem["original"]["utility_ci"]
    assert lo < rem["original"]["utility"] < hi and hi - lo < 0.25
    row = rem["rows"][0]
    assert row["utility_ok"] and row["utility"] >= 0.55 and row["utility_ci"][0] < row["utility"] < row["utility_ci"][1]
    # every count behind the accuracy is a whole number of the 120 held-out records
    assert abs(row["utility"] * 120 - round(row["utility"] * 120)) < 1e-6
    st = rem["statement"]
    assert st["model_kind"].startswith("sequence classifier (DP fine-tuning") and st["unit"] == "record"
    assert any(str(clf / "clf_base") in p for p in st["public"]) and st["noise_multiplier"] > 0
    assert rep["target"]["kind"] == "sequence_classifier" and rem["output"]["format"] == "save_pretrained"
    assert f"hardened model: {out}" in r.stdout.replace("\n", "")
    # the folder loads as a classifier and gives the reported held-out accuracy
    import numpy as np
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(str(out), local_files_only=True).eval()
    tok = AutoTokenizer.from_pretrained(str(out), local_files_only=True)
    rows = [json.loads(line) for line in (clf / "clf_nonmembers.jsonl").read_text().splitlines()]
    with torch.inference_mode():
        pred = model(**tok([x["text"] for x in rows], return_tensors="pt", padding=True)).logits.argmax(-1).numpy()
    assert abs(float(np.mean(pred == np.array([x["label"] for x in rows]))) - row["utility"]) < 1e-9


def test_audit_dpsgd_on_a_language_model_recipe_with_text_canaries(clinical, tmp_path):
    """``privgate audit dpsgd --recipe lm_recipe.yaml``: one DP fine-tune with text canaries; JSON, JUnit, SARIF."""
    import xml.etree.ElementTree as ET

    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"base: {clinical / 'base'}\nmode: full\nepochs: 1\nlearning_rate: 0.01\n")  # one epoch: 11 steps
    js, xml, sarif = tmp_path / "a.json", tmp_path / "a.xml", tmp_path / "a.sarif"
    r = run_cli(
        "audit", "dpsgd", "--recipe", str(recipe), "--data", str(clinical / "members.jsonl"), "--epsilon", "2",
        "--delta", "1e-3", "--canaries", "100", "--confidence", "0.9", "--json", str(js), "--junit", str(xml),
        "--sarif", str(sarif), "--threads", "1",
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    rep = json.loads(js.read_text())
    assert rep["job"] == "audit-dpsgd" and rep["mode"] == "black_box" and rep["verdict"] == "pass"
    assert rep["claimed_epsilon"] == 2 and rep["canaries"] == 100 and 30 < rep["included"] < 70
    assert 0 <= rep["epsilon_lb"] <= 2 < rep["max_provable_epsilon"]  # DP at ε = 2: the claim is not refuted
    dp = rep["trainer"]["dp_sgd"]
    n = 120 + rep["included"]  # the members and the included canaries, Poisson-sampled at q = 1/⌈N/B⌉
    assert dp["n_train"] == n and dp["sample_rate"] == 1 / math.ceil(n / 16) and dp["epsilon"] <= 2 + 1e-9
    assert dp["noise_multiplier"] > 0.5 and "text canaries" in rep["data"]["canary_design"]
    assert rep["checks"][0]["id"] == "dpsgd-epsilon" and rep["checks"][0]["value"] == rep["epsilon_lb"]
    suite = ET.parse(xml).getroot()
    assert suite.get("tests") == "1" and suite.get("failures") == "0"
    runs = json.loads(sarif.read_text())["runs"]
    assert runs[0]["tool"]["driver"]["name"] == "privgate" and not [
        x for x in runs[0]["results"] if x.get("level") == "error"
    ]
    assert "measured ε ≥" in r.stdout and "text canaries" in r.stdout


def test_audit_dpsgd_language_model_bad_text_is_one_sentence(clinical, tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"base: {clinical / 'base'}\n")
    bad = tmp_path / "notes.jsonl"
    bad.write_text('{"text": "fine"}\n{"body": "no text field"}\n')
    r = run_cli("audit", "dpsgd", "--recipe", str(recipe), "--data", str(bad), "--epsilon", "2", "--delta", "1e-3")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stdout + r.stderr
    assert str(bad) in r.stderr and "line 2" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def _with_users(clinical: Path, tmp: Path, per_user: int = 3) -> Path:
    """The members with a 'patient' field: record i belongs to patient i // per_user (40 patients of 3 notes)."""
    rows = [json.loads(line) for line in (clinical / "members.jsonl").read_text().splitlines()]
    out = tmp / "members_by_patient.jsonl"
    out.write_text("".join(json.dumps({**r, "patient": f"P{i // per_user:03d}"}) + "\n" for i, r in enumerate(rows)))
    return out


#: The membership check alone, without canaries: the unit of privacy is this test's point; the canary exposure and
#: the extraction of a DP fine-tune are test_lm_harden's (each audit of 2 × 10^4 candidates costs ≈1.4 CPU-s)
USER_POLICY = """\
name: lm-user-level-test
sensitivity: internal
release: api
confidence: 0.9
decision: upper_bound
attacks:
  lm_loss: {}
checks:
  - {id: mia-auc, attack: lm_loss, metric: auc, max: 0.85}
remediation:
  enabled: true
  epsilons: [8]
  max_perplexity: 600
"""


def test_user_level_dp_fine_tuning_states_users_as_the_unit(clinical, tmp_path):
    """--user-field: Poisson over the 40 patients, q = 1/⌈40/8⌉, δ = 1/(10·40); the MIA stays per record.

    The hardening runs in process through ``privgate.api`` (the report and the card are its content); a record
    without its user is refused by ``privgate harden`` in a subprocess (exit 2, nothing written).
    """
    from test_lm_harden import RECIPE

    from privgate import HardenSettings, api
    from privgate.settings import TextOptions

    # 15 noisy steps reach a held-out perplexity of 179-296 (builder seeds 0-2; the public base's is ≈760-1,050)
    (tmp_path / "policy.yaml").write_text(USER_POLICY)
    # batch 8 of the 40 users: q = 1/5 (the accountant calibrates σ for it in about half the time q = 1/3 takes)
    (tmp_path / "recipe.yaml").write_text(RECIPE.format(base=clinical / "base") + "batch_size: 8\n")
    members, out = _with_users(clinical, tmp_path), tmp_path / "hardened"
    settings = HardenSettings(
        str(clinical / "memorised"), str(tmp_path / "policy.yaml"), str(members), str(clinical / "nonmembers.jsonl"),
        recipe=str(tmp_path / "recipe.yaml"), output_model=str(out),
        text=TextOptions(user_field="patient"),
    )  # fmt: skip
    result = api.harden(settings, threads=1)
    assert result.exit_code == 0 and result.status == "hardened", result.report.summary
    rep = json.loads(result.report.to_json())
    rem = rep["remediation"]
    row = rem["rows"][0]["training"]
    assert row["n_train"] == 40 and row["sample_rate"] == 1 / 5 and row["steps"] == 3 * 5  # 3 epochs of 5 steps
    assert rem["settings"]["n_train"] == 40 and rem["settings"]["delta"] == 1 / (10 * 40)
    checks = {c["id"]: c for c in rep["checks"]}  # the evaluation stays per record: 60 + 60 of the 120 records
    assert rep["data"]["members"]["n"] == 120 and checks["mia-auc"]["n_members"] == 60
    st = rem["statement"]  # unit = user, N users, q over users
    assert st["unit"] == "user" and st["n_train"] == 40 and st["sample_rate"] == 1 / 5
    assert "40 users, 120 records" in st["unit_note"] and st["sampling"].startswith("Poisson over users")
    assert any("number of users N = 40" in p for p in st["public"])
    from privgate.dp.card import read_statement

    _, card = result.files[out / "README.md"]
    assert read_statement(card.decode("utf-8")).unit == "user"
    # a record without its user: one sentence naming the file and the line, exit 2, nothing written
    lines = members.read_text().splitlines()
    lines[4] = json.dumps({"text": json.loads(lines[4])["text"]})
    members.write_text("\n".join(lines) + "\n")
    other = tmp_path / "other"
    r = run_cli(
        "harden", str(clinical / "memorised"), "--policy", str(tmp_path / "policy.yaml"),
        "--recipe", str(tmp_path / "recipe.yaml"), "--members", str(members),
        "--nonmembers", str(clinical / "nonmembers.jsonl"), "--json", str(tmp_path / "report.json"),
        "--output-model", str(other), "--canaries", str(clinical / "canaries.jsonl"), "--threads", "1",
        "--user-field", "patient",
    )  # fmt: skip
    assert r.returncode == 2 and f"{members}, line 5: no user in field 'patient'" in r.stderr, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and not other.exists() and not (tmp_path / "report.json").exists()


def test_user_level_clips_one_contribution_per_user(clinical):
    """Known truths: with q = 1 every step clips exactly U = 40 sums (not 120 records); one record per user is
    record-level DP-SGD's (q, T)."""
    from privgate.dpsgd.accounting import sampling
    from privgate.dpsgd.records import DPSettings
    from privgate.inputs.lm_recipe import parse_lm_recipe
    from privgate.lm.finetune import DPFineTune, finetune, load_base

    recipe = parse_lm_recipe("base: base\nepochs: 1\n", "r.yaml", clinical)  # LoRA
    texts = [json.loads(line)["text"] for line in (clinical / "members.jsonl").read_text().splitlines()]
    base = load_base(recipe)
    seen: list[int] = []

    def instrument(opt, q):
        real = opt.clip_and_accumulate

        def spy():
            seen.append(len(opt.grad_samples[0]))
            return real()

        opt.clip_and_accumulate = spy

    s = DPSettings(epochs=2, batch_size=64, max_grad_norm=1.0, delta=1e-3)
    users = [f"P{i // 3}" for i in range(len(texts))]
    _, _, st = finetune(recipe, texts, base=base, dp=DPFineTune(s, 1.0, None, instrument), users=users)
    assert st.dp.sample_rate == 1.0 and st.dp.n_train == 40 and seen == [40, 40]  # Poisson at q = 1: everyone
    s = DPSettings(epochs=1, batch_size=16, max_grad_norm=1.0, delta=1e-3)
    _, _, one = finetune(recipe, texts[:48], base=base, dp=DPFineTune(s, 1.0, None), users=[str(i) for i in range(48)])
    assert (one.dp.sample_rate, one.dp.steps) == sampling(48, 16, 1) and one.dp.n_train == 48
