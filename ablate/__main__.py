"""``python -m ablate`` is the same as the ``ablate`` console script."""

from ablate.cli import main

raise SystemExit(main())
