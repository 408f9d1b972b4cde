"""AMD's ATOM as a plugin, its parts one module each.

Recipe (``recipe.py``), metric names and reader (``metrics.py``), synthetic knobs (``knobs.py``), the simulator's
ATOM dialect (``sim.py``) and the :class:`~alflow.frameworks.registry.Framework` (``plugin.py``). Facts are from ROCm/ATOM's own
source at ffdf3bb5dd (main, 2026-08-22); each constant names its file or PR.
"""
