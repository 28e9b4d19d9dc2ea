#!/usr/bin/env python3
"""Waits until an OpenAI-compatible server lists a model on GET /v1/models.

  wait_ready.py URL PID TIMEOUT_S

Exit 0 when ready; 1 when the server process PID exits first, when neuron's
GET /models reports a failed load, or after TIMEOUT_S seconds. Standard
library only (runs under any python3).
"""
import json
import os
import sys
import time
import urllib.error
import urllib.request


def get(url: str):
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except (urllib.error.URLError, OSError):
        return 0, b""


def main() -> int:
    url, pid, timeout = sys.argv[1].rstrip("/"), int(sys.argv[2]), float(sys.argv[3])
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
        except OSError:
            print(f"wait_ready: server process {pid} exited", file=sys.stderr)
            return 1
        status, body = get(url + "/v1/models")
        if status == 200:
            try:
                if json.loads(body).get("data"):
                    return 0
            except ValueError:
                pass
        status, body = get(url + "/models")  # neuron: a failed load never shows up in /v1/models
        if status == 200:
            try:
                models = json.loads(body)  # a bare array (the helexa contract); older neuron: {"models": [...]}
                if isinstance(models, dict):
                    models = models.get("models", [])
                for m in models:
                    if m.get("state", m.get("status")) == "failed":
                        print(f"wait_ready: model failed to load: {m}", file=sys.stderr)
                        return 1
            except (ValueError, AttributeError):
                pass
        time.sleep(0.5)
    print(f"wait_ready: {url} listed no model within {timeout:.0f} s", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
