"""Importing Montreal Forced Aligner TextGrids and Kaldi CTM into the alignment cache."""

import pytest

from segreconcat_aug.align.aligners.importers import (
    ImportFormatError,
    import_ctm,
    import_textgrids,
    read_ctm,
    read_textgrid,
    textgrid_words,
)
from segreconcat_aug.align.cache import Word, load_alignments
from segreconcat_aug.data.jobs import read_failures

# As MFA writes it (long text format), with a phones tier and silence intervals.
LONG = """File type = "ooTextFile"
Object class = "TextGrid"

xmin = 0
xmax = 2.5
tiers? <exists>
size = 2
item []:
    item [1]:
        class = "IntervalTier"
        name = "words"
        xmin = 0
        xmax = 2.5
        intervals: size = 4
        intervals [1]:
            xmin = 0
            xmax = 0.31
            text = ""
        intervals [2]:
            xmin = 0.31
            xmax = 0.8
            text = "northanger"
        intervals [3]:
            xmin = 0.8
            xmax = 1.42
            text = "abbey"
        intervals [4]:
            xmin = 1.42
            xmax = 2.5
            text = ""
    item [2]:
        class = "IntervalTier"
        name = "phones"
        xmin = 0
        xmax = 2.5
        intervals: size = 1
        intervals [1]:
            xmin = 0
            xmax = 2.5
            text = "sil"
"""

# Praat's short text format, MFA multi-speaker tier name, a quoted quote, a point tier.
SHORT = """File type = "ooTextFile"
Object class = "TextGrid"

0
1.5
<exists>
2
"IntervalTier"
"19 - words"
0
1.5
3
0
0.2
"sp"
0.2
0.9
"say ""hi"" now"
0.9
1.5
"there"
"TextTier"
"events"
0
1.5
1
0.7
"click"
"""


def test_textgrid_long_and_short_formats(tmp_path):
    (tmp_path / "u1.TextGrid").write_text(LONG)
    xmax, tiers = read_textgrid(tmp_path / "u1.TextGrid")
    assert xmax == 2.5 and [t.name for t in tiers] == ["words", "phones"]
    assert textgrid_words(tmp_path / "u1.TextGrid") == (
        2.5,
        [Word("northanger", 0.31, 0.8), Word("abbey", 0.8, 1.42)],
    )
    (tmp_path / "u2.TextGrid").write_bytes(SHORT.encode("utf-16"))  # Praat may write UTF-16
    xmax, words = textgrid_words(tmp_path / "u2.TextGrid")
    assert xmax == 1.5 and words == [Word('say "hi" now', 0.2, 0.9), Word("there", 0.9, 1.5)]
    assert read_textgrid(tmp_path / "u2.TextGrid")[1][1].intervals == [(0.7, 0.7, "click")]


def test_textgrid_errors_name_the_file(tmp_path):
    (tmp_path / "bad.TextGrid").write_text(LONG.replace("size = 4", "size = 9"))
    with pytest.raises(ImportFormatError, match=r"bad.TextGrid: malformed"):
        read_textgrid(tmp_path / "bad.TextGrid")
    (tmp_path / "u1.TextGrid").write_text(LONG)
    with pytest.raises(ImportFormatError, match=r"no interval tier named 'word'.*\['words', 'phones'\]"):
        textgrid_words(tmp_path / "u1.TextGrid", tier="word")


def test_import_textgrids_into_cache_with_durations_and_missing(tmp_path):
    (tmp_path / "tg" / "19").mkdir(parents=True)
    (tmp_path / "tg" / "19" / "u1.TextGrid").write_text(LONG)
    (tmp_path / "tg" / "u2.TextGrid").write_text(SHORT)
    (tmp_path / "tg" / "u3.TextGrid").write_text("not a textgrid")
    job, _ = import_textgrids(
        tmp_path / "tg",
        tmp_path / "c.jsonl",
        durations={"u1": 2.4},
        ids=["u1", "u2", "u3", "u4"],
        progress=False,
    )
    assert job.written == 2 and job.failures == {"malformed": 1, "missing": 1}
    index = load_alignments(tmp_path / "c.jsonl", keep_words=True)
    assert index.duration("u1") == 2.4 and index.duration("u2") == 1.5  # utt2dur wins, else xmax
    assert index.get("u1").words == [Word("northanger", 0.31, 0.8), Word("abbey", 0.8, 1.42)]
    assert index.get("u2").aligner == "mfa"
    assert set(read_failures(tmp_path / "c.jsonl")) == {"u3", "u4"}
    # Rerun: done ids are skipped, the failed ones retried (and still failing).
    job, _ = import_textgrids(tmp_path / "tg", tmp_path / "c.jsonl", ids=["u1", "u2", "u3"], progress=False)
    assert job.written == 0 and job.previously_done == 2 and job.failed == 1


def test_ctm_read_import_and_errors(tmp_path):
    ctm = tmp_path / "a.ctm"
    ctm.write_text(
        ";; comment\nu1 1 0.00 0.20 <eps>\nu1 1 0.20 0.35 hello 0.91\nu1 1 0.60 0.30 world\nu2 A 1.5 0.5 yes\n"
    )
    assert read_ctm(ctm) == {
        "u1": [Word("hello", 0.2, 0.55), Word("world", 0.6, 0.9)],
        "u2": [Word("yes", 1.5, 2.0)],
    }
    job, stats = import_ctm(ctm, tmp_path / "out", durations={"u1": 1.0}, progress=False)
    assert job.written == 2 and stats["duration_from_last_word"] == 1
    index = load_alignments(tmp_path / "out")
    assert index.duration("u1") == 1.0 and index.duration("u2") == 2.0
    assert index.get("u1").aligner == "ctm"
    ctm.write_text("u1 1 0.0 0.2 hi\nu1 1 zero 0.2 there\n")
    with pytest.raises(ImportFormatError, match=r"a.ctm:2: start and duration must be numbers"):
        read_ctm(ctm)
    ctm.write_text("u1 1 0.0\n")
    with pytest.raises(ImportFormatError, match=r"a.ctm:1: expected"):
        read_ctm(ctm)
