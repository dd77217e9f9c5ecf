"""``python -m parplan``: the same entry point as the ``parplan`` console script."""

from parplan.cli.app import main

if __name__ == "__main__":
    main()
