"""Running trials behind one executor interface (local, Slurm), the sweep driver, adaptive search and
repeats, and the verbs that drive them."""
