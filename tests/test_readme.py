"""The README's Python example runs as written, its commands name files and keys that exist, and every
link to a docs page (in the README, the docs, and the code's messages and docstrings) reaches a heading."""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")


def test_readme_python_examples_run(monkeypatch, capsys):
    blocks = re.findall(r"```python\n(.*?)```", README, flags=re.S)
    assert blocks, "the README shows the pipeline on a real utterance"
    monkeypatch.chdir(REPO)
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})
    printed = capsys.readouterr().out
    # "<utt>@0 torch.Size([48000]) augmented=1": a 3 s crop of the augmented utterance.
    assert re.search(r"@0 torch\.Size\(\[48000\]\) augmented=1", printed), printed


def yaml_keys(path: Path) -> set[str]:
    return set(re.findall(r"^(\w+):", path.read_text(encoding="utf-8"), flags=re.M))


def readme_commands() -> list[str]:
    """Each command line of the README's bash blocks, continuation lines joined, comments dropped."""
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", README, flags=re.S):
        lines += [line.split("#")[0].strip() for line in block.replace("\\\n", " ").splitlines()]
    return [line for line in lines if line]


def test_readme_setup_is_make_demo_and_make_test():
    makes = [line for line in readme_commands() if line.startswith("make")]
    assert makes == ["make demo", "make test"]
    targets = set(re.findall(r"^([\w-]+):", (REPO / "Makefile").read_text(), flags=re.M))
    assert {"demo", "test"} <= targets


def test_readme_commands_name_existing_recipes_yamls_and_keys():
    commands = [line for line in readme_commands() if line.startswith("python recipes/")]
    assert len(commands) >= 5, commands
    for line in commands:
        recipe, yaml, *rest = line.split()[1:]
        assert (REPO / recipe).is_file(), line
        assert (REPO / yaml).is_file(), line
        unknown = set(re.findall(r"--(\w+)", " ".join(rest))) - yaml_keys(REPO / yaml)
        assert not unknown, f"{line}: {sorted(unknown)} are not keys of {yaml}"


def test_readme_inline_overrides_are_training_keys():
    # The Table 1 rows and the protocol switch are overrides of hparams/ecapa_segreconcat.yaml.
    overrides = set(re.findall(r"`--(\w+)=", README))
    assert {"mode", "strategy", "specaug", "protocol"} <= overrides
    assert not overrides - yaml_keys(REPO / "hparams/ecapa_segreconcat.yaml")


def test_readme_is_a_short_guide():
    assert len(README.encode("utf-8")) <= 12_000


def heading_anchors(page: Path) -> set[str]:
    """GitHub's anchors for a page's headings: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    headings = re.findall(r"^#+ (.+)$", text, flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def doc_links() -> list[tuple[Path, str, str]]:
    """(file, target page, anchor) of every link to a page of docs/ (or README, CHANGELOG)."""
    links = []
    sources = [REPO / "README.md", REPO / "CHANGELOG.md", *sorted((REPO / "docs").glob("*.md"))]
    for source in sources:
        for target, anchor in re.findall(r"\]\(([\w./-]+\.md)(?:#([\w-]+))?\)", source.read_text("utf-8")):
            links.append((source, str((source.parent / target).resolve().relative_to(REPO)), anchor))
    code = [*REPO.glob("segreconcat_aug/**/*.py"), *REPO.glob("recipes/*.py"), *REPO.glob("hparams/*.yaml")]
    for source in [*code, *REPO.glob("tests/*.py")]:
        for target, anchor in re.findall(r"(docs/[\w-]+\.md)#([\w-]+)", source.read_text("utf-8")):
            links.append((source, target, anchor))
    return links


@pytest.mark.parametrize("source,target,anchor", doc_links(), ids=lambda x: str(x).rsplit("/", 1)[-1])
def test_doc_links_reach_a_page_and_heading(source, target, anchor):
    page = REPO / target
    assert page.is_file(), f"{source}: links to {target}, which does not exist"
    if anchor:
        assert anchor in heading_anchors(page), f"{source}: {target}#{anchor} is no heading of {target}"


def test_readme_indexes_every_docs_page():
    indexed = set(re.findall(r"\]\(docs/([\w-]+\.md)\) \|", README))
    assert indexed == {page.name for page in (REPO / "docs").glob("*.md")}
