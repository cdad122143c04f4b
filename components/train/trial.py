"""``python -m components.train.trial``: one trial of a Vertex AI hyperparameter tuning job. The training command's
flags (``python -m components.train --help``), then the trial's values as Vertex AI appends them
(``--learning_rate=0.003 --per_replica_batch_size=32 --augment=true``); trains with those values into
``AIP_MODEL_DIR`` and reports the trial's ``val_accuracy`` to Vertex AI (``components.train.tuning``)."""

from __future__ import annotations

import json
import sys

from components.cli import configure_logging, console_script


def main(argv: list[str] | None = None) -> int:
    from components.train.__main__ import build_parser, train_config
    from components.train.core import run
    from components.train.tuning import apply, report, split_trial_flags

    values, rest = split_trial_flags(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    parser.prog = "python -m components.train.trial"
    args = parser.parse_args(rest)
    configure_logging(args.verbose)
    config = apply(train_config(args), values)
    result = run(config)
    print(json.dumps({"trial": values, "val_accuracy": report(result), "model_dir": result["model_dir"]}))
    return 0


cli = console_script(main)

if __name__ == "__main__":
    cli()
