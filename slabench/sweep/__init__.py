"""`slabench sweep`: repeated locust runs per concurrency level, and `slabench aggregate` (see analysis/)."""
