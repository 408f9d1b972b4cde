"""``python -m alflow.cli``: the ``alflow`` console script."""

from alflow.cli.entry import main

main()
