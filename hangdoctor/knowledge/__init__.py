"""Field knowledge as data: mechanism rules, known upstream issues and A/B experiments.

- ``rules.json``: mechanisms (which evidence, which cause, what weight, what speaks against it,
  what to do next). ``"symptom": true`` marks a downstream line that only says someone is stuck:
  its weight is capped, so it points the search without deciding it.
- ``known_issues.json``: upstream bugs with a matcher, the thread, the versions affected, the fix
  and the workaround.
- ``experiments.json``: the one toggle that tells two causes apart, and what each outcome means.
- ``samples/*.txt``: for every rule and known issue, evidence where it fires and where it must
  not (written for the mechanism, not copied from a report); ``tests/test_knowledge.py`` runs them.

``checks/knowledge.py`` evaluates all of it, on live snapshots and pasted evidence alike.

Layer: knowledge; may import: the standard library, hangdoctor.knowledge and the foundation.
"""

from hangdoctor.knowledge.matcher import (  # noqa: F401
    Match,
    View,
    evaluate,
    experiments,
    known_issues,
    rules,
    validate,
    view_of_evidence,
    view_of_lines,
)
