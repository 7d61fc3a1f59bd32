"""The one exception users see from the dev cluster."""


class DevClusterError(RuntimeError):
    """A one-line message for the user (the CLI prints `launcher: error: <message>`, exit 2)."""
