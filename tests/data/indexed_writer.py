#!/usr/bin/env python3
"""An independent Megatron .bin/.idx writer and reader built from the byte layout (Megatron's
indexed_dataset.py) with numpy and struct only, so the C++ reader and writer are checked against
code that shares nothing with them.

  indexed_writer.py write  SPEC.json PREFIX   write PREFIX.bin/.idx from the spec
  indexed_writer.py verify SPEC.json PREFIX   read PREFIX.bin/.idx and compare with the spec

SPEC: {"dtype_code": 8, "documents": [[[1, 2, 3], [4, 5]], [[6]], []]} -- each document is a list
of sequences (lists of token ids).
"""
import json
import struct
import sys

import numpy

DTYPES = {1: numpy.uint8, 2: numpy.int8, 3: numpy.int16, 4: numpy.int32, 5: numpy.int64,
          6: numpy.float64, 7: numpy.float32, 8: numpy.uint16}


def flatten(spec):
    lengths, doc_indices, tokens = [], [0], []
    for doc in spec["documents"]:
        for seq in doc:
            lengths.append(len(seq))
            tokens.extend(seq)
        doc_indices.append(len(lengths))
    return lengths, doc_indices, tokens


def write(spec, prefix):
    dtype = DTYPES[spec["dtype_code"]]
    lengths, doc_indices, tokens = flatten(spec)
    with open(prefix + ".bin", "wb") as f:
        f.write(numpy.array(tokens, dtype=dtype).tobytes(order="C"))
    itemsize = numpy.dtype(dtype).itemsize
    pointers = numpy.zeros(len(lengths), dtype=numpy.int64)
    if lengths:
        pointers[1:] = numpy.cumsum(numpy.array(lengths[:-1], dtype=numpy.int64) * itemsize)
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", spec["dtype_code"]))
        f.write(struct.pack("<Q", len(lengths)))
        f.write(struct.pack("<Q", len(doc_indices)))
        f.write(numpy.array(lengths, dtype=numpy.int32).tobytes(order="C"))
        f.write(pointers.tobytes(order="C"))
        f.write(numpy.array(doc_indices, dtype=numpy.int64).tobytes(order="C"))


def verify(spec, prefix):
    lengths, doc_indices, tokens = flatten(spec)
    raw = open(prefix + ".idx", "rb").read()
    problems = []
    if raw[:9] != b"MMIDIDX\x00\x00":
        problems.append("magic")
    version, = struct.unpack("<Q", raw[9:17])
    code, = struct.unpack("<B", raw[17:18])
    n, = struct.unpack("<Q", raw[18:26])
    d, = struct.unpack("<Q", raw[26:34])
    if version != 1 or code != spec["dtype_code"] or n != len(lengths) or d != len(doc_indices):
        problems.append(f"header version={version} code={code} n={n} d={d}")
    got_lengths = numpy.frombuffer(raw, dtype=numpy.int32, count=n, offset=34)
    got_pointers = numpy.frombuffer(raw, dtype=numpy.int64, count=n, offset=34 + 4 * n)
    got_docs = numpy.frombuffer(raw, dtype=numpy.int64, count=d, offset=34 + 12 * n)
    if len(raw) != 34 + 12 * n + 8 * d:
        problems.append(f"size {len(raw)}")
    if got_lengths.tolist() != lengths:
        problems.append(f"lengths {got_lengths.tolist()}")
    if got_docs.tolist() != doc_indices:
        problems.append(f"document_indices {got_docs.tolist()}")
    dtype = DTYPES[code]
    itemsize = numpy.dtype(dtype).itemsize
    expect_ptr = numpy.concatenate([[0], numpy.cumsum(numpy.array(lengths, dtype=numpy.int64) * itemsize)[:-1]]) if n else []
    if list(got_pointers) != list(expect_ptr):
        problems.append(f"pointers {got_pointers.tolist()}")
    bin_tokens = numpy.fromfile(prefix + ".bin", dtype=dtype)
    if bin_tokens.astype(numpy.int64).tolist() != tokens:
        problems.append("bin tokens differ")
    if problems:
        print("; ".join(problems))
        return 1
    print("ok")
    return 0


def main():
    mode, spec_path, prefix = sys.argv[1:4]
    spec = json.load(open(spec_path))
    if mode == "write":
        write(spec, prefix)
        return 0
    return verify(spec, prefix)


if __name__ == "__main__":
    sys.exit(main())
