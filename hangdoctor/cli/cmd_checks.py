"""``hangdoctor checks``: list the checks, what they need and the causes they speak to.

Layer: cli; may import: the standard library, click, hangdoctor and hangdoctor.cli.options,
never another command module.
"""

from __future__ import annotations

import json

import click

from hangdoctor.cli.options import _load_checks


@click.command("checks")
@click.option("--json", "as_json", is_flag=True, help="as JSON")
@click.option("--checks-dir", "checks_dirs", multiple=True, type=click.Path(file_okay=False))
def list_checks(as_json: bool, checks_dirs: tuple[str, ...]) -> None:
    """List the checks: id, what they need, the causes they speak to; then the knowledge packs
    (rules, known issues, experiments) that come with them."""
    checks = _load_checks(checks_dirs)
    if as_json:
        click.echo(json.dumps([{"id": c.id, "title": c.title, "needs": c.needs, "causes": c.causes,
                                "module": c.module, "confirm": c.confirm} for c in checks], indent=1))
        return
    width = max(len(c.id) for c in checks)
    for c in checks:
        click.echo(f"{c.id:<{width}}  {c.title}")
        click.echo(f"{'':<{width}}  needs: {', '.join(c.needs) or '-'}; causes: {', '.join(c.causes) or '-'}")
    from hangdoctor.knowledge import packs

    click.echo("")
    for pack in packs.active():  # the knowledge packs found beside the checks
        counts = ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in pack.counts().items())
        where = "" if pack.origin == "builtin" else f" ({pack.origin})"
        click.echo(f"knowledge: {pack.name}{where}: {counts}")
