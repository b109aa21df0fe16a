"""Subtitles of spoken text: the words' times (speech.Word) grouped into cues of a readable
length, cut between words, written as SubRip (srt) or WebVTT (webvtt-py) as the file name says.

The cues cover the audio: the first starts at 0, each ends where the next starts (a cue stays
up through the pause after it) and the last ends with the audio. A cue is final only once the
word after it is known, so a stream writes each cue when the next one starts (SubtitleStream).
"""
from __future__ import annotations

import datetime
import html
import os
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Iterable

import srt
from webvtt.models import Caption, Timestamp
from webvtt.vtt import WebVTTCueBlock

from kokoro_tvm.atomic import atomic_path
from kokoro_tvm.runtime.audio_file import OutputError, check_folder
from kokoro_tvm.runtime.speech import Word

SUFFIXES = (".srt", ".vtt")
# One line a cue, of at most CUE_CHARS characters (the common subtitle guideline's line) and
# CUE_SECONDS of speech; a sentence's end ends a cue too.
CUE_CHARS = 42
CUE_SECONDS = 6.0
SENTENCE_ENDS = (".", "!", "?", "…", "।", "。", "！", "？")


@dataclass(frozen=True)
class Cue:
    start: float  # seconds
    end: float
    text: str


def check_subtitles(dest: str | os.PathLike) -> str:
    """The suffix (format) ``dest`` is written in; an OutputError if it names no subtitle
    format or its folder is not writable."""
    dest = Path(dest)
    check_folder(dest, example="speech.srt")
    suffix = dest.suffix.lower()
    if suffix not in SUFFIXES:
        what = f"'{suffix}' files" if suffix else "a file name without an extension"
        raise OutputError(f"cannot write subtitles as {what} ({dest}); name them "
                          f"{' or '.join(SUFFIXES)}")
    return suffix


def _text(words: list[Word]) -> str:
    return " ".join(" ".join(word.text.split()) for word in words)


class Cues:
    """Words in, in order; cues out, each as soon as it is final."""

    def __init__(self):
        self.words: list[Word] = []  # the cue being filled
        self.start = 0.0  # where it starts: the first at 0, each later one where the last ended

    def add(self, words: Iterable[Word]) -> list[Cue]:
        """The cues that ``words`` finish."""
        finished = []
        for word in words:
            if self.words and (self.words[-1].text.endswith(SENTENCE_ENDS)
                               or len(_text([*self.words, word])) > CUE_CHARS
                               or word.end - self.words[0].start > CUE_SECONDS):
                finished.append(self._cue(word.start))
            self.words.append(word)
        return finished

    def close(self, audio_seconds: float) -> list[Cue]:
        """The last cue, ending with the audio (none if no word came)."""
        return [self._cue(audio_seconds)] if self.words else []

    def _cue(self, end: float) -> Cue:
        cue = Cue(self.start, max(end, self.start), _text(self.words))
        self.words, self.start = [], cue.end
        return cue


def _header(suffix: str) -> str:
    return "WEBVTT\n" if suffix == ".vtt" else ""


def _block(suffix: str, index: int, cue: Cue) -> str:
    """One cue as the format writes it (numbered from 1)."""
    if suffix == ".srt":
        return srt.Subtitle(index, datetime.timedelta(seconds=cue.start),
                            datetime.timedelta(seconds=cue.end), cue.text).to_srt()
    caption = Caption(str(Timestamp.from_seconds(cue.start)),
                      str(Timestamp.from_seconds(cue.end)), html.escape(cue.text, quote=False))
    return "\n".join(WebVTTCueBlock.format_lines(caption)) + "\n"


def _write(out: IO[str], suffix: str, cues: list[Cue], written: int) -> None:
    for index, cue in enumerate(cues, written + 1):
        out.write(_block(suffix, index, cue))


def write_subtitles(dest: str | os.PathLike, words: Iterable[Word], audio_seconds: float
                    ) -> int:
    """The cues of ``words`` written to ``dest`` whole (an existing file stays as it was if
    this fails); how many."""
    suffix, cues = check_subtitles(dest), Cues()
    every = [*cues.add(words), *cues.close(audio_seconds)]
    with atomic_path(dest) as tmp, open(tmp, "w", encoding="utf-8") as out:
        out.write(_header(suffix))
        _write(out, suffix, every, 0)
    return len(every)


class SubtitleStream:
    """Subtitles written as a stream's chunks come: each cue once final, flushed at once."""

    def __init__(self, dest: str | os.PathLike):
        self.suffix, self.cues, self.written = check_subtitles(dest), Cues(), 0
        Path(dest).parent.mkdir(parents=True, exist_ok=True)
        self.out = open(dest, "w", encoding="utf-8")
        self.out.write(_header(self.suffix))
        self.out.flush()

    def add(self, words: Iterable[Word]) -> None:
        self._write(self.cues.add(words))

    def close(self, audio_seconds: float) -> int:
        """The last cue written and the file closed; how many cues it has."""
        self._write(self.cues.close(audio_seconds))
        self.out.close()
        return self.written

    def _write(self, cues: list[Cue]) -> None:
        _write(self.out, self.suffix, cues, self.written)
        self.written += len(cues)
        self.out.flush()
