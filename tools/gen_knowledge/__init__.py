"""Generate hangdoctor/knowledge/generated/{wait_points,messages}.json from the libraries' own
source: ``python -m tools.gen_knowledge --help`` (docs/knowledge-generation.md)."""
