"""Serving-engine lifecycle: recipes turn a server configuration into a Launch; runners start it.

``infra`` sits between the core library (``alflow``) and the Prefect tasks: it may import ``alflow``,
never Prefect and never ``tasks``/``flows``.
"""
