"""The labelled corpus: precision and recall of the scanner against hand-written
labels, silence on clean controls, and a prefilter that never changes results."""

from __future__ import annotations

import tomllib
from collections import Counter
from pathlib import Path

import pytest
from torchport.tools.scanner import ScanOptions, scan

CORPUS = Path(__file__).parent / "fixtures" / "corpus"
EXAMPLE = Path(__file__).parents[1] / "examples" / "cuda_mnist"

# what the corpus holds (tests/fixtures/corpus/expected.toml), so a label file that loses
# entries fails here instead of raising the scores
LABELLED_FILES = 76
CONTROLS = 11


def _labels(expected_file: Path) -> tuple[dict[str, dict], Counter]:
    files = tomllib.loads(expected_file.read_text())["files"]
    labels: Counter = Counter()
    for path, entry in files.items():
        for item in entry["findings"]:
            where, code = item.split()
            labels[(path, where, code)] += 1
    return files, labels


def _found(result) -> Counter:
    return Counter(
        (f.path, f"{f.cell}:{f.line}" if f.cell else str(f.line), f.rule) for f in result.findings
    )


@pytest.fixture(scope="module")
def corpus_scan():
    return scan(CORPUS)


def test_precision_and_recall_on_the_labelled_corpus(corpus_scan):
    files, expected = _labels(CORPUS / "expected.toml")
    found = _found(corpus_scan)
    true_pos = sum((found & expected).values())
    precision = true_pos / max(1, sum(found.values()))
    recall = true_pos / max(1, sum(expected.values()))
    missed = sorted((expected - found).elements())
    spurious = sorted((found - expected).elements())
    assert len(files) == LABELLED_FILES
    # measured: every label found, nothing else; a lower score is a regression to explain
    assert precision == 1.0 and recall == 1.0, (
        f"precision {precision:.3f} recall {recall:.3f}\nmissed: {missed}\nspurious: {spurious}"
    )


def test_every_labelled_file_is_scanned_and_nothing_unlabelled_has_findings(corpus_scan):
    files, _ = _labels(CORPUS / "expected.toml")
    skipped = {s.path for s in corpus_scan.skipped}
    assert not skipped & set(files)
    assert {f.path for f in corpus_scan.findings} <= set(files)


def test_controls_have_no_findings(corpus_scan):
    files, _ = _labels(CORPUS / "expected.toml")
    controls = [p for p, e in files.items() if e.get("difficulty") == "control"]
    assert len(controls) == CONTROLS
    noisy = [f for f in corpus_scan.findings if f.path in controls]
    assert noisy == []


def test_the_prefilter_never_changes_the_findings(corpus_scan):
    exhaustive = scan(CORPUS, ScanOptions(prefilter=False))
    assert [f.to_json() for f in exhaustive.findings] == [f.to_json() for f in corpus_scan.findings]


def test_parallel_and_serial_scans_agree():
    serial = scan(CORPUS, ScanOptions(jobs=1))
    from torchport.tools import scanner

    old = scanner.PARALLEL_MIN_FILES
    scanner.PARALLEL_MIN_FILES = 1
    try:
        parallel = scan(CORPUS, ScanOptions(jobs=2))
    finally:
        scanner.PARALLEL_MIN_FILES = old
    assert [f.to_json() for f in parallel.findings] == [f.to_json() for f in serial.findings]
    assert parallel.entrypoints == serial.entrypoints


def test_bundled_example_matches_its_labels():
    _, expected = _labels(EXAMPLE / "EXPECTED_FINDINGS.toml")
    assert _found(scan(EXAMPLE)) == expected
