"""``python -m alflow.cli``: the ``alflow`` console script."""

from alflow.cli.main import main

main()
