"""The framework plugins, one folder each, and what their recipes share.

Plugins: ``vllm``, ``sglang``, ``trtllm``, ``atom``, ``sim``, ``tiny``. Shared: the launch contract with the runners
(:mod:`.launch`), release gates (:mod:`.versions`), the recipe kit (:mod:`.recipe_kit`) and the recipe entry points
(:mod:`.recipes`). This package's ``__init__`` imports nothing: a plugin's parts load only when the registry
(:mod:`alflow.plugins`) asks for them.
"""
