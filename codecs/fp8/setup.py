"""Builds the ``_fp8`` C extension (fp8 quantization, GIL released); metadata is in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "lifeboatcache_codec_fp8._fp8",
            sources=["src/lifeboatcache_codec_fp8/_fp8.c"],
            extra_compile_args=["-O3", "-fvisibility=hidden"],
        )
    ],
)
