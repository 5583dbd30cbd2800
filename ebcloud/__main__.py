"""`python -m ebcloud ...` runs the same CLI as the `ebcloud` console script."""

from ebcloud.cli import main

if __name__ == "__main__":
    main()
