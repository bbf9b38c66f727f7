"""``python -m nnsweep.cli``: the ``nnsweep`` command."""

from nnsweep.cli import entry

if __name__ == "__main__":
    entry()
