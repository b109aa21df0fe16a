"""``kokoro-tvm serve``: everything loaded first, then the port opened (uvicorn)."""
from __future__ import annotations

import logging

from kokoro_tvm.runtime.engine import TvmEngine
from kokoro_tvm.runtime.kokoro import Kokoro
from kokoro_tvm.runtime.model_folder import ModelFolder
from kokoro_tvm.runtime.voices import describe_voice
from kokoro_tvm.serve.app import Limits, create_app

log = logging.getLogger("kokoro_tvm.serve")


def ready_model(folder: ModelFolder, engine=None, lstm: str | None = None) -> Kokoro:
    """``folder``'s model with every library loaded and its weights prepared, and the G2P of
    every language its voices speak that is installed, each used once: no request pays a first
    use."""
    spoken = {}
    for info in map(describe_voice, folder.voices):
        if info.language is not None and info.unavailable is None:
            spoken.setdefault(info.language, info.name)
    tts = Kokoro(folder, engine=engine, lstm=lstm, languages=sorted(spoken))
    if isinstance(tts.engine, TvmEngine):
        tts.engine.load_all()
    english = next((spoken[lang] for lang in ("en-us", "en-gb") if lang in spoken), None)
    if english is not None:  # the first call of each library allocates its memory pools
        tts.create("Ready.", voice=english)
    return tts


def serve(tts: Kokoro, host: str, port: int, limits: Limits, api_key: str | None) -> None:
    import uvicorn

    app = create_app(tts, limits, api_key)
    uvicorn.run(app, host=host, port=port, log_level="info", timeout_graceful_shutdown=5)
