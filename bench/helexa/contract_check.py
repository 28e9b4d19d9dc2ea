#!/usr/bin/env python3
"""Checks a running neuron daemon against the helexa node contract (docs/DESIGN.md,
"Model management"): required fields and their types on every management route,
with the given model loaded synchronously (200), at TP=1 and TP=2, unloaded (200,
then 404), and an impossible load (422). Prints one line per check; exit 1 on any
failure.
  contract_check.py URL MODEL_DIR [--device cuda:0] [--tp2-devices 0,0]"""
import json, sys, urllib.request, urllib.error, argparse, urllib.parse

ap = argparse.ArgumentParser()
ap.add_argument("url"); ap.add_argument("model")
ap.add_argument("--device", default=None, help="any value: load TP=1 with devices [0] (CUDA ordinal 0)")
ap.add_argument("--tp2-devices", default=None)
a = ap.parse_args()
failures = 0

def call(method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(a.url + path, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")

INT, NUM, STR, BOOL, ARR, OBJ = "int", "num", "str", "bool", "arr", "obj"
def typed(v, t):
    nullable = t.endswith("?")
    t = t.rstrip("?")
    if v is None: return nullable
    return {"int": isinstance(v, int) and not isinstance(v, bool), "num": isinstance(v, (int, float)) and not isinstance(v, bool),
            "str": isinstance(v, str), "bool": isinstance(v, bool), "arr": isinstance(v, list), "obj": isinstance(v, dict)}[t]

def check(name, ok, detail=""):
    global failures
    print(("ok   " if ok else "FAIL ") + name + ("" if ok else ": " + detail))
    if not ok: failures += 1

def fields(where, obj, spec):
    for k, t in spec.items():
        check(f"{where}.{k} is {t}", isinstance(obj, dict) and k in obj and typed(obj[k], t), json.dumps(obj)[:300])

def health_and_models(tag):
    st, h = call("GET", "/health")
    check(f"[{tag}] GET /health 200", st == 200, str(st))
    fields(f"[{tag}] health", h, {"uptime_secs": INT, "devices": ARR, "activation": OBJ, "models": ARR})
    for i, d in enumerate(h.get("devices", [])):
        # cortex's DeviceHealth has no optional field: a null fails its whole /health read.
        fields(f"[{tag}] health.devices[{i}]", d, {"index": INT, "vram_used_mb": INT, "vram_free_mb": INT,
                                                 "utilization_pct": INT, "temp_c": INT})
    act = h.get("activation", {})
    fields(f"[{tag}] health.activation", act, {"state": STR, "pending": ARR, "in_progress": "str?", "completed": ARR, "failed": ARR})
    check(f"[{tag}] activation.state", act.get("state") in ("pre_warming", "ready"), str(act.get("state")))
    for i, m in enumerate(h.get("models", [])):
        fields(f"[{tag}] health.models[{i}]", m, {"id": STR, "in_flight": INT, "queue_depth": INT, "max_in_flight": INT,
                                                "max_queue_depth": INT, "rejected_queue_full": INT, "rejected_timeout": INT,
                                                "kv_budget_mb": NUM, "kv_available_mb": NUM, "tok_s_prefill": NUM, "tok_s_decode": NUM})
    st, ms = call("GET", "/models")
    check(f"[{tag}] GET /models is a bare array", st == 200 and isinstance(ms, list), json.dumps(ms)[:200])
    for i, m in enumerate(ms if isinstance(ms, list) else []):
        fields(f"[{tag}] models[{i}]", m, {"id": STR, "harness": STR, "status": STR, "devices": ARR, "vram_used_mb": "int?",
                                         "capabilities": ARR, "limit": OBJ, "tool_call": BOOL, "reasoning": BOOL})
        check(f"[{tag}] models[{i}].status", m.get("status") in ("loaded", "loading", "unloaded", "recovering"), str(m.get("status")))
        fields(f"[{tag}] models[{i}].limit", m.get("limit", {}), {"context": INT, "output": INT})
    return ms

import time
# Start from no model: unload what the daemon loaded at startup (a load in progress answers busy: retry).
for _ in range(600):
    st, ms = call("GET", "/models")
    if not ms: break
    for m in ms:
        call("POST", "/models/unload", {"model_id": m.get("model_id", m["id"])})
    time.sleep(0.2)

st, d = call("GET", "/discovery")
check("GET /discovery 200", st == 200, str(st))
fields("discovery", d, {"hostname": STR, "os": STR, "kernel": STR, "cuda_version": "str?", "driver_version": "str?",
                        "devices": ARR, "harnesses": ARR, "max_prompt_tokens": INT})
for i, dev in enumerate(d.get("devices", [])):
    fields(f"discovery.devices[{i}]", dev, {"index": INT, "name": STR, "vram_total_mb": INT, "compute_capability": STR})
print("discovery devices:", json.dumps(d.get("devices")), "cuda", d.get("cuda_version"), "driver", d.get("driver_version"))

for tag, extra in (("tp1", {"devices": [0]} if a.device else {}),
                   ("tp2", {"tensor_parallel": 2, **({"devices": [int(x) for x in a.tp2_devices.split(",")]} if a.tp2_devices else {})})):
    body = {"model_id": a.model, "harness": "candle", **extra}  # what cortex's catalogue sends
    st, r = call("POST", "/models/load", body)
    check(f"[{tag}] POST /models/load 200 loaded", st == 200 and isinstance(r, dict) and r.get("status") == "loaded", f"{st} {json.dumps(r)[:300]}")
    ms = health_and_models(tag)
    mine = [m for m in ms if isinstance(m, dict) and m.get("status") == "loaded"]
    check(f"[{tag}] model listed as loaded", len(mine) == 1, json.dumps(ms)[:300])
    if mine:
        print(f"[{tag}] model entry:", json.dumps({k: mine[0].get(k) for k in ("id", "devices", "vram_used_mb", "device_names", "tensor_parallel", "limit")}))
        mid = urllib.parse.quote(mine[0]["id"], safe="")
        st, e = call("GET", f"/models/{mid}/endpoint")
        # cortex joins url with the client's path (/v1/chat/completions): the node's root, no /v1.
        check(f"[{tag}] endpoint", st == 200 and typed(e.get("url"), STR) and not e["url"].rstrip("/").endswith("/v1"), f"{st} {e}")
        st, c = call("GET", f"/models/{mid}/capabilities")
        check(f"[{tag}] capabilities", st == 200 and typed(c.get("capabilities"), ARR), f"{st} {c}")
        st, ch = call("POST", "/v1/chat/completions", {"model": mine[0]["id"], "messages": [{"role": "user", "content": "hi"}],
                                                      "max_tokens": 8, "temperature": 0})
        check(f"[{tag}] chat completion", st == 200 and ch["usage"]["completion_tokens"] >= 1, f"{st} {json.dumps(ch)[:200]}")
        st, u = call("POST", "/models/unload", {"model_id": mine[0]["id"]})
        check(f"[{tag}] unload 200", st == 200 and u.get("status") == "unloaded", f"{st} {u}")
        st, u = call("POST", "/models/unload", {"model_id": mine[0]["id"]})
        check(f"[{tag}] unload again 404", st == 404, f"{st} {u}")

st, r = call("POST", "/models/load", {"model_id": a.model, "tensor_parallel": 3})
check("TP that does not divide the heads: 422", st == 422 and isinstance(r, dict) and "error" in r, f"{st} {json.dumps(r)[:200]}")
st, r = call("POST", "/models/load", {"model_id": "no-such-org/no-such-model"})
check("unknown model: 422", st == 422, f"{st} {json.dumps(r)[:200]}")
print("failures:", failures)
sys.exit(1 if failures else 0)
