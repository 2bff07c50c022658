"""LiRA and RMIA on a causal language model with reference models privgate fine-tunes, and the cache behind them.

The clinical-notes example (``clinical`` fixture, profile ``test``) writes ``population.jsonl`` (records of the
same distribution, neither members nor non-members) and ``reference_recipe.yaml`` (LoRA on ``base/``, two
epochs): two references each fine-tune in a fraction of a second on the CPU.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cases import run_cli

pytestmark = pytest.mark.slow

POLICY = """name: lm-references
sensitivity: internal
release: api
confidence: 0.95
attacks: {lm_lira: {models: 2}, rmia: {models: 2}, lm_loss: {}}
checks:
  - {id: lira-auc, attack: lm_lira, metric: auc, max: 0.6}
  - {id: rmia-auc, attack: rmia, metric: auc, max: 0.6}
"""


def _numbers(report: dict) -> dict:
    """Every number an audit measured: per attack its AUC, interval and ROC; per check its value and interval."""
    attacks = {a["name"]: (a.get("auc"), a.get("auc_ci"), a.get("extras", {}).get("roc")) for a in report["attacks"]}
    checks = {c["id"]: (c["value"], c["ci"], c["status"]) for c in report["checks"]}
    return {"attacks": attacks, "checks": checks}


CACHE_KEY = "the-pipelines-secret-0123456789abcdef"


def _cli_check(d: Path, tmp: Path, name: str, cache: Path):
    policy = tmp / "policy.yaml"
    policy.write_text(POLICY)
    out = tmp / f"{name}.json"
    r = run_cli(
        "check",
        str(d / "memorised"),
        "--policy",
        str(policy),
        "--members",
        str(d / "members.jsonl"),
        "--nonmembers",
        str(d / "nonmembers.jsonl"),
        "--population",
        str(d / "population.jsonl"),
        "--recipe",
        str(d / "reference_recipe.yaml"),
        "--cache-dir",
        str(cache),
        "--json",
        str(out),
        "--threads",
        "1",
        env={"PRIVGATE_CACHE_KEY": CACHE_KEY},  # the in-process runs below read its cache with the same key
    )
    return r, (json.loads(out.read_text()) if out.exists() else None)


def _in_process(d: Path, model: str, policy: str, cache: Path, **kw):
    from privgate import check

    return check(
        str(d / model),
        policy,
        str(d / "members.jsonl"),
        str(d / "nonmembers.jsonl"),
        population=str(d / "population.jsonl"),
        recipe=str(d / "reference_recipe.yaml"),
        cache_dir=str(cache),
        cache_key=CACHE_KEY.encode(),
        threads=1,
        **kw,
    )


def test_lira_and_rmia_fail_a_memorising_lm_and_a_second_run_reads_the_cache(clinical, tmp_path):
    """``privgate check`` fine-tunes the references (exit 1); runs in process through privgate.api read the cache."""
    cache = tmp_path / "cache"
    r, rep = _cli_check(clinical, tmp_path, "first", cache)
    assert r.returncode == 1, r.stderr
    assert r.stderr == ""  # no library warning leaks to the user's terminal
    attacks = {a["name"]: a for a in rep["attacks"]}
    lira, rmia = attacks["lm_lira"], attacks["lm_rmia"]  # the policy's rmia runs as the language-model version
    for a in (lira, rmia):
        assert a["status"] == "ran" and a["auc"] > 0.9 and a["auc_ci"][0] > 0.85, a
        assert a["n_members"] == 60 and a["n_nonmembers"] == 60
    assert lira["extras"]["models_trained"] == 2 and lira["extras"]["models_from_cache"] == 0
    assert lira["extras"]["population_pool"] == 60 and lira["extras"]["z_samples"] == 20
    assert lira["notes"][0].startswith("fine-tuned 2 reference model(s) with the recipe reference_recipe.yaml (lora)")
    assert "tokens/s" in lira["notes"][0] and "none on an audit record" in lira["notes"][0]
    assert rmia["extras"]["models_reused"] == 2 and rmia["extras"]["models_trained"] == 0  # shared within the run
    checks = {c["id"]: c for c in rep["checks"]}
    assert checks["lira-auc"]["status"] == "fail" and checks["lira-auc"]["ci"][0] > 0.5
    assert checks["rmia-auc"]["attack"] == "lm_rmia" and checks["rmia-auc"]["status"] == "fail"
    assert rep["target"]["recipe"]["mode"] == "lora" and rep["data"]["population"]["n"] == 80

    # the second run in process through privgate.api, on the same cache: the CLI's numbers, nothing fine-tuned
    second = _in_process(clinical, "memorised", str(tmp_path / "policy.yaml"), cache)
    assert second.exit_code == 1, second.summary
    again = json.loads(second.to_json())
    lira2 = next(a for a in again["attacks"] if a["name"] == "lm_lira")
    assert lira2["extras"]["models_trained"] == 0 and lira2["extras"]["models_from_cache"] == 2
    assert lira2["notes"][0].startswith("all 2 reference models came from the cache")
    assert _numbers(again) == _numbers(rep)  # the cache saves the fine-tunes and changes no number

    # every entry damaged: ignored (the report says so), the references fine-tuned again, the same numbers
    entries = sorted((cache / "models").rglob("*.pt"))
    assert len(entries) == 5  # 2 fine-tunes, 2 references' scores, the target's scores of the z-samples
    for p in entries:
        raw = bytearray(p.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        p.write_bytes(bytes(raw))
    third = json.loads(_in_process(clinical, "memorised", str(tmp_path / "policy.yaml"), cache).to_json())
    assert _numbers(third) == _numbers(rep)
    lira3 = next(a for a in third["attacks"] if a["name"] == "lm_lira")
    assert lira3["extras"]["models_trained"] == 2
    damaged = [w for w in third["warnings"] if "failed its integrity check" in w]
    assert len(damaged) == 5 and any("the records were scored again" in w for w in damaged)
    assert any("the model was retrained" in w for w in damaged)


def test_lira_on_a_model_of_other_records_is_near_chance_with_the_cached_references(clinical, tmp_path):
    cache = tmp_path / "cache"
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    _in_process(clinical, "memorised", str(policy), cache)
    other = _in_process(clinical, "other", str(policy), cache)
    lira = next(a for a in other.attacks if a.name == "lm_lira")
    # the references depend on the recipe, base, population and seed, not on the target: all from the cache
    assert lira.extras["models_from_cache"] == 2 and lira.extras["models_trained"] == 0
    # "other" never saw the members: its AUC is chance, sd √(121 / (12·60·60)) = 0.053 on 60 + 60 records, so 0.16
    # is 3 sd (1 builder seed in 370); seeds 0-3 give 0.476, 0.452, 0.497, 0.501 (benchmarks/lm/lm_fixture_seeds.py)
    assert abs(lira.auc - 0.5) < 0.16 and lira.auc_ci[0] < 0.6
    assert other.verdict != "fail"


def test_reference_model_scores_are_cached_and_a_damaged_entry_is_ignored(clinical, tmp_path):
    from privgate import check

    cache = tmp_path / "cache"
    kw = {"reference_model": str(clinical / "base")}

    def run():
        from privgate.settings import TextOptions

        return check(
            str(clinical / "memorised"),
            "internal",
            str(clinical / "members.jsonl"),
            str(clinical / "nonmembers.jsonl"),
            text=TextOptions(**kw),
            cache_dir=str(cache),
            threads=1,
        )

    first, second = run(), run()
    assert first.target["reference_scores_from_cache"] is False and second.target["reference_scores_from_cache"]
    ref = next(a for a in second.attacks if a.name == "reference_ratio")
    assert ref.status == "ran" and ref.auc > 0.9
    assert _numbers(json.loads(second.to_json())) == _numbers(json.loads(first.to_json()))
    (entry,) = (cache / "models").rglob("*.pt")
    entry.write_bytes(entry.read_bytes()[:100])  # truncated
    third = run()
    assert third.target["reference_scores_from_cache"] is False
    assert _numbers(json.loads(third.to_json())) == _numbers(json.loads(first.to_json()))
    assert any("failed its integrity check" in w and "scored again" in w for w in third.warnings)


def test_policies_map_lira_and_rmia_onto_the_language_model_versions_only_with_a_recipe():
    from privgate.api import as_policy
    from privgate.lm.family import lm_policy, skipped_attacks

    strict = as_policy("strict")
    with_recipe = lm_policy(strict, recipe=True).attacks_to_run()
    assert with_recipe["lm_lira"] == {"models": 16} and with_recipe["lm_rmia"] == {"models": 4}
    assert "lira" not in with_recipe and "rmia" not in with_recipe
    skipped = skipped_attacks(strict, recipe=True)
    assert "lira" not in skipped and "rmia" not in skipped
    assert "no language-model version" in skipped["learned_reference"]
    without = skipped_attacks(strict)
    assert {"lira", "rmia"} <= set(without) and "--recipe recipe.yaml" in without["lira"]
    assert "lm_lira" not in lm_policy(strict).attacks_to_run()


def test_bad_reference_inputs_are_one_sentence(clinical, tmp_path):
    from privgate.errors import DataError, RecipeError

    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    overlap = tmp_path / "population.jsonl"
    member_line = (clinical / "members.jsonl").read_text().splitlines()[0]
    overlap.write_text((clinical / "population.jsonl").read_text() + member_line + "\n")
    from privgate import check

    common = (str(clinical / "memorised"), str(policy), str(clinical / "members.jsonl"))
    with pytest.raises(DataError, match=r"population.jsonl, line 81: the record is also in the audit data \("):
        check(*common, str(clinical / "nonmembers.jsonl"), population=str(overlap), recipe=None)
    with pytest.raises(RecipeError, match=r"is a YAML file .* not a Python recipe\.$"):
        check(*common, str(clinical / "nonmembers.jsonl"), recipe="recipe:RECIPE")
    import shutil

    from conftest import clinical_builder

    base = shutil.copytree(clinical / "base", tmp_path / "base")  # the same weights, another tokenizer
    texts = [json.loads(line)["text"] for line in (clinical / "population.jsonl").read_text().splitlines()]
    clinical_builder().make_tokenizer(texts, 300).save_pretrained(str(base))
    other_tokenizer = tmp_path / "recipe.yaml"
    other_tokenizer.write_text("base: base\n")
    with pytest.raises(RecipeError, match=r"has another tokenizer than the target"):
        check(
            *common,
            str(clinical / "nonmembers.jsonl"),
            population=str(clinical / "population.jsonl"),
            recipe=str(other_tokenizer),
            cache_dir="off",
        )
