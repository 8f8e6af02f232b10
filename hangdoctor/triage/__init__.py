"""Triage: runs the checks over the evidence, merges their signals into ranked causes with a
confidence, decides the verdict (hung, progressing, healthy, dead, inconclusive) and proposes the
next experiment; the result is the analysis model that reports render.

Layer: triage; may import: hangdoctor.triage, hangdoctor.checkapi, hangdoctor.evidence,
hangdoctor.engines, hangdoctor.knowledge, hangdoctor.snapshot, hangdoctor.parsers and the
foundation.
"""
