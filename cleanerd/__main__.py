"""``python -m cleanerd`` runs the command line."""

from cleanerd.cli import main

if __name__ == "__main__":  # a spawned cleaning process imports this module as __mp_main__
    main()
