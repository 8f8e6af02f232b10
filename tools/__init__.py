"""Developer tools kept with the repository (not shipped in the package)."""
