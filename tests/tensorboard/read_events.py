#!/usr/bin/env python3
"""Reads TensorBoard event files with code that is not strata's: the
TFRecord framing checked with crcmod's CRC-32C (python3-crcmod), each record
decoded by protobuf (python3-protobuf) from event.proto compiled by protoc.
Prints one line per scalar, "<file's folder> <step> <tag> <value>", after a
line "version <file_version>" per file; exits 1 naming the first defect.

usage: read_events.py EVENT_FILE...
"""
import os
import struct
import subprocess
import sys
import tempfile

import crcmod.predefined


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(path, crc32c):
    data = open(path, "rb").read()
    at = 0
    while at < len(data):
        if len(data) - at < 12:
            raise ValueError(f"{path}: truncated header at byte {at}")
        (n,) = struct.unpack_from("<Q", data, at)
        (head_crc,) = struct.unpack_from("<I", data, at + 8)
        if masked(crc32c(data[at:at + 8])) != head_crc:
            raise ValueError(f"{path}: bad length checksum at byte {at}")
        payload = data[at + 12:at + 12 + n]
        if len(payload) != n or len(data) < at + 16 + n:
            raise ValueError(f"{path}: truncated record at byte {at}")
        (crc,) = struct.unpack_from("<I", data, at + 12 + n)
        if masked(crc32c(payload)) != crc:
            raise ValueError(f"{path}: bad payload checksum at byte {at}")
        yield payload
        at += 16 + n


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    with tempfile.TemporaryDirectory() as out:
        subprocess.run(["protoc", f"--proto_path={here}", f"--python_out={out}", "event.proto"], check=True)
        sys.path.insert(0, out)
        import event_pb2  # noqa: E402 (generated above)

        crc = crcmod.predefined.mkCrcFun("crc-32c")
        for path in sys.argv[1:]:
            folder = os.path.basename(os.path.dirname(path))
            for i, payload in enumerate(records(path, crc)):
                e = event_pb2.Event()
                e.ParseFromString(payload)
                if i == 0:
                    if e.WhichOneof("what") != "file_version":
                        raise ValueError(f"{path}: the first record is not the file version")
                    print("version", e.file_version)
                    continue
                for v in e.summary.value:
                    print(folder, e.step, v.tag, repr(v.simple_value))


if __name__ == "__main__":
    try:
        main()
    except ValueError as err:
        print(err)
        sys.exit(1)
