"""Hostile text inputs of a language-model audit (issue 36, items 7 and 11): one sentence, exit 2, no cost first.

The model is the character-level tiny LM of ``tests/tiny_lm.py`` (a session fixture; context 128 tokens). What
the CLI itself must show (exit 2 and one line on stderr, never a traceback or exit 4) runs ``privgate check`` in a
subprocess; the other refusals go through the same door in process (:func:`privgate.api.check`). The limits are
lowered with their flags or config keys so that the inputs just past them are small: nothing here allocates
more than a few megabytes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cases import run_cli
from tiny_lm import INSERTED, tiny_lm_records

from privgate import PrivgateError
from privgate.errors import DataError

NESTED = "[" * 100_000 + "]" * 100_000  # Python's JSON parser gives up (RecursionError) long before this depth


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture
def data(tmp_path):
    members, nonmembers = tiny_lm_records()
    m = _jsonl(tmp_path / "members.jsonl", [{"text": t} for t in members])
    n = _jsonl(tmp_path / "nonmembers.jsonl", [{"text": t} for t in nonmembers])
    return m, n


def _cli_refusal(model: Path, *args: str, cwd: Path) -> str:
    """``privgate check`` refuses: exit 2, one line on stderr, no traceback; that line."""
    r = run_cli("check", str(model), "--policy", "public", "--threads", "1", *args, cwd=cwd)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr
    lines = [line for line in r.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1, r.stderr
    return lines[0]


def _refusal(model: Path, members: Path, nonmembers: Path, **text) -> str:
    """The one sentence :func:`privgate.api.check` raises (the CLI prints it and exits 2)."""
    from privgate import check
    from privgate.settings import TextOptions

    with pytest.raises(PrivgateError) as err:
        check(str(model), "public", str(members), str(nonmembers), text=TextOptions(**text))
    msg = str(err.value)
    assert "\n" not in msg and msg.endswith("."), msg
    return msg


def test_deeply_nested_json_in_a_members_file_is_one_sentence(tiny_lm_dir, data, tmp_path):
    """10^5 nested brackets on line 25: RecursionError (exit 4) before; now the file and line, exit 2."""
    members, nonmembers = data
    members.write_text(members.read_text() + NESTED + "\n")
    line = _cli_refusal(tiny_lm_dir, "--members", str(members), "--nonmembers", str(nonmembers), cwd=tmp_path)
    assert line == f"error: {members}, line 25: the JSON is nested too deeply to parse (a row is one flat object)."


def test_deeply_nested_json_in_canaries_and_user_fields_is_one_sentence(tiny_lm_dir, data, tmp_path):
    from privgate.inputs.text import load_users

    members, nonmembers = data
    canaries = tmp_path / "canaries.jsonl"
    canaries.write_text(json.dumps(INSERTED) + "\n" + '{"prefix": ' + NESTED + "}\n")
    msg = _refusal(tiny_lm_dir, members, nonmembers, canaries=str(canaries))
    assert msg == f"{canaries}, line 2: the JSON is nested too deeply to parse (a row is one flat object)."
    # the user column of user-level DP fine-tuning (privgate harden --user-field) reads the same rows
    members.write_text(json.dumps({"text": "a record", "user": "u1"}) + "\n" + NESTED + "\n")
    with pytest.raises(DataError, match=rf"^{members}, line 2: the JSON is nested too deeply"):
        load_users(members, "user")


def test_a_lone_surrogate_in_a_record_is_one_sentence(tiny_lm_dir, data):
    """``"\\ud800"`` decodes to a lone surrogate: the tokenizer's TypeError (exit 4) before; now exit 2."""
    members, nonmembers = data
    members.write_text(members.read_text() + '{"text": "record 99: abc \\ud800 def"}\n')
    msg = _refusal(tiny_lm_dir, members, nonmembers)
    assert msg == (
        f"{members}, line 25: field 'text' holds a lone surrogate ('\\ud800' at character 16), which is not Unicode "
        "text (a JSON escape such as \\ud800 must be one half of a pair)."
    )


def test_a_lone_surrogate_in_a_canary_is_one_sentence(tiny_lm_dir, data, tmp_path):
    members, nonmembers = data
    canaries = tmp_path / "canaries.jsonl"
    canaries.write_text('{"prefix": "pin \\udfff is ", "secret": "12", "alphabet": "0123456789"}\n')
    msg = _refusal(tiny_lm_dir, members, nonmembers, canaries=str(canaries))
    assert msg.startswith(f"{canaries}, line 1: field 'prefix' holds a lone surrogate ('\\udfff' at character 5)")
    # a well-formed pair (an emoji written as two escapes) is ordinary text
    from privgate.inputs.text import unicode_text

    assert unicode_text(json.loads('"\\ud83d\\ude00"'), "here", "field") == "\U0001f600"


def test_more_records_than_the_limit_are_refused_at_the_first_past_it(tiny_lm_dir, data):
    """A limit of 10 on 24 records: refused at line 11, naming the flag and its config key."""
    members, nonmembers = data
    msg = _refusal(tiny_lm_dir, members, nonmembers, max_records=10)
    assert msg == (
        f"{members}, line 11: the members file holds more than 10 records, the limit; raise it with --max-records N "
        "(config key max_records) to audit them all."
    )


def test_the_limit_flags_reach_the_text_options():
    """``--max-records``/``--max-text-mib``/``--max-canaries`` (else their config keys) set the TextOptions."""
    from privgate.cli.lmoptions import text_settings

    config = {"max_text_mib": 7}
    got = text_settings(
        {"max_records": 10, "max_canaries": 2}, lambda key, flag: config.get(key) if flag is None else flag
    )
    assert (got.max_records, got.max_text_mib, got.max_canaries) == (10, 7, 2)
    defaults = text_settings({}, lambda key, flag: flag)
    assert (defaults.max_records, defaults.max_text_mib, defaults.max_canaries) == (100_000, 512, 1000)


def test_the_default_record_limit_refuses_before_scoring(tiny_lm_dir, data, tmp_path):
    """100,001 one-word records (800 kB): refused when read, before any is tokenised or scored."""
    from privgate.inputs.text import MAX_RECORDS

    _, nonmembers = data
    many = tmp_path / "many.txt"
    many.write_text("".join(f"r{i}\n" for i in range(MAX_RECORDS + 1)))
    msg = _refusal(tiny_lm_dir, many, nonmembers)
    assert msg.startswith(f"{many}, line 100001: the members file holds more than 100,000 records, the limit")


def test_the_file_size_limit_is_checked_before_reading(tiny_lm_dir, data, tmp_path):
    """A 2 MiB sparse file under a 1 MiB limit: refused from its size (nothing read), naming --max-text-mib."""
    members, _ = data
    sparse = tmp_path / "sparse.jsonl"
    with sparse.open("wb") as f:
        f.truncate(2 << 20)  # a hole: no byte is written, so none would be worth reading
    msg = _refusal(tiny_lm_dir, members, sparse, max_text_mib=1)
    assert msg == (
        f"{sparse}: the non-members file is larger than 1 MiB, the most privgate reads; raise the limit with "
        "--max-text-mib N (config key max_text_mib) if this is the right file."
    )


def test_more_canaries_than_the_config_allows_are_refused(tiny_lm_dir, data, tmp_path):
    """``max_canaries = 1`` in privgate.toml, two canaries: refused at line 2 before any secret is ranked."""
    members, nonmembers = data
    (tmp_path / "privgate.toml").write_text("max_canaries = 1\n")
    canaries = tmp_path / "canaries.jsonl"
    canaries.write_text(json.dumps(INSERTED) + "\n" + json.dumps({**INSERTED, "secret": "1111"}) + "\n")
    args = ("--members", str(members), "--nonmembers", str(nonmembers), "--canaries", str(canaries))
    line = _cli_refusal(tiny_lm_dir, *args, cwd=tmp_path)
    assert line.startswith(f"error: {canaries}, line 2: the canary file holds more than 1 canaries, the limit")
    assert line.endswith("raise it with --max-canaries N (config key max_canaries).")


def test_a_canary_longer_than_the_context_is_refused_before_scoring(tiny_lm_dir, data, tmp_path):
    """A 300-character prefix (305 tokens) on a 128-token model: refused, naming the canary's line."""
    members, nonmembers = data
    canaries = tmp_path / "canaries.jsonl"
    canaries.write_text(json.dumps(INSERTED) + "\n" + json.dumps({**INSERTED, "prefix": "x" * 300}) + "\n")
    msg = _refusal(tiny_lm_dir, members, nonmembers, canaries=str(canaries))
    assert msg == (
        f"{canaries}, line 2: the canary's prefix and secret are 305 tokens, more than the model's context of 128; "
        "use a shorter prefix."
    )


def test_a_secret_space_beyond_floating_point_is_refused():
    """400 random digits (2^1329 candidates): the exposure arithmetic would overflow (exit 4); refused at load."""
    from privgate.inputs.canaries import validate_canary

    row = {"prefix": "pin ", "secret": "7" * 400, "alphabet": "0123456789"}
    with pytest.raises(DataError) as err:
        validate_canary(row, "c.jsonl, line 1")
    assert str(err.value) == (
        "c.jsonl, line 1: the secret's 400 characters over an alphabet of 10 make 2^1,329 candidates, more than "
        "the 2^1000 privgate ranks a secret among; use a shorter secret."
    )


def test_a_long_record_is_cut_to_the_context_before_it_is_tokenised(tiny_lm_dir, data, tmp_path):
    """A 300,000-character CSV record: csv's 128 KiB field limit (exit 4) before; now cut to 128 × 32 characters
    when read — all that 128 tokens can cover — scored, and counted as truncated."""
    from inproc import check

    from privgate.inputs.text import MAX_CHARS_PER_TOKEN, char_limit, load_texts

    members, nonmembers = data
    texts = [json.loads(line)["text"] for line in members.read_text().splitlines()]
    table = tmp_path / "members.csv"
    long = "record 98: " + "abc " * 75_000
    table.write_text("text\n" + "\n".join([*texts, long]) + "\n")
    read = load_texts(table, "members", max_chars=char_limit(128))
    assert read.clipped == (24,) and len(read.texts[24]) == 128 * MAX_CHARS_PER_TOKEN == 4096
    assert read.texts[24] == long[:4096] and read.texts[:24] == texts  # the others are untouched
    report = check(tiny_lm_dir, "public", table, nonmembers)
    assert report.data["members"]["n"] == 25 and report.data["truncated"] == 1
    assert "1 of 49 records are longer than the model's context of 128 tokens and were truncated to it" in (
        report.warnings
    )


def test_the_limits_are_config_keys_of_at_least_one(tmp_path):
    """The three limits are config keys (privgate.toml, [tool.privgate]); a 0 is one sentence, exit 2."""
    from privgate.errors import ConfigError
    from privgate.inputs.config import load_config

    good = tmp_path / "privgate.toml"
    good.write_text("max_records = 5\nmax_text_mib = 2\nmax_canaries = 3\n")
    assert load_config(good).values == {"max_records": 5, "max_text_mib": 2, "max_canaries": 3}
    bad = tmp_path / "bad.toml"
    bad.write_text("max_records = 0\n")
    with pytest.raises(ConfigError, match=r"'max_records' must be at least 1, got 0\.$"):
        load_config(bad)
