"""``privgate canaries make``: fresh random canaries for a team to insert into training text.

The canaries (Carlini et al. 2019, "The Secret Sharer", arXiv 1802.08232) go
into a JSON Lines file, written atomically and never over an existing file;
``privgate check --canaries FILE`` later measures how exposed each one is.
"""

from __future__ import annotations

import math

import click

from privgate.cli.guard import guard


@click.group("canaries")
def canaries() -> None:
    """Canaries: random secrets inserted into training text to measure memorisation (exposure)."""


@canaries.command("make")
@click.argument("output", type=click.Path(dir_okay=False))
@click.option("-n", "--count", default=10, show_default=True, type=click.IntRange(min=1), help="How many canaries.")
@click.option("--length", default=6, show_default=True, type=click.IntRange(min=1), help="Characters in each secret.")
@click.option(
    "--alphabet", default="0123456789", show_default=True, help="Characters a secret is drawn from (distinct)."
)
@click.option(
    "--prefix",
    "prefix_template",
    default="canary {i}: the secret number is ",
    show_default=True,
    help="Text before each secret; {i} becomes the canary's number.",
)
@click.option(
    "--seed",
    type=int,
    default=None,
    help="Seed for reproducible canaries (default: the operating system's randomness, which real canaries want).",
)
@guard
def make(output: str, count: int, length: int, alphabet: str, prefix_template: str, seed: int | None) -> int:
    """Write COUNT fresh canaries to OUTPUT (JSON Lines; never overwrites a file)."""
    from privgate.errors import PrivgateError
    from privgate.inputs.canaries import make_canaries, to_jsonl
    from privgate.io.atomic import write_new

    if not alphabet:
        raise PrivgateError("--alphabet is empty; give the characters a secret may use, e.g. 0123456789.")
    repeated = sorted({c for c in alphabet if alphabet.count(c) > 1})
    if repeated:
        raise PrivgateError(f"--alphabet {alphabet!r} repeats {''.join(repeated)!r}; give each character once.")
    if not prefix_template:
        raise PrivgateError("--prefix is empty; a secret needs text before it to follow.")
    from privgate.inputs.canaries import MAX_SPACE_BITS

    if length * math.log2(len(alphabet)) > MAX_SPACE_BITS:
        raise PrivgateError(
            f"--length {length} over {len(alphabet)} characters makes more than 2^{MAX_SPACE_BITS} possible secrets, "
            "more than privgate ranks a secret among; use a shorter secret."
        )
    made = make_canaries(count, length=length, alphabet=alphabet, prefix_template=prefix_template, seed=seed)
    try:
        write_new(output, to_jsonl(made))
    except FileExistsError:
        raise PrivgateError(
            f"{output}: already exists; privgate canaries make never overwrites a file, so nothing was written."
        ) from None
    except OSError as exc:
        raise PrivgateError(f"{output}: cannot write the canaries ({exc.strerror or exc}).") from None
    bits = length * math.log2(len(alphabet))
    what = "canary" if count == 1 else "canaries"
    click.echo(
        f"wrote {count} {what} to {output}: {len(alphabet)}^{length} possible secrets each "
        f"(exposure up to {bits:.1f} bits); insert them into the training text, then measure with --canaries."
    )
    return 0


@canaries.command("validate")
@click.argument("path", type=click.Path(dir_okay=False))
@click.option(
    "--max-canaries",
    type=click.IntRange(min=1),
    default=None,
    help="Most canaries the file may hold (default 1,000, as privgate check).",
)
@guard
def validate(path: str, max_canaries: int | None) -> int:
    """Check a canary file (JSON Lines: prefix, secret, alphabet) and say how much each canary can show."""
    from privgate.inputs.canaries import MAX_CANARIES, load_canaries

    rows = load_canaries(path, max_canaries or MAX_CANARIES)
    bits = [c.space_bits for c in rows]
    spaces = [c.space for c in rows]
    what = "canary" if len(rows) == 1 else "canaries"
    click.echo(
        f"{path}: {len(rows)} {what}, each with {min(spaces):,} to {max(spaces):,} possible secrets "
        f"(exposure up to {min(bits):.1f}-{max(bits):.1f} bits)."
    )
    return 0
