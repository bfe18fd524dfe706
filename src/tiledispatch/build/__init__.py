"""Building kernel instances: tensor-free compile tasks, spawned worker pool, persistent cache."""
