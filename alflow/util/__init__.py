"""Utilities the rest builds on: atomic files, JSON and YAML, names, redaction, the event loop, process guards."""
