"""Trajectories: what a rollout's model and environment calls were, in order, for a trainer.

``record`` captures them where a rollout runs (the agent or the environment episode), and
``tokens`` turns a recorded trajectory into one token sequence with its loss mask (the
driver's ``export`` writes those as a Parquet table). See docs/trajectories.md.
"""
