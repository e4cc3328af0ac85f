"""A tiny random-weight llama model written as GGUF, for a real engine to serve in tests.

Nothing is downloaded: the architecture is llama's (token embedding, RMS norms, rotary
attention, SwiGLU feed-forward, output head) at toy sizes, the weights come from a seeded
random generator, and the vocabulary is a SentencePiece-style ("llama") one made of the
three control tokens, the 256 byte tokens (so any text tokenizes by byte fallback) and a
few word pieces. Its answers are noise, but the engine really tokenizes, runs and counts
tokens, which is what the tests check.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

N_EMBD = 64
N_HEAD = 4
N_LAYER = 2
N_FF = 128
N_CTX = 512
WORDS = ["▁", "▁Answer", ":", "▁the", "▁is", "▁a", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9"]
#: A ChatML template, so the engine needs no chat format of its own.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _vocab() -> tuple[list[str], list[float], list[int]]:
    from gguf import TokenType

    tokens = ["<unk>", "<s>", "</s>"]
    types = [TokenType.UNKNOWN, TokenType.CONTROL, TokenType.CONTROL]
    tokens += [f"<0x{byte:02X}>" for byte in range(256)]
    types += [TokenType.BYTE] * 256
    tokens += WORDS
    types += [TokenType.NORMAL] * len(WORDS)
    scores = [0.0] * 3 + [-1000.0] * 256 + [-float(i) for i in range(len(WORDS))]
    return tokens, scores, [int(t) for t in types]


def write_tiny_llama(path: Path, seed: int = 0) -> Path:
    """Write the model to ``path`` (a few hundred kB) and return it."""
    from gguf import GGUFWriter, LlamaFileType

    rng = np.random.default_rng(seed)
    tokens, scores, types = _vocab()
    n_vocab = len(tokens)

    def weights(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    writer = GGUFWriter(str(path), "llama")
    writer.add_name("rollgym-tiny-random")
    writer.add_context_length(N_CTX)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD)
    writer.add_rope_dimension_count(N_EMBD // N_HEAD)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_chat_template(CHAT_TEMPLATE)

    # numpy shapes are (rows, columns) = GGUF's dimensions reversed: (out, in)
    writer.add_tensor("token_embd.weight", weights(n_vocab, N_EMBD))
    for layer in range(N_LAYER):
        block = f"blk.{layer}"
        writer.add_tensor(f"{block}.attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            writer.add_tensor(f"{block}.{name}.weight", weights(N_EMBD, N_EMBD))
        writer.add_tensor(f"{block}.ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        writer.add_tensor(f"{block}.ffn_gate.weight", weights(N_FF, N_EMBD))
        writer.add_tensor(f"{block}.ffn_up.weight", weights(N_FF, N_EMBD))
        writer.add_tensor(f"{block}.ffn_down.weight", weights(N_EMBD, N_FF))
    writer.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    writer.add_tensor("output.weight", weights(n_vocab, N_EMBD))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
