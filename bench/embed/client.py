"""Embeddings throughput: N requests of one ~512-token text each, C at a time, against an
OpenAI-compatible /v1/embeddings, after WARM other texts (default C: one wave) to warm up; SEED picks
the texts (no text twice, so no server reuses a cached prefix). Prints one JSON line: requests, prompt
tokens, seconds, rates.  usage: client.py URL MODEL N C [SEED [WARM]]"""
import json, random, sys, time, urllib.request
from concurrent.futures import ThreadPoolExecutor

url, model, n, conc = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
words = ("alpha river stone quiet engine metal forest cloud signal harbor lantern copper orbit valley "
         "thunder garden mirror rocket canvas summer winter bridge window planet crystal shadow").split()
rng = random.Random(int(sys.argv[5]) if len(sys.argv) > 5 else 1)
warm = int(sys.argv[6]) if len(sys.argv) > 6 else conc
texts = [" ".join(rng.choice(words) for _ in range(500)) for _ in range(n + warm)]  # no text twice: no prefix reuse

def one(t):
    body = json.dumps({"model": model, "input": t}).encode()
    req = urllib.request.Request(url + "/v1/embeddings", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        d = json.loads(r.read())
    assert len(d["data"]) == 1 and len(d["data"][0]["embedding"]) > 0, d
    return d.get("usage", {}).get("prompt_tokens", 0)

with ThreadPoolExecutor(conc) as ex:  # warm-up
    list(ex.map(one, texts[n:]))
t0 = time.time()
with ThreadPoolExecutor(conc) as ex:
    toks = sum(ex.map(one, texts[:n]))
dt = time.time() - t0
print(json.dumps({"url": url, "requests": n, "concurrency": conc, "prompt_tokens": toks, "seconds": round(dt, 3),
                  "requests_per_s": round(n / dt, 2), "tokens_per_s": round(toks / dt, 1)}), flush=True)
