"""``python -m privgate.cli``: the same as the ``privgate`` console script."""

from privgate.cli import main

main()
