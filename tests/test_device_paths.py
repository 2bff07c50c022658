"""privgate's GPU paths on a machine without one: the white-box attacks, DP-SGD retraining, language-model
scoring and DP fine-tuning, run with the model on a second device (``tests/standin.py``).

The stand-in computes on the CPU and refuses what CUDA refuses — a CPU tensor meeting one on the device, a CPU
generator asked to draw there — and draws its own random numbers from another stream than the CPU's, as CUDA
does. So a step that feeds a model tensors from the wrong device fails here as it fails on a GPU, and a model
whose training draws a random number on the device (rather than from privgate's seeded CPU generators) comes out
different from the CPU's. ``--device cuda`` (``RunOptions(device="cuda")``) resolves to the stand-in in these
tests; every other line of privgate runs as it does for a user. TorchScript cannot run on a Python device, so
the TorchScript target's move is checked on ``meta``.
"""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest
import standin
import torch
from standin import StandInMode
from torch import nn

from privgate import train_model


def _where(model: nn.Module) -> str:
    """The device ``model``'s first parameter is on."""
    return str(next(model.parameters()).device)


@pytest.fixture
def gpu(monkeypatch):
    """``device="cuda"`` resolves to the stand-in device for the test (and ``auto`` still to the CPU)."""
    import privgate.device as device
    import privgate.options as options

    if torch.cuda.is_available():
        pytest.skip(
            "a CUDA GPU is here: the stand-in device would make PrivateUse1 torch's accelerator for the rest of this "
            "process, after which every CUDA backward trips autograd's stream assert (pytorch#161129); make "
            "test-gpu runs these paths on the GPU itself"
        )
    name = standin.install()
    real = device.resolve_device
    monkeypatch.setattr(options, "DEVICES", (*options.DEVICES, name))
    monkeypatch.setattr(device, "DEVICES", (*device.DEVICES, name))
    monkeypatch.setattr(device, "resolve_device", lambda asked: name if asked in ("cuda", name) else real(asked))
    with StandInMode(), torch.autograd.set_multithreading_enabled(False):  # standin.py: backward in this thread
        yield name


def _close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """The largest difference between two state dicts (on any device), asserting they hold the same tensors."""
    assert a.keys() == b.keys()
    return max(float((a[k].detach().cpu().double() - b[k].detach().cpu().double()).abs().max()) for k in a)


# --------------------------------------------------------------------------- white-box attacks


def test_torchscript_target_moves_with_leaf_parameters():
    """A TorchScript target moved to the run's device keeps leaf parameters there, so a white-box gradient is the
    model's. ``copy.deepcopy`` of a ScriptModule gave clones (not leaves): on a GPU torch warned that a non-leaf's
    ``.grad`` was read, and the strict policy's gradient attack died with "invalid gradient … expected device cpu
    but got cuda:0" (exit 4). ``meta`` stands in for the GPU (warnings are errors here)."""
    from privgate import Target, outputs
    from privgate.attacks.gradient import _per_example_sq_norms_loop

    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(torch.jit.script(net), buffer)
        buffer.seek(0)
        scripted = torch.jit.load(buffer)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        moved = Target(scripted, fmt="torchscript").to_device("meta").module
        params = dict(moved.named_parameters())
        assert {(p.device.type, p.is_leaf, p.requires_grad) for p in params.values()} == {("meta", True, True)}
        assert next(scripted.parameters()).device.type == "cpu" and not moved.training  # the caller's stays
        x, y = torch.zeros(5, 4, device="meta"), torch.zeros(5, dtype=torch.long, device="meta")
        sq, loss = _per_example_sq_norms_loop(moved, x, y, list(params), outputs.LOGITS)
    assert sq.device.type == loss.device.type == "meta" and sq.shape == (5, 4)


def _white_box_world():  # noqa: ANN202
    from privgate import Recipe

    rng = np.random.default_rng(3)
    centres = rng.normal(size=(3, 1, 4, 4))

    def rows(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = rng.integers(0, 3, n)
        return (centres[y] + rng.normal(size=(n, 1, 4, 4))).astype(np.float32), y

    def factory() -> nn.Module:
        return nn.Sequential(nn.Flatten(), nn.Linear(16, 24), nn.ReLU(), nn.Dropout(0.1), nn.Linear(24, 3))

    recipe = Recipe(factory, epochs=8, batch_size=16, lr=1e-2, name="white-box")
    members, nonmembers, population = rows(60), rows(60), rows(60)
    return train_model(recipe, *members, seed=0), recipe, members, nonmembers, population


WHITE_BOX = """\
name: white-box
sensitivity: internal
release: model
confidence: 0.9
attacks:
  gradient: {mode: classifier, n_reference: 1}
  inversion: {steps: 20, prior: dae}
checks:
  - {id: gradient, attack: gradient, metric: auc, max: 0.99}
  - {id: inversion, attack: inversion, metric: auc, max: 0.99}
"""


def test_white_box_attacks_on_the_device_give_the_cpu_report(gpu, tmp_path):
    """The gradient attack (its reference models trained on the device too) and model inversion, through the gate
    with ``device="cuda"``: the same report as on the CPU, to float rounding. No warning is raised on the way."""
    from privgate import api

    model, recipe, members, nonmembers, population = _white_box_world()
    (tmp_path / "policy.yaml").write_text(WHITE_BOX)
    reports = {}
    for device in ("cpu", "cuda"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            reports[device] = api.check(
                model, str(tmp_path / "policy.yaml"), members, nonmembers, population=population, recipe=recipe,
                device=device, cache_dir="off", seed=0,
            )  # fmt: skip
    cpu, dev = reports["cpu"], reports["cuda"]
    assert dev.environment["device"] == gpu and cpu.environment["device"] == "cpu"
    assert (
        {a.name: a.status for a in dev.attacks}
        == {a.name: a.status for a in cpu.attacks}
        == {
            "gradient": "ran",
            "inversion": "ran",
        }
    )
    for a, b in zip(cpu.attacks, dev.attacks):
        assert b.auc == pytest.approx(a.auc, abs=1e-6), a.name
    assert [c.value for c in dev.checks] == pytest.approx([c.value for c in cpu.checks], abs=1e-6)
    assert next(model.parameters()).device.type == "cpu"  # the caller's model was copied, not moved


# --------------------------------------------------------------------------- reference models


def test_reference_models_train_on_the_device_as_on_the_cpu(gpu):
    """The engine's kernels — the closed-form MLP (plain and DP-SGD with its own noise), the grouped stack of a CNN
    with BatchNorm and dropout — and the sequential loop train on the device the models the CPU trains."""
    from privgate import Recipe
    from privgate.dp.recipe import DPRecipe
    from privgate.training.engine import train_models
    from privgate.training.plan import model_seeds, paired_masks

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(48, 1, 4, 4)).astype(np.float32), rng.integers(0, 3, 48)
    masks, seeds = paired_masks(48, 2, 0), model_seeds(0, 2)

    def mlp() -> nn.Module:
        return nn.Sequential(nn.Flatten(), nn.Linear(16, 8), nn.Tanh(), nn.Linear(8, 3))

    def cnn() -> nn.Module:
        return nn.Sequential(
            nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.ReLU(), nn.Dropout(0.2), nn.Flatten(), nn.Linear(8, 3)
        )  # fmt: skip

    cases = [(Recipe(mlp, epochs=2, batch_size=16), True), (DPRecipe(mlp, epochs=2, batch_size=16), True)]
    cases += [(Recipe(cnn, epochs=2, batch_size=16), True), (Recipe(cnn, epochs=2, batch_size=16), False)]
    kernels = []
    for recipe, vectorise in cases:
        on = {d: train_models(recipe, x, y, masks, seeds, vectorise=vectorise, device=d) for d in ("cpu", gpu)}
        assert on["cpu"].kernel == on[gpu].kernel, recipe
        kernels.append(on[gpu].kernel)
        for a, b in zip(on["cpu"].states, on[gpu].states):
            assert {t.device.type for t in b.values()} == {"cpu"} and _close(a, b) < 1e-5, on[gpu].kernel
    assert kernels == ["mlp", "mlp-dp", "grouped", "loop"]


# --------------------------------------------------------------------------- DP-SGD retraining


@pytest.mark.parametrize("mode", ["ghost", "hooks"])
def test_dp_sgd_retraining_trains_the_cpu_model_on_the_device(gpu, mode):
    """DP-SGD retraining (Opacus: Poisson batches, clipping, noise; dropout masks) on the device gives the model
    the same seed gives on the CPU. The noise was drawn by a generator on the training device: another stream on
    a GPU than on the CPU (``privgate harden --remediation random-stopping`` found no ε there that the CPU
    hardened at 4); here a generator on the device is refused, as a draw that would differ."""
    from privgate import Recipe
    from privgate.audits.dpsgd_whitebox import GradientCanaries, install
    from privgate.dpsgd.records import DPSettings
    from privgate.dpsgd.train import train_dp

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(64, 8)).astype(np.float32), rng.integers(0, 3, 64)
    recipe = Recipe(lambda: nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 3)), lr=1e-2)
    settings = DPSettings(epochs=2, batch_size=16, max_grad_norm=1.0, delta=1e-3, grad_sample_mode=mode)
    trained, canaries = {}, {}
    for device in ("cpu", gpu):
        gen = torch.Generator().manual_seed(1)
        marks = GradientCanaries(np.array([0, 5, 40]), np.array([True, False, True]), 1.0, gen)
        model, record = train_dp(
            recipe, x, y, seed=3, settings=settings, noise_multiplier=1.0, device=device,
            instrument=lambda opt, q, marks=marks: install(opt, marks, q),  # the one-run audit's canaries
        )  # fmt: skip
        assert _where(model) == "cpu" and record.steps == 8  # handed back on the CPU
        trained[device], canaries[device] = model.state_dict(), marks.scores
    assert _close(trained["cpu"], trained[gpu]) < 1e-5
    assert torch.allclose(canaries["cpu"], canaries[gpu], atol=1e-5) and canaries["cpu"].abs().sum() > 0


# --------------------------------------------------------------------------- language models


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    """Tiny untrained Llama models (a causal LM and a sequence classifier) with tests/tiny_lm.py's character
    tokenizer, saved as public bases, and records of text: what scoring and fine-tuning need, in a second."""
    from tiny_lm import char_tokenizer, records
    from transformers import LlamaConfig, LlamaForCausalLM, LlamaForSequenceClassification

    folder = tmp_path_factory.mktemp("tiny-bases")
    tok = char_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=64, bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, num_labels=2,
    )  # fmt: skip
    for name, cls in (("causal", LlamaForCausalLM), ("classifier", LlamaForSequenceClassification)):
        torch.manual_seed(0)
        cls(config).save_pretrained(folder / name)
        tok.save_pretrained(folder / name)
    texts = [t[:24] for t in records(48, np.random.default_rng(5))]
    return folder, texts


def test_lm_scoring_runs_where_the_model_is(gpu, bases):
    """Token scores, held-out perplexity (harden's utility) and a text classifier's outputs of a model on the device
    equal the CPU's. The token ids were made on the CPU whatever the model's device: ``privgate harden`` of a
    language model died on a GPU with "Expected all tensors to be on the same device, but got index is on cpu"
    (exit 4), its utility scoring the candidate the audit had left on the GPU."""
    from privgate.inputs.targets.hf import load_model_dir
    from privgate.inputs.targets.hf_classifier import TextClassifier
    from privgate.inputs.text import TextSet
    from privgate.lm.scoring import score_texts
    from privgate.lm.utility import HeldOutAccuracy, HeldOutPerplexity

    folder, texts = bases
    lm, clf = load_model_dir(folder / "causal"), load_model_dir(folder / "classifier")
    rows = np.asarray(texts, dtype=object).reshape(-1, 1)
    heldout = TextSet(texts, np.arange(len(texts)) % 2, "<held out>", "held-out")

    def measured() -> tuple:  # noqa: ANN202 - what harden and the audits compute, wherever the models are
        return (
            score_texts(lm.model, lm.tokenizer, texts, context=32, batch_size=8),
            HeldOutPerplexity(heldout, 32, 0.9, 0).utility(lm.model, lm.tokenizer),  # held-out perplexity, its interval
            HeldOutAccuracy(heldout, 32, 0.9, 0).utility(clf.model, clf.tokenizer),  # held-out accuracy
            TextClassifier(clf, batch_size=8).predict_log_proba(rows),
        )

    on_cpu = measured()
    lm.model.to(gpu), clf.model.to(gpu)
    scores, ppl, accuracy, log_proba = measured()
    for name in ("logprob", "mu", "sigma"):
        assert np.allclose(np.concatenate(getattr(scores, name)), np.concatenate(getattr(on_cpu[0], name)), atol=1e-5)
    assert [ppl[0], *ppl[1]] == pytest.approx([on_cpu[1][0], *on_cpu[1][1]], rel=1e-6)
    assert [accuracy[0], *accuracy[1]] == pytest.approx([on_cpu[2][0], *on_cpu[2][1]])
    assert np.allclose(log_proba, on_cpu[3], atol=1e-6)
    assert _where(lm.model) == _where(clf.model) == f"{gpu}:0"  # scored where they are, and left there


def _lm_recipe(base):  # noqa: ANN001, ANN202
    from privgate.inputs.lm_recipe import LMRecipe

    lora = {"r": 2, "alpha": 4, "dropout": 0.1, "target_modules": ["q_proj", "v_proj"]}
    return LMRecipe(base=base, mode="lora", lora=lora, epochs=2, learning_rate=0.01, batch_size=8, max_length=32)


@pytest.mark.parametrize("kind", ["plain", "dp", "user-level dp"])
def test_lm_fine_tunes_are_the_cpu_models_on_the_device(gpu, bases, kind):
    """A fine-tune on the device (LoRA with dropout 0.1; DP-SGD per record or per user) is the model the same seed
    gives on the CPU, handed back on the CPU. LoRA's dropout masks were drawn on the device (another model than
    the CPU's) and the DP noise by a generator on the device (refused here, as a draw that would differ)."""
    from privgate.dpsgd.records import DPSettings
    from privgate.lm.finetune import DPFineTune, finetune

    folder, texts = bases
    dp = None if kind == "plain" else DPFineTune(DPSettings(epochs=2, batch_size=8, max_grad_norm=1.0, delta=1e-3), 1.0)
    users = [f"u{i % 8}" for i in range(len(texts))] if kind == "user-level dp" else None
    models = {}
    for device in ("cpu", gpu):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # transformers' deprecations inside peft
            model, _, stats = finetune(_lm_recipe(folder / "causal"), texts, seed=4, device=device, dp=dp, users=users)
        assert _where(model) == "cpu" and stats.steps > 0 and not any("attention dropout" in n for n in stats.notes)
        models[device] = model.state_dict()
    assert _close(models["cpu"], models[gpu]) < 1e-5


HARDEN = """\
name: lm-device
sensitivity: internal
release: api
confidence: 0.9
attacks:
  {attack}: {{}}
checks:
  - {{id: mia-auc, attack: {attack}, metric: auc, max: 0.01}}
remediation:
  enabled: true
  epsilons: [8]
  accountant: rdp  # calibrates σ in milliseconds (PRV takes seconds at q = 1/3)
"""


@pytest.mark.parametrize("kind", ["causal", "classifier"])
def test_lm_harden_on_the_device_gives_the_cpu_search(gpu, bases, tmp_path, kind):
    """``privgate harden`` of a language model (a causal LM, a sequence classifier; per-user DP shares the path) with
    ``device="cuda"``: every step of the search — the DP fine-tune from the public base, its audit, its held-out
    utility — runs, and gives the CPU's numbers. (A check no model passes, AUC ≤ 0.01, makes the one rung run.)
    On a GPU the utility fed CPU token ids to the candidate the audit had left there: exit 4."""
    import json

    from privgate import HardenSettings, api

    folder, texts = bases
    base = folder / ("classifier" if kind == "classifier" else "causal")
    attack = "loss" if kind == "classifier" else "lm_loss"
    (tmp_path / "policy.yaml").write_text(HARDEN.format(attack=attack))
    (tmp_path / "recipe.yaml").write_text(f"base: {base}\nmode: lora\nlora: {{r: 2, alpha: 4, target_modules: "
                                          "[q_proj, v_proj]}\nepochs: 1\nbatch_size: 8\nmax_length: 32\n")  # fmt: skip
    for name, rows in (("members", texts[:24]), ("nonmembers", texts[24:])):  # AUC: at least 10 + 10 evaluated
        lines = [{"text": t, "label": i % 2} for i, t in enumerate(rows)]
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    reports = {}
    for device in ("cpu", "cuda"):
        settings = HardenSettings(
            str(base), str(tmp_path / "policy.yaml"), str(tmp_path / "members.jsonl"),
            str(tmp_path / "nonmembers.jsonl"), recipe=str(tmp_path / "recipe.yaml"),
            output_model=str(tmp_path / f"out-{device}"),
        )  # fmt: skip
        result = api.harden(settings, device=device, threads=1, cache_dir="off")
        reports[device] = json.loads(result.report.to_json())
    cpu, dev = reports["cpu"], reports["cuda"]
    assert dev["environment"]["device"] == gpu and cpu["environment"]["device"] == "cpu"
    rows = [(r["remediation"]["status"], r["remediation"]["rows"]) for r in (cpu, dev)]
    assert rows[0][0] == rows[1][0] == "no_epsilon" and len(rows[0][1]) == len(rows[1][1]) == 1
    (a,), (b,) = rows[0][1], rows[1][1]
    assert b["training"]["steps"] == a["training"]["steps"] > 0
    assert b["utility"] == pytest.approx(a["utility"], rel=1e-5)
    assert [c["value"] for c in b["checks"]] == pytest.approx([c["value"] for c in a["checks"]], abs=1e-6)
