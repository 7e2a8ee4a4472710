"""Packaged data of the fleet check (a package so that `pip install .` ships the YAML)."""
