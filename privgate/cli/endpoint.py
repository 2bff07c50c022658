"""Flags for auditing a live endpoint: ``--header``, ``--max-queries``, ``--endpoint-output``, transport bounds.

They only matter when MODEL is an ``http(s)://…/v2/models/NAME`` URL
(:mod:`privgate.inputs.targets.endpoint`). Header values are credentials:
they go into the request and nowhere else — not the report, not the console,
not an error message.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click


def endpoint_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Add the endpoint flags to a command."""
    options = [
        click.option(
            "--header",
            "headers",
            multiple=True,
            metavar="'NAME: VALUE'",
            help="With an endpoint URL: an HTTP header sent with every request, e.g. 'Authorization: Bearer "
            "TOKEN' (repeatable). Its value is never written to a report or log.",
        ),
        click.option(
            "--max-queries",
            type=click.IntRange(min=1),
            help="With an endpoint URL: the most rows privgate may send (distinct rows; a run that would need more "
            "stops with exit 2 before sending them). This flag, else the config's 'max_queries', else no limit.",
        ),
        click.option(
            "--endpoint-output",
            metavar="NAME",
            help="With an endpoint URL: the output tensor to read (default: the single output the server lists, "
            "the one named like probabilities or logits, or MLServer's predict_proba when the server answers "
            "labels). This flag, else the config's 'endpoint_output'.",
        ),
        click.option(
            "--endpoint-timeout",
            type=click.FloatRange(min=0.1),
            help="With an endpoint URL: seconds one whole request may take, its answer read to the end, before it "
            "is retried (default 30). This flag, else the config's 'endpoint_timeout'.",
        ),
        click.option(
            "--endpoint-max-bytes",
            type=click.IntRange(min=1024),
            metavar="BYTES",
            help="With an endpoint URL: the largest answer read, in bytes once decompressed (default 33554432, 32 "
            "MiB); a larger one stops the run with exit 2 before it is read. This flag, else the config's "
            "'endpoint_max_bytes'.",
        ),
        click.option(
            "--endpoint-batch",
            type=click.IntRange(min=1),
            help="With an endpoint URL: rows per request (default 256).",
        ),
        click.option(
            "--endpoint-concurrency",
            type=click.IntRange(min=1),
            help="With an endpoint URL: requests in flight at once (default 4).",
        ),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def endpoint_access(
    headers: tuple[str, ...] = (),
    max_queries: int | None = None,
    endpoint_output: str | None = None,
    endpoint_timeout: float | None = None,
    endpoint_batch: int | None = None,
    endpoint_concurrency: int | None = None,
    config: Any = None,
    endpoint_max_bytes: int | None = None,
) -> Any:
    """The :class:`~privgate.inputs.targets.endpoint.Access` the flags (and config keys) describe."""
    from privgate.inputs.targets.endpoint import Access, parse_header
    from privgate.inputs.targets.oip import MAX_BYTES

    def pick(value: Any, key: str, default: Any) -> Any:
        if value is not None:
            return value
        found = config.get(key) if config is not None else None
        return default if found is None else found

    return Access(
        headers=tuple(parse_header(h) for h in headers),
        max_queries=pick(max_queries, "max_queries", None),
        output=pick(endpoint_output, "endpoint_output", None),
        timeout=float(pick(endpoint_timeout, "endpoint_timeout", 30.0)),
        batch=pick(endpoint_batch, "endpoint_batch", 256),
        concurrency=pick(endpoint_concurrency, "endpoint_concurrency", 4),
        max_bytes=pick(endpoint_max_bytes, "endpoint_max_bytes", MAX_BYTES),
    )


__all__ = ["endpoint_access", "endpoint_options"]
