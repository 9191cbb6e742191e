"""Replay agent sessions against an OpenAI-compatible server and measure what a cache changes.

``sessions`` is the common shape every source produces (kv-cache-tester traces, LMCache's
agentic JSONL, the synthetic generator); ``client`` sends one streaming request and records
it; ``runner`` drives N concurrent agents; ``stats`` and ``report`` turn records into numbers.
"""
