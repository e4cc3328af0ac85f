"""A trainer's side for the weight-reload tests: a second checkpoint and its log-probabilities.

Run with the vLLM venv's Python (it has ``torch`` and ``transformers``)::

    python tiny_checkpoint.py MODEL_DIR OUT_DIR TOKEN_IDS_JSON

writes into ``OUT_DIR`` the model of ``MODEL_DIR`` with every weight moved by seeded noise
(``save_pretrained``: safetensors, as a trainer saves a step; the tokenizer copied beside it),
and prints as JSON the log-probability of each of the token ids after the first, given the ones
before it, under both sets of weights (``{"base": [...], "perturbed": [...]}``), computed in
float32 with transformers: the trainer's numbers the engine's are compared with.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

NOISE = 0.1  # beside the tiny model's initial weights (std 0.02): the log-probabilities move


def logprobs(model: object, token_ids: list[int]) -> list[float]:
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([token_ids])).logits[0].float()  # type: ignore[operator]
        scores = torch.log_softmax(logits, dim=-1)
    return [float(scores[i - 1, token]) for i, token in enumerate(token_ids) if i > 0]


def main(model_dir: Path, out: Path, token_ids: list[int]) -> dict[str, list[float]]:
    import torch
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    base = logprobs(model, token_ids)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in model.parameters():
            noise = torch.randn(parameter.shape, generator=generator) * NOISE
            parameter.add_(noise.to(parameter.dtype))
    model.save_pretrained(out)
    for name in model_dir.iterdir():
        if name.name.startswith(("tokenizer", "special_tokens")):
            shutil.copy(name, out / name.name)
    return {"base": base, "perturbed": logprobs(model, token_ids)}


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit("usage: tiny_checkpoint.py MODEL_DIR OUT_DIR TOKEN_IDS_JSON")
    found = main(Path(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3]))
    print(json.dumps(found))
