"""The server side: OpenAI's speech API over the ``Kokoro`` API (``kokoro-tvm serve``).

``app`` holds the routes, ``speech_request`` the checks of a request, ``scheduler`` the one
engine's worker, ``encoders`` the response formats, ``metrics`` what ``/metrics`` reports and
``server`` the loading and the port. It imports nothing of the build and no PyTorch.
"""
