"""``python -m alflow.tiny serve ...``: run the tiny engine's server without the root ``alflow`` command."""

from alflow.tiny.cli import main

if __name__ == "__main__":
    main()
