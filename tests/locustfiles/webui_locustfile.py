"""The chat replay user for the web UI tests (install() brings the SLA hook, the scraper and the LLM tab)."""

from locustfiles.chat_replay import ChatReplayUser

__all__ = ["ChatReplayUser"]
