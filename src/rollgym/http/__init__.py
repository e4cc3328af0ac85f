"""The HTTP edges of every rollgym process: one outgoing client, one server app factory."""
