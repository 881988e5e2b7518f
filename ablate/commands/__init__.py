"""One module per ``ablate`` sub-command; see :mod:`ablate.cli` for the protocol."""
