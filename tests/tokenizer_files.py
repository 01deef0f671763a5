"""Tokenizer files the tests build themselves, offline: a tiny tiktoken BPE and tiny Hugging Face tokenizers
trained on a few sentences (nothing is downloaded)."""

from __future__ import annotations

import base64
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

SENTENCES = [
    "The token expires after fifteen minutes; verify_token must refuse expired tokens.",
    "Fix the failing authentication spec and keep the public token API unchanged.",
    "Tried comparing the expiry as a string; the spec still fails at line 48.",
    "Redis is required by the session middleware, which rotates the signed token.",
    "def verify_token(token, now):\n    return token.expires_at > now\n",
]


def write_tiktoken(path: Path, merges: list[bytes]) -> Path:
    """Every single byte, then ``merges`` in rank order: a tiny but complete byte-level BPE."""
    tokens = [bytes([value]) for value in range(256)] + merges
    path.write_bytes(b"".join(base64.b64encode(token) + b" %d\n" % rank for rank, token in enumerate(tokens)))
    return path


def write_byte_level_bpe(path: Path, *, vocab_size: int = 400) -> Path:
    """A Llama/Qwen-style byte-level BPE with BOS/EOS added by its post-processor and an added token, plus a
    truncation setting in the file (which a count must ignore)."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<s>", "</s>", "<|im_start|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(SENTENCES * 4, trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", 0), ("</s>", 1)]
    )
    tokenizer.enable_truncation(16)
    tokenizer.save(str(path))
    return path


def write_wordpiece(path: Path, *, unknown_token: bool = True) -> Path:
    """A BERT-style WordPiece (lower-cases, ``[CLS]``/``[SEP]`` template); without its unknown token it
    cannot encode a word outside its vocabulary."""
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    specials = ["[UNK]", "[CLS]", "[SEP]"] if unknown_token else ["[CLS]", "[SEP]"]
    trainer = trainers.WordPieceTrainer(vocab_size=300, special_tokens=specials, show_progress=False)
    tokenizer.train_from_iterator(SENTENCES * 4, trainer)
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)]
    )
    tokenizer.save(str(path))
    return path


def library_count(path: Path, text: str) -> int:
    """The library's own count of ``text`` with the file as saved, truncation off, no template tokens."""
    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.no_truncation()
    return len(tokenizer.encode(text, add_special_tokens=False).ids)
