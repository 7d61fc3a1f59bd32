"""Callbacks that report a framework's optimizer steps through `launcher.meter`, for training that runs in
a framework's own loop: `hf` (a transformers `TrainerCallback`, extra `hf`) and `lightning` (a Lightning
`Callback`, extra `lightning`). Each imports its framework; nothing else in launcher imports them."""
