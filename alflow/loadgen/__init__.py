"""The streaming load generator: aiohttp client, SSE parsing, schedulers and request records."""

from alflow.loadgen.client import AiohttpTransport, FatalRequestError, Transport, stream_request
from alflow.loadgen.counts import CountsReader, RequestSpec, fill_spec_counts
from alflow.loadgen.endpoints import ENDPOINTS, Endpoint, Sampling, get_endpoint
from alflow.loadgen.records import RequestRecord
from alflow.loadgen.runner import run_load
from alflow.loadgen.spec import LoadAbortedError, LoadResult, LoadSpec, Progress, Target

__all__ = [
    "ENDPOINTS",
    "AiohttpTransport",
    "CountsReader",
    "Endpoint",
    "FatalRequestError",
    "LoadAbortedError",
    "LoadResult",
    "LoadSpec",
    "Progress",
    "RequestRecord",
    "RequestSpec",
    "Sampling",
    "Target",
    "Transport",
    "fill_spec_counts",
    "get_endpoint",
    "run_load",
    "stream_request",
]
