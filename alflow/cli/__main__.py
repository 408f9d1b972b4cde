"""``python -m alflow.cli``: the ``alflow`` console script."""

from alflow.cli import main

main()
