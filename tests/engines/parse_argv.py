"""Run engine argvs through vLLM's or SGLang's own parsers; executed by the engines' interpreter.

Usage: ``<engines python> parse_argv.py vllm|sglang < cases.json > results.json``. Each case is
``{"id": ..., "argv": [...]}`` (the container command with ``$(VAR)`` already expanded). The answer holds,
per case, ``{"id", "ok", "error"}`` and, for the alias check, every option spelling of the parser's actions.

vLLM: the ``vllm serve`` sub-command's parser and its argument validation, then the engine config build
(``create_engine_config``, headless as ``run_headless`` does it) on a model folder holding only a
config.json; the platform is vLLM's CPU platform, as vllm-ascend's would be on an NPU node.
SGLang: ``prepare_server_args`` and ``check_server_args``, with ``--device npu`` swapped to cpu because
the NPU path imports torch_npu.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import tempfile
import traceback

# A small Llama-shaped config: what the engine config build reads from a model folder.
MODEL_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 1024,
    "intermediate_size": 2048,
    "num_attention_heads": 64,
    "num_key_value_heads": 16,
    "num_hidden_layers": 96,
    "vocab_size": 32000,
    "max_position_embeddings": 32768,
    "torch_dtype": "bfloat16",
    "rms_norm_eps": 1e-5,
}


def model_folder(quantized: bool = False) -> str:
    """A model folder holding only config.json (and, for ModelSlim int8 weights, their description file)."""
    folder = tempfile.mkdtemp(prefix="engine-model-")
    with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as handle:
        json.dump(MODEL_CONFIG, handle)
    if quantized:
        with open(os.path.join(folder, "quant_model_description.json"), "w", encoding="utf-8") as handle:
            json.dump({"model_quant_type": "W8A8"}, handle)
    return folder


def _register_ascend_quantization() -> None:
    """vllm-ascend's one parser change: its platform registers the ``ascend`` quantization (ModelSlim weights).

    vllm-ascend cannot be imported without CANN, so the name is registered here the way its platform does it,
    with a config that only answers what the engine config build asks; loading weights is out of scope.
    """
    from vllm.model_executor.layers.quantization import register_quantization_config
    from vllm.model_executor.layers.quantization.base_config import QuantizationConfig
    from vllm.platforms.cpu import CpuPlatform

    @register_quantization_config("ascend")
    class AscendQuantization(QuantizationConfig):
        def get_name(self):
            return "ascend"

        @classmethod
        def get_supported_act_dtypes(cls):
            import torch

            return [torch.bfloat16, torch.float16]

        @classmethod
        def get_min_capability(cls):
            return 0

        @staticmethod
        def get_config_filenames():
            return ["quant_model_description.json"]

        @classmethod
        def from_config(cls, config):
            return cls()

        def get_quant_method(self, layer, prefix):
            return None

    if CpuPlatform.supported_quantization and "ascend" not in CpuPlatform.supported_quantization:
        CpuPlatform.supported_quantization = [*CpuPlatform.supported_quantization, "ascend"]


def _register_ascend_connectors() -> None:
    """vllm-ascend's other parser-visible change: its platform registers its KV connectors by name.

    The config build only asks whether the name is registered; the names (from the project's engine facts,
    ASCEND_FLEET_KV_CONNECTORS) are registered here as vLLM's example connector, which is never loaded.
    """
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory

    for name in filter(None, os.environ.get("ASCEND_FLEET_KV_CONNECTORS", "").split(",")):
        if name not in KVConnectorFactory._registry:
            KVConnectorFactory.register_connector(
                name, "vllm.distributed.kv_transfer.kv_connector.v1.example_connector", "ExampleConnector"
            )


def vllm_checker(model: str, quantized_model: str):
    import vllm.platforms
    from vllm.platforms.cpu import CpuPlatform

    vllm.platforms.current_platform = CpuPlatform()
    _register_ascend_quantization()
    _register_ascend_connectors()
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.usage.usage_lib import UsageContext
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm")
    subparsers = parser.add_subparsers(dest="subparser")
    command = ServeSubcommand()
    serve = command.subparser_init(subparsers)

    def check(argv: list[str]) -> None:
        if argv[:2] != ["vllm", "serve"]:
            raise ValueError(f"not a vllm serve command: {argv[:3]}")
        folder = quantized_model if "--quantization" in argv else model
        args = parser.parse_args(["serve", folder, *argv[3:]])
        command.validate(args)
        args.model = args.model_tag
        engine_args = AsyncEngineArgs.from_cli_args(args)
        headless = bool(getattr(args, "headless", False))
        config = engine_args.create_engine_config(
            usage_context=UsageContext.OPENAI_API_SERVER, headless=headless
        )
        if headless and config.parallel_config.data_parallel_size_local <= 0:
            raise ValueError("data_parallel_size_local must be > 0 in headless mode")

    return check, serve


def sglang_checker(model: str):
    import argparse

    from sglang.srt.server_args import ServerArgs, prepare_server_args

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)

    def check(argv: list[str]) -> None:
        if argv[:2] != ["python3", "-m"]:
            raise ValueError(f"not a python -m launcher: {argv[:3]}")
        args = list(argv[3:])
        args[args.index("--model-path") + 1] = model
        if "--device" in args and args[args.index("--device") + 1] == "npu":
            args[args.index("--device") + 1] = "cpu"  # the NPU path needs torch_npu
        server_args = prepare_server_args(args)
        server_args.check_server_args()

    return check, parser


def main() -> int:
    engine = sys.argv[1]
    cases = json.load(sys.stdin)
    model = model_folder()
    check, parser = (
        vllm_checker(model, model_folder(quantized=True)) if engine == "vllm" else sglang_checker(model)
    )
    results = []
    for case in cases:
        said = io.StringIO()
        try:
            with contextlib.redirect_stderr(said):
                check(case["argv"])
        except BaseException as error:  # argparse exits with SystemExit after printing why
            detail = traceback.format_exception_only(type(error), error)[-1].strip()
            if isinstance(error, SystemExit):
                detail = said.getvalue().strip().splitlines()[-1:] or [detail]
                detail = detail[0]
            results.append({"id": case["id"], "ok": False, "error": detail})
        else:
            results.append({"id": case["id"], "ok": True, "error": ""})
    options = [list(action.option_strings) for action in parser._actions if action.option_strings]
    answer = {"results": results, "options": options, "allow_abbrev": parser.allow_abbrev}
    sys.__stdout__.write("\n@@RESULTS@@" + json.dumps(answer) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
