# Benchmarks: figures (JSON) and plots under results/bench/, outside `rule all`.


# See kokoro_tvm.measure.bench_lstm.
rule bench_lstm_target:
    input:
        manifest=rules.manifest.output.manifest,
        params=lstm_params(),
        code=code_inputs("bench_lstm.py"),
        script=script("bench_lstm.py"),
    output:
        json=paths.BENCH_LSTM,
        plot=report(paths.BENCH_LSTM_PLOT, category="Benchmarks", labels={"figure": "LSTM methods", "target": "{target}"}),
    params:
        repeats=5,
        versions=versions("apache-tvm", "matplotlib"),
    threads: job_threads
    log:
        "logs/bench/lstm/{target}.log",
    benchmark:
        "benchmarks/bench/lstm/{target}.tsv"
    conda:
        "../envs/kokoro-tvm.yaml"
    shell:
        "TVM_NUM_THREADS={threads} python {input.script} --manifest {input.manifest}"
        " --params {input.params} --threads {threads} --repeats {params.repeats} --out-json {output.json} --out-plot {output.plot}"
        " > {log} 2>&1"


# See kokoro_tvm.measure.bench_components.
rule bench_components_target:
    input:
        manifest=rules.manifest.output.manifest,
        checkpoint=rules.weights.output.checkpoint,
        config=rules.weights.output.config,
        params=expand(paths.PARAMS, component=COMPONENTS),
        code=code_inputs("bench_components.py"),
        script=script("bench_components.py"),
    output:
        json=paths.BENCH_COMPONENTS,
        plot=report(paths.BENCH_COMPONENTS_PLOT, category="Benchmarks", labels={"figure": "components vs PyTorch", "target": "{target}"}),
    params:
        repeats=5,
        lengths=bench_components_lengths(),
        versions=versions("apache-tvm", "torch", "matplotlib"),
    threads: job_threads
    log:
        "logs/bench/components/{target}.log",
    benchmark:
        "benchmarks/bench/components/{target}.tsv"
    conda:
        "../envs/kokoro-tvm.yaml"
    shell:
        "TVM_NUM_THREADS={threads} python {input.script} --manifest {input.manifest}"
        " --checkpoint {input.checkpoint} --model-config {input.config} --params {input.params}"
        " --threads {threads} --repeats {params.repeats} {params.lengths} --out-json {output.json}"
        " --out-plot {output.plot} > {log} 2>&1"


# See kokoro_tvm.measure.bench_e2e.
rule bench_e2e_target:
    input:
        model=rules.dist.output.folder,
        checkpoint=rules.weights.output.checkpoint,
        config=rules.weights.output.config,
        onnx=paths.ASSET_ONNX,
        voice=expand(paths.ASSET_VOICE, voice=setting("report.voice")),
        code=code_inputs("bench_e2e.py"),
        script=script("bench_e2e.py"),
    output:
        json=paths.BENCH_E2E,
        plot=report(paths.BENCH_E2E_PLOT, category="Benchmarks", labels={"figure": "end to end", "target": "{target}"}),
    params:
        voice=setting("report.voice"),
        runtime_python=cli_args(runtime_python=setting("report.runtime_python")),
        versions=versions("apache-tvm", "torch", "onnxruntime"),
    threads: job_threads
    log:
        "logs/bench/e2e/{target}.log",
    benchmark:
        "benchmarks/bench/e2e/{target}.tsv"
    conda:
        "../envs/kokoro-tvm.yaml"
    shell:
        "python {input.script} --target {wildcards.target} --threads {threads}"
        " --voice {params.voice} {params.runtime_python} --out-json {output.json}"
        " --out-plot {output.plot} > {log} 2>&1"


# See kokoro_tvm.measure.bench_serve.
rule bench_serve_target:
    input:
        model=rules.dist.output.folder,
        code=code_inputs("bench_serve.py"),
        script=script("bench_serve.py"),
    output:
        json=paths.BENCH_SERVE,
    params:
        versions=versions("apache-tvm", "torch", "uvicorn", "starlette", "av"),
        runtime_python=cli_args(runtime_python=setting("report.runtime_python")),
    threads: job_threads
    log:
        "logs/bench/serve/{target}.log",
    benchmark:
        "benchmarks/bench/serve/{target}.tsv"
    conda:
        "../envs/kokoro-tvm.yaml"
    shell:
        "python {input.script} --model {input.model} --threads {threads}"
        " {params.runtime_python} --out-json {output.json} > {log} 2>&1"


# See kokoro_tvm.measure.bench_slow_readers.
rule bench_slow_readers_target:
    input:
        model=rules.dist.output.folder,
        code=code_inputs("bench_slow_readers.py"),
        script=script("bench_slow_readers.py"),
    output:
        json=paths.BENCH_SLOW_READERS,
    params:
        versions=versions("apache-tvm", "uvicorn", "starlette", "av"),
        runtime_python=cli_args(runtime_python=setting("report.runtime_python")),
    threads: job_threads
    log:
        "logs/bench/slow_readers/{target}.log",
    benchmark:
        "benchmarks/bench/slow_readers/{target}.tsv"
    conda:
        "../envs/kokoro-tvm.yaml"
    shell:
        "python {input.script} --model {input.model} --threads {threads}"
        " {params.runtime_python} --out-json {output.json} > {log} 2>&1"


# See kokoro_tvm.measure.bench_web. The web folder's module and kokoro-js (npm) in headless
# Chromium; not per target: the web folder is the webgpu target's.
rule bench_web:
    input:
        site=rules.web.output.site,
        onnx=paths.ASSET_ONNX,
        page=str(Path(workflow.basedir) / "kokoro_tvm/measure/bench_web/index.html"),
        code=code_inputs("bench_web.py"),
        script=script("bench_web.py"),
    output:
        json=paths.BENCH_WEB,
    params:
        text=setting("report.web_text"),
        voice=setting("report.voice"),
        browser=bench_web_browser_args(),
        versions=versions("playwright", "onnx"),
    log:
        "logs/bench/web.log",
    benchmark:
        "benchmarks/bench/web.tsv"
    conda:
        "../envs/kokoro-tvm.yaml"
    shell:
        "python {input.script} --web {input.site} --onnx {input.onnx} --text {params.text:q}"
        " --voice {params.voice} {params.browser}"
        " --out-json {output.json} > {log} 2>&1"
