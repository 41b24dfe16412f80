#!/usr/bin/env python3
"""OTLP/HTTP JSON export requests decoded by opentelemetry-proto (the OpenTelemetry project's
generated protobuf classes) with protobuf's own JSON parser, which refuses an unknown field, a
value of the wrong type and an unknown enum: the independent reader `load --otlp` and
`--otlp-file` are held against. The input is one request per line (the collector's file
exporter format); the output one JSON line per request: {metric name: {unit, temporality,
scope, resource, points: [{attributes, count, sum, min, max, bucket_counts, explicit_bounds,
start, time}]}}."""
import json
import sys

try:
    from google.protobuf import json_format
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
        ExportMetricsServiceRequest,
    )
except ImportError:
    sys.exit("opentelemetry-proto is missing: scripts/test.sh installs it under ~/.cache/tokscope/pylib "
             "(python3 -m pip install --target ~/.cache/tokscope/pylib opentelemetry-proto)")


def value(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


with open(sys.argv[1], encoding="utf-8") as f:
    for line in f:
        if not line.strip():
            continue
        request = json_format.Parse(line, ExportMetricsServiceRequest())
        out = {}
        for rm in request.resource_metrics:
            resource = {a.key: value(a.value) for a in rm.resource.attributes}
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    if m.WhichOneof("data") != "histogram":
                        sys.exit(f"{m.name}: not a histogram")
                    points = []
                    for p in m.histogram.data_points:
                        points.append({
                            "attributes": {a.key: value(a.value) for a in p.attributes},
                            "count": p.count,
                            "sum": p.sum,
                            "min": p.min if p.HasField("min") else None,
                            "max": p.max if p.HasField("max") else None,
                            "bucket_counts": list(p.bucket_counts),
                            "explicit_bounds": list(p.explicit_bounds),
                            "start": p.start_time_unix_nano,
                            "time": p.time_unix_nano,
                        })
                    out[m.name] = {
                        "unit": m.unit,
                        "temporality": m.histogram.aggregation_temporality,
                        "scope": sm.scope.name,
                        "resource": resource,
                        "points": points,
                    }
        print(json.dumps(out, sort_keys=True))
