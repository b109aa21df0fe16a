"""The server side: OpenAI's speech API over the ``Kokoro`` API (``kokoro-tvm serve``).

``app`` holds the routes, ``speech_request`` the checks of a request, ``scheduler`` the one
engine's worker, ``encoders`` the response formats, ``metrics`` what ``/metrics`` reports and
``server`` the loading and the port. It imports nothing of the build and no PyTorch.
"""
from kokoro_tvm.runtime.speech import FRAME_SECONDS

# The longest audio one call decodes (--max-chunk-seconds): a new request's first audio waits
# for at most that chunk (docs/serving.md, Figures: The chunk bound).
DEFAULT_MAX_CHUNK_SECONDS = 4.0


def chunk_frames(seconds: float) -> int:
    """The decoder frames of ``seconds`` of audio: the server engine's ``max_frames``."""
    return round(seconds / FRAME_SECONDS)
