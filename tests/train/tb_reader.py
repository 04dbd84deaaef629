#!/usr/bin/env python3
"""Independent TensorBoard event-file reader (TFRecord framing + minimal protobuf decoding).
Verifies both masked CRC32Cs of every record and prints one JSON object per scalar:
{"step": N, "tag": "...", "value": x}, and per text summary {"step": N, "tag": "...", "text": "..."};
the first line is {"file_version": "..."}."""
import json
import struct
import sys


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(buf, i):
    shift = value = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, i


def fields(buf):
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            v, i = varint(buf, i)
        elif wire == 1:
            v = buf[i:i + 8]; i += 8
        elif wire == 5:
            v = buf[i:i + 4]; i += 4
        elif wire == 2:
            n, i = varint(buf, i)
            v = buf[i:i + n]; i += n
        else:
            raise ValueError("unsupported wire type %d" % wire)
        yield field, wire, v


def main(path):
    data = open(path, "rb").read()
    i = 0
    while i < len(data):
        header = data[i:i + 8]
        (length,) = struct.unpack("<Q", header)
        (len_crc,) = struct.unpack("<I", data[i + 8:i + 12])
        assert len_crc == masked(header), "bad length crc at %d" % i
        payload = data[i + 12:i + 12 + length]
        (data_crc,) = struct.unpack("<I", data[i + 12 + length:i + 16 + length])
        assert data_crc == masked(payload), "bad data crc at %d" % i
        i += 16 + length
        step = 0
        for f, w, v in fields(payload):
            if f == 2:
                step = v
            elif f == 3:
                print(json.dumps({"file_version": v.decode()}))
            elif f == 5:
                for sf, sw, sv in fields(v):
                    if sf != 1:
                        continue
                    tag, value, text, plugin = None, None, None, None
                    for vf, vw, vv in fields(sv):
                        if vf == 1:
                            tag = vv.decode()
                        elif vf == 2:
                            (value,) = struct.unpack("<f", vv)
                        elif vf == 8:  # TensorProto: dtype 7 (DT_STRING), string_val
                            parts = {tf: tv for tf, tw, tv in fields(vv)}
                            assert parts.get(1) == 7, "text tensor of dtype %r" % parts.get(1)
                            text = parts[8].decode()
                        elif vf == 9:  # SummaryMetadata.plugin_data.plugin_name
                            for mf, mw, mv in fields(vv):
                                if mf == 1:
                                    plugin = {pf: pv for pf, pw, pv in fields(mv)}.get(1, b"").decode()
                    if text is not None:
                        assert plugin == "text", "text summary without the text plugin: %r" % plugin
                        print(json.dumps({"step": step, "tag": tag, "text": text}))
                    else:
                        print(json.dumps({"step": step, "tag": tag, "value": value}))


if __name__ == "__main__":
    main(sys.argv[1])
