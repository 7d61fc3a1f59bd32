"""The job payload (`python -m launcher.train`): models, one engine per layout, data, the training loop
and what it measures."""
