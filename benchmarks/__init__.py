"""The benchmarks: each module that records figures in benchmarks/results/ runs from the repository root
as `.venv/bin/python -m benchmarks.<name>` (its docstring says with which options); the others are the
pieces they share."""
