#!/usr/bin/env python3
"""Nsight Compute's raw CSV (`ncu --metrics gpu__time_duration.sum --csv --page raw`) summed by kernel name:
a header line (kernels, total), then one line a kernel name (launches, total time), largest total first.
Kernels whose name contains one of --skip (e.g. a dummy-weight fill) are left out.

    ncu_table.py CSV [--unit ms|us] [--width 90] [--top 30] [--skip NAME ...]
"""
import argparse
import collections
import csv

ap = argparse.ArgumentParser()
ap.add_argument("csv")
ap.add_argument("--unit", choices=["ms", "us"], default="ms")
ap.add_argument("--width", type=int, default=90)
ap.add_argument("--top", type=int, default=30)
ap.add_argument("--skip", nargs="*", default=[])
a = ap.parse_args()
rows = [r for r in csv.reader(open(a.csv)) if len(r) > 5]
if not rows:
    print("no rows")
    raise SystemExit
head = rows[0]
ki, ti = head.index("Kernel Name"), head.index("gpu__time_duration.sum")
unit = rows[1][ti]  # ncu's unit of the column (ns or us)
per_unit = {"ns": {"ms": 1e6, "us": 1e3}, "usecond": {"ms": 1e3, "us": 1.0}, "us": {"ms": 1e3, "us": 1.0}}
div = per_unit.get(unit, per_unit["ns"])[a.unit]
agg = collections.defaultdict(lambda: [0, 0.0])
for r in rows[2:]:
    try:
        t = float(r[ti].replace(",", ""))
    except ValueError:
        continue
    name = r[ki].split("(")[0][: a.width]
    if any(s in name for s in a.skip):
        continue
    agg[name][0] += 1
    agg[name][1] += t
total = sum(t for _, t in agg.values())
print(f"kernels {sum(c for c, _ in agg.values())}, total {total / div:.1f} {a.unit} (unit {unit})")
for name, (c, t) in sorted(agg.items(), key=lambda x: -x[1][1])[: a.top]:
    print(f"  {name:{a.width}s} {c:6d} {t / div:9.2f} {a.unit}")
