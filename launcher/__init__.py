"""launcher: measure distributed PyTorch training at several sizes and pick the efficient one."""

__version__ = "0.1.0"
