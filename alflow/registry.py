"""The framework registry's former home, kept for framework plugins written before it moved.

The registry is :mod:`alflow.frameworks.registry`; a plugin's ``plugin.py`` imports ``Framework`` from there.
"""

from alflow.frameworks.registry import Framework, frameworks, get_framework

__all__ = ["Framework", "frameworks", "get_framework"]
