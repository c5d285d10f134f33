"""What a W&B run left on disk: the record kinds of its .wandb file, read without a login or a W&B process.

An offline run's OUTPUT_DIR/wandb/offline-run-*/run-*.wandb is a LevelDB-style log (32 KiB blocks of records,
each with a 7-byte header: CRC, length, kind) of protobuf `Record`s; `wandb.finish()` appends the `exit` record.
A run that has none was left unfinished (the process died or never finished it).
"""
from __future__ import annotations

import struct
from pathlib import Path

BLOCK, HEADER = 32 * 1024, 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def record_kinds(path: Path) -> list[str]:
    return [record.WhichOneof("record_type") for record in records(path)]


def history_keys(path: Path) -> set[str]:
    """The metric names logged as history (wandb.log / the Lightning logger) in a .wandb file: each history
    record's items, not a search of the raw bytes (where the config's own names also occur)."""
    keys = set()
    for record in records(path):
        if record.WhichOneof("record_type") == "history":
            keys |= {item.key or "/".join(item.nested_key) for item in record.history.item}
    return keys


def exit_code(path: Path) -> int | None:
    """The exit code `wandb.finish` recorded (1: the run failed), or None for a run left unfinished."""
    codes = [record.exit.exit_code for record in records(path) if record.WhichOneof("record_type") == "exit"]
    return codes[-1] if codes else None


def records(path: Path) -> list:
    from wandb.proto import wandb_internal_pb2

    data = Path(path).read_bytes()
    assert data[1:4] == b"W&B", f"{path} is not a .wandb file"
    kinds, pos, pending = [], HEADER, b""
    while pos + HEADER <= len(data):
        if BLOCK - pos % BLOCK < HEADER:  # a block's tail too short for a header is padding
            pos += BLOCK - pos % BLOCK
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + HEADER])
        pos += HEADER
        if kind == 0 and length == 0:
            break
        chunk, pos = data[pos:pos + length], pos + length
        if kind in (FIRST, MIDDLE):
            pending += chunk
            continue
        payload, pending = (pending + chunk, b"") if kind == LAST else (chunk, b"")
        record = wandb_internal_pb2.Record()
        record.ParseFromString(payload)
        kinds.append(record)
    return kinds


def unfinished_runs(output_dir: Path) -> list[Path]:
    """The W&B runs under a run directory that have no exit record."""
    return [p for p in Path(output_dir).glob("wandb/*run-*/*.wandb") if "exit" not in record_kinds(p)]
