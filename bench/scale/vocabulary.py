"""The words the filled runs' prompts and replies are made of, drawn as real text draws them.

A few hundred common English and engineering words, then a long tail of made-up but
pronounceable words (names, identifiers, jargon), 20,000 in all, drawn by Zipf's law (the
word of rank r with a weight 1/r): a handful of words are in nearly every run, most are rare,
as in real prompts. Deterministic (a seeded generator), so two fills search alike.
"""

from __future__ import annotations

import functools
import itertools
import random

# A text, split: the list literal would take a line a word.
COMMON = """
the to and a of in is you that for it on with as be this are can your or have from not by an
at we will if what how use please my all do so but about one more which when should would
there their they any me need get make like out some time than just also only new into each
other these first then code data user file error value function test system model request
response server service api key token run stream chunk query table index database deploy
deployment pipeline build release version config setting update change fix issue bug log
message queue cache memory cpu disk network latency timeout retry limit budget cost price
invoice billing account customer order payment refund subscription plan team project task
ticket support summary report review document page section list item field name type status
result output input example question answer explain write rewrite translate summarize
describe compare check find show create delete add remove return call send receive open
close start stop wait read parse format json yaml sql python javascript rust docker
kubernetes cluster node pod container image volume secret policy role permission access
login password email address phone date month week day hour minute second morning evening
today tomorrow yesterday price total amount number count average percent growth revenue
sales market product feature release roadmap meeting calendar schedule deadline priority
owner manager engineer developer designer analyst contract legal privacy security incident
alert outage backup restore migration schema upgrade rollback region zone latency throughput
capacity
""".split()  # noqa: SIM905
SYLLABLES = [
    "ka", "lo", "mi", "ra", "ten", "vo", "zu", "bel", "dor", "fin", "gar", "hul", "jo", "kes",
    "lan", "mor", "nix", "pel", "qua", "rin", "sol", "tur", "ul", "ven", "wim", "xa", "yor",
    "zel", "ar", "en", "is", "ob", "ux", "tra", "pli", "sto", "cre", "dra", "gle", "pho",
]  # fmt: skip
WORDS = 20_000


@functools.cache
def vocabulary() -> list[str]:
    """The words, most common first (a word's rank is its place in the list)."""
    words = list(dict.fromkeys(COMMON))
    seen = set(words)
    for length in (2, 3, 4):
        for parts in itertools.product(SYLLABLES, repeat=length):
            word = "".join(parts)
            if word not in seen:
                seen.add(word)
                words.append(word)
            if len(words) == WORDS:
                break
        if len(words) == WORDS:
            break
    # The made-up words in a shuffled order, so rank does not follow the alphabet.
    head, tail = words[: len(COMMON)], words[len(COMMON) :]
    random.Random(7).shuffle(tail)
    return head + tail


def texts(count: int, words_each: int, *, seed: int) -> list[str]:
    """`count` texts of about `words_each` words (±50%), the words drawn by Zipf's law."""
    words = vocabulary()
    weights = list(itertools.accumulate(1 / rank for rank in range(1, len(words) + 1)))
    draw = random.Random(seed)
    made = []
    for _ in range(count):
        length = draw.randint(words_each // 2, words_each * 3 // 2)
        made.append(" ".join(draw.choices(words, cum_weights=weights, k=length)))
    return made


def word_of_rank(rank: int) -> str:
    """The word at `rank` (1: the most common)."""
    return vocabulary()[rank - 1]
