"""Run by MLflow's own Python (its venv): every span of every trace of an experiment, read
through MLflow's client, printed as one JSON list. Usage: mlflow_read.py URL EXPERIMENT_ID."""

from __future__ import annotations

import json
import sys

from mlflow import MlflowClient


def main() -> None:
    url, experiment = sys.argv[1], sys.argv[2]
    client = MlflowClient(tracking_uri=url)
    out = []
    for found in client.search_traces(locations=[experiment], max_results=500):
        trace = client.get_trace(found.info.trace_id)
        out.append(
            {
                "trace_id": trace.info.trace_id,
                "session": trace.info.trace_metadata.get("mlflow.trace.session"),
                "token_usage": trace.info.token_usage,
                "spans": [
                    {
                        "name": span.name,
                        "span_id": span.span_id,
                        "parent_id": span.parent_id,
                        "otel_trace_id": span.trace_id,
                        "span_type": span.span_type,
                        "attributes": span.attributes,
                        "events": [
                            {"name": e.name, "attributes": e.attributes} for e in span.events
                        ],
                        "links": [
                            {"trace_id": link.trace_id, "span_id": link.span_id}
                            for link in span.links
                        ],
                    }
                    for span in trace.data.spans
                ],
            }
        )
    json.dump(out, sys.stdout, default=str)


if __name__ == "__main__":
    main()
