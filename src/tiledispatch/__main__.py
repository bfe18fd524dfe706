"""`python -m tiledispatch`: the same command as the `tiledispatch` console script."""
from tiledispatch.cli.main import main

if __name__ == "__main__":
    main()
