"""Built-in checks, one module each. They ship as ``hangdoctor.checks`` and register through
the ``hangdoctor.checks`` entry-point group like any third-party check package.

A check reads only the evidence views (``hangdoctor.evidence``); it never runs a command.

Layer: checks; may import: hangdoctor.checkapi, hangdoctor.evidence, hangdoctor.engines,
hangdoctor.knowledge and the foundation; never psutil, nvidia-ml-py, asyncssh.
"""
