"""``python -m robopt``: the ``robopt`` command (what ``torchrun ... -m robopt train`` starts on each rank)."""

from robopt.cli import main

main()
