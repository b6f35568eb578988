"""`tpucared check`: will this config work on this project? The preflight's checks
(tpucared/preflight/), one line each (`ok|WARN|FAIL name: detail`) or `--json`.

Exit status: 0 when nothing FAILs (WARNs included), 1 on any FAIL, 2 for a config that does
not load (as every command). Changes nothing anywhere: no database, no key, no cloud write.
"""

from __future__ import annotations

import argparse
import asyncio

from tpucared.cli.config_arg import load
from tpucared.preflight import check_config, exit_code, render, to_json


def check_command(args: argparse.Namespace) -> int:
    config = load(args)
    results = asyncio.run(check_config(config))
    print(to_json(results) if args.json else render(results))
    return exit_code(results)
