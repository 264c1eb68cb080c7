"""``python -m streamsaver ...``: the ``streamsaver`` command."""

from .cli import main

if __name__ == "__main__":  # imported (e.g. by the API reference's inspection), it runs nothing
    raise SystemExit(main())
