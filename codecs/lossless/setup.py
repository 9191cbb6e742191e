"""Builds the ``_planes`` C extension (byte planes + huff0, GIL released); metadata is in pyproject.toml.

The entropy coder is huff0 from zstd 1.5.6 (BSD, ``_vendor/zstd``, only the files huff0 needs),
compiled into the extension with hidden symbols so it never clashes with another copy of zstd
in the process (python-zstandard, zipnn). ZSTD_DISABLE_ASM: setuptools does not assemble the
``.S`` fast loop; huff0's C fast loops are used instead.
"""

from pathlib import Path

from setuptools import Extension, setup

PACKAGE = Path("src/lifeboatcache_codec_lossless")
VENDOR = PACKAGE / "_vendor" / "zstd"
SOURCES = [
    PACKAGE / "_planes.c",
    VENDOR / "common" / "debug.c",
    VENDOR / "common" / "entropy_common.c",
    VENDOR / "common" / "error_private.c",
    VENDOR / "common" / "fse_decompress.c",
    VENDOR / "compress" / "fse_compress.c",
    VENDOR / "compress" / "hist.c",
    VENDOR / "compress" / "huf_compress.c",
    VENDOR / "decompress" / "huf_decompress.c",
]

setup(
    ext_modules=[
        Extension(
            "lifeboatcache_codec_lossless._planes",
            sources=[str(s) for s in SOURCES],
            include_dirs=[str(VENDOR)],
            define_macros=[("ZSTD_DISABLE_ASM", "1")],
            extra_compile_args=["-O3", "-fvisibility=hidden"],
        )
    ],
)
