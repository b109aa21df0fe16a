"""Facts about Kokoro-82M that the model, build, runtime and measurement sides share, stated once.
Plain values: importing this module imports nothing else."""

SAMPLE_RATE = 24_000
# F0 and energy (N) values per aligned frame: the prosody predictor upsamples by 2.
F0_PER_FRAME = 2
# Audio samples per frame: F0_PER_FRAME times prod(upsample_rates) (10 * 6) times the iSTFT hop
# (5); assets/model_config.py checks a model's config against it.
SAMPLES_PER_FRAME = 600
# SineGen's harmonics: the fundamental and 8 overtones (Kokoro's Generator fixes harmonic_num=8).
HARMONICS = 9
# The compiled components, in the order a forward pass runs them (docs/architecture.md).
COMPONENT_NAMES = ("bert", "duration", "text_encoder", "f0n", "decoder")
# A voice's style vector (ref_s) is two halves of this width: the decoder's, then the prosody's.
STYLE_DIM = 128
# KModel's submodules: the checkpoint holds one state dict per submodule.
SUBMODULES = ("bert", "bert_encoder", "predictor", "text_encoder", "decoder")
# Kokoro's context is 512 positions, two of them the boundary pads: at most this many phoneme
# tokens per forward pass, and one voice-table row per token count.
MAX_TOKENS = 510
# How the LSTM components' LSTMs can be lowered (compile/lstm.py; config.yaml's lstm_methods),
# fastest first: the runtime prefers them in this order.
LSTM_METHOD_NAMES = ("tir_vec", "tir", "unroll")
# The voice speech uses when none is named (Kokoro's own default).
DEFAULT_VOICE = "af_heart"
