"""Checks of the project as a whole: lint, types and layers, imports, packaging, documentation."""
