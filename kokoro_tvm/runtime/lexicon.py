"""misaki's English lexicons as compact read-only mappings.

misaki's English G2P keeps its gold and silver lexicons (about 365,000 words with the forms it
adds) as dicts of Python strings, about 48 MB resident; it only looks words up in them (``in``,
``get``, ``[]``). ``PackedLexicon`` holds the same entries as two byte buffers and their
offsets, sorted by key, and finds a word by binary search (docs/memory.md).
"""
from __future__ import annotations

import bisect
import json
from array import array
from collections.abc import Iterator, Mapping
from itertools import accumulate


class _PackedBytes:
    """Byte strings in one buffer, read back by index (a sequence ``bisect`` searches)."""

    def __init__(self, items: list[bytes]):
        self.offsets = array("q", accumulate(map(len, items), initial=0))
        self.data = b"".join(items)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, index: int) -> bytes:
        return self.data[self.offsets[index]:self.offsets[index + 1]]


class PackedLexicon(Mapping):
    """A misaki lexicon (word -> phonemes, or -> {part of speech: phonemes or None}), read-only,
    equal to the dict it was made from."""

    def __init__(self, entries: Mapping[str, str | dict]):
        keys = sorted(word.encode() for word in entries)
        self._keys = _PackedBytes(keys)
        # Phonemes as they are; a dict by part of speech as JSON, marked in ``_by_tag``.
        values = [entries[key.decode()] for key in keys]
        self._by_tag = bytes(isinstance(value, dict) for value in values)
        self._values = _PackedBytes([(json.dumps(value) if isinstance(value, dict) else value)
                                     .encode() for value in values])

    def _index(self, word: str) -> int | None:
        key = word.encode()
        index = bisect.bisect_left(self._keys, key)
        return index if index < len(self._keys) and self._keys[index] == key else None

    def __getitem__(self, word: str) -> str | dict:
        index = self._index(word) if isinstance(word, str) else None
        if index is None:
            raise KeyError(word)
        value = self._values[index].decode()
        return json.loads(value) if self._by_tag[index] else value

    def __contains__(self, word: object) -> bool:
        return isinstance(word, str) and self._index(word) is not None

    def __iter__(self) -> Iterator[str]:
        return (self._keys[index].decode() for index in range(len(self._keys)))

    def __len__(self) -> int:
        return len(self._keys)


def pack_lexicons(lexicon) -> None:
    """misaki's ``en.Lexicon`` with its gold and silver dicts replaced by packed ones."""
    lexicon.golds = PackedLexicon(lexicon.golds)
    lexicon.silvers = PackedLexicon(lexicon.silvers)
