#!/usr/bin/env python3
"""A stand-in Kubernetes API server that answers API discovery and nothing else.

`kubectl create --dry-run=client` parses objects offline, but first asks the server which kinds
exist (discovery) to map each object's apiVersion and kind to a resource. No cluster runs where
scripts/lint-deploy runs, so this serves the discovery documents for the kinds deploy/k8s uses,
on a loopback port the OS picks, and answers 404 to everything else: a request that tried to
create or read an object would fail loudly. It prints `http://127.0.0.1:PORT` once it listens and
serves until killed.

Usage: kube-discovery.py            (scripts/lint-deploy starts it and writes a kubeconfig for it)
"""

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# group/version -> [(plural, Kind, namespaced)]: every kind in the rendered overlays. A kind
# missing here makes kubectl fail with "no matches for kind", which is the signal to add it.
RESOURCES: dict[str, list[tuple[str, str, bool]]] = {
    "v1": [
        ("configmaps", "ConfigMap", True),
        ("namespaces", "Namespace", False),
        ("secrets", "Secret", True),
        ("serviceaccounts", "ServiceAccount", True),
        ("services", "Service", True),
    ],
    "apps/v1": [("deployments", "Deployment", True)],
    "autoscaling/v2": [("horizontalpodautoscalers", "HorizontalPodAutoscaler", True)],
    "policy/v1": [("poddisruptionbudgets", "PodDisruptionBudget", True)],
    "networking.k8s.io/v1": [("networkpolicies", "NetworkPolicy", True)],
    "monitoring.coreos.com/v1": [("servicemonitors", "ServiceMonitor", True)],
}

VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]


def resource_list(group_version: str) -> dict:
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": [
            {"name": plural, "singularName": kind.lower(), "namespaced": namespaced, "kind": kind, "verbs": VERBS}
            for plural, kind, namespaced in RESOURCES[group_version]
        ],
    }


def documents() -> dict[str, dict]:
    docs: dict[str, dict] = {
        "/api": {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []},
        "/api/v1": resource_list("v1"),
    }
    groups = []
    for group_version in RESOURCES:
        if "/" not in group_version:
            continue
        group, version = group_version.split("/")
        entry = {"groupVersion": group_version, "version": version}
        groups.append({"name": group, "versions": [entry], "preferredVersion": entry})
        docs[f"/apis/{group_version}"] = resource_list(group_version)
    docs["/apis"] = {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
    return docs


class Handler(BaseHTTPRequestHandler):
    DOCS = documents()

    def do_GET(self) -> None:  # noqa: N802 - the http.server API
        doc = self.DOCS.get(self.path.split("?", 1)[0])
        body = json.dumps(doc if doc is not None else {"kind": "Status", "code": 404}).encode()
        self.send_response(200 if doc is not None else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        pass


def main() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(f"http://127.0.0.1:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
