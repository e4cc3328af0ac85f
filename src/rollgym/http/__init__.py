"""The HTTP edges of every rollgym process: one outgoing client, one server app factory."""

#: Seconds a client has to send one whole request (head and body) to a rollgym server or the
#: trace store; a stalled or hostile sender is disconnected (:mod:`rollgym.http.bounded_reads`).
#: Generous: a 16 MiB body over loopback takes milliseconds.
REQUEST_READ_TIMEOUT_S = 30.0
