"""Typed structured configs (schema, choices), composition with Hydra, validation and derived values:
the bottom of the package above the leaves and the layout table."""
