"""The methods as plain functions over typed inputs, their side effects injected.

M2's procedure is :mod:`alflow.methods.m2`, the concurrency plans it walks :mod:`alflow.methods.plan`. No Prefect
here: the flows give these functions Prefect's tasks as their steps, unit tests give them fakes.
"""
