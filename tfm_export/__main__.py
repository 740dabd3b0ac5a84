"""`python -m tfm_export` is the `tfm-export` command."""

from .cli import main

main()
