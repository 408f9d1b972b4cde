"""The framework plugins, one folder each, and what their recipes share.

Plugins: ``vllm``, ``sglang``, ``trtllm``, ``atom``, ``sim``, ``tiny``. Shared: the launch contract with the runners
(:mod:`.launch`), release gates (:mod:`.versions`), the recipe kit (:mod:`.recipe_kit`) and the recipe entry points
(:mod:`.recipes`), the recipe's protocols (:mod:`.contract`). This package's ``__init__`` imports only
:mod:`alflow.config`: a plugin's parts load when the registry (:mod:`alflow.frameworks.registry`, from the specs in
:mod:`alflow.plugins`) asks for them, and a plugin's config model (``<name>/config.py``) subclasses
``alflow.config.server.ServerBase``, whose module builds the server union from every plugin's model when it is
first imported. Importing that module first, from here, lets a plugin's config module be the first thing imported
(the union then loads it whole, before the import that asked for it goes on).
"""

import alflow.config  # noqa: F401  (first: see above)
