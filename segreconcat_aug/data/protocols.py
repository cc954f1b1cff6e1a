"""The evaluation protocols an attacker is trained and scored under (the ``protocol:`` key), in one
table, :data:`PROTOCOLS`: each names its data sets, the subsets it scores, how the table averages
them and the scoring conventions of the challenge code that defines it (docs/evaluation.md).

>>> protocol = get_protocol("vpc2026-track2")
>>> protocol.train_set("de"), protocol.trial_set("test_mixed", "de"), protocol.enroll_set("dev", "de")
('train_german', 'de_test_trials_mixed', 'de_dev_enrolls')
>>> get_protocol("vpac2024").subsets
('dev_f', 'dev_m', 'test_f', 'test_m')
>>> language_of_set("train_german_BM1"), language_of_set("de_dev_enrolls"), language_of_set("libri_dev_enrolls_B3")
('de', 'de', None)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..errors import UserError

DEFAULT_PROTOCOL = "vpac2024"
PARTS = ("dev", "test")
#: The two folder layouts (:mod:`segreconcat_aug.data.vpac`).
LAYOUTS = ("vpac2024", "vpc2026")


class ProtocolError(UserError, ValueError):
    """An unknown protocol, or options that do not fit the protocol (a language, a subset)."""


@dataclass(frozen=True)
class TableLayout:
    """The columns of a results table: subsets and averages, their headers, and what each average covers."""

    columns: tuple[str, ...]
    headers: tuple[str, ...]
    averages: Mapping[str, tuple[str, ...]]

    @property
    def subsets(self) -> tuple[str, ...]:
        """The columns that are subsets (not averages)."""
        return tuple(column for column in self.columns if column not in self.averages)


#: The paper's Table 2 (VPAC 2024): dev / test x f / m, each part's average and the average of the four.
VPAC_TABLE = TableLayout(
    columns=("dev_f", "dev_m", "dev_avg", "test_f", "test_m", "test_avg", "avg"),
    headers=("dev F", "dev M", "dev avg", "test F", "test M", "test avg", "avg"),
    averages={
        "dev_avg": ("dev_f", "dev_m"),
        "test_avg": ("test_f", "test_m"),
        "avg": ("dev_f", "dev_m", "test_f", "test_m"),
    },
)
#: VPC 2026: one pooled (mixed-gender) list per part, and their average.
MIXED_TABLE = TableLayout(
    columns=("dev_mixed", "test_mixed", "avg"),
    headers=("dev mixed", "test mixed", "avg"),
    averages={"avg": ("dev_mixed", "test_mixed")},
)

#: The suffixes of the extra rows of a pooled list: its target trials with only its same-gender,
#: or only its cross-gender, non-target trials (``dev_mixed_same``, ``dev_mixed_cross``).
GENDER_ROWS = ("same", "cross")


@dataclass(frozen=True)
class Language:
    """A Track 2 language: its code, its training set and whether the 2026 toolkit scores it."""

    code: str
    train_set: str
    scored: bool = True
    # False: the toolkit ships no training set (name one with folder_overrides)
    shipped_train_set: bool = True


#: VPC 2026 Track 2 (scripts/build_mls_data.py, build_cn_data.py, build_ja_data.py and the README's layout).
TRACK2_LANGUAGES = {
    "en": Language("en", "train_english"),
    "de": Language("de", "train_german"),
    "fr": Language("fr", "train_french"),
    "es": Language("es", "train_spanish"),
    # Anonymized but not scored by the toolkit, which ships no training set for them.
    "cn": Language("cn", "train_chinese", scored=False, shipped_train_set=False),
    "ja": Language("ja", "train_japanese", scored=False, shipped_train_set=False),
}


@dataclass(frozen=True)
class Protocol:
    """One row of :data:`PROTOCOLS`."""

    name: str
    description: str
    layout: str
    set_prefix: str
    trial_lists: Mapping[str, tuple[str, str]]
    table: TableLayout
    conventions: Mapping[str, object]
    train: str | None = "train-clean-360"  # None: per language (languages)
    languages: Mapping[str, Language] | None = None
    gender_rows: bool = False  # extra same-gender / cross-gender rows of each pooled list
    # Published numbers shown beside ours (reference_results.csv): the paper's table (by attacker
    # label) and the challenge's own attacker (table, attacker).
    published: Mapping[str, object] = field(default_factory=dict)

    @property
    def subsets(self) -> tuple[str, ...]:
        """The subsets scored, in table order."""
        return tuple(self.trial_lists)

    @property
    def scored_languages(self) -> tuple[str, ...]:
        return tuple(code for code, lang in (self.languages or {}).items() if lang.scored)

    def check_language(self, language: str | None) -> str | None:
        """The language this protocol's sets are in (None: English, no choice), or a :class:`ProtocolError`."""
        if self.languages is None:
            if language not in (None, "en"):
                raise ProtocolError(
                    f"protocol {self.name} is English only: language {language!r} does not apply "
                    f"(vpc2026-track2 has {', '.join(TRACK2_LANGUAGES)})"
                )
            return None
        if language not in self.languages:
            given = "no language" if language is None else f"language {language!r}"
            raise ProtocolError(
                f"protocol {self.name} trains one attacker per language and got {given}: give "
                f"--language= one of {', '.join(self.languages)} (scored by the challenge: "
                f"{', '.join(self.scored_languages)})"
            )
        return language

    def _prefix(self, language: str | None) -> str:
        return self.set_prefix.format(language=self.check_language(language))

    def train_set(self, language: str | None = None) -> str:
        """The training set's name (``train-clean-360``, ``train_german``, ...)."""
        language = self.check_language(language)
        return self.train if language is None else self.languages[language].train_set

    def enroll_set(self, part: str, language: str | None = None) -> str:
        return f"{self._prefix(language)}_{part}_enrolls"

    def trial_set(self, subset: str, language: str | None = None) -> str:
        if subset not in self.trial_lists:
            raise ProtocolError(
                f"protocol {self.name}: unknown subset {subset!r}; subsets: {list(self.subsets)}"
            )
        return f"{self._prefix(language)}_{self.trial_lists[subset][1]}"

    def part(self, subset: str) -> str:
        """``dev`` or ``test``: the part whose enrollment a subset is scored against."""
        return self.trial_lists[subset][0]

    def sets(self, language: str | None = None) -> tuple[str, ...]:
        """Every set of one language (training, enrollment, trial lists)."""
        parts = dict.fromkeys(part for part, _ in self.trial_lists.values())
        return (
            self.train_set(language),
            *(self.enroll_set(part, language) for part in parts),
            *(self.trial_set(subset, language) for subset in self.subsets),
        )

    def known_sets(self) -> tuple[str, ...]:
        """Every set of every language (what ``folder_overrides`` may name)."""
        languages = list(self.languages) if self.languages else [None]
        return tuple(dict.fromkeys(name for language in languages for name in self.sets(language)))

    def convention(self, key: str, value=None):
        """An evaluation option's value: ``value`` when given (not None), else this protocol's."""
        return self.conventions[key] if value is None else value


_VPC2026_CONVENTIONS = {
    # evaluation/privacy/asv/utils.py: normalize_wave as of commit 5f4ae1d (2026-02-20; unchanged to e6810a4):
    # its block size and its NaN and silence fallbacks
    "eval_normalize_wave": "vpc2026",
    # asv.py: eer_compute skips (and counts) a trial whose enrollment or test embedding is missing
    "eval_skip_missing_trials": True,
    # The plain `ecapa` path (an EncoderClassifier, which this attacker is) averages raw embeddings;
    # "l2" is what the challenge's own WavLM+ECAPA extractor does (speechbrain_vectors.py after f2c9bdc).
    "eval_enroll_mean": "raw",
    # evaluate_asv.py: every trial list is read from the original (unsuffixed) folder, data/<set>/trials.
    "eval_trials_from": "original",
    # asv.py: eer_compute keeps its trials in a dict keyed by (speaker, utterance): a repeated pair counts once.
    "eval_duplicate_trials": "collapse",
    # utils.py: normalize_wave resamples a wave of another rate to 16 kHz after normalizing it.
    "eval_resample": True,
}

PROTOCOLS: dict[str, Protocol] = {
    "vpac2024": Protocol(
        name="vpac2024",
        description="VoicePrivacy Attacker Challenge 2024 (the paper's protocol)",
        layout="vpac2024",
        set_prefix="libri",
        trial_lists={
            "dev_f": ("dev", "dev_trials_f"),
            "dev_m": ("dev", "dev_trials_m"),
            "test_f": ("test", "test_trials_f"),
            "test_m": ("test", "test_trials_m"),
        },
        table=VPAC_TABLE,
        conventions={
            "eval_normalize_wave": "vpc2024",
            "eval_skip_missing_trials": False,
            "eval_enroll_mean": "raw",
            # Its layout has no original folders: a system's own lists.
            "eval_trials_from": "anonymized",
            # VPC 2024's asv.py keeps the same (speaker, utterance)-keyed dict.
            "eval_duplicate_trials": "collapse",
            # The paper's setting: 16 kHz audio, anything else refused.
            "eval_resample": False,
        },
        published={"paper": "paper-table2", "challenge": ("vpac-baseline", "VPAC baseline")},
    ),
    "vpc2026-track1": Protocol(
        name="vpc2026-track1",
        description="VoicePrivacy Challenge 2026, Track 1 (English, pooled mixed-gender lists)",
        layout="vpc2026",
        set_prefix="libri",
        trial_lists={"dev_mixed": ("dev", "dev_trials_mixed"), "test_mixed": ("test", "test_trials_mixed")},
        table=MIXED_TABLE,
        conventions=_VPC2026_CONVENTIONS,
        gender_rows=True,
        published={"challenge": ("vpc2026-track1", "VPC 2026 challenge attacker (WavLM-Large+ECAPA)")},
    ),
    "vpc2026-track2": Protocol(
        name="vpc2026-track2",
        description="VoicePrivacy Challenge 2026, Track 2 (multilingual MLS; one attacker per language)",
        layout="vpc2026",
        set_prefix="{language}",
        trial_lists={"dev_mixed": ("dev", "dev_trials_mixed"), "test_mixed": ("test", "test_trials_mixed")},
        table=MIXED_TABLE,
        conventions=_VPC2026_CONVENTIONS,
        train=None,
        languages=TRACK2_LANGUAGES,
        gender_rows=True,
    ),
}

#: Every subset name any protocol scores (what ``eval_subsets`` may list).
ALL_SUBSETS = tuple(dict.fromkeys(s for p in PROTOCOLS.values() for s in p.subsets))


def get_protocol(name: str | None) -> Protocol:
    """The protocol of that name (None: :data:`DEFAULT_PROTOCOL`)."""
    name = DEFAULT_PROTOCOL if name is None else name
    if name not in PROTOCOLS:
        raise ProtocolError(f"protocol {name!r} is unknown; protocols: {', '.join(PROTOCOLS)}")
    return PROTOCOLS[name]


#: Track 2 language codes that Whisper spells otherwise.
WHISPER_LANGUAGES = {"cn": "zh"}


def whisper_language(code: str | None) -> str | None:
    """Whisper's code of a language (``cn`` is Whisper's ``zh``; None stays None: detected).

    >>> whisper_language("cn"), whisper_language("de"), whisper_language(None)
    ('zh', 'de', None)
    """
    return WHISPER_LANGUAGES.get(code, code)


def language_of_set(folder_name: str) -> str | None:
    """The Track 2 language of a set's folder name (its suffix ignored), or None (not a Track 2 set)."""
    for code, language in TRACK2_LANGUAGES.items():
        if folder_name == language.train_set or folder_name.startswith(
            (f"{language.train_set}_", f"{code}_dev_", f"{code}_test_")
        ):
            return code
    return None


def check_protocol_options(values: Mapping) -> None:
    """Check the keys of a recipe's YAML that must fit its protocol (``language``, ``eval_subsets``);
    a :class:`ProtocolError` names the key, the protocol and what it allows."""
    if "protocol" not in values:
        return
    protocol = get_protocol(values.get("protocol"))
    if "language" in values:
        protocol.check_language(values.get("language"))
    subsets = values.get("eval_subsets")
    if subsets:
        wrong = [s for s in subsets if s not in protocol.subsets]
        if wrong:
            raise ProtocolError(
                f"eval_subsets: {wrong} are not subsets of protocol {protocol.name}; its subsets: "
                f"{list(protocol.subsets)} (null: all of them)"
            )
