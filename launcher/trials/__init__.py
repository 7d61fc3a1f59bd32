"""Pure: config → trial specs (degrees per world size, batch math, the payload description) and the
trial folder, read and written in one place."""
