"""alflow: calibrate, gate and benchmark speculative decoding in LLM serving frameworks."""

__version__ = "0.1.0"
