#!/usr/bin/env python3
# Writes the seed corpus of safetensors_fuzz (workers/model/fuzz/) into this
# directory: tiny valid files and one of each refusal, built byte by byte
# from the format (8-byte little-endian header size, header JSON, data), and
# two model.safetensors.index.json texts. The fuzzer also reads this script
# as one more input, which is harmless. Run: python3 make_seeds.py
import json, os, struct

here = os.path.dirname(os.path.abspath(__file__))

def st(header, data=b"", pad=True):
    h = header if isinstance(header, bytes) else json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data

def e(dtype, shape, b, en):
    return {"dtype": dtype, "shape": shape, "data_offsets": [b, en]}

seeds = {
    "valid_empty": st({}),
    "valid_metadata": st({"__metadata__": {"format": "pt"}}),
    "valid_two": st({"__metadata__": {"format": "pt"}, "w": e("F32", [2], 0, 8), "b": e("BF16", [], 8, 10)},
                    struct.pack("<ff", 1.5, -2.0) + b"\x80\x3f"),
    "valid_zero_size": st({"a": e("I64", [0, 3], 0, 0), "b": e("U8", [1], 0, 1), "c": e("BOOL", [0], 1, 1)}, b"\x07"),
    "valid_unpadded": st({"x": e("I16", [1, 2], 0, 4)}, b"\x01\x00\xff\xff", pad=False),
    "bad_truncated": st({"w": e("F64", [2], 0, 16)}, b"\x00" * 9),
    "bad_header_past_end": struct.pack("<Q", 4096) + b"{}",
    "bad_json": st(b'{"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]', b"\x00" * 4),
    "bad_dtype": st({"w": e("F8_E4M3", [4], 0, 4)}, b"\x00" * 4),
    "bad_shape_mismatch": st({"w": e("F32", [2, 2], 0, 12)}, b"\x00" * 12),
    "bad_overlap": st({"a": e("F32", [2], 0, 8), "b": e("F32", [2], 4, 12)}, b"\x00" * 12),
    "bad_hole": st({"a": e("F32", [1], 0, 4), "b": e("F32", [1], 8, 12)}, b"\x00" * 12),
    "bad_duplicate": st(b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}', b"xy"),
    "bad_overflow": st({"w": e("F32", [4611686018427387904, 4], 0, 0)}),
    "bad_nul": st(b'{}\x00{"w":1}'),
    "index_valid.json": (json.dumps({"metadata": {"total_size": 8}, "weight_map": {
        "a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}, indent=2) + "\n").encode(),
    "index_escaping.json": json.dumps({"weight_map": {"a": "../model.safetensors"}}).encode(),
}
for name, data in seeds.items():
    with open(os.path.join(here, name), "wb") as f:
        f.write(data)
