"""The code layout holds: the runtime and server sides import nothing of the model, build or
measurement sides (nor torch or TVM's compiler), the stages after export and the Snakefile load
no torch, module-level imports have no cycle, and every rule's code inputs cover every package
module its script imports (docs/architecture.md, Staleness)."""
from __future__ import annotations

import ast
import json
import modulefinder
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO, TINY, TINY_BUCKET, dry_run, run_snakemake

from kokoro_tvm.compile.devices import device_kind
from kokoro_tvm.components import COMPONENTS
from kokoro_tvm.stages import code_inputs
from kokoro_tvm.stages.code_inputs import GPU_ONLY, LSTM_ONLY

PACKAGE = REPO / "kokoro_tvm"
# What the runtime side must not import, directly or through the package modules it uses.
NOT_IN_RUNTIME = ("torch", "tvm.relax", "tvm.s_tir", "tvm.te", "tvm.topi", "snakemake", "onnx",
                  "onnxruntime", "kokoro", "kokoro_tvm.model", "kokoro_tvm.compile",
                  "kokoro_tvm.stages", "kokoro_tvm.assets", "kokoro_tvm.measure")


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_file(name: str) -> Path | None:
    return code_inputs.module_file(REPO, name)


def imports(path: Path, top_level: bool = False) -> set[str]:
    """Modules ``path`` imports: anywhere in it, or only in module-level statements."""
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level else list(ast.walk(tree))
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names
                         if module_file(f"{node.module}.{alias.name}"))
    return found


def package_closure(start: set[str], top_level: bool = False) -> dict[str, set[str]]:
    """Package module -> its imports, for every package module reachable from ``start``."""
    graph: dict[str, set[str]] = {}
    todo = [m for m in start if module_file(m)]
    while todo:
        name = todo.pop()
        if name in graph:
            continue
        graph[name] = imports(module_file(name), top_level)
        todo += [m for m in graph[name] if m.startswith("kokoro_tvm") and module_file(m)]
    return graph


@pytest.mark.parametrize("side, core", [
    ("runtime", {"kokoro_tvm.runtime.engine", "kokoro_tvm.runtime.library"}),
    ("serve", {"kokoro_tvm.serve.app", "kokoro_tvm.serve.server"})])
def test_runtime_and_server_sides_import_no_torch_compiler_or_other_side(side, core):
    """The runtime, and the server over it, run in an install without the build."""
    modules = {module_name(p) for p in (PACKAGE / side).glob("*.py")}
    assert core <= modules
    offending = {
        (module, imported)
        for module, found in package_closure(modules).items()
        for imported in found
        if any(imported == bad or imported.startswith(bad + ".") for bad in NOT_IN_RUNTIME)}
    assert not offending, sorted(offending)


def test_code_passes_the_projects_lint():
    """ruff with pyproject.toml's settings (line length, unused names, import order) over every
    Python file git does not ignore."""
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", str(REPO)],
                          capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr


def test_workflow_passes_snakemakes_lint(tmp_path):
    """`snakemake --lint`: every rule has its log, no absolute paths, no mixed rules and
    functions, and the other snakemake-workflows conventions."""
    done = run_snakemake(tmp_path, "--lint", configfiles=(), check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_no_import_cycles():
    """The package's imports run one way, those inside functions counted too: a deferred
    import that closes a circle is a circle all the same."""
    everything = {module_name(p) for p in PACKAGE.rglob("*.py")}
    graph = {m: {i for i in deps if i in everything and i != m}
             for m, deps in package_closure(everything).items()}
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in graph.get(node, ()):
            if state.get(nxt) == 1:
                raise AssertionError("import cycle: " + " -> ".join(path + [node, nxt]))
            if nxt not in state:
                visit(nxt, path + [node])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])


# The stages whose processes run without PyTorch (stages/common.without_torch): tvm_ffi would
# import it, about a second of every job's start.
TORCH_FREE_SCRIPTS = ("tune.py", "lower.py", "build.py", "validate.py")


def test_torch_free_stages_and_the_snakefile_import_no_torch():
    """The package modules that the torch-free stages load (their scripts, the imports inside
    their stage functions, and what those import when loaded) and those the Snakefile's helpers
    load when it is parsed all import with torch made unimportable."""
    entry = [REPO / "workflow_scripts" / name for name in TORCH_FREE_SCRIPTS]
    entry += [PACKAGE / "stages" / name for name in TORCH_FREE_SCRIPTS]
    start = set().union(*(imports(path) for path in entry))
    start |= set(re.findall(r"^from (kokoro_tvm[\w.]*) import",
                            (REPO / "rules/common.smk").read_text(), re.M))
    modules = sorted(m for m in package_closure(start, top_level=True)
                     if m.startswith("kokoro_tvm"))
    assert {"kokoro_tvm.components", "kokoro_tvm.measure.validate", "kokoro_tvm.config",
            "kokoro_tvm.compile.lower", "kokoro_tvm.compile.build"} <= set(modules)
    code = "import importlib, sys\nsys.modules['torch'] = None\n" + "".join(
        f"importlib.import_module({m!r})\n" for m in modules)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]


class _PackageFinder(modulefinder.ModuleFinder):
    """The standard library's import finder, following only this package's modules, and not
    into ``skipped`` ones."""

    def __init__(self, skipped=(), **options):
        super().__init__(**options)
        self.skipped = set(skipped)

    def import_hook(self, name, caller=None, fromlist=None, level=-1):
        if level <= 0 and (name.split(".")[0] != "kokoro_tvm" or name in self.skipped):
            return None
        fromlist = [f for f in fromlist or () if f"{name}.{f}" not in self.skipped] or None
        return super().import_hook(name, caller, fromlist, level)


def script_modules(script: Path, skipped=()) -> set[Path]:
    finder = _PackageFinder(skipped, path=[str(REPO), *sys.path])
    finder.run_script(str(script))
    return {Path(m.__file__) for name, m in finder.modules.items()
            if name.startswith("kokoro_tvm") and m.__file__}


def dry_run_jobs(workdir: Path) -> list[dict]:
    """Every job of `all` and `figures` that has inputs, with them and its wildcards, from a
    forced dry run."""
    return [job for job in dry_run(workdir, "--forceall", "all", "figures") if job["inputs"]]


def test_every_rule_lists_the_code_its_script_imports(tmp_path):
    """The code inputs Snakemake compares are every package module the rule's script imports
    (as Python's own modulefinder sees them), but for components without LSTMs the LSTM-only
    modules, and for CPU targets the GPU-only ones, with what only they import: code those
    jobs never run."""
    jobs = dry_run_jobs(tmp_path)
    targets = {**yaml.safe_load((REPO / "config.yaml").read_text())["target_options"],
               **yaml.safe_load(TINY.read_text()).get("target_options", {})}
    assert {"export", "reference", "relax", "lower", "build", "validate", "manifest", "weights",
            "bench_components_target", "spectrogram"} <= {j["rule"] for j in jobs}
    for job in jobs:
        scripts = [p for p in job["inputs"] if p.parent.name == "workflow_scripts"]
        if not scripts:  # only the target rules run no script
            assert job["rule"] in ("all", "figures"), job
            continue
        component, target = job["wildcards"].get("component"), job["wildcards"].get("target")
        lstm = component is None or COMPONENTS[component].has_lstm
        gpu = target is None or device_kind(targets[target]) == "cuda"
        expected = script_modules(scripts[0], (() if lstm else LSTM_ONLY)
                                  + (() if gpu or component is None else GPU_ONLY))
        missing = expected - job["inputs"]
        assert not missing, (job["rule"], job["wildcards"], sorted(map(str, missing)))


def test_the_import_stage_does_not_depend_on_the_schedules(tmp_path):
    """A schedule change re-lowers every library but must not re-import any: the relax jobs'
    code inputs hold none of compile/schedules, the lower jobs' hold all of it."""
    schedules = set((PACKAGE / "compile" / "schedules").glob("*.py"))
    jobs = dry_run_jobs(tmp_path)
    for rule, expected in (("relax", set()), ("lower", schedules)):
        found = [job for job in jobs if job["rule"] == rule]
        assert found, rule
        for job in found:
            assert {p for p in job["inputs"] if p in schedules} == expected, (rule, job)


def test_cpu_lowering_loads_no_gpu_only_module(built):
    """What GPU_ONLY promises (CPU targets' jobs leave those modules out of their inputs):
    lowering every Relax artifact of the tiny build for a CPU target imports none of them, so
    no edit of theirs can change a CPU library; lowering one LSTM artifact for cuda and webgpu
    afterwards (and webgpu's plans, which its build imports) does (the check can see them)."""
    code = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from kokoro_tvm.compile.lower import lower\n"
        "from kokoro_tvm.compile.specialize import specialize\n"
        "from kokoro_tvm.compile.targets import make_target\n"
        "from kokoro_tvm.stages.common import load_ir\n"
        f"artifacts = sorted(Path({str(built)!r}).glob('results/relax/*/*.json'))\n"
        "for path in artifacts:\n"
        f"    lower(specialize(load_ir(path), {TINY_BUCKET}), make_target({{'kind': 'llvm'}}))\n"
        "cpu = sorted(sys.modules)\n"
        "lstm = next(p for p in artifacts if p.stem == 'tir_vec')\n"
        f"lower(specialize(load_ir(lstm), {TINY_BUCKET}),"
        " make_target({'kind': 'cuda', 'arch': 'sm_90'}))\n"
        f"lower(specialize(load_ir(lstm), {TINY_BUCKET}), make_target({{'kind': 'webgpu'}}))\n"
        "import kokoro_tvm.compile.webgpu.plan\n"
        "print(json.dumps([[str(p) for p in artifacts], cpu, sorted(sys.modules)]))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    artifacts, cpu, after_cuda = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(artifacts) >= 5 and any(p.endswith("/tir_vec.json") for p in artifacts), artifacts
    assert not set(GPU_ONLY) & set(cpu), sorted(set(GPU_ONLY) & set(cpu))
    assert set(GPU_ONLY) <= set(after_cuda)


def test_a_local_run_is_not_held_by_snakemakes_job_rate_limit(tmp_path):
    """rules/common.smk drops Snakemake's job rate limiter in local runs (its timers cost the
    jobs CPU): with a limit of one job per ten minutes on the command line, the tiny model's
    weights and its five components' params (six jobs) still run in one go."""
    params = [f"results/params/{component}.npz" for component in COMPONENTS]
    try:
        run_snakemake(tmp_path, "--max-jobs-per-timespan", "1/600s", *params, timeout=300)
    except subprocess.TimeoutExpired as err:
        raise AssertionError("the run waited for the rate limit's window") from err
    assert all((tmp_path / path).is_file() for path in params)
