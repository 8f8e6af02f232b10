"""Reports: the analysis model (MODEL.md) rendered as self-contained HTML, Markdown, JSON and
the terminal summary. Reads the analysis only; never collects or analyses.

Layer: report; may import: the standard library, jinja2, hangdoctor.report and the foundation
(it reads the analysis model only).
"""
