"""GPU fleet compatibility: does the one serving image run on every GPU node, and if not, why not."""
