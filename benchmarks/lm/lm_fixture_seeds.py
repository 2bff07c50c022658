"""The clinical-notes example across builder seeds: the numbers the language-model tests assert, per seed.

The test suite builds the example once (``tests/conftest.py``, fixture ``clinical``, profile ``test``, seed 0)
and asserts numbers of it; ``pytest --clinical-seed N`` runs the same tests on the build of seed N. This script
prints, per seed, the numbers behind those assertions, so that their margins can be read off:

* ``memorised`` against ``examples/clinical_notes/policy.yaml`` (with the base as reference model and the
  inserted canaries): internal's MIA accuracy with its interval, the lowest AUC of the six language-model
  attacks, the canary exposure (Carlini et al. 2019, arXiv 1802.08232), the extraction excess (Carlini et
  al. 2021, arXiv 2012.07805) and how many of the duplicated members were extracted, the distribution-shift
  guard's AUC interval (Duan et al. 2024, arXiv 2402.07841);
* ``other`` (fine-tuned on other records) against ``internal``: its verdict, the loss attack's AUC interval,
  and the exposure of the same canaries, which it never saw: each one's rank is uniform over the 10⁴
  candidates, so P(exposure ≥ x bits) = 2^-x per canary; and the upper end of its best attack's AUC interval
  as ``assert_mia_below(other, …, auc=0.8)`` reports it (tests/test_lm_release.py);
* with ``--references``: LiRA (Carlini et al. 2022, arXiv 2112.03570) and RMIA (Zarifzadeh et al. 2024,
  arXiv 2312.03262) with two LoRA reference fine-tunes each (tests/test_lm_references.py's policy), their
  AUC and interval on ``memorised`` and on ``other``.

``python benchmarks/lm/lm_fixture_seeds.py --seeds 0 1 2 3 4 [--profile test|demo]`` (one thread; about
19 s of CPU to build a seed for the test profile, and about as much to measure it).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for _common

from _common.clinical import builder  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "examples" / "clinical_notes" / "policy.yaml"


REFERENCES = """name: lm-references
sensitivity: internal
release: api
confidence: 0.95
attacks: {lm_lira: {models: 2}, rmia: {models: 2}, lm_loss: {}}
checks:
  - {id: lira-auc, attack: lm_lira, metric: auc, max: 0.6}
  - {id: rmia-auc, attack: rmia, metric: auc, max: 0.6}
"""


def references(d: Path) -> dict:
    """LiRA and RMIA AUCs (with intervals) of ``memorised`` and ``other``, the references fine-tuned once."""
    from privgate.api import check

    (d / "references.yaml").write_text(REFERENCES)
    out = {}
    for model in ("memorised", "other"):
        rep = check(
            str(d / model),
            str(d / "references.yaml"),
            str(d / "members.jsonl"),
            str(d / "nonmembers.jsonl"),
            population=str(d / "population.jsonl"),
            recipe=str(d / "reference_recipe.yaml"),
            cache_dir=str(d / "cache"),
            threads=1,
        )
        for a in rep.attacks:
            if a.name in ("lm_lira", "lm_rmia", "rmia"):
                out[f"{model} {a.name}"] = (a.auc, a.auc_ci)
    return out


def measure(d: Path, duplicated: int) -> dict:
    """The numbers of one build (folder ``d``), in process through ``privgate.api``."""
    from privgate.api import check
    from privgate.settings import TextOptions

    text = TextOptions(reference_model=str(d / "base"), canaries=str(d / "canaries.jsonl"))
    data = (str(d / "members.jsonl"), str(d / "nonmembers.jsonl"))
    mem = json.loads(check(str(d / "memorised"), str(POLICY), *data, text=text, threads=1, cache_dir="off").to_json())
    oth = json.loads(check(str(d / "other"), "internal", *data, text=text, threads=1, cache_dir="off").to_json())
    from privgate.assertions import PrivacyAssertionError, assert_mia_below

    try:  # the bound of tests/test_lm_release.py's user test; the number is what matters here
        plugin = assert_mia_below(str(d / "other"), *data, auc=0.8)
    except PrivacyAssertionError as err:
        plugin = err.report
    checks = {c["id"]: c for c in mem["checks"]}
    attacks = {a["name"]: a for a in mem["attacks"]}
    others = {a["name"]: a for a in oth["attacks"]}
    lm = ("lm_loss", "zlib", "min_k", "min_k_pp", "reference_ratio", "lm_learned")
    extracted = {e["member_index"] for e in attacks["extraction"]["extras"]["extracted"]}
    return {
        "verdict": mem["verdict"],
        "mia": checks["internal:mia-accuracy"],
        "min_auc": min(attacks[a]["auc"] for a in lm),
        "exposure": checks["canary-exposure"],
        "extraction": checks["extraction"],
        "dup_extracted": len(extracted & set(range(duplicated))),
        "shift": attacks["distribution_shift"]["auc_ci"],
        "other_verdict": oth["verdict"],
        "other_loss": others["lm_loss"]["auc_ci"],
        "other_exposure": [c["exposure"] for c in others["canary_exposure"]["extras"]["canaries"]],
        "plugin_hi": plugin.checks[0].ci[1],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--profile", default="test")
    ap.add_argument("--references", action="store_true", help="also LiRA and RMIA with fine-tuned references")
    args = ap.parse_args()
    b = builder()
    p = b.PROFILES[args.profile]
    print(
        f"{'seed':>4} | {'build s':>7} | {'MIA acc [CI]':>20} {'':4} | {'min AUC':>7} | {'exposure':>8} | "
        f"{'extraction [CI]':>22} {'':4} | {'dup':>5} | {'shift AUC CI':>14} | other: {'verdict':>7} "
        f"{'loss AUC CI':>14} {'exposures':>12} {'plugin hi':>9}"
    )
    for seed in args.seeds:
        with tempfile.TemporaryDirectory() as tmp:
            t = time.process_time()
            b.build(Path(tmp) / "cn", args.profile, seed)
            built = time.process_time() - t
            r = measure(Path(tmp) / "cn", p.duplicated)
            refs = references(Path(tmp) / "cn") if args.references else {}
        mia, exp, ext = r["mia"], r["exposure"], r["extraction"]
        print(
            f"{seed:>4} | {built:7.1f} | "
            f"{mia['value']:.3f} [{mia['ci'][0]:.3f}, {mia['ci'][1]:.3f}] {mia['status']:4.4} | "
            f"{r['min_auc']:7.3f} | {exp['value']:8.2f} | "
            f"{ext['value']:.3f} [{ext['ci'][0]:+.3f}, {ext['ci'][1]:.3f}] {ext['status']:4.4} | "
            f"{r['dup_extracted']:>2}/{p.duplicated:<2} | [{r['shift'][0]:.2f}, {r['shift'][1]:.2f}] | "
            f"{r['other_verdict']:>14} [{r['other_loss'][0]:.2f}, {r['other_loss'][1]:.2f}] "
            f"{' '.join(f'{e:.2f}' for e in r['other_exposure']):>12} {r['plugin_hi']:9.3f}",
            flush=True,
        )
        for name, (auc, ci) in refs.items():
            print(f"{'':>4}   {name}: AUC {auc:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]", flush=True)


if __name__ == "__main__":
    main()
