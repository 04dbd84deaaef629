#!/usr/bin/env python3
"""Writes a Megatron indexed dataset (<prefix>.bin/.idx) of random tokens,
for throughput benchmarks: python3 bench/random_dataset.py PREFIX VOCAB NUM_TOKENS [DOC_LEN]."""
import struct
import sys

import numpy as np


def main(prefix, vocab, num_tokens, doc_len=4096):
    dtype, code = (np.uint16, 8) if vocab < 65500 else (np.int32, 4)
    rng = np.random.RandomState(1)
    tokens = rng.randint(0, vocab, size=num_tokens).astype(dtype)
    lengths = [doc_len] * (num_tokens // doc_len)
    if num_tokens % doc_len:
        lengths.append(num_tokens % doc_len)
    with open(prefix + ".bin", "wb") as f:
        f.write(tokens.tobytes())
    itemsize = np.dtype(dtype).itemsize
    pointers = np.concatenate([[0], np.cumsum(np.array(lengths[:-1], dtype=np.int64) * itemsize)]).astype(np.int64)
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", code))
        f.write(struct.pack("<Q", len(lengths)))
        f.write(struct.pack("<Q", len(lengths) + 1))
        f.write(np.array(lengths, dtype=np.int32).tobytes())
        f.write(pointers.tobytes())
        f.write(np.arange(len(lengths) + 1, dtype=np.int64).tobytes())


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), *(int(a) for a in sys.argv[4:]))
