"""Slurm: job scripts rendered as a pure function of a request, the one module that runs
sbatch/squeue/sacct/scancel, pure parsers of their output, the tracker, and the dev cluster."""
