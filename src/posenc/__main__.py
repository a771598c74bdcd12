"""``python -m posenc``: the guided tour (see posenc.tour)."""

from posenc.cli import main

if __name__ == "__main__":
    main()
