"""Trainers that take their rollouts from rollgym: one sub-package per trainer (``trl``).

This floor stands above the driver: an integration drives a :class:`~rollgym.Collector` on a
trainer's behalf and turns its outcomes into what the trainer takes. Each imports its trainer
only when called, so rollgym imports without any of them.
"""
