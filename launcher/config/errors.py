"""The one exception type for bad user input: the CLI prints its single line and exits 2."""


class ConfigError(ValueError):
    """Bad input. The message says what is wrong, the value, and how to fix it — one line."""
