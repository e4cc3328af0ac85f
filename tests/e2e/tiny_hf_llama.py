"""Write a tiny random-weight Llama (Hugging Face format) for vLLM's CPU build to serve in tests.

Run with the vLLM venv's Python (it has ``torch``, ``transformers`` and ``tokenizers``; the
project's own Python need not): ``python tiny_hf_llama.py OUT_DIR``. Nothing is downloaded: the
tokenizer is a byte-level BPE trained here on a few lines of text (so any text tokenizes), with
ChatML control tokens, a chat template, and Hermes' ``<tool_call>`` tokens (vLLM's ``hermes``
tool-call parser refuses a tokenizer without them); the model is Llama at toy sizes with seeded
random weights. vLLM's CPU attention refuses a head size of 16 and accepts 64, hence two heads
of 64 in a hidden size of 128. Its answers are noise, but vLLM really tokenizes, schedules,
generates and counts, which is what the tests check.
"""

from __future__ import annotations

import sys
from pathlib import Path

HIDDEN = 128
HEADS = 2
HEAD_DIM = 64
LAYERS = 2
FEED_FORWARD = 256
CONTEXT = 2048
VOCAB = 600
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"]
#: ChatML with tools and tool calls rendered as text: enough for chat, tool loops and episodes.
CHAT_TEMPLATE = (
    "{% if tools %}<|im_start|>system\nTools: {{ tools | tojson }}<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['content'] is string %}{{ m['content'] }}{% endif %}"
    "{% for c in m.get('tool_calls') or [] %}<tool_call>{{ c['function'] | tojson }}</tool_call>"
    "{% endfor %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CORPUS = [
    "Compute: 12 + 7 * 3. Answer: 33",
    "Start key: k-58bc15e5. Follow the chain with read_key until you find the secret.",
    "next key: k-0e4bd005 secret: S-1b8e5915b365",
    "Run shell commands to solve the task; the files are in the work directory.",
    "ls -la; cat notes.txt | sort | uniq -c > counts.txt; tar xzf logs.tar.gz",
    'The quick brown fox jumps over the lazy dog. 0123456789 + - * / ( ) = { } [ ] : , "',
]


def write(out: Path, vocab_size: int = 0) -> Path:
    """``vocab_size``: at least this many embeddings (ids past the tokenizer's own decode to
    nothing): for a trainer fed the simulated model's toy token ids, below 50,000."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator(CORPUS * 20, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        bos_token="<|endoftext|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="<|endoftext|>",
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(out)

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=max(len(tokenizer), vocab_size),
        hidden_size=HIDDEN,
        intermediate_size=FEED_FORWARD,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        head_dim=HEAD_DIM,
        max_position_embeddings=CONTEXT,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="float32",
    )
    LlamaForCausalLM(config).save_pretrained(out)
    return out


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: tiny_hf_llama.py OUT_DIR [VOCAB_SIZE]")
    print(write(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) == 3 else 0))
