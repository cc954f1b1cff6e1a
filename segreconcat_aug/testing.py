"""A tiny randomly initialized Whisper (transformers), built with no download: ``--whisper_model
tiny-random-whisper`` of recipes/align.py, and the tests' stand-in.

>>> bundle = tiny_whisper()
>>> tok = bundle.tokenizer
>>> tok.convert_ids_to_tokens([tok.eos_token_id, bundle.model.generation_config.no_timestamps_token_id])
['<|endoftext|>', '<|notimestamps|>']
>>> len(tok) == bundle.model.config.vocab_size == 256 + 26 + 9 + 1501
True
"""

from __future__ import annotations

import torch

from .align.whisper import WhisperBundle, prepare

SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|startoftranscript|>",
    "<|en|>",
    "<|translate|>",
    "<|transcribe|>",
    "<|startoflm|>",
    "<|startofprev|>",
    "<|nospeech|>",
    "<|notimestamps|>",
)
N_TIMESTAMPS = 1501  # 0.00 .. 30.00 s in steps of 20 ms
TEXT_BOOST = 10.0
LETTERS = "abcdefghijklmnopqrstuvwxyz"


def tiny_tokenizer():
    """A byte-level Whisper tokenizer with the special and timestamp tokens."""
    from tokenizers.pre_tokenizers import ByteLevel
    from transformers import WhisperTokenizer

    vocab = {symbol: k for k, symbol in enumerate(sorted(ByteLevel.alphabet()))}
    merges = [("Ġ", letter) for letter in LETTERS]
    for left, right in merges:
        vocab[left + right] = len(vocab)
    for token in SPECIAL_TOKENS:
        vocab[token] = len(vocab)
    timestamps = [f"<|{k * 0.02:.2f}|>" for k in range(N_TIMESTAMPS)]
    for token in timestamps:
        vocab[token] = len(vocab)
    tokenizer = WhisperTokenizer(
        vocab=vocab, merges=merges, extra_special_tokens=list(SPECIAL_TOKENS[1:]), pad_token="<|endoftext|>"
    )
    tokenizer.add_tokens(timestamps)
    return tokenizer


def tiny_whisper(seed: int = 0, *, device: str = "cpu", dtype=torch.float32, **sizes) -> WhisperBundle:
    """A tiny random Whisper bundle (model, feature extractor, tokenizer); ``sizes`` override the
    ``WhisperConfig`` dimensions (e.g. whisper-medium's, for a throughput benchmark)."""
    from transformers import (
        GenerationConfig,
        WhisperConfig,
        WhisperFeatureExtractor,
        WhisperForConditionalGeneration,
    )

    tokenizer = tiny_tokenizer()
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in SPECIAL_TOKENS}
    eot, sot = ids["<|endoftext|>"], ids["<|startoftranscript|>"]
    word_starts = [tokenizer.convert_tokens_to_ids("Ġ" + letter) for letter in LETTERS]
    space = tokenizer.convert_tokens_to_ids("Ġ")
    dimensions = {
        "d_model": 64,
        "encoder_layers": 2,
        "decoder_layers": 2,
        "encoder_attention_heads": 2,
        "decoder_attention_heads": 2,
        "encoder_ffn_dim": 128,
        "decoder_ffn_dim": 128,
        **sizes,
    }
    config = WhisperConfig(
        vocab_size=len(tokenizer),
        **dimensions,
        num_mel_bins=80,
        max_source_positions=1500,
        max_target_positions=448,
        decoder_start_token_id=sot,
        pad_token_id=eot,
        bos_token_id=eot,
        eos_token_id=eot,
    )
    config._attn_implementation = "eager"
    # A private RNG stream: building the model must not move the caller's global seed.
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = WhisperForConditionalGeneration(config)
        # Whisper's timestamp rule emits a timestamp whenever the 1501 timestamp tokens
        # together outweigh the best text token, so a random decoder writes almost no text.
        # Larger word-start rows (output embeddings are tied to the inputs) let it write.
        with torch.no_grad():
            model.get_output_embeddings().weight[word_starts] *= TEXT_BOOST
    model.generation_config = GenerationConfig(
        decoder_start_token_id=sot,
        bos_token_id=eot,
        eos_token_id=eot,
        pad_token_id=eot,
        no_timestamps_token_id=ids["<|notimestamps|>"],
        prev_sot_token_id=ids["<|startofprev|>"],
        lang_to_id={"<|en|>": ids["<|en|>"]},
        task_to_id={"translate": ids["<|translate|>"], "transcribe": ids["<|transcribe|>"]},
        is_multilingual=True,
        max_initial_timestamp_index=50,
        begin_suppress_tokens=[space, eot],
        # Only the one-letter word tokens may be generated: every text token the random
        # decoder emits is then a word (plain bytes would glue or be punctuation).
        suppress_tokens=[k for k in range(len(tokenizer)) if k < eot and k not in word_starts],
        alignment_heads=[[0, 0], [1, 1]],
        max_length=448,
    )
    bundle = WhisperBundle(model, WhisperFeatureExtractor(), tokenizer, "tiny-random-whisper", device, dtype)
    return prepare(bundle)
