"""The trtllm framework plugin: its recipe and its :class:`alflow.plugins.Framework` (``plugin.py``)."""
