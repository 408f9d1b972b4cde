"""The vllm framework plugin: its recipe and its :class:`~alflow.frameworks.registry.Framework` (``plugin.py``)."""
