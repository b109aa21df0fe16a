"""runtime/lexicon.py: misaki's lexicons packed, equal to the dicts they replace."""
import pytest

from kokoro_tvm.runtime.lexicon import PackedLexicon

ENTRIES = {"used": {"DEFAULT": "jˈuzd", "VBD": "jˈust", "NN": None}, "a": "ɐ", "Zürich": "zˈʊɹɪk",
           "Hello": "həlˈO", "hello": "həlˈO", "": "x"}


def test_packed_lexicon_reads_as_its_dict():
    packed = PackedLexicon(ENTRIES)
    assert len(packed) == len(ENTRIES) and set(packed) == set(ENTRIES)
    for word, phonemes in ENTRIES.items():
        assert word in packed and packed[word] == phonemes and packed.get(word) == phonemes
    for missing in ("hell", "helloo", "zürich", "b", "Used"):
        assert missing not in packed and packed.get(missing) is None
        with pytest.raises(KeyError):
            packed[missing]
    assert 3 not in packed and None not in packed
    assert dict(packed) == ENTRIES


@pytest.mark.parametrize("british", [False, True])
def test_misakis_lexicons_packed_are_equal(british):
    """Every word of misaki's gold and silver lexicons, with the forms misaki adds."""
    from misaki import en

    lexicon = en.Lexicon(british)
    for entries in (lexicon.golds, lexicon.silvers):
        packed = PackedLexicon(entries)
        assert len(packed) == len(entries)
        assert all(packed[word] == phonemes for word, phonemes in entries.items())
