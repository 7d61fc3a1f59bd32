"""Helpers shared by test files of more than one kind (unit, multiprocess, slurm), imported as
`tests.support.NAME`."""
