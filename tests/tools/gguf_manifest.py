#!/usr/bin/env python3
"""What a GGUF file holds besides its tokenizer, as a small JSON manifest.

For the files llama.cpp's convert_hf_to_gguf.py wrote over the family fixtures
(tests/data/families/*, on the GPU machine, which has torch and transformers):
the tests compare tests/support/gguf_writer.hpp's output against these
manifests, so CI pins the writer to the real converter without the 11 MB files
(their bulk is the 151936-token vocabulary and embedding).

The manifest keeps every metadata key but general.* and tokenizer.* (scalars,
arrays as lists; floats as written, f32 widened) and, per tensor in file order,
its name, ggml type, ne (ggml order) and the FNV-1a 64 of its bytes; 1-D f32
tensors whose values the converter computes with a transcendental (ssm_a =
-exp(A_log)) also carry the values, since another libm may round them a ulp
apart.

Usage: gguf_manifest.py FILE.gguf > manifest.json   (pure Python, no numpy)
"""
import json
import struct
import sys

SCALARS = {0: 'B', 1: 'b', 2: 'H', 3: 'h', 4: 'I', 5: 'i', 6: 'f', 7: '?', 10: 'Q', 11: 'q', 12: 'd'}
TYPE_BYTES = {0: (1, 4), 1: (1, 2), 30: (1, 2), 8: (32, 34)}  # f32, f16, bf16, q8_0: (block, bytes)


def main(path):
    b = open(path, 'rb').read()
    at = 0

    def rd(fmt):
        nonlocal at
        v = struct.unpack_from('<' + fmt, b, at)[0]
        at += struct.calcsize('<' + fmt)
        return v

    def rs():
        nonlocal at
        n = rd('Q')
        s = b[at:at + n].decode('utf-8')
        at += n
        return s

    def value(t):
        if t == 8:
            return rs()
        if t == 9:
            et, n = rd('I'), rd('Q')
            return [value(et) for _ in range(n)]
        return rd(SCALARS[t])

    assert b[:4] == b'GGUF'
    at = 4
    rd('I')
    n_tensors, n_kv = rd('Q'), rd('Q')
    alignment = 32
    metadata = {}
    for _ in range(n_kv):
        key, t = rs(), rd('I')
        v = value(t)
        if key == 'general.alignment':
            alignment = v
        if not key.startswith(('general.', 'tokenizer.')):
            metadata[key] = v
    infos = []
    for _ in range(n_tensors):
        name = rs()
        ne = [rd('Q') for _ in range(rd('I'))]
        infos.append((name, ne, rd('I'), rd('Q')))
    data = (at + alignment - 1) // alignment * alignment
    tensors = []
    for name, ne, t, offset in infos:
        block, size = TYPE_BYTES[t]
        count = 1
        for d in ne:
            count *= d
        raw = b[data + offset:data + offset + count // block * size]
        h = 0xcbf29ce484222325
        for byte in raw:
            h = ((h ^ byte) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
        entry = {'name': name, 'type': t, 'ne': ne, 'fnv1a': '%016x' % h}
        if name.endswith('.ssm_a') and t == 0:
            entry['values'] = list(struct.unpack('<%df' % count, raw))
        tensors.append(entry)
    json.dump({'metadata': metadata, 'tensors': tensors}, sys.stdout, indent=1)
    sys.stdout.write('\n')


if __name__ == '__main__':
    main(sys.argv[1])
