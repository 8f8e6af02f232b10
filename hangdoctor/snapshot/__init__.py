"""Snapshots: the one JSON document (SCHEMA.md) that collectors and paste parsers write and
evidence reads; reading, writing (atomic, redacted) and normalising older versions.

Layer: snapshot; may import: the standard library, hangdoctor.snapshot and the foundation.
"""
