"""What ``transformers``, ``tokenizers`` and PEFT print while they read a model folder goes through privgate's
terminal sanitiser.

The rest (design, limits, derivations): docs/internals-inputs.md.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def library_output_cleaned() -> Iterator[None]:
    """Log records and warnings raised inside the block are printed without control characters (module docstring)."""
    from privgate.plaintext import clean

    make_record = logging.getLogRecordFactory()

    def cleaned_record(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make_record(*args, **kwargs)
        try:
            record.msg, record.args = clean(record.getMessage()), ()
        except Exception:  # noqa: BLE001 - a message that cannot be formatted is dropped, not printed raw
            record.msg, record.args = "(a library message privgate could not format)", ()
        return record

    with warnings.catch_warnings():
        show = warnings.showwarning

        def cleaned_warning(
            message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None
        ):
            show(clean(str(message)), category, filename, lineno, file, line)

        warnings.showwarning = cleaned_warning
        logging.setLogRecordFactory(cleaned_record)
        try:
            yield
        finally:
            logging.setLogRecordFactory(make_record)


__all__ = ["library_output_cleaned"]
