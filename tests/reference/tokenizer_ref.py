"""Reference token ids for pagoda's tokenizer tests.

bpe GGUF PRE OUTDIR: builds a Hugging Face `tokenizers` pipeline from the
GGUF's own vocabulary and merges, with the pre-tokenizer the named model's
original tokenizer.json uses, and writes the corpus (plus seeded random
strings) and its ids with and without special-token parsing.

pre OUTDIR: writes each pre-tokenizer's pieces of the corpus, plus seeded
random strings over the characters DeepSeek's steps tell apart (pieces_*.txt,
hex pieces separated by spaces).

gemma GGUF OUTDIR: a Gemma file's tokenizer as transformers converts the
GGUF vocabulary (its GGUF tokenizer builder), and its ids and decodes.

spm OUTDIR: trains a tiny SentencePiece BPE model with byte fallback, writes
it as a tokenizer-only GGUF the way llama.cpp's converter does, and writes
sentencepiece's own ids and decodes for the corpus.

Outputs, one line per text: texts.hex (UTF-8 as hex), ids_special.txt and
ids_plain.txt (space-separated ids), decoded.hex (spm only), random_ids.txt
and random_decoded.hex (bpe only: random id sequences and their decodes).
"""

import io
import json
import os
import random
import sys

import gguf
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

HERE = os.path.dirname(os.path.abspath(__file__))

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"""
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
QWEN2_PATTERN = LLAMA3_PATTERN.replace(r"\p{N}{1,3}", r"\p{N}")
# Qwen3.5's tokenizer.json: marks in words, none in punctuation runs.
QWEN35_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|"""
    r""" ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
# Seed-Coder's (and Seed-OSS's) tokenizer.json.
SEED_CODER_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}|"""
    r""" ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
# tiktoken's o200k pattern, as gpt-oss's (and Llama 4's) tokenizer.json
# states it.
GPT4O_PATTERN = (
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"""
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"""
    r"""\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
# Kimi K2's tiktoken pattern (tokenization_kimi.py): Han runs first, the
# o200k letter classes without Han, no "/" after punctuation.
KIMI_K2_PATTERN = (
    r"""[\p{Han}]+|"""
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"""
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"""
    r"""\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
# Mistral's Tekken tokenizer.json (Mistral-Nemo, Mistral Small 3.x).
TEKKEN_PATTERN = (
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|"""
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|"""
    r"""\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
# DeepSeek-V3's (and R1's) tokenizer.json: three Split steps, as its JSON
# strings read (so "[\r\n]" holds a real CR and LF).
DEEPSEEK_V3_SPLITS = [
    "\\p{N}{1,3}",
    "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
    " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
]
# DeepSeek LLM's (deepseek-llm-7b-base): five Split steps, then Digits with
# individual digits. The letters are its list of ranges; the six characters
# NFC would change are escaped so that no tool normalizes them.
DEEPSEEK_LLM_SPLITS = [
    "[\r\n]",
    "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\u1F7Dᾀ-ᾴᾶ-ᾼ\u1FBEῂ-ῄῆ-ῌῐ-\u1FD3ῖ-\u1FDBῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\u2126ℨ\u212A-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
    "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+",
    "\\s+$",
    "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+",
]


def corpus():
    with open(os.path.join(HERE, "tokenizer_corpus.json"), encoding="utf-8") as f:
        texts = json.load(f)
    # Seeded random strings over a pool that mixes the classes the patterns
    # care about, to reach combinations the hand-written texts miss.
    pool = list("aAzZ éüßñ'sltdmrveSLTDMRVE0123456789 \t\n\r.,!?-_()<>|{}\"'") + [
        "日", "本", "😀", "👍🏽", "\u200d", "ا", "ه", "١", "२", "\u0301", "\u093f", "\u00a0", "\u3000",
        "½", "Ⅻ", "<|im_end|>", "<|im_start|>", "<|endoftext|>", "  ", "\n\n", " 's", "'LL",
    ]
    # Then the classes the GPT-4o pattern adds: a slash, non-ASCII capitals
    # and small letters, a titlecase and a modifier letter, a mark after a
    # capital (its strings come after the others', which stay the same).
    more = pool + ["/", "É", "Ω", "ω", "ǅ", "ʰ", "A\u0301", "McD", "iPhone", "HTTPServer"]
    more_rng = random.Random(20261202)
    rng = random.Random(20261123)
    for _ in range(300):
        texts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 40))))
    for _ in range(200):
        texts.append("".join(more_rng.choice(more) for _ in range(more_rng.randint(1, 40))))
    # One long text for the timing note (about 10k tokens).
    texts.append("\n".join(texts[:40]) * 12)
    return texts


def field(reader, key):
    return reader.fields[key].contents()


def write_outputs(outdir, texts, runs):
    with open(os.path.join(outdir, "texts.hex"), "w") as f:
        for t in texts:
            f.write(t.encode("utf-8").hex() + "\n")
    for name, rows in runs.items():
        with open(os.path.join(outdir, name), "w") as f:
            for row in rows:
                if isinstance(row, str):
                    f.write(row.encode("utf-8").hex() + "\n")
                else:
                    f.write(" ".join(map(str, row)) + "\n")


def pre_tokenizer(pre):
    """The pre-tokenizer of the original tokenizer.json behind each name."""
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    # SmolLM's and StarCoder's (and Refact's) tokenizer.json: digits split
    # one by one, then byte-level with the GPT-2 pattern.
    if pre in ("smollm", "starcoder", "refact"):
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    # GPT-2's and GPT-NeoX's (MPT, OLMo 1).
    if pre in ("gpt-2", "default", "mpt", "olmo"):
        return byte_level
    # Llama 3's and DBRX's (tiktoken's cl100k pattern), Qwen2's.
    if pre in ("llama-bpe", "dbrx", "qwen2", "qwen35", "gpt-4o", "minimax-m2", "seed-coder", "tekken",
               "kimi-k2"):
        # MiniMax-M2's tokenizer.json states o200k's pattern as it is.
        pattern = {"qwen2": QWEN2_PATTERN, "qwen35": QWEN35_PATTERN, "gpt-4o": GPT4O_PATTERN,
                   "minimax-m2": GPT4O_PATTERN,
                   "tekken": TEKKEN_PATTERN,
                   "seed-coder": SEED_CODER_PATTERN, "kimi-k2": KIMI_K2_PATTERN}.get(pre, LLAMA3_PATTERN)
        return pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    # DeepSeek's: Split steps in sequence, each splitting every piece the
    # one before it left, then byte-level without a pattern of its own.
    if pre in ("deepseek-v3", "deepseek-llm"):
        steps = [pre_tokenizers.Split(Regex(p), behavior="isolated", invert=False)
                 for p in (DEEPSEEK_V3_SPLITS if pre == "deepseek-v3" else DEEPSEEK_LLM_SPLITS)]
        if pre == "deepseek-llm":
            steps.append(pre_tokenizers.Digits(individual_digits=True))
        steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False))
        return pre_tokenizers.Sequence(steps)
    raise SystemExit(f"unknown pre {pre}")


def deepseek_texts():
    """Seeded random strings over the classes DeepSeek's steps tell apart:
    digit runs, Han inside and past U+9FA5, kana with its marks, `゠`, `・`
    and `ー`, Hangul, fullwidth and CJK punctuation, curly quotes, Greek
    letters at the ends of DeepSeek LLM's ranges, a script from U+0800 on,
    marks, ASCII punctuation before letters, controls and an unassigned
    character, symbols, emoji."""
    pool = list("aZ é'sl0123456789 \t\n\r.,!?-_()$#@/") + [
        "123", "4567890", "٣٤٥", "１２３", "½", "Ⅻ", "日本", "漢字", "龥", "龦", "\u9fff", "ひらがな",
        "カタカナ", "゠", "・", "ー", "\u3099", "ゝ", "\u3040", "한국어", "！", "，", "（", "）", "：",
        "、", "。", "　", "「", "」", "‘", "’", "“", "”", "…", "—", "\u1f7d", "\u1fd3", "\u1fdb",
        "\u1fbe", "\u2126", "\u212a", "Ωmega", "ß", "ǅ", "ʰ", "ﬁ", "ࠀ", "हिन्दी", "ไทย", "עברית",
        "العربية", "Русский", "\u0301", "e\u0301", ".Net", "$HOME", "#tag", "'s", "'LL", "\x00",
        "\x07", "\u00a0", "\u2028", "\u200b", "€", "±", "→", "∑", "😀", "👍🏽", "🇯🇵", "  ", "\n\n",
        "\r\n", " \n ", "<|im_end|>",
    ]
    rng = random.Random(20261215)
    return ["".join(rng.choice(pool) for _ in range(rng.randint(1, 30))) for _ in range(300)]


def pre(outdir):
    """Each pre-tokenizer's pieces of every text, as substrings of it."""
    texts = corpus() + deepseek_texts()
    runs = {}
    for name in ("smollm", "gpt-2", "llama-bpe", "qwen2", "qwen35", "starcoder", "refact", "mpt",
                 "olmo", "dbrx", "gpt-4o", "minimax-m2", "deepseek-v3", "deepseek-llm", "seed-coder",
                 "tekken", "kimi-k2"):
        p = pre_tokenizer(name)
        rows = []
        for t in texts:
            rows.append([t[a:b].encode("utf-8").hex() for _, (a, b) in p.pre_tokenize_str(t)])
        runs[f"pieces_{name}.txt"] = rows
    write_outputs(outdir, texts, runs)


def bpe(path, pre, outdir):
    r = gguf.GGUFReader(path)
    tokens = field(r, "tokenizer.ggml.tokens")
    types = field(r, "tokenizer.ggml.token_type")
    merges = [tuple(m.split(" ", 1)) for m in field(r, "tokenizer.ggml.merges")]
    vocab = {t: i for i, t in reversed(list(enumerate(tokens)))}

    def build(parse_special):
        model = models.BPE(vocab=vocab, merges=merges, ignore_merges=(pre in ("llama-bpe", "tekken")))
        tok = Tokenizer(model)
        tok.pre_tokenizer = pre_tokenizer(pre)
        tok.decoder = decoders.ByteLevel()
        added = []
        for i, (t, ty) in enumerate(zip(tokens, types)):
            # llama.cpp: user-defined tokens always match, control tokens
            # only when special parsing is asked for.
            if ty == 4 or (ty == 3 and parse_special):
                added.append(AddedToken(t, special=(ty == 3), normalized=False))
        tok.add_special_tokens(added)
        return tok

    texts = corpus()
    runs = {}
    for name, parse in (("ids_special.txt", True), ("ids_plain.txt", False)):
        tok = build(parse)
        runs[name] = [tok.encode(t, add_special_tokens=False).ids for t in texts]
    # Seeded random id sequences, half of their ids single-byte pieces so
    # that multi-byte characters split across tokens, decoded by the
    # reference's byte-level decoder.
    rng = random.Random(7)
    singles = [i for i, t in enumerate(tokens) if len(t) == 1]
    seqs = []
    for _ in range(200):
        seqs.append([rng.choice(singles) if rng.random() < 0.5 else rng.randrange(len(tokens))
                     for _ in range(rng.randint(1, 24))])
    tok = build(True)
    runs["random_ids.txt"] = seqs
    runs["random_decoded.hex"] = [tok.decode(q, skip_special_tokens=False) for q in seqs]
    write_outputs(outdir, texts, runs)


def spm(outdir):
    import sentencepiece as sp
    import codecs
    import contextlib

    with contextlib.redirect_stdout(io.StringIO()):
        import this  # its text is English to train on

    zen = codecs.decode(this.s, "rot13")
    with open(os.path.join(HERE, "tokenizer_corpus.json"), encoding="utf-8") as f:
        seed = json.load(f)
    # Latin-script training text only, so CJK, emoji and the like in the
    # corpus must take the byte fallback.
    train = [line for line in zen.splitlines() if line.strip()] * 4
    train += [t for t in seed[:12] if t.isascii()] * 4
    model = io.BytesIO()
    sp.SentencePieceTrainer.train(
        sentence_iterator=iter(train),
        model_writer=model,
        model_type="bpe",
        vocab_size=600,
        hard_vocab_limit=False,
        byte_fallback=True,
        character_coverage=1.0,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        add_dummy_prefix=True,
        split_digits=False,
        num_threads=1,
        minloglevel=2,
    )
    proc = sp.SentencePieceProcessor(model_proto=model.getvalue())
    n = proc.get_piece_size()
    tokens, scores, types = [], [], []
    for i in range(n):
        tokens.append(proc.id_to_piece(i))
        scores.append(proc.get_score(i))
        ty = gguf.TokenType.NORMAL
        if proc.is_unknown(i):
            ty = gguf.TokenType.UNKNOWN
        elif proc.is_control(i):
            ty = gguf.TokenType.CONTROL
        elif proc.is_unused(i):
            ty = gguf.TokenType.UNUSED
        elif proc.is_byte(i):
            ty = gguf.TokenType.BYTE
        types.append(int(ty))
    w = gguf.GGUFWriter(os.path.join(outdir, "spm.gguf"), "llama")
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(proc.bos_id())
    w.add_eos_token_id(proc.eos_id())
    w.add_unk_token_id(proc.unk_id())
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    texts = corpus()
    ids = [proc.encode(t) for t in texts]
    write_outputs(outdir, texts, {
        "ids_plain.txt": ids,
        "decoded.hex": [proc.decode(i) for i in ids],
    })


def gemma(path, outdir):
    """A Gemma GGUF's tokenizer as transformers converts it (its own GGUF
    tokenizer builder, fed the file's `tokenizer.ggml.*` arrays as the
    `gguf` package reads them: transformers' metadata reader needs torch),
    encoding the corpus without and with special-token parsing."""
    from transformers.integrations.gguf.gguf_tokenizer_mapping import (
        GGUF_TOKENIZER_MAPPING,
        convert_gguf_tokenizer,
    )

    r = gguf.GGUFReader(path)
    arch = field(r, "general.architecture")
    tokenizer_dict = {
        name: field(r, f"tokenizer.{key}")
        for key, name in GGUF_TOKENIZER_MAPPING["tokenizer"].items()
        if f"tokenizer.{key}" in r.fields
    }
    backend, _ = convert_gguf_tokenizer(arch, tokenizer_dict)
    texts = corpus()
    ids = [backend.encode(t, add_special_tokens=False).ids for t in texts]
    write_outputs(outdir, texts, {
        "ids_plain.txt": ids,
        "decoded.hex": [backend.decode(i, skip_special_tokens=False) for i in ids],
    })


if __name__ == "__main__":
    if sys.argv[1] == "bpe":
        bpe(sys.argv[2], sys.argv[3], sys.argv[4])
    elif sys.argv[1] == "pre":
        pre(sys.argv[2])
    elif sys.argv[1] == "spm":
        spm(sys.argv[2])
    elif sys.argv[1] == "gemma":
        gemma(sys.argv[2], sys.argv[3])
    else:
        raise SystemExit(
            "usage: tokenizer_ref.py bpe GGUF PRE OUTDIR | pre OUTDIR | spm OUTDIR | gemma GGUF OUTDIR"
        )
