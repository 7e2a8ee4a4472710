"""Tokenizers far from the project's estimator, built in a test (nothing downloaded)."""

from __future__ import annotations

import json
import random
from pathlib import Path

from slabench.core.prompts import synthetic_text

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}{{ eos_token }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def _train(d: Path, texts: list[str], vocab: int) -> Path:
    """A byte-level BPE of `vocab` tokens trained on `texts`, with a chat template, in folder `d`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    special = ["<unk>", "<s>", "</s>", "<|user|>", "<|assistant|>"]
    trainer = trainers.BpeTrainer(
        vocab_size=vocab, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(texts, trainer)
    tok.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(
        json.dumps({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "chat_template": TEMPLATE})
    )
    return d


def build_coarse_tokenizer(d: Path) -> Path:
    """~300 tokens: every word splits into several (~2.9 tokens per estimator token on the retail transcripts)."""
    rng = random.Random(0)
    return _train(d, [synthetic_text(40, rng) for _ in range(200)], 300)


def build_transcript_tokenizer(d: Path, vocab: int = 1000) -> Path:
    """Trained on the retail calls themselves: with 1,000 tokens ~1.2 tokens per estimator token on transcripts (a
    real model's tokenizer is near that), with 600 ~1.5 (the live tier's tiny Llama's)."""
    from slabench.workload import load_golden

    return _train(d, [g.transcript for g in load_golden(ROOT / "datasets")[:40]], vocab)
