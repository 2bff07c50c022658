"""Canary files: ``privgate canaries make`` through the CLI, and the loader's one-sentence refusals."""

from __future__ import annotations

import json

import pytest
from cases import run_cli as privgate

from privgate.errors import DataError
from privgate.inputs.canaries import load_canaries, make_canaries


def test_make_writes_seeded_canaries_and_never_overwrites(tmp_path):
    out = tmp_path / "canaries.jsonl"
    args = ["canaries", "make", "-n", "5", "--length", "8", "--alphabet", "abc", "--seed", "11"]
    done = privgate(*args, str(out))
    assert done.returncode == 0, done.stderr
    assert "5 canaries" in done.stdout and "12.7 bits" in done.stdout  # 8 · log2(3)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 5
    assert [r["prefix"] for r in rows] == [f"canary {i}: the secret number is " for i in range(5)]
    assert all(len(r["secret"]) == 8 and set(r["secret"]) <= set("abc") and r["alphabet"] == "abc" for r in rows)
    assert len({r["secret"] for r in rows}) == 5
    loaded = load_canaries(out)  # the file the command writes is one the loader accepts
    assert [c.secret for c in loaded] == [r["secret"] for r in rows]
    assert loaded[0].space == 3**8

    again = tmp_path / "again.jsonl"
    assert privgate(*args, str(again)).returncode == 0
    assert again.read_text() == out.read_text()  # same seed, same canaries
    other = tmp_path / "other.jsonl"
    assert privgate(*args[:-1], "12", str(other)).returncode == 0
    assert other.read_text() != out.read_text()

    before = out.read_text()
    refused = privgate(*args[:-1], "99", str(out))
    assert refused.returncode == 2
    assert "already exists" in refused.stderr and "Traceback" not in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert out.read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["again.jsonl", "canaries.jsonl", "other.jsonl"]


def test_make_without_seed_draws_fresh_secrets():
    a = make_canaries(3, length=12)
    b = make_canaries(3, length=12)
    assert [c.secret for c in a] != [c.secret for c in b]
    assert make_canaries(3, length=12, seed=4) == make_canaries(3, length=12, seed=4)


def test_make_refuses_a_repeating_alphabet(tmp_path):
    done = privgate("canaries", "make", "--alphabet", "0120", str(tmp_path / "c.jsonl"))
    assert done.returncode == 2 and "repeats '0'" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "c.jsonl").exists()


BAD = {
    "outside": ('{"prefix": "pin ", "secret": "12a4", "alphabet": "0123456789"}', "uses 'a', not in its alphabet"),
    "empty-alphabet": ('{"prefix": "pin ", "secret": "1", "alphabet": ""}', "the alphabet is empty"),
    "duplicates": ('{"prefix": "pin ", "secret": "1", "alphabet": "0112"}', "repeats '1'"),
    "missing": ('{"prefix": "pin ", "alphabet": "01"}', "has no field 'secret'"),
    "not-string": ('{"prefix": "pin ", "secret": 1234, "alphabet": "01234"}', "field 'secret' must be a string"),
    "json": ('{"prefix": "pin ", "secret": ', "not valid JSON"),
    "array": ('["pin ", "1", "01"]', "expected a JSON object"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_canary_files_are_one_sentence_naming_file_and_line(tmp_path, case):
    line, words = BAD[case]
    path = tmp_path / "canaries.jsonl"
    path.write_text('{"prefix": "ok ", "secret": "01", "alphabet": "01"}\n\n' + line + "\n")
    with pytest.raises(DataError) as err:
        load_canaries(path)
    message = str(err.value)
    assert message.startswith(f"{path}, line 3: ") and words in message
    assert "\n" not in message and message.endswith(".")


def test_validate_through_the_cli_exits_2_with_one_sentence(tmp_path):
    good, bad = tmp_path / "good.jsonl", tmp_path / "bad.jsonl"
    good.write_text('{"prefix": "pin ", "secret": "0042", "alphabet": "0123456789"}\n')
    bad.write_text('{"prefix": "pin ", "secret": "00x2", "alphabet": "0123456789"}\n')
    done = privgate("canaries", "validate", str(good))
    assert done.returncode == 0 and "1 canary," in done.stdout and "10,000 to 10,000" in done.stdout
    done = privgate("canaries", "validate", str(bad))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip() == (
        f"error: {bad}, line 1: the secret '00x2' uses 'x', not in its alphabet '0123456789'."
    )


def test_an_empty_or_missing_canary_file_is_refused(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(DataError, match="has no canaries"):
        load_canaries(empty)
    with pytest.raises(DataError, match="cannot read canary file"):
        load_canaries(tmp_path / "absent.jsonl")
