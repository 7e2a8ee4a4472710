"""slabench: load testing and SLA grading for OpenAI-compatible LLM endpoints."""

__version__ = "0.1.0"
