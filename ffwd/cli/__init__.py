"""`ffwd serve | generate | replay | bench | deploy | models | info`: the top of the house.

Each command lives in its own module of this package, which provides
``add_arguments(parser)`` and ``main(args) -> int``: argument parsing and the
wiring of the layers below, nothing else. This file only routes.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import importlib
import sys
from collections.abc import Sequence
from types import ModuleType

from ffwd.config.engine import openmp_defaults

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("ffwd.cli.serve", "run the HTTP server (OpenAI and Anthropic APIs)"),
    "generate": ("ffwd.cli.generate", "generate from a prompt and print the result"),
    "replay": ("ffwd.cli.replay", "model-free replay of BFCL calls through the strict tier"),
    "bench": ("ffwd.cli.bench", "side-by-side benchmarks and report"),
    "deploy": ("ffwd.cli.deploy", "scale out on Ray Serve: print a Serve config file"),
    "models": ("ffwd.cli.models", "the models this machine holds that ffwd can serve: "
               "embedded, the Hub cache, Ollama, LM Studio"),
    "info": ("ffwd.cli.info", "what a model runs as: path, backend, dtype, template, context, "
             "greedy determinism"),
}


def main(argv: Sequence[str] | None = None) -> int:
    # Before torch or llama.cpp load their OpenMP runtime (see ffwd.config.engine).
    openmp_defaults()
    # A native crash (a signal in llama.cpp or torch) prints the Python stack, never bare.
    if sys.__stderr__ is not None and not faulthandler.is_enabled():
        with contextlib.suppress(ValueError, OSError):  # no file descriptor to write to
            faulthandler.enable(sys.__stderr__)
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="ffwd", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    wanted = next((a for a in argv if a in COMMANDS), None)
    loaded: dict[str, ModuleType] = {}
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        # Import only the chosen command's module: the others may pull torch.
        if name == wanted:
            loaded[name] = importlib.import_module(module)
            loaded[name].add_arguments(p)
    args, rest = parser.parse_known_args(argv)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    return int(loaded[args.command].main(args))


if __name__ == "__main__":
    sys.exit(main())
