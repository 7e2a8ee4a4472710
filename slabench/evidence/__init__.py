"""What a run knows about itself beyond its records: completeness, the server's own metrics, agreement between
client and server, provenance, and whether the load generator was on time. Imports only the core."""
