"""Generates titan's default corpus and tokenizer (assets/README.md says why and how).

Run from anywhere with the test environment's Python (it needs PyPI `tokenizers`):
    python3 assets/make_assets.py
The output is a pure function of the seeds below: rerunning rewrites identical files.
"""

import json
import os
import random

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

TRAIN_SEED = 1234
VALIDATION_SEED = 5678
TRAIN_DOCS = 5000
VALIDATION_DOCS = 200
VOCAB_SIZE = 2048  # Special tokens included.
LLAMA3_SPLIT_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
    r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SPECIAL_TOKENS = ["<|begin_of_text|>", "<|end_of_text|>"] + [
    f"<|reserved_special_token_{i}|>" for i in range(6)
]

HERE = os.path.dirname(os.path.abspath(__file__))

NAMES = ["Mia", "Leo", "Ava", "Sam", "Nora", "Finn", "Ruby", "Omar", "Lila", "Theo", "Zoe", "Ivan",
         "Chloé", "José", "Anaïs", "Björn", "Yuki", "Priya", "Kofi", "Elena"]
ANIMALS = ["cat", "dog", "fox", "owl", "rabbit", "bear", "duck", "frog", "horse", "mouse", "wolf",
           "turtle", "goat", "bee", "whale", "deer"]
ADJECTIVES = ["small", "brave", "quiet", "happy", "curious", "sleepy", "clever", "kind", "tall",
              "old", "young", "gentle", "proud", "shy", "funny", "busy"]
PLACES = ["forest", "village", "garden", "river", "hill", "farm", "city", "beach", "valley",
          "meadow", "castle", "library", "market", "school", "harbor", "cave"]
OBJECTS = ["red ball", "old map", "shiny key", "blue hat", "wooden box", "small boat", "golden coin",
           "green kite", "paper star", "silver bell", "warm blanket", "big apple"]
FOODS = ["apples", "bread", "carrots", "fish", "honey", "seeds", "berries", "grass", "nuts",
         "cheese", "soup", "rice"]
FEELINGS = ["happy", "sad", "surprised", "tired", "excited", "worried", "calm", "proud"]
ACTIVITIES = ["read books", "sing songs", "climb trees", "swim in the lake", "draw pictures",
              "bake bread", "watch the stars", "play with friends", "walk in the rain",
              "count the clouds", "build sand castles", "plant flowers"]
TIMES = ["morning", "afternoon", "evening", "night", "weekend", "winter", "summer", "spring"]
COLORS = ["red", "blue", "green", "yellow", "white", "black", "orange", "purple", "brown", "gray"]
NUMBER_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
                "ten", "eleven", "twelve"]
CATEGORIES = {"cat": "mammal", "dog": "mammal", "fox": "mammal", "owl": "bird", "rabbit": "mammal",
              "bear": "mammal", "duck": "bird", "frog": "amphibian", "horse": "mammal",
              "mouse": "mammal", "wolf": "mammal", "turtle": "reptile", "goat": "mammal",
              "bee": "insect", "whale": "mammal", "deer": "mammal"}
# Invented town names: enough distinct words for a 2048-token vocabulary to fill up.
TOWN_STARTS = ["Bram", "Cor", "Dun", "El", "Fen", "Glen", "Hol", "Kil", "Lin", "Mar", "Nor", "Ash",
               "Bel", "Cal", "Dal", "Ever", "Fair", "Gold", "Hart", "Iron", "Lake", "Mill", "Oak",
               "Pen", "Red", "Stone", "Thorn", "West", "Wind", "Wolf"]
TOWN_ENDS = ["ford", "wood", "vale", "by", "ton", "ham", "field", "bridge", "mouth", "stead", "more",
             "wick", "dale", "haven", "brook", "gate", "hurst", "ley", "moor", "shire"]
GOODS = ["wool", "salt", "timber", "cloth", "pottery", "grain", "copper", "candles", "rope", "glass"]
SAYINGS = ["\"Look at this!\"", "\"Where are we going?\"", "\"I can help you.\"",
           "\"Let's go home.\"", "\"What a nice day!\"", "\"Thank you, friend.\""]


def a(noun_phrase):
    return ("an " if noun_phrase[0] in "aeiou" else "a ") + noun_phrase


def pronoun(name):
    return "she" if name in ("Mia", "Ava", "Nora", "Ruby", "Lila", "Zoe", "Chloé", "Anaïs",
                             "Yuki", "Priya", "Elena") else "he"


def story(rng):
    name, friend = rng.sample(NAMES, 2)
    animal, friend_animal = rng.sample(ANIMALS, 2)
    he = pronoun(name)
    place, obj = rng.choice(PLACES), rng.choice(OBJECTS)
    lines = [
        f"Once upon a time, there was {a(rng.choice(ADJECTIVES))} {animal} named {name}.",
        f"{name} lived in {a(place)} near {town(rng)}.",
        f"Every {rng.choice(TIMES)}, {he} liked to {rng.choice(ACTIVITIES)}.",
        f"One day, {name} found {a(obj)} under {a(rng.choice(COLORS))} stone.",
        f"{he.capitalize()} felt {rng.choice(FEELINGS)} and showed it to {friend} the {friend_animal}.",
        f"{friend} said, {rng.choice(SAYINGS)}",
    ]
    if rng.random() < 0.5:
        lines.append(f"Together they took the {obj} to the {rng.choice(PLACES)}.")
    lines.append(f"From that day on, {name} and {friend} were best friends. The end.")
    return " ".join(lines)


def facts(rng):
    out = []
    for animal in rng.sample(ANIMALS, rng.randint(3, 6)):
        food = rng.choice(FOODS)
        out.append(f"The {animal} is {a(CATEGORIES[animal])}. A {animal} likes to eat {food}. "
                   f"Most {animal}s are {rng.choice(COLORS)} or {rng.choice(COLORS)}.")
    return "\n".join(out)


def arithmetic(rng):
    out = []
    for _ in range(rng.randint(4, 10)):
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        op = rng.choice(["plus", "minus", "times"])
        if op == "plus":
            out.append(f"{a} plus {b} equals {a + b}.")
        elif op == "minus":
            a, b = max(a, b), min(a, b)
            out.append(f"{a} minus {b} equals {a - b}.")
        else:
            a, b = a % 13, b % 13
            out.append(f"{NUMBER_WORDS[a]} times {NUMBER_WORDS[b]} is {a * b}.")
    return " ".join(out)


def dialogue(rng):
    a, b = rng.sample(NAMES, 2)
    food, place = rng.choice(FOODS), rng.choice(PLACES)
    count = rng.randint(2, 12)
    return (f"{a}: Hello {b}! Do you want some {food}?\n"
            f"{b}: Yes, please. How many do you have?\n"
            f"{a}: I have {count}. We can share them at the {place}.\n"
            f"{b}: Great! I will bring {count + 1} cups of tea ☕.")


def town(rng):
    return rng.choice(TOWN_STARTS) + rng.choice(TOWN_ENDS)


def travel(rng):
    here, there = town(rng), town(rng)
    miles = rng.randint(2, 300)
    good = rng.choice(GOODS)
    return (f"The road from {here} to {there} is {miles} miles long. "
            f"A cart needs {miles // 20 + 1} days to make the trip. "
            f"Traders in {here} sell {good} and buy {rng.choice(GOODS)} from {there}. "
            f"In {rng.choice(TIMES)}, {rng.randint(10, 900)} people visit the market of {there}.")


def counting(rng):
    start = rng.randint(1, 50)
    step = rng.randint(1, 5)
    numbers = ", ".join(str(start + i * step) for i in range(rng.randint(5, 12)))
    return f"Count by {step}s starting at {start}: {numbers}."


GENERATORS = [(story, 4), (facts, 2), (arithmetic, 2), (dialogue, 2), (travel, 2), (counting, 1)]


def document(rng):
    parts = []
    for _ in range(rng.randint(1, 3)):
        generator = rng.choices([g for g, _ in GENERATORS], weights=[w for _, w in GENERATORS])[0]
        parts.append(generator(rng))
    return "\n\n".join(parts)


def write_corpus(path, seed, num_docs):
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(num_docs):
            f.write(json.dumps({"text": document(rng)}, ensure_ascii=False) + "\n")


def train_tokenizer(train_path, out_dir):
    tokenizer = Tokenizer(models.BPE())
    # Llama 3's layout: regex split, then byte-level mapping without a second split.
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_SPLIT_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - len(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )

    def texts():
        with open(train_path, encoding="utf-8") as f:
            for line in f:
                yield json.loads(line)["text"]

    tokenizer.train_from_iterator(texts(), trainer=trainer)
    # Specials after the learned vocab, as in Llama 3.
    tokenizer.add_special_tokens(SPECIAL_TOKENS)
    tokenizer.save(os.path.join(out_dir, "tokenizer.json"))
    config = {
        "bos_token": SPECIAL_TOKENS[0],
        "eos_token": SPECIAL_TOKENS[1],
        "added_tokens_decoder": {
            str(tokenizer.token_to_id(t)): {"content": t, "lstrip": False, "normalized": False,
                                            "rstrip": False, "single_word": False, "special": True}
            for t in SPECIAL_TOKENS
        },
        "clean_up_tokenization_spaces": False,
        "model_max_length": 131072,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
        f.write("\n")


def main():
    corpus_dir = os.path.join(HERE, "default_corpus")
    tokenizer_dir = os.path.join(HERE, "default_tokenizer")
    os.makedirs(corpus_dir, exist_ok=True)
    os.makedirs(tokenizer_dir, exist_ok=True)
    train_path = os.path.join(corpus_dir, "train.jsonl")
    write_corpus(train_path, TRAIN_SEED, TRAIN_DOCS)
    write_corpus(os.path.join(corpus_dir, "validation.jsonl"), VALIDATION_SEED, VALIDATION_DOCS)
    train_tokenizer(train_path, tokenizer_dir)


if __name__ == "__main__":
    main()
