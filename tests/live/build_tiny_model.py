"""Build a tiny random-weight Llama and a locally trained byte-level BPE tokenizer with a chat template.

Run with the vLLM venv's python (it has torch, transformers and tokenizers; the project venv has none of them):

    ~/.cache/slabench/vllm-venv/bin/python tests/live/build_tiny_model.py OUT_DIR

Nothing is downloaded (Hugging Face is unreachable here). The weights are random, so the model's answers are noise:
the live tier measures the server and the harness, not the model. Deterministic: the same seed gives the same files.
The tokenizer is trained on a small customer-service vocabulary; it is coarser than a real one (~2.2 characters per
token on the retail prompts against ~4), so the longest golden prompt (~6k tokens with a real tokenizer) is ~12.2k
tokens here: 16,384 positions leave room for the workload's 2,048 output tokens.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

VOCAB_SIZE = 4096
MAX_POSITIONS = 16384
SPECIAL = ["<unk>", "<s>", "</s>", "<pad>", "<|system|>", "<|user|>", "<|assistant|>"]
# Llama-2-style roles; generation stops at </s> (the eos token).
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
WORDS = (
    "the a an and or but if then so because when while of to in on at for with from by about as into over after "
    "before under between through during without within is are was were be been being have has had do does did "
    "will would can could should may might must shall not no yes i you he she it we they me him her us them my "
    "your his its our their this that these those what which who whom whose where why how all any each every some "
    "many much more most other such only own same than too very just also well now here there again once "
    "order refund return warranty exchange delivery package invoice receipt customer agent account store card "
    "payment shipping address status tracking policy item size colour color price discount coupon loyalty points "
    "subscription cancel replace damaged missing late early manager supervisor transfer hold callback survey "
    "please thank thanks sorry help check confirm verify explain understand process request number date week day "
    "call transcript rubric score pass fail criteria greeting empathy resolution compliance escalation disclosure "
    "identity verification closing hello hi goodbye today tomorrow yesterday minute hour month year product service "
    "issue problem question answer ticket case note record system email phone chat online website app login "
    "password reset charge charged credit debit bank balance statement fee total amount dollars cents paid pay "
    "shipment courier carrier box label pickup drop store location branch team department policy terms conditions "
    "json true false null evaluation reason evidence quote speaker caller agent_name customer_name auto_fail "
    "criterion met not_met partial overall summary result score_out_of comments required optional must never always"
).split()


def corpus(seed: int = 0, lines: int = 6000) -> list[str]:
    """Sentences and JSON-ish snippets over WORDS, with digits and punctuation, like rubric prompts and answers."""
    rng = random.Random(seed)
    out = []
    for i in range(lines):
        words = [rng.choice(WORDS) for _ in range(rng.randint(5, 30))]
        line = " ".join(words).capitalize() + rng.choice([".", "?", "!", ":", ","])
        if i % 5 == 0:
            line = json.dumps({rng.choice(WORDS): rng.choice(WORDS), "score": rng.randint(0, 100), "note": line})
        if i % 7 == 0:
            line = f"{rng.choice(['Agent', 'Customer'])}: {line} #{rng.randint(1000, 99999)}"
        out.append(line)
    return out


def build_tokenizer(out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # every byte: no input is ever unknown
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        model_max_length=MAX_POSITIONS,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)


def build_model(out: Path, vocab_size: int, bos: int, eos: int, pad: int) -> None:
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=MAX_POSITIONS,
        bos_token_id=bos,
        eos_token_id=eos,
        pad_token_id=pad,
        tie_word_embeddings=True,
        torch_dtype="bfloat16",
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    GenerationConfig(bos_token_id=bos, eos_token_id=eos, pad_token_id=pad).save_pretrained(out)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: build_tiny_model.py OUT_DIR", file=sys.stderr)
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    build_tokenizer(out)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out)
    build_model(out, len(tok), tok.bos_token_id, tok.eos_token_id, tok.pad_token_id)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
