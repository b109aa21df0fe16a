"""Loading and validating config.yaml: the JSON schema first, then what a schema cannot say.

Every error names the offending key and says how to fix it, and is raised before any job runs
(rules/common.smk calls ``validate_config`` when Snakemake parses the workflow).
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from kokoro_tvm.assets.model_config import KOKORO_82M, frame_size_error, merge
from kokoro_tvm.assets.voices import KNOWN_NPM_VOICES, VOICE_FILE_SUFFIXES, folder_voice_file
from kokoro_tvm.errors import UserError
from kokoro_tvm.schema import schema


class ConfigError(UserError, ValueError):
    """A config value that cannot work; the message names the key."""


def _key(path) -> str:
    """'voices.names[2]' from jsonschema's path deque."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _type_command_line_values(value: Any, spec: dict[str, Any],
                              root: dict[str, Any] | None = None) -> Any:
    """``value`` with strings turned into the booleans, numbers and nulls ``spec`` asks for.

    ``snakemake --config tuning='{enabled: true, max_trials: 16}'`` hands nested values over as
    strings ('true', '16', 'null'); YAML-parsing such a string where the schema wants a boolean,
    a number or null (and no string) gives what the user wrote. Anything else is left for the
    schema to judge. ``root`` is the whole schema, which ``$ref``s point into."""
    root = spec if root is None else root
    if "$ref" in spec:  # the schema's own, '#/$defs/name'
        referred = root
        for part in spec["$ref"].removeprefix("#/").split("/"):
            referred = referred[part]
        spec = referred
    if isinstance(value, dict):
        properties = spec.get("properties", {})
        for key, item in value.items():
            if key in properties:
                value[key] = _type_command_line_values(item, properties[key], root)
        return value
    if isinstance(value, list) and isinstance(spec.get("items"), dict):
        return [_type_command_line_values(item, spec["items"], root) for item in value]
    types = spec.get("type", [])
    types = {types} if isinstance(types, str) else set(types)
    if not isinstance(value, str) or "string" in types:
        return value
    parsed = yaml.safe_load(value)
    # bool is an int in Python: 'true' must not pass for an integer.
    kind = ("null" if parsed is None else "boolean" if isinstance(parsed, bool)
            else "integer" if isinstance(parsed, int)
            else "number" if isinstance(parsed, float) else None)
    fits = kind in types or (kind == "integer" and "number" in types)
    return parsed if fits else value


def _check_schema(config: dict[str, Any]) -> None:
    validator = jsonschema.Draft202012Validator(schema())
    errors = sorted(validator.iter_errors(config), key=lambda e: list(e.absolute_path))
    if errors:
        lines = [f"config key '{_key(e.absolute_path)}': {e.message}" for e in errors]
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(lines))


def _require_file(config: dict[str, Any], section: str, key: str, base: Path) -> None:
    value = config[section].get(key)
    if not value:
        raise ConfigError(f"config key '{section}.{key}' is required when {section}.source is "
                          f"'{config[section]['source']}': set it to a file path")
    if not (base / value).is_file():
        raise ConfigError(f"config key '{section}.{key}': no file at '{value}' "
                          f"(relative paths are taken from {base})")


def _check_weights(config: dict[str, Any], base: Path) -> None:
    weights = config["weights"]
    if weights["source"] == "path":
        _require_file(config, "weights", "checkpoint", base)
        _require_file(config, "weights", "model_config", base)
        key = "weights.model_config"
        try:
            model = json.loads((base / weights["model_config"]).read_text())
            error = frame_size_error(model)
        except (ValueError, KeyError, TypeError) as err:
            raise ConfigError(f"config key '{key}': not a Kokoro config.json ({err!r})") from err
    elif weights["source"] == "random":
        key = "weights.random_model"
        error = frame_size_error(merge(KOKORO_82M, weights.get("random_model") or {}))
    else:
        return
    if error is not None:
        raise ConfigError(f"config key '{key}': {error}")


def _all_voices(voices: dict[str, Any], base: Path) -> list[str]:
    """Every voice of the source, for ``names: all``: an npm release's (KNOWN_NPM_VOICES), or
    the voice files of a path folder."""
    if voices["source"] == "npm" and voices.get("npm_package") in KNOWN_NPM_VOICES:
        return list(KNOWN_NPM_VOICES[voices["npm_package"]])
    if voices["source"] == "path":
        name = re.compile(schema()["properties"]["voices"]["properties"]["names"]["items"]
                          ["pattern"])
        names = sorted({path.stem for path in (base / voices["folder"]).iterdir()
                        if path.suffix in VOICE_FILE_SUFFIXES and name.fullmatch(path.stem)})
        if names:
            return names
        raise ConfigError(f"config key 'voices.names': all, but '{voices['folder']}' holds no "
                          f"voice files ({{name}}{', '.join(VOICE_FILE_SUFFIXES)})")
    source = voices["source"]
    what = f"npm package {voices.get('npm_package')}" if source == "npm" else f"source '{source}'"
    raise ConfigError(f"config key 'voices.names': all needs the source's list of voices, known "
                      f"for npm packages {', '.join(KNOWN_NPM_VOICES)} and path folders, not for "
                      f"{what}: list the names")


def _check_voices(config: dict[str, Any], base: Path) -> None:
    voices = config["voices"]
    folder = voices.get("folder")
    if voices["source"] == "path" and (not folder or not (base / folder).is_dir()):
        raise ConfigError(f"config key 'voices.folder': '{folder}' is not a folder; set it to "
                          f"the folder holding {{name}}{', '.join(VOICE_FILE_SUFFIXES)} "
                          "voice files")
    if voices["names"] == "all":
        voices["names"] = _all_voices(voices, base)
    names = voices["names"]
    if voices["source"] == "npm" and voices.get("npm_package") in KNOWN_NPM_VOICES:
        known = KNOWN_NPM_VOICES[voices["npm_package"]]
        for i, name in enumerate(names):
            if name not in known:
                raise ConfigError(f"config key 'voices.names[{i}]': unknown voice '{name}'; "
                                  f"{voices['npm_package']} has: {', '.join(known)}")
    if voices["source"] == "path":
        for i, name in enumerate(names):
            if folder_voice_file(base / folder, name) is None:
                raise ConfigError(f"config key 'voices.names[{i}]': no "
                                  f"{name}{', '.join(VOICE_FILE_SUFFIXES)} in '{folder}'")
    report_voice = config.get("report", {}).get("voice")
    if report_voice is not None and report_voice not in names:
        raise ConfigError(f"config key 'report.voice': '{report_voice}' is not built; use one of "
                          f"voices.names ({', '.join(names)}) or add it there")
    if voices["source"] == "random" and config["weights"]["source"] != "random":
        raise ConfigError("config key 'voices.source': random voices only make sense with random "
                          "weights (weights.source: random); use npm, hf or path")


def _check_targets(config: dict[str, Any]) -> None:
    for i, target in enumerate(config["targets"]):
        if target not in config["target_options"]:
            raise ConfigError(f"config key 'targets[{i}]': no target_options entry for '{target}'; "
                              f"defined: {', '.join(sorted(config['target_options']))}")
        check_precision(target, config["target_options"][target])


def _check_image(config: dict[str, Any]) -> None:
    """An image holds a model folder the server runs on a Linux CPU: no GPU or cross-OS one."""
    for i, target in enumerate(config.get("image", {}).get("targets", [])):
        key = f"config key 'image.targets[{i}]'"
        options = config["target_options"].get(target)
        if options is None:
            raise ConfigError(f"{key}: no target_options entry for '{target}'; defined: "
                              f"{', '.join(sorted(config['target_options']))}")
        if options["kind"] != "llvm" or "linux" not in options.get("mtriple", "linux"):
            raise ConfigError(f"{key}: {target} is not a CPU target for Linux; an image runs "
                              "the server on a Linux CPU (e.g. x86_64_v3)")


def check_mac_check(config: dict[str, Any]) -> None:
    """The Mac check's targets are defined and its buckets are built: checked when its bundle
    is planned (a build whose buckets leave out the bundle's needs no Mac check section)."""
    mac_check = config["mac_check"]
    for i, target in enumerate(mac_check["targets"]):
        if target not in config["target_options"]:
            raise ConfigError(f"config key 'mac_check.targets[{i}]': no target_options entry "
                              f"for '{target}'; defined: "
                              f"{', '.join(sorted(config['target_options']))}")
    for component, bucket in mac_check["buckets"].items():
        if bucket not in config["buckets"][component]:
            raise ConfigError(f"config key 'mac_check.buckets.{component}': {bucket} is not one "
                              f"of buckets.{component} ({config['buckets'][component]}): choose "
                              "one that the build makes")


def check_precision(target: str, options: dict[str, Any]) -> None:
    """int8 only where its kernels can be compiled: llvm targets whose CPU has VNNI. Checked at
    parse time for ``targets`` and, for a target asked for by path, when its jobs are planned:
    checking every ``target_options`` entry would refuse the default config on a CPU without
    VNNI, which never builds ``llvm_int8`` unless asked."""
    if options.get("precision", "float32") != "int8":
        return
    key = f"config key 'target_options.{target}.precision'"
    if options["kind"] != "llvm":
        raise ConfigError(f"{key}: int8 is for CPU (llvm) targets; use float32 for {target}")
    from kokoro_tvm.compile.quantize import missing_features
    from kokoro_tvm.compile.targets import make_target

    missing = missing_features(make_target(options))
    if missing:
        cpu = options.get("mcpu", "the default CPU")
        raise ConfigError(f"{key}: int8 needs {', '.join(missing)}, which {cpu} lacks; use "
                          "float32, or an mcpu with AVX-512 VNNI (e.g. znver4, sapphirerapids)")


def validate_config(config: dict[str, Any], base: str | Path = ".") -> dict[str, Any]:
    """Raises ConfigError naming the key if ``config`` cannot work; returns it, with booleans
    and numbers given as strings on Snakemake's command line typed and ``voices.names: all``
    replaced by the source's voices (in place).

    ``base`` is the folder relative paths in the config are taken from (Snakemake's workdir).
    """
    _type_command_line_values(config, schema())
    _check_schema(config)
    base = Path(base)
    _check_weights(config, base)
    _check_voices(config, base)
    _check_targets(config)
    _check_image(config)
    return config
