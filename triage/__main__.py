# `python -m triage` takes the console script's road: classify without importing click, the rest through it.
from .fastpath import main

if __name__ == "__main__":
    main()
