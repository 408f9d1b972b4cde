"""Serving-engine lifecycle: recipes turn a server configuration into a Launch; runners start it.

``infra`` sits between the core library (``alflow``) and the Prefect tasks: it may import ``alflow``,
never Prefect and never ``tasks``/``flows``.

Typical use (the tasks layer does the same through :mod:`alflow_infra.lifecycle`)::

    from alflow.config import DockerOptions, SpeculativeConfig, SyntheticAcceptance, server_config
    from alflow_infra.lifecycle import serving

    config = server_config(
        framework="vllm",
        model="deepseek-ai/DeepSeek-V3",
        image="vllm/vllm-openai:v0.11.0",
        parallelism={"tp": 8},
        speculative=SpeculativeConfig(method="mtp", k=3),
        synthetic=SyntheticAcceptance(target_al=2.49),
    )
    with serving(config, DockerOptions(gpus="all")) as handle:
        ...  # handle.base_url, handle.metrics_url, handle.dialect, handle.image_digest

- recipes are the framework plugins' (:mod:`alflow.frameworks.recipes`, ``alflow/frameworks/<name>/recipe.py``) -> :class:`alflow.frameworks.launch.Launch`.
- :mod:`alflow_infra.runners`: ``process``, ``docker``, ``external``, ``slurm`` (registry :data:`alflow_infra.runners.RUNNERS`).
- :mod:`alflow_infra.images`: the local simulator image for Docker without a registry.
- :mod:`alflow_infra.cli`: ``alflow infra cleanup`` and ``alflow infra sim-image``.
"""
