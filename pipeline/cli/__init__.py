"""The command line, one module per command group: ``python -m pipeline`` (``pipeline/__main__.py``) assembles
them."""
