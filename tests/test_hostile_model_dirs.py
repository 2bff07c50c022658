"""Hostile Hugging Face model folders (issue 36): a folder is data, never code, and costs what its bytes do.

A pull request controls the model folder a CI job audits. Each case builds the folder an attacker would (from
the session's tiny LM, ``tests/tiny_lm.py``), runs ``privgate`` in its own process (``cases.run_cli``) with standard
input answering ``y`` or closed, and expects exit 2 with one sentence naming the file and the entry, the folder's
Python never run (it would write a marker file), no prompt, and no control character on stdout or stderr.
Variants that only differ in the refused entry run in process through :func:`privgate.inputs.targets.hf.load_model_dir`,
the one loader every path (check, harden, references, adapters' bases, audit dpsgd) goes through.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cases import run_cli

pytest.importorskip("transformers")

#: A C0 or C1 control character other than newline and tab (ESC starts CSI and OSC 8 sequences; 0x9b is CSI).
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
#: A tensor name an attacker writes into the weights: an OSC 8 hyperlink and a CSI colour.
EVIL_TENSOR = "\x1b]8;;http://evil.example\x1b\\click\x1b]8;;\x1b\\\x1b[31mRED\x1b[0m"
EVIL_CODE = """\
import pathlib
pathlib.Path({marker!r}).write_text("ran")
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
class EvilConfig(LlamaConfig):
    model_type = "evilmodel"
class EvilForCausalLM(LlamaForCausalLM):
    config_class = EvilConfig
class EvilTokenizer(PreTrainedTokenizerFast):
    pass
"""


def _cli(*args: str, cwd: Path, stdin: str | None) -> subprocess.CompletedProcess[str]:
    """``privgate ARGS`` in its own process (:func:`cases.run_cli`); ``stdin`` is what standard input answers (``""``:
    nothing, end of file at once, as in CI), ``None``: it is closed."""
    return run_cli(*args, cwd=cwd, stdin=stdin)


def _refused(r: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Exit 2, one line on stderr holding every needle, nothing on stdout, no control character, no prompt."""
    assert r.returncode == 2, (r.returncode, r.stdout[-3000:], r.stderr[-3000:])
    assert not CONTROL.search(r.stdout + r.stderr), (r.stdout[-2000:], r.stderr[-2000:])
    assert "[y/N]" not in r.stdout + r.stderr and "trust_remote_code" not in r.stdout + r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and not r.stdout.strip(), (r.stdout, r.stderr)
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


@pytest.fixture
def folder(tiny_lm_dir, tmp_path) -> Path:
    """A copy of the session's tiny LM an attacker may edit, beside its members and non-members."""
    from tiny_lm import tiny_lm_records

    members, nonmembers = tiny_lm_records()
    for name, rows in (("m.jsonl", members), ("n.jsonl", nonmembers)):
        (tmp_path / name).write_text("".join(json.dumps({"text": t}) + "\n" for t in rows))
    return Path(shutil.copytree(tiny_lm_dir, tmp_path / "model", ignore=shutil.ignore_patterns(".built")))


def _edit(path: Path, **changes) -> None:
    data = json.loads(path.read_text()) if path.exists() else {}
    data.update(changes)
    path.write_text(json.dumps(data))


def _remote_config(model: Path, marker: Path) -> None:
    """``config.json`` names code beside it (an unknown model_type, so transformers would need it)."""
    (model / "configuration_evil.py").write_text(EVIL_CODE.format(marker=str(marker)))
    auto_map = {
        "AutoConfig": "configuration_evil.EvilConfig",
        "AutoModelForCausalLM": "configuration_evil.EvilForCausalLM",
    }
    _edit(model / "config.json", model_type="evilmodel", architectures=["EvilForCausalLM"], auto_map=auto_map)


def _check(model: Path, *extra: str, stdin: str | None = "y\n") -> subprocess.CompletedProcess[str]:
    d = model.parent
    return _cli("check", str(model), "--policy", "internal", "--members", "m.jsonl", "--nonmembers", "n.jsonl",
                "--threads", "1", *extra, cwd=d, stdin=stdin)  # fmt: skip


# --------------------------------------------------------------------------- item 1: a folder never runs code


@pytest.mark.parametrize("stdin", ["y\n", None], ids=["stdin-answers-y", "stdin-closed"])
def test_config_auto_map_never_runs_the_folders_code(folder, stdin):
    """Before: transformers asked on stdout whether to run configuration_evil.py and ran it on 'y'."""
    marker = folder.parent / "ran"
    _remote_config(folder, marker)
    extra = ("--quiet",) if stdin is None else ()
    msg = _refused(_check(folder, *extra, stdin=stdin), "config.json", "'auto_map' entry 'AutoConfig'")
    assert "configuration_evil.EvilConfig" in msg and "never runs its code" in msg
    assert not marker.exists()


def _remote_tokenizer(model: Path, marker: Path) -> None:
    """``tokenizer_config.json`` names a tokenizer class in a ``.py`` beside it."""
    (model / "tokenization_evil.py").write_text(EVIL_CODE.format(marker=str(marker)))
    _edit(model / "tokenizer_config.json", tokenizer_class="EvilTokenizer",
          auto_map={"AutoTokenizer": [None, "tokenization_evil.EvilTokenizer"]})  # fmt: skip


def test_tokenizer_auto_map_never_runs_the_folders_code(folder):
    from privgate.errors import TargetError
    from privgate.inputs.targets.hf import load_model_dir

    marker = folder.parent / "ran"
    _remote_tokenizer(folder, marker)
    with pytest.raises(TargetError) as err:
        load_model_dir(folder)
    msg = str(err.value)
    assert f"{folder / 'tokenizer_config.json'}: 'auto_map' entry 'AutoTokenizer' names code" in msg
    assert "tokenization_evil.EvilTokenizer" in msg and not marker.exists()


@pytest.mark.parametrize("remote", [_remote_config, _remote_tokenizer], ids=["config", "tokenizer"])
def test_trust_remote_code_is_off_even_where_the_folder_check_would_miss(folder, remote, monkeypatch, capsys):
    """The second wall: with privgate's own auto_map refusal switched off and standard input answering 'y',
    transformers still runs no code and asks nothing (every loader passes trust_remote_code=False)."""
    import io

    import privgate.inputs.targets.hf_folder
    from privgate.errors import TargetError
    from privgate.inputs.targets.hf import load_model_dir

    marker = folder.parent / "ran"
    remote(folder, marker)
    monkeypatch.setattr(privgate.inputs.targets.hf_folder, "refuse_code", lambda path, data: None)
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n" * 8))
    with pytest.raises(TargetError, match="custom code"):
        load_model_dir(folder)
    assert not marker.exists() and sys.stdin.read() == "y\n" * 8  # nothing read the answers
    assert "[y/N]" not in capsys.readouterr().out


def test_an_adapters_base_naming_code_is_refused_and_its_name_cannot_reach_the_terminal(folder):
    """Before: the adapter's base folder, named with ESC sequences, reached stdout raw through transformers'
    prompt, printed even when standard input is empty (and its code ran on 'y')."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    marker = folder.parent / "ran"
    adapter = folder.parent / "adapter"
    get_peft_model(
        AutoModelForCausalLM.from_pretrained(folder), LoraConfig(r=2, target_modules=["q_proj"])
    ).save_pretrained(adapter)
    base = folder.rename(folder.parent / "base\x1b]8;;evil.example\x1b\\x\x1b[31m")  # no "/": one name
    _remote_config(base, marker)
    _edit(adapter / "adapter_config.json", base_model_name_or_path=str(base))
    _refused(_check(adapter, stdin=""), "config.json", "'auto_map'")  # no input at all, as in CI
    assert not marker.exists()


def test_every_loader_refuses_a_folder_naming_code(folder, tiny_lm_dir, tmp_path):
    """The target, a reference model, a recipe's base (check's LiRA/RMIA references, harden, audit dpsgd) and the
    pytest assertion all read a folder through the same guarded loader (an adapter's base: the CLI case above)."""
    from privgate import DpsgdAuditSettings, PrivgateError, api
    from privgate.settings import TextOptions
    from pytest_privgate import assert_exposure_below

    marker = tmp_path / "ran"
    _remote_config(folder, marker)
    recipe, policy = tmp_path / "recipe.yaml", tmp_path / "policy.yaml"
    recipe.write_text(f"base: {folder}\n")
    policy.write_text(
        "name: p\nsensitivity: internal\nrelease: api\nattacks: {lm_loss: {}}\n"
        "checks: [{id: a, attack: lm_loss, metric: auc, max: 0.9}]\nremediation: {enabled: true}\n"
    )
    data = {"members": str(tmp_path / "m.jsonl"), "nonmembers": str(tmp_path / "n.jsonl")}
    good = str(tiny_lm_dir)
    entries = {
        "target": lambda: api.check(str(folder), "internal", **data),
        "reference": lambda: api.check(good, "internal", **data, text=TextOptions(reference_model=str(folder))),
        "references' recipe": lambda: api.check(good, "internal", **data, recipe=str(recipe)),
        "harden's recipe": lambda: api.harden(good, str(policy), **data, recipe=str(recipe)),
        "audit dpsgd's recipe": lambda: api.audit_dpsgd(
            DpsgdAuditSettings(epsilon=2, delta=1e-3, data=data["members"], recipe=str(recipe))
        ),
        "assert_exposure_below": lambda: assert_exposure_below(folder, [{"prefix": "a", "secret": "1"}], bits=8),
    }
    for name, attempt in entries.items():
        with pytest.raises(PrivgateError) as err:
            attempt()
        assert f"{folder / 'config.json'}: 'auto_map' entry 'AutoConfig' names code" in str(err.value), name
    assert not marker.exists()


@pytest.mark.parametrize(
    ("file", "changes", "needle"),
    [
        ("config.json", {"custom_pipelines": {"evil": {"impl": "pipe_evil.EvilPipeline"}}}, "'custom_pipelines'"),
        ("config.json", {"architectures": ["modeling_evil.EvilForCausalLM"]}, "'architectures' entry"),
        ("config.json", {"text_config": {"auto_map": {"AutoConfig": "c.Evil"}}}, "'text_config.auto_map'"),
        ("generation_config.json", {"auto_map": {"AutoConfig": "c.Evil"}}, "'auto_map'"),
        ("processor_config.json", {"auto_map": {"AutoProcessor": "p.Evil"}}, "'auto_map' entry 'AutoProcessor'"),
        ("config.json", {"attn_implementation": "kernels-community/evil"}, "'attn_implementation' names code"),
    ],
)
def test_other_ways_a_folder_names_code_are_refused(folder, file, changes, needle):
    from privgate.errors import TargetError
    from privgate.inputs.targets.hf import load_model_dir

    _edit(folder / file, **changes)
    with pytest.raises(TargetError) as err:
        load_model_dir(folder)
    assert f"{folder / file}:" in str(err.value) and needle in str(err.value)


# --------------------------------------------------------------------------- item 6: library output sanitised


def test_a_tensor_name_with_escape_sequences_reaches_stderr_cleaned(folder):
    """Before: transformers' load report printed the unexpected tensor's OSC 8 link and CSI colour raw."""
    import torch
    from safetensors.torch import load_file, save_file

    weights = load_file(folder / "model.safetensors")
    save_file({**weights, EVIL_TENSOR: torch.zeros(2)}, folder / "model.safetensors", metadata={"format": "pt"})
    (folder.parent / "n.jsonl").unlink()  # the run stops after loading the model: the non-members are missing
    r = _check(folder, stdin=None)
    assert r.returncode == 2 and "n.jsonl" in r.stderr.splitlines()[-1], r.stderr[-2000:]
    assert not CONTROL.search(r.stdout + r.stderr), r.stderr[-2000:]
    assert "UNEXPECTED" in r.stderr and "http://evil.example\\click" in r.stderr  # the report, cleaned, not dropped


# --------------------------------------------------------------------------- item 7: exit 2, not 4


def test_a_catastrophic_tokenizer_regex_is_refused_before_tokenising(folder):
    """Before: tokenizers' Oniguruma hit its retry limit on 'aaaa…c' and the Rust panic ended the run (exit 4)."""
    tok = json.loads((folder / "tokenizer.json").read_text())
    tok["pre_tokenizer"] = {"type": "Split", "pattern": {"Regex": "(a+)+b"}, "behavior": "Isolated", "invert": False}
    (folder / "tokenizer.json").write_text(json.dumps(tok))
    for name in ("m.jsonl", "n.jsonl"):
        rows = [json.dumps({"text": "a" * 40 + f"c {name} {i}"}) for i in range(24)]
        (folder.parent / name).write_text("\n".join(rows) + "\n")
    msg = _refused(_check(folder), f"{folder / 'tokenizer.json'}:", "'(a+)+b'", "backtrack catastrophically")
    assert "panicked" not in msg


@pytest.mark.parametrize(
    ("file", "text", "needle"),
    [
        ("config.json", '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
        ("generation_config.json", '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
        ("config.json", None, "more digits than privgate reads"),
        ("tokenizer_config.json", " " * (16 * 2**20 + 1), "more than the 16.0 MiB privgate reads"),
        ("additional_chat_templates/evil.jinja", " " * (16 * 2**20 + 1), "more than the 16.0 MiB"),
    ],
)
def test_configuration_files_are_bounded(folder, file, text, needle):
    """Before: 10^5 brackets in config.json were a RecursionError (exit 4)."""
    from privgate.errors import TargetError
    from privgate.inputs.targets.hf import load_model_dir

    path = folder / file
    path.parent.mkdir(exist_ok=True)
    if text is None:
        text = path.read_text().replace('"vocab_size": ', '"vocab_size": ' + "7" * 5000 + ', "x": ')
    path.write_text(text)
    with pytest.raises(TargetError) as err:
        load_model_dir(folder)
    assert f"{path}:" in str(err.value) and needle in str(err.value)


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"hidden_size": 10**9, "head_dim": None}, "'hidden_size' is 1,000,000,000, more than the"),
        ({"num_labels": 10**9}, "'num_labels' is 1,000,000,000"),
        ({"num_hidden_layers": 10**6}, "'num_hidden_layers' is 1,000,000, more than the"),
        ({"hidden_size": 4096, "head_dim": None}, "describes a model of"),  # within every count: the meta build
    ],
)
def test_config_counts_are_bounded_by_the_weights(folder, changes, needle):
    """Before: hidden_size 10^9 made transformers allocate the model and run out of memory (exit 4)."""
    from privgate.errors import TargetError
    from privgate.inputs.targets.hf import load_model_dir

    _edit(folder / "config.json", **changes)
    with pytest.raises(TargetError, match="before allocating any memory") as err:
        load_model_dir(folder)
    assert needle in str(err.value)


@pytest.fixture
def adapter(folder) -> Path:
    """A LoRA adapter of the tiny LM, naming it as its base."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    out = folder.parent / "adapter"
    model = AutoModelForCausalLM.from_pretrained(folder)
    get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj", "v_proj"])).save_pretrained(out)
    _edit(out / "adapter_config.json", base_model_name_or_path=str(folder))
    return out


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        (None, "nested too deeply"),
        ({"r": 10**8}, "'r' is 100,000,000, more than the"),
        ({"rank_pattern": {"q_proj": 10**8}}, "'rank_pattern.q_proj' is 100,000,000"),
        ({"target_modules": "(.+)+x"}, "'target_modules' '(.+)+x' is a regular expression that can backtrack"),
        ({"alpha_pattern": {"(\\w+\\.?)+v": 4}}, "'alpha_pattern'"),
        ({"megatron_config": {"tp": 1}, "megatron_core": "evilmod"}, "'megatron_config' makes PEFT import"),
    ],
)
def test_hostile_adapter_configs_are_one_sentence(adapter, changes, needle):
    """Before: a deep adapter_config.json was a RecursionError (exit 4), a huge rank ran out of memory, a
    catastrophic target_modules regex made PEFT's re.fullmatch run for ever."""
    from privgate.errors import TargetError
    from privgate.inputs.targets.hf import load_model_dir

    path = adapter / "adapter_config.json"
    if changes is None:
        path.write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    else:
        _edit(path, **changes)
    with pytest.raises(TargetError) as err:
        load_model_dir(adapter)
    assert f"{path}:" in str(err.value) and needle in str(err.value)


def test_a_normalizer_regex_is_checked_too(folder):
    from privgate.errors import TargetError
    from privgate.inputs.targets.hf import load_model_dir

    tok = json.loads((folder / "tokenizer.json").read_text())
    tok["normalizer"] = {"type": "Replace", "pattern": {"Regex": "(\\s|\\s)*x"}, "content": " "}
    (folder / "tokenizer.json").write_text(json.dumps(tok))
    with pytest.raises(TargetError, match=r"the normalizer's regular expression '\(\\\\s\|\\\\s\)\*x'"):
        load_model_dir(folder)


#: Pre-tokenizer patterns of published tokenizers (GPT-2, cl100k/Llama 3, o200k, DeepSeek, digits): accepted.
PUBLISHED = [
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
    r"\s+(?!\S)|\s+",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    r"[\r\n]",
    r"\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-Ֆ]+",
    r"[一-龥぀-ゟ゠-ヿ]+",
    r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|"
    r"\s*[\r\n]+|\s+(?!\S)|\s+",
    r" ?[^(\s|[.,!?…。，、।۔،])]+",
]


def test_published_tokenizer_patterns_pass_and_catastrophic_ones_do_not():
    from privgate.inputs.targets.hf_regexes import backtracking_problem

    assert [p for p in PUBLISHED if backtracking_problem(p, oniguruma=True)] == []
    for bad in ["(a+)+b", "(a|aa)+b", "(\\p{L}+\\s?)+$", "(?:a?a?)+b", "(.*)\\1", "([a-z]+)*$"]:
        assert backtracking_problem(bad, oniguruma=True), bad


# --------------------------------------------------------------------------- item 11: sizes before reading


def test_an_oversized_tokenizer_is_refused_before_it_is_read(folder):
    """Before: a 67 MB tokenizer.json was parsed (1.6 GB) before any refusal."""
    from privgate.errors import TargetError
    from privgate.inputs.targets.hf import load_model_dir

    path = folder / "tokenizer.json"
    text = path.read_text()
    path.write_text(text[:-1] + " " * (48 * 2**20 - len(text) + 1) + "}")
    with pytest.raises(TargetError) as err:
        load_model_dir(folder)
    msg = str(err.value)
    assert msg.startswith(f"{path}: is 48.0 MiB") and "more than the 48.0 MiB privgate reads" in msg
    assert "cannot be raised" in msg


#: A user's module a config names (code the run imports): it records what the run's standard input was.
STDIN_PROBE = """\
import json, os, sys
from pathlib import Path
try:
    os.fstat(0)
    seen = {"fd0": True, "text": sys.stdin.read()}
except OSError:
    seen = {"fd0": False, "stdin": repr(sys.stdin)}
Path(__file__).with_name("stdin.json").write_text(json.dumps(seen))

def data():
    return 1
"""


@pytest.mark.parametrize(("stdin", "seen"), [("y\n", {"fd0": True, "text": "y\n"}), ("", {"fd0": True, "text": ""}),
                                             (None, {"fd0": False, "stdin": "None"})])  # fmt: skip
def test_the_runs_above_get_the_standard_input_they_name(tmp_path, stdin, seen):
    """``_cli``'s ``stdin``: the text it names, or no descriptor 0 and ``sys.stdin`` None, as ``<&-`` leaves a
    fresh interpreter."""
    config = 'model = "m.pt"\npolicy = "internal"\nnonmembers = "n.npz"\nmembers = "probe:data"\n'
    (tmp_path / "privgate.toml").write_text(config)
    (tmp_path / "probe.py").write_text(STDIN_PROBE)
    r = _cli("check", cwd=tmp_path, stdin=stdin)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert json.loads((tmp_path / "stdin.json").read_text()) == seen
