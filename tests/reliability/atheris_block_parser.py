"""atheris (libFuzzer) over the block parsers: ``python atheris_block_parser.py [CORPUS_DIR] -runs=N``.

Any exception other than ``CorruptBlockError`` (or ``OSError`` for a stream cut short), or an
accepted payload that is not the block's own checksummed bytes, is a finding. (A payload that
differs from the seed's is not: libFuzzer's comparison tracing learns the digest the parser
computes and writes it into the trailer, building a new, self-consistent block. The content
hash detects damage, not forgery; keyed integrity covers forgery.) Seeds are a valid block, so
the fuzzer starts from the format and mutates its way through every check.

libFuzzer adds what it finds to the first corpus directory (made if missing); an empty one is
seeded with the valid block. Without one, a temporary directory is made and kept, named on
stderr so that a later run can start from what this one found; the test passes one in its
``tmp_path`` so that runs of the suite leave nothing behind.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import atheris
import xxhash

with atheris.instrument_imports():
    from lifeboatcache_core.chunkfile import (
        FIXED,
        TRAILER,
        BlockMeta,
        decode_block,
        encode_block,
        read_block_stream,
    )
    from lifeboatcache_core.errors import CorruptBlockError
    from lifeboatcache_core.keys import BlockKey
    from lifeboatcache_core.testing.streams import byte_stream

KEY = BlockKey("fuzzns", b"\x11" * 32)
PAYLOAD = bytes(range(256)) * 4
SEED = b"".join(bytes(p) for p in encode_block(BlockMeta.new(KEY, len(PAYLOAD)), [PAYLOAD]))


def own_checksummed_payload(data: bytes, payload: memoryview) -> bool:
    """The accepted payload is the block's bytes after its header, and its trailer's digest is theirs."""
    header_len = FIXED.unpack_from(data, 0)[2]
    body = data[header_len:header_len + payload.nbytes]
    digest, length, _magic = TRAILER.unpack_from(data, header_len + payload.nbytes)
    return bytes(payload) == body and length == len(body) and xxhash.xxh3_128_digest(body) == digest


def one_input(data: bytes) -> None:
    try:
        _meta, payload = decode_block(data, KEY)
        if not own_checksummed_payload(data, payload):
            raise AssertionError("decode_block accepted bytes that are not the block's checksummed payload")
    except CorruptBlockError:
        pass
    try:
        _meta, payload = read_block_stream(byte_stream(data), len(data), KEY)
        if not own_checksummed_payload(data, payload):
            raise AssertionError("read_block_stream accepted bytes that are not the block's checksummed payload")
    except (CorruptBlockError, OSError):
        pass


def main() -> None:
    corpus = [a for a in sys.argv[1:] if not a.startswith("-")]
    if corpus:
        first = Path(corpus[0])
        first.mkdir(parents=True, exist_ok=True)
    else:
        first = Path(tempfile.mkdtemp(prefix="lifeboat-atheris-"))
        print(f"corpus: {first}", file=sys.stderr)
        sys.argv.append(str(first))
    if not any(first.iterdir()):
        (first / "valid-block").write_bytes(SEED)
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
