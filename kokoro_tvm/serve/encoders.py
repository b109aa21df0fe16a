"""Audio encoders for the server's response formats, on PyAV (FFmpeg's codecs and muxers).

One encoder per response: the request's chunks are fed to it in order as 16-bit samples and it
returns the bytes its muxer has written so far, so a streamed response is one continuous
encoded stream (no joins between chunks for a decoder to click at) whose tail is flushed when
the speech ends. A lossless format carries exactly ``pcm16`` of the samples it is given.
"""
from __future__ import annotations

import io
from dataclasses import dataclass, field

import av
import numpy as np

from kokoro_tvm.facts import SAMPLE_RATE
from kokoro_tvm.runtime.audio_file import pcm16


@dataclass(frozen=True)
class AudioFormat:
    """A response format: FFmpeg's muxer and encoder for it, and its media type."""

    muxer: str
    codec: str
    media_type: str
    lossless: bool
    # Muxer options: Ogg pages of 20 ms instead of 1 s, so that opus bytes leave as they are
    # encoded rather than a second later.
    options: dict[str, str] = field(default_factory=dict)


# OpenAI's response formats; pcm is raw 24 kHz 16-bit mono little-endian, as OpenAI's.
FORMATS = {
    "mp3": AudioFormat("mp3", "libmp3lame", "audio/mpeg", lossless=False),
    "opus": AudioFormat("ogg", "libopus", "audio/ogg; codecs=opus", lossless=False,
                        options={"page_duration": "20000"}),
    "aac": AudioFormat("adts", "aac", "audio/aac", lossless=False),
    "flac": AudioFormat("flac", "flac", "audio/flac", lossless=True),
    "wav": AudioFormat("wav", "pcm_s16le", "audio/wav", lossless=True),
    "pcm": AudioFormat("s16le", "pcm_s16le", "audio/pcm", lossless=True),
}


class _Sink:
    """A write-only, unseekable file for the muxer: a streamed response cannot go back, so
    headers that would hold the length say 'unknown' (as FFmpeg writes them when streaming)."""

    def __init__(self):
        self.parts: list[bytes] = []

    def write(self, data) -> int:
        self.parts.append(bytes(data))
        return len(data)

    def take(self) -> bytes:
        out, self.parts = b"".join(self.parts), []
        return out


class Encoder:
    """Encodes one response. ``streaming``: bytes come out as chunks go in, from an unseekable
    output; otherwise the whole file is written to memory and returned by ``close``, with its
    length in its header (a WAV's or FLAC's sizes)."""

    def __init__(self, name: str, streaming: bool = True):
        self.format = FORMATS[name]
        self.streaming = streaming
        self._out = _Sink() if streaming else io.BytesIO()
        # A small I/O buffer: the muxer's writes reach the sink as they are made.
        self._container = av.open(self._out, "w", format=self.format.muxer, buffer_size=4096,
                                  options=self.format.options)
        self._stream = self._container.add_stream(self.format.codec, rate=SAMPLE_RATE,
                                                  layout="mono")
        self._samples = 0

    def _encode(self, frame) -> None:
        for packet in self._stream.encode(frame):
            self._container.mux(packet)

    def _written(self) -> bytes:
        return self._out.take() if self.streaming else b""

    def write(self, samples: np.ndarray) -> bytes:
        """Encodes float samples at SAMPLE_RATE; the bytes ready now (none if not streaming)."""
        if len(samples):
            frame = av.AudioFrame.from_ndarray(pcm16(samples)[None, :], format="s16",
                                               layout="mono")
            frame.sample_rate = SAMPLE_RATE
            frame.pts = self._samples
            self._samples += len(samples)
            self._encode(frame)
        return self._written()

    def close(self) -> bytes:
        """Flushes the encoder and writes the trailer: the rest of the file."""
        self._encode(None)
        self._container.close()
        return self._out.take() if self.streaming else self._out.getvalue()
