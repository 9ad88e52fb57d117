"""``python -m dpgen COMMAND ...``: the ``dpgen`` command (``python -m dpgen train experiment=...``)."""

from .cli import main

raise SystemExit(main())
