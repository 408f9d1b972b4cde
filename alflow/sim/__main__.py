"""``python -m alflow.sim serve ...``: run the simulated engine without the root ``alflow`` command."""

from alflow.sim.cli import main

if __name__ == "__main__":
    main()
