"""The tiny framework plugin: its recipe and its :class:`~alflow.registry.Framework` (``plugin.py``)."""
