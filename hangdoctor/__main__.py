"""``python -m hangdoctor``: the command line (hangdoctor.cli).

Layer: cli; may import: anything in hangdoctor, and click.
"""

from hangdoctor.cli import run

if __name__ == "__main__":
    run()
