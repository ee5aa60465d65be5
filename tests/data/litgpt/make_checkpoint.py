"""A tiny litgpt checkpoint and instruction data set, made offline with litgpt's own API.

    VENV/bin/python tests/data/litgpt/make_checkpoint.py OUT_DIR

Run with the litgpt venv's Python (.venv-litgpt, `make litgpt-env`). Writes
`OUT_DIR/checkpoint/` (what `litgpt finetune_full CHECKPOINT_DIR` loads: a randomly initialised
2-layer GPT's `lit_model.pth`, its `model_config.yaml`, and a word-level `tokenizer.json` with its
`tokenizer_config.json`) and `OUT_DIR/data.json` (Alpaca-shaped samples for `--data JSON`).
Nothing is downloaded: the tokenizer is trained on the samples themselves.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

WORDS = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa",
         "lambda", "mu", "nu", "xi", "omicron", "pi", "rho", "sigma", "tau", "upsilon", "phi",
         "chi", "psi", "omega")


def samples(n: int, seed: int = 0) -> list[dict[str, str]]:
    rng = random.Random(seed)
    return [{"instruction": "repeat the words " + " ".join(rng.choices(WORDS, k=4)),
             "input": "",
             "output": " ".join(rng.choices(WORDS, k=8))} for _ in range(n)]


def main(argv: list[str] | None = None) -> int:
    import torch
    from litgpt import GPT, Config
    from litgpt.prompts import Alpaca
    from litgpt.utils import save_config
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    [out] = argv if argv is not None else sys.argv[1:]
    out_dir = Path(out)
    checkpoint = out_dir / "checkpoint"
    checkpoint.mkdir(parents=True, exist_ok=True)
    data = samples(64)
    (out_dir / "data.json").write_text(json.dumps(data, indent=1))

    tokenizer = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    prompts = [Alpaca().apply(d["instruction"]) + d["output"] for d in data]
    tokenizer.train_from_iterator(prompts, trainers.WordLevelTrainer(
        special_tokens=["<unk>", "<s>", "</s>"]))
    tokenizer.save(str(checkpoint / "tokenizer.json"))
    (checkpoint / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True,
         "tokenizer_class": "PreTrainedTokenizerFast"}))

    config = Config(name="tiny-gpt", block_size=128, vocab_size=tokenizer.get_vocab_size(),
                    padding_multiple=64, n_layer=2, n_head=2, n_embd=32)
    save_config(config, checkpoint)
    torch.manual_seed(0)
    torch.save(GPT(config).state_dict(), checkpoint / "lit_model.pth")
    return 0


if __name__ == "__main__":
    sys.exit(main())
