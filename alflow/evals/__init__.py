"""Accuracy evaluations (GSM8K) against OpenAI-compatible servers."""
