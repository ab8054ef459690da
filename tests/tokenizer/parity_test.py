"""titan's tokenizer (through encode_main) against PyPI tokenizers and tiktoken.

Tolerance: none. Ids, BOS/EOS ids, vocabulary sizes and decodings must be equal exactly, because
tokenization is discrete and any difference changes what a model is trained on.
"""

import argparse
import base64
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import unicodedata
import unittest

import tiktoken
import transformers
from tiktoken.load import load_tiktoken_bpe
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

FLAGS = None

# Qwen2/2.5/3's tokenizer.json Split regex: one digit a piece, unlike Llama 3's 1-3.
QWEN_PAT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
    r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

LLAMA3_PAT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
    r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

TRICKY_TEXTS = [
    "",
    " ",
    "Hello, world!",
    "  two leading spaces and trailing   ",
    "I'm sure you're right; they've said we'll go, she'd agree. IT'S, DON'T, We'Re",
    "digits 0 7 42 123 1234 12345678901234567890 3.14159 1,000,000 -17 +8 2024-06-01",
    "naïve café résumé Ελληνικά русский текст Ünïcödé",
    "日本語のテキスト、中文字符。한국어 문장입니다.",
    "emoji 👍🏽 👨‍👩‍👧 🎉🎉 ☕ ❤️",
    "tabs\tand\nnewlines\n\n\nand\r\nwindows   \n   lines\n",
    "nbsp\u00a0ideographic\u3000space line\u2028sep nel\u0085zero\u200bwidth",
    "combining e\u0301 a\u0308 and precomposed é ä",
    "math ∑ ∫ √ ≤ ≥ ≠ ∞ and arrows → ← ↔ and ©®™",
    "العربية हिन्दी ไทย עברית",
    "code: def f(x):\n    return x ** 2  # square\n\tif a != b: pass",
    "a" * 3000,
    " " * 2000 + "x",
    "\n" * 500,
    "1234567" * 200,
    "héllo" * 400,
]


def special_texts(specials):
    """Texts with the tokenizer's special tokens inside, at edges, adjacent and broken."""
    first, second = specials[0], specials[-1]
    return [
        f"{first}Hello there{second}",
        f"{first}{first}{second}",
        f"x{second} y {first}\n{first} z",
        f"broken {first[:-1]} and {first[1:]} and <|{second}|>",
        f"{first} leading space, {second}  two spaces",
    ]


def mixed_sample(validation_path, seed, specials):
    """A few KB of corpus text, random unicode and special tokens, mixed deterministically."""
    rng = random.Random(seed)
    with open(validation_path, encoding="utf-8") as f:
        docs = [json.loads(line)["text"] for line in f]
    pool = (
        [chr(c) for c in range(0x20, 0x7F)]
        + [chr(c) for c in range(0xA0, 0x250)]
        + [chr(c) for c in range(0x370, 0x400)]
        + [chr(c) for c in range(0x4E00, 0x4E80)]
        + [chr(c) for c in range(0x1F600, 0x1F640)]
        + ["\n", "\t", "\r\n", "  ", "\u00a0", "\u3000", "'s", "'LL", "'ſ", "K\u212a", "123", "9876"]
    )
    texts = []
    for i in range(12):
        parts = []
        for _ in range(40):
            r = rng.random()
            if r < 0.4:
                parts.append(rng.choice(docs)[: rng.randint(20, 200)])
            elif r < 0.9:
                parts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 30))))
            else:
                parts.append(rng.choice(specials))
        texts.append("".join(parts))
    texts.append("\n\n".join(docs[:20]))
    return texts


def run_encode_main_logging(tokenizer_path, texts, tmp):
    """encode_main's results and what it logged."""
    texts_path = os.path.join(tmp, "texts.json")
    with open(texts_path, "w", encoding="utf-8") as f:
        json.dump(texts, f, ensure_ascii=False)
    out = subprocess.run(
        [FLAGS.encode_main, f"--tokenizer={tokenizer_path}", f"--texts={texts_path}"],
        check=True, capture_output=True, text=True)
    return json.loads(out.stdout), out.stderr


def run_encode_main(tokenizer_path, texts, tmp):
    return run_encode_main_logging(tokenizer_path, texts, tmp)[0]


def write_tokenizer_json(tmp, name, spec):
    """Folder `name` under `tmp` holding `spec` as its tokenizer.json; the folder and file paths."""
    tokenizer_dir = os.path.join(tmp, name)
    os.makedirs(tokenizer_dir)
    json_path = os.path.join(tokenizer_dir, "tokenizer.json")
    with open(json_path, "w", encoding="utf-8") as f:
        json.dump(spec, f, ensure_ascii=False)
    return tokenizer_dir, json_path


def split_then_byte_level(regex):
    """A pre_tokenizer: Split by `regex` (Isolated), then ByteLevel without its own regex."""
    return {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
         "use_regex": False}]}


def all_byte_pairs_split_by(regex):
    """A tokenizer.json spec: bytes, every pair of them merged, split by `regex`: the ids show
    where the Split's pieces end."""
    to_byte = byte_level_decoder()
    chars = sorted(to_byte, key=to_byte.get)
    vocab = {c: b for c, b in to_byte.items()}
    merges = []
    for a in chars:
        for b in chars:
            vocab[a + b] = len(vocab)
            merges.append(f"{a} {b}")
    return {"model": {"type": "BPE", "vocab": vocab, "merges": merges},
            "pre_tokenizer": split_then_byte_level(regex),
            "added_tokens": [{"id": len(vocab), "content": "</s>", "single_word": False,
                              "lstrip": False, "rstrip": False, "normalized": False,
                              "special": True}]}


def byte_level_decoder():
    """GPT-2's byte-level alphabet, character -> byte (the reverse of ByteLevel.alphabet())."""
    printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


class ParityTest(unittest.TestCase):

    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory(dir=os.environ.get("TEST_TMPDIR"))
        self.tmp = self._tmp.name

    def tearDown(self):
        self._tmp.cleanup()

    def texts_for(self, specials):
        return (TRICKY_TEXTS + special_texts(specials)
                + mixed_sample(FLAGS.validation_corpus, 7, specials))

    def assert_hf_parity(self, tokenizer_path, json_path, specials, bos, eos):
        """bos None: the tokenizer has no BOS (Qwen's layout)."""
        reference = Tokenizer.from_file(json_path)
        texts = self.texts_for(specials)
        self.assertGreater(sum(len(t.encode()) for t in texts), 20000)
        ours = run_encode_main(tokenizer_path, texts, self.tmp)
        self.assertEqual(ours["bos_id"], None if bos is None else reference.token_to_id(bos))
        self.assertEqual(ours["eos_id"], reference.token_to_id(eos))
        prefix = [] if bos is None else [ours["bos_id"]]
        self.assertEqual(ours["vocab_size"], reference.get_vocab_size(with_added_tokens=True))
        # Documents: special-token text is plain text (tokenizers' encode_special_tokens).
        plain = Tokenizer.from_file(json_path)
        plain.encode_special_tokens = True
        differ = 0
        for text, result in zip(texts, ours["results"]):
            expected = reference.encode(text, add_special_tokens=False).ids
            self.assertEqual(result["ids"], expected, f"text: {text[:80]!r}")
            self.assertEqual(result["decoded"], reference.decode(expected, skip_special_tokens=False))
            expected_plain = plain.encode(text, add_special_tokens=False).ids
            self.assertEqual(result["ids_plain"], expected_plain, f"text: {text[:80]!r}")
            self.assertEqual(result["ids_plain_bos_eos"], prefix + expected_plain + [ours["eos_id"]])
            differ += expected_plain != expected
        self.assertGreater(differ, 5)  # The special texts did exercise the difference.
        return texts, ours

    def assert_encodes_as_tokenizers(self, spec, name, texts, regex):
        """titan encodes `texts` with tokenizer.json `spec` (folder `name`) as tokenizers does."""
        tokenizer_dir, json_path = write_tokenizer_json(self.tmp, name, spec)
        reference = Tokenizer.from_file(json_path)
        ours = run_encode_main(tokenizer_dir, texts, self.tmp)
        for text, result in zip(texts, ours["results"]):
            self.assertEqual(result["ids"], reference.encode(text, add_special_tokens=False).ids,
                             f"regex {regex!r}, text {text[:40]!r}")

    def assert_both_refuse(self, spec, tokenizers_error):
        """tokenizers refuses tokenizer.json `spec` with `tokenizers_error`, and so does titan;
        titan's stderr."""
        path = os.path.join(self.tmp, "refused.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(spec, f, ensure_ascii=False)
        with self.assertRaisesRegex(Exception, tokenizers_error):
            Tokenizer.from_file(path)
        with self.assertRaises(subprocess.CalledProcessError) as refused:
            run_encode_main(path, ["x"], self.tmp)
        return refused.exception.stderr

    def assert_auto_tokenizer_parity(self, tokenizer_dir, texts, results):
        """titan's `results` for `texts` equal AutoTokenizer's ids in both modes (parsed, and plain
        as split_special_tokens=True); the AutoTokenizer and its parsed ids."""
        auto = transformers.AutoTokenizer.from_pretrained(tokenizer_dir)
        auto_plain = transformers.AutoTokenizer.from_pretrained(tokenizer_dir,
                                                                split_special_tokens=True)
        parsed = []
        for text, result in zip(texts, results):
            parsed.append(auto(text, add_special_tokens=False).input_ids)
            self.assertEqual(result["ids"], parsed[-1], f"text: {text[:80]!r}")
            self.assertEqual(result["ids_plain"],
                             auto_plain(text, add_special_tokens=False).input_ids,
                             f"text: {text[:80]!r}")
        return auto, parsed

    def test_default_tokenizer_matches_tokenizers(self):
        with open(FLAGS.default_tokenizer, encoding="utf-8") as f:
            spec = json.load(f)
        specials = [t["content"] for t in spec["added_tokens"]]
        # Directory form: tokenizer.json with its tokenizer_config.json.
        self.assert_hf_parity(os.path.dirname(FLAGS.default_tokenizer), FLAGS.default_tokenizer,
                              specials, "<|begin_of_text|>", "<|end_of_text|>")

    def test_default_tokenizer_with_ignore_merges_matches_tokenizers(self):
        # Llama 3's own tokenizer.json sets ignore_merges: a piece in the vocab is one token.
        with open(FLAGS.default_tokenizer, encoding="utf-8") as f:
            spec = json.load(f)
        spec["model"]["ignore_merges"] = True
        path = os.path.join(self.tmp, "ignore_merges.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(spec, f, ensure_ascii=False)
        specials = [t["content"] for t in spec["added_tokens"]]
        self.assert_hf_parity(path, path, specials, "<|begin_of_text|>", "<|end_of_text|>")

    def test_gpt2_style_tokenizer_matches_tokenizers(self):
        # A different layout: one ByteLevel pre-tokenizer with GPT-2's regex and add_prefix_space,
        # merges as "a b" strings, added tokens with lstrip/rstrip and a normalized one, BOS/EOS
        # named only by tokenizer_config.json.
        tokenizer = Tokenizer(models.BPE())
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)
        tokenizer.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=700, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        with open(FLAGS.validation_corpus, encoding="utf-8") as f:
            docs = [json.loads(line)["text"] for line in f]
        tokenizer.train_from_iterator(docs + TRICKY_TEXTS, trainer=trainer)
        tokenizer.add_special_tokens(["<s>", "</s>", AddedToken("<mask>", lstrip=True, rstrip=True)])
        tokenizer.add_tokens([AddedToken("[cat dog]", normalized=True)])
        spec = json.loads(tokenizer.to_str())
        spec["model"]["merges"] = [f"{a} {b}" for a, b in spec["model"]["merges"]]
        tokenizer_dir, json_path = write_tokenizer_json(self.tmp, "gpt2_style", spec)
        with open(os.path.join(tokenizer_dir, "tokenizer_config.json"), "w") as f:
            json.dump({"bos_token": "<s>", "eos_token": {"content": "</s>"}}, f)
        specials = ["<s>", "</s>", "<mask>", "[cat dog]"]
        texts_extra = ["a <mask> b", "x   <mask>\n\ny", "the [cat dog] sat", "<mask>"]
        TRICKY_TEXTS.extend(texts_extra)
        try:
            self.assert_hf_parity(tokenizer_dir, json_path, specials, "<s>", "</s>")
        finally:
            del TRICKY_TEXTS[-len(texts_extra):]

    def test_decoding_without_a_decoder_or_with_an_empty_sequence_matches_tokenizers(self):
        # tokenizers joins the token strings by spaces without a decoder and concatenates them
        # for an empty Sequence; assert_hf_parity compares the decodings.
        with open(FLAGS.default_tokenizer, encoding="utf-8") as f:
            spec = json.load(f)
        specials = [t["content"] for t in spec["added_tokens"]]
        for name, decoder in [("null", None), ("missing", "missing"),
                              ("empty_sequence", {"type": "Sequence", "decoders": []})]:
            if decoder == "missing":
                del spec["decoder"]
            else:
                spec["decoder"] = decoder
            _, json_path = write_tokenizer_json(self.tmp, f"decoder_{name}", spec)
            self.assert_hf_parity(json_path, json_path, specials, "<|begin_of_text|>",
                                  "<|end_of_text|>")

    def test_bos_and_eos_without_tokenizer_config_are_the_post_processors(self):
        # Without tokenizer_config.json, transformers' encode with add_special_tokens=True adds
        # the post_processor's tokens (bos_token stays None): titan's BOS is the one before the
        # text, its EOS the one after (else the usual name).
        with open(FLAGS.default_tokenizer, encoding="utf-8") as f:
            spec = json.load(f)
        n = len(spec["model"]["vocab"]) + len(spec["added_tokens"])
        spec["added_tokens"].append({"id": n, "content": "<cls>", "single_word": False,
                                     "lstrip": False, "rstrip": False, "normalized": False,
                                     "special": True})
        bos, eos = "<|begin_of_text|>", "<|end_of_text|>"
        ids = {t["content"]: t["id"] for t in spec["added_tokens"]}

        def template(before, after):
            pieces = ([{"SpecialToken": {"id": t, "type_id": 0}} for t in before]
                      + [{"Sequence": {"id": "A", "type_id": 0}}]
                      + [{"SpecialToken": {"id": t, "type_id": 0}} for t in after])
            return {"type": "TemplateProcessing", "single": pieces,
                    "pair": pieces + [{"Sequence": {"id": "B", "type_id": 1}}],
                    "special_tokens": {t: {"id": t, "ids": [ids[t]], "tokens": [t]}
                                       for t in before + after}}

        byte_level = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                      "use_regex": True}
        for name, processor in [
                ("llama3", {"type": "Sequence", "processors": [byte_level, template([bos], [])]}),
                ("cls_eos", template(["<cls>"], [eos])),
                ("eos_only", template([], [eos])),
                ("roberta", {"type": "RobertaProcessing", "sep": [bos, ids[bos]],
                             "cls": ["<cls>", n], "trim_offsets": True, "add_prefix_space": True}),
                ("bert", {"type": "BertProcessing", "sep": [bos, ids[bos]], "cls": ["<cls>", n]}),
                ("byte_level", byte_level)]:
            spec["post_processor"] = processor
            tokenizer_dir, _ = write_tokenizer_json(self.tmp, f"post_{name}", spec)
            auto = transformers.AutoTokenizer.from_pretrained(tokenizer_dir)
            self.assertIsNone(auto.bos_token)
            bare = auto("Hi", add_special_tokens=False).input_ids
            full = auto("Hi").input_ids
            start = full.index(bare[0])
            before, after = full[:start], full[start + len(bare):]
            ours, log = run_encode_main_logging(tokenizer_dir, ["Hi"], self.tmp)
            # A ByteLevel adds nothing and names nothing: the usual names stay.
            self.assertEqual(ours["bos_id"],
                             before[0] if before else None if after else ids[bos], name)
            self.assertEqual(ours["eos_id"], after[0] if after else ids[eos], name)
            self.assertIn("post_processor" if before or after else "its usual name", log, name)

    def test_keys_tokenizers_requires_are_refused_when_missing_as_tokenizers_refuses(self):
        # serde fields without defaults, and merges split by one space into two strings.
        with open(FLAGS.default_tokenizer, encoding="utf-8") as f:
            base = json.load(f)
        cases = []
        for key in ["behavior", "invert"]:
            cases.append((["pre_tokenizer", "pretokenizers", 0], key,
                          f"pre_tokenizer.pretokenizers[0].{key}: missing"))
        for key in ["add_prefix_space", "trim_offsets"]:
            cases.append((["pre_tokenizer", "pretokenizers", 1], key,
                          f"pre_tokenizer.pretokenizers[1].{key}: missing"))
            cases.append((["decoder"], key, f"decoder.{key}: missing"))
        for key in ["single_word", "lstrip", "rstrip", "normalized", "special"]:
            cases.append((["added_tokens", 0], key, f"added_tokens[0].{key}: missing"))
        for path, key, error in cases:
            spec = json.loads(json.dumps(base))
            target = spec
            for step in path:
                target = target[step]
            del target[key]
            stderr = self.assert_both_refuse(spec, f"missing field `{key}`|did not match any")
            self.assertIn(error, stderr)
        for merge in ["\u0120 t x", "\u0120  t", "\u0120 t "]:
            spec = json.loads(json.dumps(base))
            spec["model"]["merges"][0] = merge
            stderr = self.assert_both_refuse(spec, "did not match any variant")
            self.assertIn('model.merges[0]: expected "left right" (one space)', stderr)

    def test_split_regexes_with_empty_matches_match_tokenizers(self):
        # tokenizers splits by the onig crate's find_iter: an empty match (a lookaround, an anchor,
        # a starred atom) is a split point unless it sits where the previous match ended.
        with open(FLAGS.default_tokenizer, encoding="utf-8") as f:
            spec = json.load(f)
        texts = ["a Bc", "banana bread", "ab", "a", "ab cd", "baac", "a\nb\n", "HelloWorld FooBar",
                 "aaa", "naïve café 日本語 👍🏽"] + TRICKY_TEXTS[:16]
        # Groups around an anchor or lookaround may repeat (a bare one may not: below).
        for i, pattern in enumerate([r"(?=\p{Lu})", "(?=a)", "(?<=a)", "$", "^", r"\b", "",
                                     "x*", "a*", r"(?=\s)|\s+", r"(\b)+", r"(?i:^)+",
                                     r"(?>(?=\p{Lu}))*", "(?:(?=a)(?<=b))?", "(?:^^|a)+",
                                     r"(?:\b(?=a))+|(?:a|(?i)$){2}", r"(?:(?i)\b|\b)+"]):
            spec["pre_tokenizer"] = split_then_byte_level(pattern)
            self.assert_encodes_as_tokenizers(spec, f"empty_match_{i}", texts, pattern)

    def test_quantified_anchors_and_lookarounds_are_refused_as_tokenizers_refuses_them(self):
        with open(FLAGS.default_tokenizer, encoding="utf-8") as f:
            spec = json.load(f)
        for pattern in [r"(?=\p{Lu})+", r"\b*", r"\b?", "^+", "(?!x){2}", "$?", r"\A{,3}",
                        "(?<=a)*", "(?:^)+", r"(?:a|(?:\B|b))+", r"a|(?i)\z+", "(?:|$)?",
                        # Only the rest of the group after a (?i) is one option node.
                        r"(?:\b|(?i))+", r"(?:\b|a(?i)b)+", r"(?:(?:\b|(?i)))+",
                        r"(?:\A|(?#c)(?i)x)+", r"(?:a|\b|(?i)c)*"]:
            spec["pre_tokenizer"] = split_then_byte_level(pattern)
            stderr = self.assert_both_refuse(spec, "target of repeat operator is invalid")
            self.assertIn(f"regex /{pattern}/: the quantifier ", stderr)
            self.assertIn("(tokenizers' Oniguruma refuses to repeat an anchor or a lookaround)",
                          stderr)

    def test_quantifiers_with_nothing_to_repeat_are_refused_as_tokenizers_refuses_them(self):
        with open(FLAGS.default_tokenizer, encoding="utf-8") as f:
            spec = json.load(f)
        for pattern in ["a+(?i)+b", "a?(?m)?b", "a{2}(?i)+b", "d+(?i)+", "()+(?m)?", "a(?i){,2}",
                        "a|{2}", "(?#c)*a", "(+a)"]:
            spec["pre_tokenizer"] = split_then_byte_level(pattern)
            stderr = self.assert_both_refuse(spec, "target of repeat operator is not specified")
            self.assertIn(f"regex /{pattern}/: the quantifier ", stderr)
            self.assertIn("with nothing before it is not supported", stderr)

    def test_split_regex_class_ranges_caseless_classes_and_intervals_as_tokenizers(self):
        with open(FLAGS.default_tokenizer, encoding="utf-8") as f:
            spec = json.load(f)
        # A range from or to a class escape, property or POSIX class: both refuse it.
        for pattern, error in [(r"[\p{XDigit}-z]+", "unmatched range specifier in char-class"),
                               (r"[\p{ASCII}-\u00ff]+", "unmatched range specifier in char-class"),
                               (r"[\P{XDigit}-z]+", "unmatched range specifier in char-class"),
                               (r"[\h-z]+", "unmatched range specifier in char-class"),
                               (r"[\w-z]", "unmatched range specifier in char-class"),
                               (r"[[:digit:]-z]", "unmatched range specifier in char-class"),
                               (r"[a-\p{L}]", "char-class value at end of range"),
                               (r"[!-\h]", "char-class value at end of range")]:
            spec["pre_tokenizer"] = split_then_byte_level(pattern)
            stderr = self.assert_both_refuse(spec, error)
            self.assertIn(f"regex /{pattern}/: a range ", stderr)
        # A property in a class under (?i): Oniguruma case-folds it, PCRE2 would not.
        for pattern in [r"(?i)[\p{Lower}]+", r"(?i)[^\p{Upper}]+", r"(?i:[\p{Uppercase_Letter}])+",
                        r"(?i)[\p{Ll}]+"]:
            spec["pre_tokenizer"] = split_then_byte_level(pattern)
            path = os.path.join(self.tmp, "caseless.json")
            with open(path, "w", encoding="utf-8") as f:
                json.dump(spec, f)
            with self.assertRaises(subprocess.CalledProcessError) as refused:
                run_encode_main(path, ["x"], self.tmp)
            self.assertIn("inside [...] under (?i) is not supported", refused.exception.stderr)
        # What loads splits as tokenizers splits: a literal -, \w-like escapes in a (?i) class,
        # X{n,m}+ as (?:X{n,m})+, X{n}? as (?:X{n})?, lazy intervals, inline options, X{n,m} with
        # n > m.
        texts = ["Hello World", "aaaaaaa bb", "12345 678 9",
                 "ab-z \u212a k K \u017f s \u1e9e \u00df",
                 "0x1F-fe \u00bd \u2460\u2461\u2462\u2463", "cd acaB Cd xAB dE"] + TRICKY_TEXTS[:16]
        for i, regex in enumerate([
                r"[\p{L}-]+|[-\w]+|[^-\w]", r"[a-c-\w]+|[a-c-\h]+|[\p{XDigit}-]+|[\h-]|.",
                r"(?i)[\w]+|[^\w]+", r"(?i)[\d\s\h]+|\p{Lu}+|\P{Upper}+", r"\p{N}{1,3}+|\p{N}{1,3}",
                "a{2}+|a{2,}+|b{,2}+|x{1,3}+", "a{2}?|b{2,}?|[a-z]{,2}?|l{1,3}?",
                "a{2}++|l{2}+?|(?:ab|a){2}+", r"(?i)(?-i)[\p{Ll}]+|(?i:a)[\p{Ll}]",
                # A (?i) covers the rest of its group, later alternatives inside: a(?i:b|c).
                "a(?i)b|c", r"(?:\b(?i)|c)+", "(?:a(?-i)b|C)(?m).|(?i)d(?-i)e|F",
                # X{n,m} with n > m is a possessive X{m,n}; a ? or + after it repeats it.
                "a{2,1}a|[0-9]{3,1}+|b{2,1}?|[a-z]{9,3}"]):
            self.assert_encodes_as_tokenizers(all_byte_pairs_split_by(regex),
                                              f"class_interval_{i}", texts, regex)

    def test_split_regex_stacked_quantifiers_and_long_intervals_as_tokenizers(self):
        # A quantifier after a quantified item (past a comment too) repeats the quantified item:
        # a{2}{2} is (?:a{2}){2}, a+{2} is (?:a+){2}; a ? or + after an interval, a {n} or a
        # possessive interval is such a quantifier too.
        texts = ["a aa aaa aaaaaaa", "ab aab abab b bbb", "\u00e9 \u00e9\u00e9 \u00e9\u00e9\u00e9\u00e9\u00e9",
                 "Hello World 12345"] + TRICKY_TEXTS[:16]
        for i, regex in enumerate([
                "a{3,2}*", "a{2}{2}", "a+{2}", "a{3,2}{2}", "a{3,2}(?#c)+", "a(?#c)*", "a**",
                "a???", "a+?+", "a*++", "a{2}{2}?", "a??{2}", "a*{2,3}", "a+{0,5}", "a{2,}?{2}",
                "(?:ab|a){2}{1,2}", "\u00e9{2}{2}|\u00e9{2}?", "[ab]*?{2}", r"\p{L}{1,2}+{2}",
                "(?:a|b)+?{2,}?", "a{1000}{1000}|b{,2}{2}?"]):
            self.assert_encodes_as_tokenizers(all_byte_pairs_split_by(regex),
                                              f"stacked_{i}", texts, regex)
        # Counts over PCRE2's 65535: an exact one is split in two factors, as a{35000}{2}.
        long_texts = ["a" * 70001, "a" * 100001 + "b", "ab" * 40000, "b" * 66000]
        for i, regex in enumerate(["a{70000}", "a{100000}|b{66000}", "[ab]{33000}{2}|b"]):
            self.assert_encodes_as_tokenizers(all_byte_pairs_split_by(regex),
                                              f"long_interval_{i}", long_texts, regex)
        with open(FLAGS.default_tokenizer, encoding="utf-8") as f:
            spec = json.load(f)
        # A lone raw byte above 0x7F (PCRE2 would read a code point).
        for pattern in [r"\xE9", r"a|\351"]:
            spec["pre_tokenizer"] = split_then_byte_level(pattern)
            stderr = self.assert_both_refuse(spec, "too short multibyte code string")
            self.assertIn("is not supported (a raw byte in Oniguruma", stderr)
        for pattern in ["a{100001}", "a{,100001}"]:
            spec["pre_tokenizer"] = split_then_byte_level(pattern)
            stderr = self.assert_both_refuse(spec, "too big number for repeat range")
            self.assertIn(f"regex /{pattern}/: the interval {pattern[1:]} is not supported "
                          "(tokenizers' Oniguruma refuses a count over 100000", stderr)

    def test_split_regex_quantified_escapes_as_tokenizers(self):
        # A multi-character escape is one item: \x41{2}{3} is (?:\x41{2}){3}, not \x4(?:1{2}){3};
        # Ruby's control escapes \cX and \C-X are X & 0x9f (PCRE2's \c1 is q).
        texts = ["xAAAAAAAx AAb Ab b A11 A1", "x\x01\x01\x01 \x04\x04\x04\x04\x04\x04\x04",
                 "\x11q1\x7f? b-a \x01a"] + TRICKY_TEXTS[:8]
        for i, regex in enumerate([
                r"\x41{2}{3}", r"\x41{2}?", r"\x41+{2}", r"\101{2}?b", r"\01{2}?", r"\x4{2}{3}",
                r"\cA{2}{3}", r"\cA{2}?", r"\C-a+|\c1|\C-?", r"\1011{2}|\x0A+{2}",
                r"(a)(b)(c)(d)(e)(f)(g)(h)(i)(j)\10{2}|[\C-a\x41]+"]):
            self.assert_encodes_as_tokenizers(all_byte_pairs_split_by(regex),
                                              f"escape_{i}", texts, regex)

    def test_split_regex_lazy_inside_atomic_as_tokenizers(self):
        # PCRE2 10.42's JIT missed matches of a lazy quantifier inside an atomic group or a
        # possessive quantifier; titan runs such a pattern in PCRE2's interpreter.
        texts = ["xxc", "xxxxc", "xc xxxc xxxxxxc", "aab ab abab"] + TRICKY_TEXTS[:8]
        for i, regex in enumerate(["(?>x+?)c", "(?:x+?){1,3}+c", "x+?{3,1}c",
                                   "(?>a*?b)|(?:x??){2,1}c"]):
            self.assert_encodes_as_tokenizers(all_byte_pairs_split_by(regex),
                                              f"lazy_atomic_{i}", texts, regex)

    def test_split_regex_duplicate_group_names_as_tokenizers(self):
        # Oniguruma allows a name on several groups; a \g<name> call to one it refuses, as titan.
        texts = ["xabx ccdd abab", "cd c d"] + TRICKY_TEXTS[:8]
        regex = "(?<n>a)(?<n>b)|(?'m'c)+(?<m>d)"
        self.assert_encodes_as_tokenizers(all_byte_pairs_split_by(regex), "duplicate_names",
                                          texts, regex)
        with open(FLAGS.default_tokenizer, encoding="utf-8") as f:
            spec = json.load(f)
        spec["pre_tokenizer"] = split_then_byte_level(r"(?<n>a)|(?<n>b)\g<n>")
        stderr = self.assert_both_refuse(spec, "multiplex definition name <n> call")
        self.assertIn(r"\g<n> to a name of several groups is not supported", stderr)

    def write_qwen3_layout(self, name, think_settings=None):
        """A folder holding Qwen3's tokenizer.json (the default vocabulary under Qwen's NFC
        normalizer, pre-tokenizer and added tokens, <think> not special, with `think_settings`):
        the folder, the file, its added tokens (content, special) and added_tokens_decoder."""
        with open(FLAGS.default_tokenizer, encoding="utf-8") as f:
            spec = json.load(f)
        n = len(spec["model"]["vocab"])
        spec["normalizer"] = {"type": "NFC"}
        spec["pre_tokenizer"] = split_then_byte_level(QWEN_PAT)
        added = [("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
                 ("<think>", False), ("</think>", False)]
        entries = {n + i: {"content": c, "single_word": False, "lstrip": False, "rstrip": False,
                           "normalized": False, "special": s} for i, (c, s) in enumerate(added)}
        entries[n + 3].update(think_settings or {})
        spec["added_tokens"] = [dict(entry, id=i) for i, entry in entries.items()]
        tokenizer_dir, json_path = write_tokenizer_json(self.tmp, name, spec)
        return tokenizer_dir, json_path, added, {str(i): e for i, e in entries.items()}

    def test_qwen3_layout_matches_transformers(self):
        # Qwen3's tokenizer files and instruct tokenizer_config.json: no BOS, <|im_end|> the EOS,
        # <think> not special. transformers' Qwen2Tokenizer builds that pipeline itself.
        tokenizer_dir, json_path, added, entries = self.write_qwen3_layout("qwen3_layout")
        with open(os.path.join(tokenizer_dir, "tokenizer_config.json"), "w") as f:
            json.dump({"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
                       "tokenizer_class": "Qwen2Tokenizer",
                       "added_tokens_decoder": entries}, f)
        texts, ours = self.assert_hf_parity(tokenizer_dir, json_path, [c for c, _ in added],
                                            None, "<|im_end|>")
        reference, _ = self.assert_auto_tokenizer_parity(tokenizer_dir, texts, ours["results"])
        self.assertIsNone(reference.bos_token_id)
        self.assertEqual(ours["eos_id"], reference.eos_token_id)

    def test_qwen2_tokenizer_makes_named_and_extra_tokens_plain_special_as_transformers(self):
        # transformers' Qwen2Tokenizer (Qwen2TokenizerFast too) adds every named and extra token
        # again as AddedToken(content, special=True): <think>, not special with lstrip and rstrip
        # in tokenizer.json, listed as an extra token becomes special, no lstrip, no rstrip; so does
        # model.vocab's "\u0120day", named as an AddedToken with lstrip. Other classes
        # (Qwen3Tokenizer is none) leave <think> as tokenizer.json has it, "\u0120day" as named.
        tokenizer_dir, _, _, entries = self.write_qwen3_layout(
            "qwen3_think_listed", {"lstrip": True, "rstrip": True})
        texts = ["q <think> r", "q<think>r", "<think>\nx</think>", "a  <think>  b <think><think>",
                 "<|im_start|>user <think> hi</think><|im_end|>",
                 "a  \u0120day b\u0120day"]
        for tokenizer_class in ["Qwen2Tokenizer", "Qwen2TokenizerFast", "Qwen3Tokenizer"]:
            for extra_key in ["additional_special_tokens", "extra_special_tokens"]:
                with self.subTest(tokenizer_class=tokenizer_class, extra_key=extra_key):
                    with open(os.path.join(tokenizer_dir, "tokenizer_config.json"), "w") as f:
                        json.dump({"bos_token": None, "eos_token": "<|im_end|>",
                                   "pad_token": "<|endoftext|>", "tokenizer_class": tokenizer_class,
                                   extra_key: ["<|im_start|>", "<|im_end|>", "<think>"],
                                   "mask_token": {"__type": "AddedToken", "content": "\u0120day",
                                                  "lstrip": True},
                                   "added_tokens_decoder": entries}, f)
                    ours = run_encode_main(tokenizer_dir, texts, self.tmp)
                    auto, _ = self.assert_auto_tokenizer_parity(tokenizer_dir, texts,
                                                                ours["results"])
                    think = auto.added_tokens_decoder[auto.convert_tokens_to_ids("<think>")]
                    remade = tokenizer_class != "Qwen3Tokenizer"
                    self.assertEqual((think.special, think.lstrip, think.rstrip),
                                     (remade, not remade, not remade))
                    self.assertEqual(auto.added_tokens_decoder[auto.mask_token_id].lstrip,
                                     not remade)

    def test_added_token_ids_as_tokenizers_gives_them(self):
        # tokenizers ignores the ids tokenizer.json writes for added_tokens (it only warns): a
        # token in model.vocab keeps its vocab id, any other takes the next free id in list
        # order. Written here: ids beyond the vocab with gaps, on a vocab entry's id, on the
        # token's own vocab entry under another id, out of order; transformers agrees.
        with open(FLAGS.default_tokenizer, encoding="utf-8") as f:
            spec = json.load(f)
        n = len(spec["model"]["vocab"])
        in_vocab = next(t for t, i in spec["model"]["vocab"].items() if len(t) > 2 and i > 300)
        written = [n + 900, 17, n + 5, n + 1, n + 40, n + 2, n + 3, n]
        for token, token_id in zip(spec["added_tokens"], written):
            token["id"] = token_id
        spec["added_tokens"].reverse()
        spec["added_tokens"].insert(3, dict(spec["added_tokens"][0], id=n + 7, content=in_vocab,
                                            special=False))
        tokenizer_dir, json_path = write_tokenizer_json(self.tmp, "added_ids", spec)
        with open(os.path.join(tokenizer_dir, "tokenizer_config.json"), "w") as f:
            json.dump({"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>",
                       "tokenizer_class": "PreTrainedTokenizerFast",
                       "added_tokens_decoder": {str(t["id"]): t for t in spec["added_tokens"]}}, f)
        reference = Tokenizer.from_file(json_path)
        ids = [reference.token_to_id(t["content"]) for t in spec["added_tokens"]]
        self.assertEqual(ids, [n, n + 1, n + 2, spec["model"]["vocab"][in_vocab]]
                         + list(range(n + 3, n + 8)))
        specials = [t["content"] for t in spec["added_tokens"] if t["special"]]
        texts, ours = self.assert_hf_parity(tokenizer_dir, json_path, specials,
                                            "<|begin_of_text|>", "<|end_of_text|>")
        auto = transformers.AutoTokenizer.from_pretrained(tokenizer_dir)
        self.assertEqual(ours["vocab_size"], len(auto))
        for text, result in zip(texts, ours["results"]):
            self.assertEqual(result["ids"], auto(text, add_special_tokens=False).input_ids)

    def test_stripping_added_tokens_next_to_other_added_tokens_match_tokenizers(self):
        # tokenizers finds every added token in the raw text first, then strips around each: an
        # rstrip token's stripped whitespace does not hide an added token it starts with (nor an
        # lstrip token's hide the one before). Random settings over texts built from the tokens.
        with open(FLAGS.default_tokenizer, encoding="utf-8") as f:
            base = json.load(f)
        # Not both "e\u0301" and "\u00e9": which of two tokens one NFC form matches varies from
        # run to run in tokenizers (a hash map's order).
        contents = ["<AB>", "AB", " <A>", "\n", "e\u0301", "Hello", "\u0120Hello", "ab", "abc",
                    "  ", "x y", "<|user|>"]
        frags = contents + [" ", "x", "\u00a0", "e", "\u0301", "\u00e9", "<", ">", "\r\n",
                            "\u3000"]
        rng = random.Random(3)
        texts = ["a    b", "<|user|>\nHi", "<|user|>\n  x", "x  \n<|user|>"] + [
            "".join(rng.choice(frags) for _ in range(rng.randint(1, 10))) for _ in range(400)]
        for combo in range(12):
            spec = json.loads(json.dumps(base))
            spec["normalizer"] = {"type": "NFC"} if combo % 2 else None
            n = len(spec["model"]["vocab"]) + len(spec["added_tokens"])
            for k, content in enumerate(contents):
                spec["added_tokens"].append({
                    "id": n + k, "content": content, "single_word": False,
                    "lstrip": rng.random() < 0.4, "rstrip": rng.random() < 0.4,
                    "normalized": rng.random() < 0.5, "special": rng.random() < 0.5})
            tokenizer_dir, json_path = write_tokenizer_json(self.tmp, f"strip_{combo}", spec)
            reference = Tokenizer.from_file(json_path)
            plain = Tokenizer.from_file(json_path)
            plain.encode_special_tokens = True
            ours = run_encode_main(tokenizer_dir, texts, self.tmp)
            for text, result in zip(texts, ours["results"]):
                for ids, tokenizer in [(result["ids"], reference), (result["ids_plain"], plain)]:
                    try:
                        expected = tokenizer.encode(text, add_special_tokens=False).ids
                    except BaseException as e:  # pyo3's PanicException is no Exception.
                        # An lstrip token inside another's stripped whitespace: tokenizers panics.
                        self.assertIn("bad split", str(e))
                        continue
                    self.assertEqual(ids, expected, f"combo {combo}, text {text!r}")

    def test_normalized_added_token_not_in_nfc_matches_as_tokenizers(self):
        # tokenizers normalizes a normalized added token's content as it normalizes the text, so
        # "<|e\u0301|>" matches the text's "<|e\u0301|>" and "<|\u00e9|>" alike.
        with open(FLAGS.default_tokenizer, encoding="utf-8") as f:
            spec = json.load(f)
        spec["normalizer"] = {"type": "NFC"}
        n = len(spec["model"]["vocab"]) + len(spec["added_tokens"])
        for offset, (content, normalized) in enumerate(
                [("<|e\u0301|>", True), ("<|o\u0301|>", False)]):
            spec["added_tokens"].append({"id": n + offset, "content": content,
                                         "single_word": False, "lstrip": False, "rstrip": False,
                                         "normalized": normalized, "special": False})
        tokenizer_dir, json_path = write_tokenizer_json(self.tmp, "nfc_added", spec)
        texts = ["q<|e\u0301|>r", "q<|\u00e9|>r", "q<|o\u0301|>r", "q<|\u00f3|>r"]
        reference = Tokenizer.from_file(json_path)
        expected = [reference.encode(t, add_special_tokens=False).ids for t in texts]
        self.assertEqual(expected[0], expected[1])  # The case this test is about.
        self.assertIn(n, expected[0])
        self.assertIn(n + 1, expected[2])  # Not normalized: only its own form matches.
        self.assertNotIn(n + 1, expected[3])
        ours = run_encode_main(json_path, texts, self.tmp)
        self.assertEqual([r["ids"] for r in ours["results"]], expected)

    def test_config_settings_of_listed_added_tokens_as_transformers_applies_them(self):
        # tokenizer_config.json's added_tokens_decoder entry for a token tokenizer.json already
        # lists sets its lstrip, rstrip and normalized and can make it special (never unmake it):
        # AutoTokenizer adds the entry again with tokenizers' add_tokens. Tokenizer.from_file,
        # which reads no config, matches these tokens otherwise.
        with open(FLAGS.default_tokenizer, encoding="utf-8") as f:
            spec = json.load(f)
        n = len(spec["model"]["vocab"]) + len(spec["added_tokens"])
        spec["normalizer"] = {"type": "NFC"}  # So that `normalized` decides a match.
        plain = {"lstrip": False, "rstrip": False, "normalized": False, "special": True}
        strip = dict(plain, lstrip=True, rstrip=True)
        # content -> (tokenizer.json's settings, tokenizer_config.json's entry)
        listed = {
            "<|im_start|>": (plain, strip),
            "<|im_end|>": (strip, plain),
            "<|was_special|>": (plain, dict(plain, special=False)),
            "<|now_special|>": (dict(plain, special=False), plain),
            "<|normalized|>": (plain, dict(plain, normalized=True)),
            "<|bare_entry|>": (dict(plain, lstrip=True), {}),  # AddedToken's defaults.
        }
        spec["added_tokens"] += [dict(settings, id=n + i, content=c, single_word=False)
                                 for i, (c, (settings, _)) in enumerate(listed.items())]
        tokenizer_dir, json_path = write_tokenizer_json(self.tmp, "config_settings", spec)
        with open(os.path.join(tokenizer_dir, "tokenizer_config.json"), "w") as f:
            json.dump({"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>",
                       "added_tokens_decoder": {str(n + i): dict(entry, content=c)
                                                for i, (c, (_, entry)) in enumerate(listed.items())}},
                      f)
        texts = [form.format(c) for c in listed
                 for form in ["q  {}  r", "q{}r", "q \n{}\n r", "{}  x", "a{}\u0338b"]]
        texts += mixed_sample(FLAGS.validation_corpus, 5, list(listed))
        ours = run_encode_main(tokenizer_dir, texts, self.tmp)
        auto, parsed = self.assert_auto_tokenizer_parity(tokenizer_dir, texts, ours["results"])
        self.assertEqual(ours["vocab_size"], len(auto))
        without_config = Tokenizer.from_file(json_path)
        differ = sum(expected != without_config.encode(text, add_special_tokens=False).ids
                     for text, expected in zip(texts, parsed))
        self.assertGreater(differ, 10)  # The config's settings did change the encoding.

    def test_tokens_tokenizer_config_names_as_transformers_makes_them(self):
        # transformers 5.24's AutoTokenizer makes a token tokenizer_config.json names special: the
        # seven *_token attributes, any other *_token key holding a string or an AddedToken, an
        # extra_special_tokens dict's entries. One in model.vocab only becomes an added token (a
        # string: no lstrip/rstrip, not normalized; an AddedToken: its own settings), matched whole;
        # an added token is made special where AutoTokenizer adds it again (listed in the config's
        # added_tokens_decoder, or in tokenizer.json's added_tokens without that key). An
        # extra_special_tokens (or additional_special_tokens) list adds a model.vocab token, special
        # unless an AddedToken says otherwise. A plain {"content": ...} under a model-specific key
        # names nothing. Both modes: special-token text parsed and as plain text.
        with open(FLAGS.default_tokenizer, encoding="utf-8") as f:
            spec = json.load(f)
        spec["normalizer"] = {"type": "NFC"}  # So that `normalized` decides a match.
        plain = {"single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
                 "special": False}
        n = len(spec["model"]["vocab"]) + len(spec["added_tokens"])
        angstrom = spec["model"]["vocab"]["\u00c5"]  # One byte's token: NFC composes "A\u030a".
        spec["added_tokens"] += [dict(plain, id=n, content="<think>", lstrip=True),
                                 dict(plain, id=angstrom, content="\u00c5", normalized=True)]
        tokenizer_dir, json_path = write_tokenizer_json(self.tmp, "named_tokens", spec)

        def added_token(content, **settings):
            return dict(settings, __type="AddedToken", content=content)

        llama = {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"}
        decoder_without_think = {"2040": {"content": "<|begin_of_text|>", "special": True}}
        configs = {
            "vocab strings": dict(llama, pad_token="\u0120day", unk_token="\u0120the",
                                  sep_token="ing", cls_token="<think>", mask_token="\u00c5"),
            "vocab AddedTokens": dict(
                llama, pad_token=added_token("\u0120day", lstrip=True, rstrip=True),
                sep_token=added_token("\u0120the", normalized=True, special=False)),
            "bos in vocab": dict(llama, bos_token="\u0120day"),
            "model-specific keys": dict(llama, image_token="\u0120day",
                                        audio_token=added_token("ing", rstrip=True),
                                        video_token={"content": "\u0120the"}),
            "extra list": dict(llama, extra_special_tokens=[
                "\u0120day", added_token("\u0120the"), added_token("ing", special=True), "<think>"]),
            "extra dict": dict(llama, extra_special_tokens={"image_token": "\u0120day"}),
            "additional list": dict(llama, additional_special_tokens=["\u0120day"]),
            "decoder relists": dict(llama, pad_token="\u00c5", mask_token="<think>",
                                    added_tokens_decoder={
                                        str(angstrom): {"content": "\u00c5", "special": False},
                                        str(n): dict(plain, content="<think>", rstrip=True)}),
            "decoder lacks them": dict(llama, pad_token="\u00c5", mask_token="<think>",
                                       added_tokens_decoder=decoder_without_think),
        }
        names = ["\u0120day", "\u0120the", "ing", "<think>", "\u00c5", "A\u030a"]
        texts = [form.format(c) for c in names
                 for form in ["q  {0}  r", "q{0}r", "{0}", "a {0} b {0}{0}", "\n{0}\n"]]
        texts += [" day the thing", "<|begin_of_text|>x\u0120day<|end_of_text|>"]
        texts += mixed_sample(FLAGS.validation_corpus, 3, names)
        without_config = Tokenizer.from_file(json_path)
        for name, config in configs.items():
            with self.subTest(config=name):
                with open(os.path.join(tokenizer_dir, "tokenizer_config.json"), "w") as f:
                    json.dump(config, f, ensure_ascii=False)
                ours = run_encode_main(tokenizer_dir, texts, self.tmp)
                auto, parsed = self.assert_auto_tokenizer_parity(tokenizer_dir, texts,
                                                                 ours["results"])
                self.assertEqual(ours["vocab_size"], len(auto))
                self.assertEqual(ours["bos_id"], auto.bos_token_id)
                differ = sum(
                    expected != without_config.encode(text, add_special_tokens=False).ids
                    or result["ids_plain"] != expected
                    for text, expected, result in zip(texts, parsed, ours["results"]))
                if name != "decoder lacks them":  # Named, but not added again: unchanged.
                    self.assertGreater(differ, 3)  # The named tokens did change the encoding.

    def test_tokens_the_config_names_found_nowhere_stay_plain_text_with_a_warning(self):
        # transformers adds a named or extra token neither file holds with a new id: the seven
        # attributes in their order, then other *_token keys and extra_special_tokens' in the
        # file's order; an empty one is no token. titan does not grow the vocabulary: one warning per token names the id
        # transformers gives it, and text holding it encodes as plain text.
        with open(FLAGS.default_tokenizer, encoding="utf-8") as f:
            spec = json.load(f)
        tokenizer_dir, json_path = write_tokenizer_json(self.tmp, "named_tokens_found_nowhere", spec)
        llama = {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"}
        configs = {
            "keys out of alphabetical order": dict(
                llama, extra_special_tokens={"video_token": "<video>", "audio_token": "<audio>"},
                zeta_token="<z>", alpha_token="<a>", mask_token="<mask>", pad_token="<pad>"),
            "extra list": dict(llama, additional_special_tokens=["<tool>", "<pad>", "<think>"],
                               image_token="<image>", pad_token="<pad>"),
            # transformers adds no empty token: it takes no id and gets no warning.
            "empty tokens": dict(llama, pad_token="", mask_token="<mask>", image_token="",
                                 additional_special_tokens=["", "<tool>"]),
        }
        warning = re.compile(r'tokenizer_config\.json: (\S+): "([^"]*)" is neither an added token '
                             r'nor in .*: transformers would add it with id (\d+); titan does not '
                             r'grow the vocabulary, so text holding it encodes as plain text')
        without_config = Tokenizer.from_file(json_path)
        for name, config in configs.items():
            with self.subTest(config=name):
                with open(os.path.join(tokenizer_dir, "tokenizer_config.json"), "w") as f:
                    json.dump(config, f)
                auto = transformers.AutoTokenizer.from_pretrained(tokenizer_dir)
                new_ids = {token: i for token, i in auto.get_added_vocab().items()
                           if i >= without_config.get_vocab_size()}
                texts = [f"a{token}b {token}" for token in new_ids]
                ours, log = run_encode_main_logging(tokenizer_dir, texts, self.tmp)
                warned = {token: int(i) for _, token, i in warning.findall(log)}
                self.assertEqual(len(warning.findall(log)), len(new_ids), log)
                self.assertEqual(warned, new_ids, log)
                self.assertEqual(ours["vocab_size"], without_config.get_vocab_size())
                for text, result in zip(texts, ours["results"]):
                    plain = without_config.encode(text, add_special_tokens=False).ids
                    self.assertEqual(result["ids"], plain, f"text: {text!r}")
                    self.assertEqual(result["ids_plain"], plain, f"text: {text!r}")

    def test_special_tokens_map_as_transformers_reads_it(self):
        # transformers 5.24 reads special_tokens_map.json (older saves) where tokenizer_config.json
        # has no added_tokens_decoder: its bos_token ... mask_token override the config's, its
        # additional_special_tokens count where the config lists none. titan's usual names
        # (<|end_of_text|>) must not win over the map's EOS.
        with open(FLAGS.default_tokenizer, encoding="utf-8") as f:
            spec = json.load(f)
        n = len(spec["model"]["vocab"])
        names = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                 "<|end_header_id|>", "<|eot_id|>"]
        spec["added_tokens"] = [dict(id=n + i, content=c, single_word=False, lstrip=False,
                                     rstrip=False, normalized=False, special=True)
                                for i, c in enumerate(names)]
        tokenizer_dir, json_path = write_tokenizer_json(self.tmp, "special_tokens_map", spec)
        fast = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 8192}
        llama = dict(fast, bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>")
        decoder = {str(t["id"]): t for t in spec["added_tokens"]}
        # name -> (tokenizer_config.json, special_tokens_map.json, the EOS's source in the log)
        cases = {
            "map only": (fast, {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
                                "pad_token": "\u0120the"}, "special_tokens_map.json eos_token"),
            "map overrides config": (
                llama, {"eos_token": {"content": "<|eot_id|>", "lstrip": False},
                        "bos_token": "<|start_header_id|>",
                        "additional_special_tokens": ["\u0120day"]},
                "special_tokens_map.json eos_token"),
            # A dict in the map's extra list is an AddedToken made special (plain mode skips it).
            "map extra list with a dict": (
                llama, {"extra_special_tokens": [{"content": "\u0120the", "lstrip": False,
                                                  "normalized": False}, "\u0120day"]},
                "tokenizer_config.json eos_token"),
            "ignored beside added_tokens_decoder": (
                dict(llama, added_tokens_decoder=decoder),
                {"eos_token": "<|eot_id|>", "pad_token": "\u0120the"},
                "tokenizer_config.json eos_token"),
        }
        words = ["\u0120the", "\u0120day"] + names
        texts = [form.format(c) for c in words for form in ["q  {0}  r", "q{0}r", "a {0} b {0}{0}"]]
        texts += [" day the thing"] + mixed_sample(FLAGS.validation_corpus, 9, words)
        for name, (config, special_tokens_map, eos_source) in cases.items():
            with self.subTest(case=name):
                with open(os.path.join(tokenizer_dir, "tokenizer_config.json"), "w") as f:
                    json.dump(config, f)
                with open(os.path.join(tokenizer_dir, "special_tokens_map.json"), "w") as f:
                    json.dump(special_tokens_map, f, ensure_ascii=False)
                ours, log = run_encode_main_logging(tokenizer_dir, texts, self.tmp)
                auto, _ = self.assert_auto_tokenizer_parity(tokenizer_dir, texts, ours["results"])
                self.assertEqual(ours["bos_id"], auto.bos_token_id)
                self.assertEqual(ours["eos_id"], auto.eos_token_id)
                self.assertIn(f"= {auto.eos_token_id} ({eos_source})", log)
                self.assertEqual(ours["vocab_size"], len(auto))

    def test_nfc_matches_tokenizers(self):
        # A byte vocabulary without merges under an NFC normalizer: the ids are the normalized
        # text's bytes. Every character lib/tokenizer/nfc_tables.inc or Python knows something of
        # (a canonical decomposition or a combining class) alone, after a letter and before
        # marks, then random runs of them: titan's tables must agree with tokenizers' everywhere.
        to_byte = byte_level_decoder()
        spec = {"model": {"type": "BPE", "vocab": {c: b for c, b in to_byte.items()},
                          "merges": []},
                "normalizer": {"type": "NFC"},
                "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False,
                                  "trim_offsets": False, "use_regex": False},
                "added_tokens": [{"id": 256, "content": "</s>", "single_word": False,
                                  "lstrip": False, "rstrip": False, "normalized": False,
                                  "special": True}]}
        path = os.path.join(self.tmp, "nfc.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(spec, f, ensure_ascii=False)
        reference = Tokenizer.from_file(path)
        interesting = [chr(cp) for cp in range(0x110000) if not 0xD800 <= cp < 0xE000 and (
            unicodedata.combining(chr(cp)) or unicodedata.decomposition(chr(cp)))]
        interesting += [chr(cp) for cp in range(0x1100, 0x1200)]  # Hangul jamo
        interesting += ["\uac00", "\uac01", "\ud7a3", "a", "A", "\u0391", "\u3099", "\u309a"]
        texts = []
        for c in interesting:
            texts += [c, "a" + c, c + "\u0301\u0323", "\u0323" + c + "\u0301"]
        rng = random.Random(11)
        for _ in range(3000):
            texts.append("".join(rng.choice(interesting) for _ in range(rng.randint(1, 8))))
        self.assertGreater(len(texts), 10000)
        ours = run_encode_main(path, texts, self.tmp)
        changed = 0
        for text, result in zip(texts, ours["results"]):
            expected = reference.encode(text, add_special_tokens=False).ids
            self.assertEqual(result["ids"], expected, f"text: {[hex(ord(c)) for c in text]}")
            changed += bytes(expected) != text.encode()
        self.assertGreater(changed, 5000)  # NFC did change much of it.

    def test_split_regex_scripts_and_categories_match_tokenizers(self):
        # Every byte pair is a merge, so the ids show where the Split's pieces end. Oniguruma's
        # \p{Latin} is the Script property, PCRE2's bare name Script_Extensions (which also holds
        # U+0363, U+3001, ...): the pieces must still be tokenizers'. Texts: every code point
        # Unicode 14 (PCRE2 10.42's and this Python's data) assigns, 256 a text; tokenizers'
        # Oniguruma has later data, in which code points Unicode 14 left unassigned differ.
        assigned = [chr(cp) for cp in range(0x110000)
                    if unicodedata.category(chr(cp)) not in ("Cn", "Cs", "Co")]
        texts = ["".join(assigned[i:i + 256]) for i in range(0, len(assigned), 256)]
        texts.append("x\u0363y \u5b57\u3001\u4e2d \u03b1\u0342\u03b2 a\u1dc0")
        for name in ["Latin", "Greek", "Cyrillic", "Arabic", "Devanagari", "Bengali", "Thai",
                     "Han", "Hiragana", "Katakana", "Hangul", "Common", "Inherited", "Latn",
                     "Hani", "L", "N", "Lu", "M", "P", "White_Space"]:
            regex = rf"\p{{{name}}}+|[^\p{{{name}}}]+"
            self.assert_encodes_as_tokenizers(all_byte_pairs_split_by(regex),
                                              f"split_property_{name}", texts, regex)

    def test_split_regex_oniguruma_only_property_names_match_tokenizers(self):
        # Oniguruma's POSIX-bracket properties under Unicode (Punct is P, Word is \w, Graph is
        # neither White_Space, Cc, Cs nor Cn, ...) and long General_Category names, which PCRE2
        # 10.42 lacks, in spellings Oniguruma takes (case, spaces, hyphens and underscores
        # ignored), bare, negated and inside [...]. Texts: every code point Unicode 14 assigns,
        # but one in 61 inside the large ideograph and syllable blocks, whose properties are
        # alike, and those whose properties later Unicode (tokenizers' Oniguruma has 16's
        # tables) changed: U+0363.., U+1DD3.., U+0C04, U+0F82.., U+11080.. became Alphabetic,
        # U+10FC, U+A7F2.., U+AB69 Lowercase, and U+1171E a spacing mark.
        changed = ({0x0C04, 0x0F82, 0x0F83, 0x11080, 0x11081, 0x10FC, 0xA7F2, 0xA7F3, 0xA7F4,
                    0xAB69, 0x1171E} | set(range(0x0363, 0x0370)) | set(range(0x1DD3, 0x1DE7)))
        uniform = [(0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xA000, 0xA48C), (0xAC00, 0xD7A3),
                   (0x17000, 0x18AFF), (0x20000, 0x3134F)]
        assigned = [chr(cp) for cp in range(0x110000)
                    if unicodedata.category(chr(cp)) not in ("Cn", "Cs", "Co")
                    and cp not in changed
                    and not any(start < cp < end and cp % 61 for start, end in uniform)]
        texts = ["".join(assigned[i:i + 1024]) for i in range(0, len(assigned), 1024)]
        texts.append("e=mc\u00b2 \u00bd x\u0301y \u2460 a_b \t\n\u3000\u00a0z\ue000\U0010fffd")
        regexes = []
        # Names PCRE2 has no class complement for: bare, and inside a negated class.
        for name in ["punct", "Word", "Al num", "Blank", "Posix_Punct"]:
            regexes.append(rf"\p{{{name}}}+|[^\p{{{name}}}]+")
        # The others: bare, and negated inside a class.
        for name in ["ALPHA", "digit", "Space", "Upper", "lower", "Print", "graph", "Cntrl",
                     "X-Digit", "ASCII", "new_line", "Assigned"]:
            regexes.append(rf"\p{{{name}}}+|[\P{{{name}}}]+")
        # Leaf General_Category values in turn (disjoint), then groups of them (Cased_Letter
        # before the other letters), then negations.
        regexes.append("|".join(rf"\p{{{name}}}+" for name in [
            "Uppercase_Letter", "Lowercase_Letter", "Titlecase_Letter", "modifier letter",
            "Other_Letter", "Nonspacing_Mark", "Spacing_Mark", "Enclosing-Mark", "Decimal_Number",
            "Letter_Number", "OtherNumber", "Connector_Punctuation", "Dash_Punctuation",
            "Open_Punctuation", "Close_Punctuation", "Initial_Punctuation", "Final_Punctuation",
            "Other_Punctuation", "Math_Symbol", "Currency_Symbol", "Modifier_Symbol",
            "Other_Symbol", "Space_Separator", "Line_Separator", "Paragraph_Separator", "Control",
            "Format", "Private_Use", "Unassigned"]))
        regexes.append("|".join(rf"\p{{{name}}}+" for name in [
            "Cased_Letter", "Letter", "Combining_Mark", "Number", "Punctuation", "Symbol",
            "Separator", "Other"]))
        regexes.append(r"[\p{^Letter}\p{Decimal_Number}]+|\P{^mark}+|[^\P{Symbol}\p{Zs}]+")
        for i, regex in enumerate(regexes):
            self.assert_encodes_as_tokenizers(all_byte_pairs_split_by(regex),
                                              f"onig_property_{i}", texts, regex)

    def test_property_names_tokenizers_refuses_are_refused(self):
        # PCRE2 knows these names; tokenizers' Oniguruma refuses the file.
        with open(FLAGS.default_tokenizer, encoding="utf-8") as f:
            spec = json.load(f)
        for name in ["Xan", "Xwd", "Xps", "Xsp", "Xuc", "L&", "Bidi_M", "sc:Greek", "scx:Greek",
                     "Bidi_Class:L"]:
            spec["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = rf"\p{{{name}}}+"
            stderr = self.assert_both_refuse(spec, "invalid character property name")
            self.assertIn(rf"\p{{{name}}} is not supported", stderr)
        # Names neither knows (Oniguruma's ^ must come first, once).
        for name in ["Foo", "Is_Greek", " ^Punct", "^^Punct", "^^Lu", ""]:
            spec["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = rf"[\p{{{name}}}a]+"
            stderr = self.assert_both_refuse(spec, "invalid character property name")
            self.assertIn(rf"regex /[\p{{{name}}}a]+/: PCRE2 refuses it: unknown property", stderr)

    def test_tiktoken_rank_file_matches_tiktoken(self):
        # Ranks: the default tokenizer's learned vocab in id order, as bytes. tiktoken merges by
        # the rank of the merged token (not by merge list), so this is a different BPE from HF's.
        with open(FLAGS.default_tokenizer, encoding="utf-8") as f:
            spec = json.load(f)
        to_byte = byte_level_decoder()
        ranks = {bytes(to_byte[c] for c in token): rank
                 for token, rank in spec["model"]["vocab"].items()}
        self.assertEqual(sorted(ranks.values()), list(range(len(ranks))))
        rank_dir = os.path.join(self.tmp, "llama3_layout", "original")
        os.makedirs(rank_dir)
        rank_path = os.path.join(rank_dir, "tokenizer.model")
        # tiktoken's dump_tiktoken_bpe needs blobfile, which the environment lacks: same format.
        with open(rank_path, "w", encoding="ascii") as f:
            for token, rank in sorted(ranks.items(), key=lambda item: item[1]):
                f.write(f"{base64.b64encode(token).decode()} {rank}\n")
        self.assertEqual(load_tiktoken_bpe(rank_path), ranks)
        specials = (["<|begin_of_text|>", "<|end_of_text|>"]
                    + [f"<|reserved_special_token_{i}|>" for i in range(4)]
                    + ["<|start_header_id|>", "<|end_header_id|>", "<|reserved_special_token_4|>",
                       "<|eot_id|>"]
                    + [f"<|reserved_special_token_{i}|>" for i in range(5, 251)])
        self.assertEqual(len(specials), 256)
        n = len(ranks)
        reference = tiktoken.Encoding("llama3_layout", pat_str=LLAMA3_PAT, mergeable_ranks=ranks,
                                      special_tokens={s: n + i for i, s in enumerate(specials)})
        texts = self.texts_for(["<|begin_of_text|>", "<|eot_id|>", "<|reserved_special_token_250|>"])
        # The directory layout of a Meta checkpoint: <dir>/original/tokenizer.model.
        ours = run_encode_main(os.path.dirname(rank_dir), texts, self.tmp)
        self.assertEqual(ours["bos_id"], reference.encode_single_token("<|begin_of_text|>"))
        self.assertEqual(ours["eos_id"], reference.encode_single_token("<|end_of_text|>"))
        self.assertEqual(ours["vocab_size"], reference.n_vocab)
        differ = 0
        for text, result in zip(texts, ours["results"]):
            expected = reference.encode(text, allowed_special="all")
            self.assertEqual(result["ids"], expected, f"text: {text[:80]!r}")
            self.assertEqual(result["decoded"], reference.decode(expected))
            # Documents: torchtitan's and Meta's Llama 3 Tokenizer.encode defaults.
            expected_plain = reference.encode(text, allowed_special=set(), disallowed_special=())
            self.assertEqual(result["ids_plain"], expected_plain, f"text: {text[:80]!r}")
            self.assertEqual(result["ids_plain_bos_eos"],
                             [ours["bos_id"]] + expected_plain + [ours["eos_id"]])
            differ += expected_plain != expected
        self.assertGreater(differ, 5)  # The special texts did exercise the difference.


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--encode_main", required=True)
    parser.add_argument("--default_tokenizer", required=True)
    parser.add_argument("--validation_corpus", required=True)
    FLAGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest)
