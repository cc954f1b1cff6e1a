#!/usr/bin/env python3
"""Anonymize speech with McAdams (VoicePrivacy B2) into the challenge layout.

Usage::

    python recipes/anonymize.py hparams/anonymize.yaml --input_folder=<kaldi folder or audio folder> \
        --output_folder=<new folder>

The input is a Kaldi-style or audio folder, never modified (see
:func:`segreconcat_aug.anonymizers.folder.anonymize_folder`); with ``system`` and ``sets``, a whole
layout is written to ``<output_folder>/<system>/data/<set>_<system>/``.
"""

import logging
from pathlib import Path

from segreconcat_aug.anonymizers import check_anonymizer
from segreconcat_aug.anonymizers.folder import AnonymizeInputError, anonymize_folder
from segreconcat_aug.cli import load_recipe_hparams, run_main
from segreconcat_aug.errors import MissingInputError
from segreconcat_aug.options import AnonymizeOptions

logger = logging.getLogger(__name__)


def jobs(hparams) -> list[tuple[Path, Path]]:
    """(input folder, output folder) pairs for one folder or a whole layout."""
    source, target = Path(hparams["input_folder"]), Path(hparams["output_folder"])
    sets, system = hparams.get("sets"), hparams.get("system")
    if not sets:
        return [(source, target)]
    if not system:
        raise AnonymizeInputError("--sets needs --system (the name of the anonymized system, e.g. MCADAMS)")
    missing = [name for name in sets if not (source / name).is_dir()]
    if missing:
        raise MissingInputError(f"{source}: no folder for set(s) {missing} (expected {source}/<set>/)")
    return [(source / name, target / system / "data" / f"{name}_{system}") for name in sets]


def main(argv=None):
    hparams_file, run_opts, overrides, hparams = load_recipe_hparams(argv, AnonymizeOptions)
    try:
        check_anonymizer(hparams["anonymizer"])
    except TypeError as err:
        raise AnonymizeInputError(f"{hparams_file}: anonymizer: {err}") from None
    for source, target in jobs(hparams):
        report = anonymize_folder(
            source,
            target,
            hparams["anonymizer"],
            audio_format=hparams["audio_format"],
            compression_level=hparams.get("compression_level"),
            scp_root=hparams.get("scp_root"),
            root=hparams.get("data_root"),
            allow_pipes=hparams.get("allow_pipes", False),
        )
        logger.info(
            "%s -> %s: %d utterances anonymized, %d kept from an earlier run",
            source,
            target,
            report.written,
            report.skipped,
        )


if __name__ == "__main__":
    run_main(main)
