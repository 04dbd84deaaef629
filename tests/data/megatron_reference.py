#!/usr/bin/env python3
"""Megatron's GPTDataset index construction and __getitem__ written with numpy (gpt_dataset.py),
to check Loom's C++ port against real numpy.random.RandomState.

  megatron_reference.py shuffle SEED N
      print RandomState(SEED).shuffle(arange(N)) as space-separated ints
  megatron_reference.py gpt PREFIX CACHE_STEM SAMPLES_NPY SEQ_LENGTH SEED EXTRA BEGIN END NUM_SAMPLES
      rebuild the indices of sequences [BEGIN, END) of PREFIX (NUM_SAMPLES = -1 for one epoch),
      compare with Loom's cache files CACHE_STEM{document,sample,shuffle}_index.npy and with the
      samples Loom read (SAMPLES_NPY, [n, SEQ_LENGTH + EXTRA]); print "ok" or the differences.
"""
import struct
import sys

import numpy

DTYPES = {1: numpy.uint8, 2: numpy.int8, 3: numpy.int16, 4: numpy.int32, 5: numpy.int64,
          6: numpy.float64, 7: numpy.float32, 8: numpy.uint16}


def read_index(prefix):
    raw = open(prefix + ".idx", "rb").read()
    code, = struct.unpack("<B", raw[17:18])
    n, = struct.unpack("<Q", raw[18:26])
    lengths = numpy.frombuffer(raw, dtype=numpy.int32, count=n, offset=34)
    pointers = numpy.frombuffer(raw, dtype=numpy.int64, count=n, offset=34 + 4 * n)
    return DTYPES[code], lengths, pointers


def build_document_index(documents, num_epochs, rng, separate_final_epoch):
    if not separate_final_epoch or num_epochs == 1:
        index = numpy.mgrid[0:num_epochs, 0:len(documents)][1]
        index[:] = documents
        index = index.reshape(-1).astype(numpy.int32)
        rng.shuffle(index)
        return index
    first = build_document_index(documents, num_epochs - 1, rng, False)
    last = build_document_index(documents, 1, rng, False)
    return numpy.concatenate((first, last))


def build_sample_idx(sizes, doc_idx, seq_length, num_epochs, tokens_per_epoch, extra):
    num_samples = (num_epochs * tokens_per_epoch - extra) // seq_length
    out = numpy.zeros((num_samples + 1, 2), dtype=numpy.int64)
    doc_pos, offset = 0, 0
    for s in range(1, num_samples + 1):
        remaining = seq_length + extra
        while remaining != 0:
            length = int(sizes[doc_idx[doc_pos]]) - offset
            remaining -= length
            if remaining <= 0:
                offset += remaining + length - extra
                remaining = 0
            else:
                if doc_pos == len(doc_idx) - 1:
                    offset = int(sizes[doc_idx[doc_pos]]) - extra
                    break
                doc_pos += 1
                offset = 0
        out[s] = (doc_pos, offset)
    return out


def build_shuffle_index(num_samples, total_size, rng):
    dtype = numpy.uint32 if total_size < numpy.iinfo(numpy.uint32).max - 1 else numpy.int64
    first = numpy.arange(0, num_samples, dtype=dtype)
    rng.shuffle(first)
    if num_samples == total_size:
        return first
    last = numpy.arange(num_samples, total_size, dtype=dtype)
    rng.shuffle(last)
    return numpy.concatenate((first, last))


def gpt(prefix, stem, samples_npy, seq_length, seed, extra, begin, end, num_samples):
    dtype, sizes, pointers = read_index(prefix)
    indices = numpy.arange(begin, end, dtype=numpy.int32)
    tokens_per_epoch = int(numpy.sum(sizes[indices]))
    num_epochs = 1
    if num_samples is not None:
        while num_epochs * tokens_per_epoch < num_samples * seq_length + extra:
            num_epochs += 1
    separate = False
    if num_epochs > 1:
        sans_final = ((num_epochs - 1) * tokens_per_epoch - extra) // seq_length
        from_final = num_samples - sans_final
        per_epoch = (tokens_per_epoch - extra) // seq_length
        separate = from_final < int(0.80 * per_epoch)
    rng = numpy.random.RandomState(seed)
    doc_idx = build_document_index(indices, num_epochs, rng, separate)
    sample_idx = build_sample_idx(sizes, doc_idx, seq_length, num_epochs, tokens_per_epoch, extra)
    total = sample_idx.shape[0] - 1
    shuffle_idx = build_shuffle_index(sans_final if separate else total, total, rng)

    problems = []
    got_doc = numpy.load(stem + "document_index.npy")
    got_sample = numpy.load(stem + "sample_index.npy")
    got_shuffle = numpy.load(stem + "shuffle_index.npy")
    if got_doc.dtype != numpy.int32 or not numpy.array_equal(got_doc, doc_idx):
        problems.append("document_index differs")
    if not numpy.array_equal(got_sample, sample_idx):
        problems.append("sample_index differs")
    if got_shuffle.dtype != shuffle_idx.dtype or not numpy.array_equal(got_shuffle, shuffle_idx):
        problems.append("shuffle_index differs")

    data = numpy.memmap(prefix + ".bin", dtype=dtype, mode="r")
    itemsize = numpy.dtype(dtype).itemsize

    def get(seq, offset=0, length=None):
        if length is None:
            length = int(sizes[seq]) - offset
        start = int(pointers[seq]) // itemsize + offset
        return numpy.array(data[start:start + length], dtype=numpy.int64)

    got_samples = numpy.load(samples_npy)
    for idx in range(total):
        j = shuffle_idx[idx]
        d0, o0 = sample_idx[j]
        d1, o1 = sample_idx[j + 1]
        if d0 == d1:
            parts = [get(doc_idx[d0], o0, o1 - o0 + extra)]
        else:
            parts = [get(doc_idx[i], 0 if i > d0 else o0, None if i < d1 else o1 + extra)
                     for i in range(d0, d1 + 1)]
        text = numpy.concatenate(parts)
        if not numpy.array_equal(text, got_samples[idx]):
            problems.append(f"sample {idx} differs")
            break
    if got_samples.shape[0] != total:
        problems.append(f"{got_samples.shape[0]} samples read, expected {total}")
    print("ok" if not problems else "; ".join(problems),
          f"(epochs={num_epochs} separate_final_epoch={separate} samples={total})")
    return 0 if not problems else 1


def main():
    if sys.argv[1] == "shuffle":
        rng = numpy.random.RandomState(int(sys.argv[2]))
        a = numpy.arange(int(sys.argv[3]), dtype=numpy.int64)
        rng.shuffle(a)
        print(" ".join(str(v) for v in a))
        return 0
    prefix, stem, samples_npy = sys.argv[2:5]
    seq_length, seed, extra, begin, end, num_samples = (int(v) for v in sys.argv[5:11])
    return gpt(prefix, stem, samples_npy, seq_length, seed, extra, begin, end,
               None if num_samples < 0 else num_samples)


if __name__ == "__main__":
    sys.exit(main())
