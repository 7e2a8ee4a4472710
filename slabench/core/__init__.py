"""The measurement core: the one record, the SSE parser and streaming client, sinks, token counts, and the readers
every input passes through. Imports nothing above it and never Locust."""
