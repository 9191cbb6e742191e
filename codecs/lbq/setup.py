"""Builds the ``_groups`` C extension (row-group quantization and packing, GIL released); metadata is in
pyproject.toml. ``-ffp-contract=off``: the kernel's float32 arithmetic is numpy's, operation for operation, and a
fused multiply-add would round differently on machines that have one."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "lifeboatcache_codec_lbq._groups",
            sources=["src/lifeboatcache_codec_lbq/_groups.c"],
            extra_compile_args=["-O3", "-fvisibility=hidden", "-ffp-contract=off"],
            libraries=["m"],
        )
    ],
)
