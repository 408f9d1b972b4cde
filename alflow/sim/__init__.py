"""The built-in simulated serving engine.

OpenAI-compatible streaming, continuous batching, speculative decoding with each framework's
synthetic acceptance, and each framework's metrics dialect.

Entry points: ``alflow sim serve`` / ``python -m alflow.sim serve`` (:mod:`alflow.sim.cli`),
:class:`alflow.sim.process.SimProcess` (subprocess) and :func:`alflow.sim.process.start_in_thread`.
"""
