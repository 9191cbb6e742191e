"""atheris (libFuzzer) over the block parsers: ``python atheris_block_parser.py -runs=N``.

Any exception other than ``CorruptBlockError`` (or ``OSError`` for a stream cut short), or a
decoded block whose payload is not the original one, is a finding. Seeds are a valid block, so
the fuzzer starts from the format and mutates its way through every check.
"""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports():
    from lifeboatcache_core.chunkfile import BlockMeta, decode_block, encode_block, read_block_stream
    from lifeboatcache_core.errors import CorruptBlockError
    from lifeboatcache_core.keys import BlockKey

KEY = BlockKey("fuzzns", b"\x11" * 32)
PAYLOAD = bytes(range(256)) * 4
SEED = b"".join(bytes(p) for p in encode_block(BlockMeta.new(KEY, len(PAYLOAD)), [PAYLOAD]))


def one_input(data: bytes) -> None:
    try:
        _meta, payload = decode_block(data, KEY)
        if bytes(payload) != PAYLOAD:
            raise AssertionError("decode_block accepted a block with other bytes")
    except CorruptBlockError:
        pass
    pos = 0

    def readinto(view: memoryview) -> int:
        nonlocal pos
        n = min(len(view), len(data) - pos)
        view[:n] = data[pos:pos + n]
        pos += n
        return n

    try:
        _meta, payload = read_block_stream(readinto, len(data), KEY)
        if bytes(payload) != PAYLOAD:
            raise AssertionError("read_block_stream accepted a block with other bytes")
    except (CorruptBlockError, OSError):
        pass


def main() -> None:
    corpus = [a for a in sys.argv[1:] if not a.startswith("-")]
    if not corpus:
        import tempfile
        from pathlib import Path

        seed_dir = Path(tempfile.mkdtemp(prefix="lifeboat-atheris-"))
        (seed_dir / "valid-block").write_bytes(SEED)
        sys.argv.append(str(seed_dir))
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
