"""A run's settings: TOML configs read, overridden, validated and typed; the built-in configs."""
