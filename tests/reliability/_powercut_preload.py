"""Imported once by the power-cut tests' forkserver: each forked filesystem daemon and writer
starts with libfuse's bindings and the tier's modules loaded (an interpreter start per round
would cost more than the round)."""

import mfusepy  # noqa: F401

import tests.reliability.powercut_fs  # noqa: F401
