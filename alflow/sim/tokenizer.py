"""A deterministic tokenizer of the simulator's own: no download, reversible, about 3-4 chars per token.

The vocabulary is built in code, in a fixed order, so ids never change between runs:

- ids 0..255: one token per byte (the fallback for anything else, so every text round-trips);
- a few special tokens (``<|begin_of_text|>``, ``<|eot_id|>``, ...) that plain text never produces;
- common English and code words, each with and without a leading space and capitalised;
- every lowercase letter pair and triple, and a space followed by one or two letters.

Text is split into pieces with a GPT-2-style pattern (words with their leading space, single digits,
punctuation runs, whitespace); a piece that is a vocabulary entry is one token, otherwise it is cut
greedily into the longest vocabulary entries, falling back to bytes. ``decode(encode(t)) == t``.
"""

from __future__ import annotations

import itertools
import re
import string
from collections.abc import Iterable, Sequence
from functools import lru_cache

from alflow.errors import InvalidInputError

BOS = "<|begin_of_text|>"
EOS = "<|end_of_text|>"
START_HEADER = "<|start_header_id|>"
END_HEADER = "<|end_header_id|>"
EOT = "<|eot_id|>"
SPECIAL_TOKENS = (BOS, EOS, START_HEADER, END_HEADER, EOT)

_WORDS_TEXT = """
the of and to in is that for it as with was on be by this are or at from an have not but which
they you he she we his her their there what all were when your can said if do will each about how
up out them then many some so these would other into has more two like him see time could no make
than first been its who now people my made over did down only way find use may water long little
very after words called just where most know get through back much before go good new write our
used me man too any day same right look think also around another came come work three word must
because does part even place well such here take why things help put years different away again
off went old number great tell men say small every found still between name should home big give
air line set own under read last never us left end along while might next sound below saw something
thought both few those always looked show large often together asked house world going want school
important until form food keep children feet land side without boy once animals life enough took
sometimes four head above kind began almost live page got earth need far hand high year mother light
parts country father let night following picture being study second eyes soon times story boys since
white days ever paper hard near sentence better best across during today others however sure means
knew together answer problem solve total each price cost sells buys pays dollars percent hours
minutes week weeks month months per half twice more less remaining left first second third step
therefore so equals multiply divide add subtract sum difference product quotient number numbers
def return class import from self if else elif for while in not and or None True False print
function const let var int float str list dict try except raise with yield lambda async await
public private static void main string value values data result results error errors test tests
code file files path index array object key keys type types model models token tokens request
response server client user users system assistant content message messages query answer question
"""
_WORDS = _WORDS_TEXT.split()

_PATTERN = re.compile(r" ?[A-Za-z]+| ?[0-9]| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+")


def _build_vocab() -> list[bytes]:
    """The vocabulary in its fixed order (see the module docstring)."""
    vocab: list[bytes] = [bytes([b]) for b in range(256)]
    vocab.extend(t.encode() for t in SPECIAL_TOKENS)
    seen = set(vocab)

    def add(text: str) -> None:
        data = text.encode()
        if data not in seen:
            seen.add(data)
            vocab.append(data)

    for word in _WORDS:
        for form in (word, word.capitalize()):
            add(form)
            add(" " + form)
    letters = string.ascii_lowercase
    for a in letters:
        add(" " + a)
    for a, b in itertools.product(letters, repeat=2):
        add(a + b)
        add(" " + a + b)
    for a, b, c in itertools.product(letters, repeat=3):
        add(a + b + c)
    for punct in (", ", ". ", ".\n", "\n\n", "  ", "    ", "():", "()", "[]", "{}", "==", "+=", "->", "**"):
        add(punct)
    return vocab


class Tokenizer:
    """Deterministic byte-fallback tokenizer (see the module docstring)."""

    def __init__(self) -> None:
        self.vocab: tuple[bytes, ...] = tuple(_build_vocab())
        self.ids: dict[bytes, int] = {tok: i for i, tok in enumerate(self.vocab)}
        self.bos_id = self.ids[BOS.encode()]
        self.eos_id = self.ids[EOS.encode()]
        self.start_header_id = self.ids[START_HEADER.encode()]
        self.end_header_id = self.ids[END_HEADER.encode()]
        self.eot_id = self.ids[EOT.encode()]
        self._special = frozenset(self.ids[t.encode()] for t in SPECIAL_TOKENS)
        self._max_len = max(len(t) for t in self.vocab[256 + len(SPECIAL_TOKENS) :])
        self._piece = lru_cache(maxsize=65536)(self._encode_piece)

    @property
    def vocab_size(self) -> int:
        """Number of token ids (valid ids are ``0 .. vocab_size - 1``)."""
        return len(self.vocab)

    def _encode_piece(self, piece: str) -> tuple[int, ...]:
        data = piece.encode()
        ids = self.ids
        whole = ids.get(data)
        if whole is not None and whole not in self._special:
            return (whole,)
        out: list[int] = []
        i, n = 0, len(data)
        while i < n:
            for length in range(min(self._max_len, n - i), 0, -1):
                tok = ids.get(data[i : i + length])
                if tok is not None and tok not in self._special:
                    out.append(tok)
                    i += length
                    break
        return tuple(out)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (special-token strings in the text are ordinary characters)."""
        out: list[int] = []
        piece = self._piece
        for match in _PATTERN.finditer(text):
            out.extend(piece(match.group()))
        return out

    def count(self, text: str) -> int:
        """Number of tokens in ``text``."""
        piece = self._piece
        return sum(len(piece(m.group())) for m in _PATTERN.finditer(text))

    def check_ids(self, token_ids: Iterable[object]) -> list[int]:
        """Return ``token_ids`` as a list if every one is a valid id, else raise InvalidInputError."""
        out: list[int] = []
        size = self.vocab_size
        for i, tok in enumerate(token_ids):
            if isinstance(tok, bool) or not isinstance(tok, int) or not 0 <= tok < size:
                raise InvalidInputError(f"token id {tok!r} at index {i} is not in the vocabulary [0, {size})")
            out.append(tok)
        return out

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes of one token."""
        return self.vocab[token_id]

    def decode(self, token_ids: Sequence[int], *, skip_special_tokens: bool = False) -> str:
        """Text of ``token_ids`` (invalid UTF-8, from cut byte tokens, becomes U+FFFD)."""
        vocab = self.vocab
        if skip_special_tokens:
            special = self._special
            data = b"".join(vocab[t] for t in token_ids if t not in special)
        else:
            data = b"".join(vocab[t] for t in token_ids)
        return data.decode("utf-8", errors="replace")

    def chat_ids(
        self, messages: Sequence[tuple[str, str]], *, add_generation_prompt: bool = True
    ) -> list[int]:
        """Token ids of ``(role, content)`` messages under the sim's Llama-3-style chat template."""
        out = [self.bos_id]
        for role, content in messages:
            out.append(self.start_header_id)
            out.extend(self.encode(role))
            out.append(self.end_header_id)
            out.extend(self.encode("\n\n" + content))
            out.append(self.eot_id)
        if add_generation_prompt:
            out.append(self.start_header_id)
            out.extend(self.encode("assistant"))
            out.append(self.end_header_id)
            out.extend(self.encode("\n\n"))
        return out


@lru_cache(maxsize=1)
def get_tokenizer() -> Tokenizer:
    """The process-wide tokenizer (built once, about 20 ms)."""
    return Tokenizer()
