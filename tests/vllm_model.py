"""Make the tiny random model the vLLM tests serve: run with the server's Python (.venv-vllm).

    .venv-vllm/bin/python tests/vllm_model.py DIR

A LlamaForCausalLM (hidden 256, 4 heads of 64: vLLM's CPU attention rejects head_dim 16;
2 layers; vocabulary 512) with random weights, saved with ``save_pretrained``, and a word-level
tokenizer built with ``tokenizers``. Nothing is downloaded. Writes DIR/.complete last, so a
half-written folder is made again.
"""

from __future__ import annotations

import json
import os
import shutil
import sys

VOCAB_WORDS = 500
SPECIAL = ["<unk>", "<s>", "</s>", "<pad>"]


def make(out_dir: str) -> None:
    if os.path.exists(os.path.join(out_dir, ".complete")):
        return
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIAL)}
    for i in range(VOCAB_WORDS):
        vocab[f"w{i}"] = len(vocab)
    for word in ("hello", "the", "server", "is", "hung", "a", "test", "say", "one", "two"):
        vocab.setdefault(word, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
    )
    fast.save_pretrained(out_dir)

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=512 if len(vocab) <= 512 else len(vocab),
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=64,
        max_position_embeddings=512,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=3,
        tie_word_embeddings=False,
        torch_dtype="bfloat16",
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out_dir, safe_serialization=True)
    # A generation config without sampling defaults of its own: the tests ask for what they want.
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 3}, f)
    with open(os.path.join(out_dir, ".complete"), "w") as f:
        f.write("ok\n")


if __name__ == "__main__":
    make(sys.argv[1])
