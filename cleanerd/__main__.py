"""``python -m cleanerd`` runs the command line."""

from cleanerd.cli import main

main()
