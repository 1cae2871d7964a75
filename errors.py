"""The exception for a user's mistake, importable from every layer.

A ``ConfigError`` says that what the user asked for cannot run: a config key unknown,
of the wrong type or out of range, a config that is neither a file nor a built-in one,
or a setting that the chosen loop, link or emulated device does not support. The
``hil`` command prints its message as one line and exits 2; any other exception is a
bug and shows its traceback.
"""


class ConfigError(ValueError):
    """A config (or a command-line option that sets one) that cannot run, with the reason."""
