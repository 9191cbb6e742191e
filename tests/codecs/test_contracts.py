"""Every first-party codec passes the core's CodecContract, in each of its configurations."""

from __future__ import annotations

from pathlib import Path

import pytest
from lifeboatcache_codec_fp8.codec import Fp8Codec, Fp8Config
from lifeboatcache_codec_lbq.lbq import Int2Codec, LbqCodec, LbqConfig
from lifeboatcache_codec_lbq.oscar import OscarCodec, OscarConfig
from lifeboatcache_codec_lossless.codec import LosslessCodec, LosslessConfig
from lifeboatcache_core.abc import Codec
from lifeboatcache_core.testing.contracts import CodecContract


class TestLosslessZstd(CodecContract):
    def make_codec(self) -> Codec:
        return LosslessCodec()


class TestLosslessLz4(CodecContract):
    def make_codec(self) -> Codec:
        return LosslessCodec(LosslessConfig(compressor="lz4"))


class TestFp8PerBlock(CodecContract):
    def make_codec(self) -> Codec:
        return Fp8Codec()


class TestFp8E5m2PerTokenHead(CodecContract):
    def make_codec(self) -> Codec:
        return Fp8Codec(Fp8Config(format="e5m2", scale="token_head"))


class TestLbq4(CodecContract):
    def make_codec(self) -> Codec:
        return LbqCodec()


class TestLbq3SmallGroups(CodecContract):
    def make_codec(self) -> Codec:
        return LbqCodec(LbqConfig(bits=3, group_size=24))  # partial trailing groups on every layout


class TestLbq2PerToken(CodecContract):
    def make_codec(self) -> Codec:
        return LbqCodec(LbqConfig(bits=2, k_groups="token"))


class TestInt2(CodecContract):
    def make_codec(self) -> Codec:
        return Int2Codec()


class TestOscar(CodecContract):
    rotation_dir: Path

    @pytest.fixture
    def codec(self, tmp_path: Path) -> Codec:
        self.rotation_dir = tmp_path / "rotations"
        return self.make_codec()

    def make_codec(self) -> Codec:
        return OscarCodec(OscarConfig(rotation_dir=self.rotation_dir))
