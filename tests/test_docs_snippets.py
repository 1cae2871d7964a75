"""The code in README.md and docs/*.md runs as written, from the installed package.

Every fenced block names its language: ``python``, ``bash``, ``toml`` or ``text``.

- ``python`` blocks run, each in its own interpreter (this test's), from a temporary
  folder of their document, in the document's order, and must exit 0.
- ``bash`` blocks: every ``hil ...`` command line (a synopsis with ``[...]`` and ``|``
  included) must name a real command and only options that ``hil <command> --help``
  accepts; so must every inline code span of the prose that starts with ``hil``. The
  cheap commands of a block run as written (``hil --version`` and ``hil configs ...``
  lines without placeholders); a block marked ``run`` runs line by line.
- ``toml`` blocks parse.
- ``text`` blocks (output, diagrams) are only read.

A marker, an HTML comment on the line before a block, says more about it:

- ``<!-- snippet: file NAME -->``: the block is also the file NAME of the document's
  folder (a user's module, a config), for the blocks after it;
- ``<!-- snippet: run -->``: a bash block that runs line by line, each line to exit 0
  (it makes what the blocks after it read, e.g. a short run's log);
- ``<!-- snippet: illustrative: REASON -->``: a python block that cannot run as written
  (it needs hardware, a long run's results, ...) and says why; it must still compile.

``hil`` in a bash line is this interpreter running the ``hil`` entry point that the
installed distribution declares (console_scripts), so the package under test is the one
the docs run.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:            # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LANGUAGES = {"python", "bash", "toml", "text"}
MARKER = re.compile(r"^<!--\s*snippet:\s*(file\s+\S+|run|illustrative:\s*\S.*?)\s*-->$")
FENCE = re.compile(r"^```(\S*)\s*$")
TIMEOUT = 900                  # s per block: a first run may compile its kernels
# The hil commands a bash block runs even when it is not marked `run`: cheap, no side
# effects beyond the document's folder.
CHEAP = {(), ("configs",)}


@dataclass
class Block:
    path: Path
    line: int                   # 1-based line of the opening fence
    language: str
    text: str
    marker: str | None

    @property
    def where(self) -> str:
        return f"{shown(self.path)}:{self.line}"


def shown(path: Path) -> str:
    """A path as messages name it: relative to the repository when inside it."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown file, with the marker of the line before each."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found, i = [], 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        end = next((k for k in range(i + 1, len(lines)) if lines[k].strip() == "```"), None)
        assert end is not None, f"{shown(path)}:{i + 1}: a fence that never closes"
        before = next((lines[k].strip() for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        marker = MARKER.match(before)
        found.append(Block(path, i + 1, opening.group(1), "\n".join(lines[i + 1:end]) + "\n",
                           marker.group(1) if marker else None))
        i = end + 1
    return found


def prose(path: Path) -> str:
    """The file without its fenced blocks."""
    text = path.read_text(encoding="utf-8")
    return re.sub(r"^```.*?^```\s*$", "", text, flags=re.S | re.M)


# -- the hil command's own help --------------------------------------------------------------

HELP_SCRIPT = r"""
import contextlib, io, json, re, sys
from importlib.metadata import entry_points

(hil,) = entry_points(group="console_scripts", name="hil")
main = hil.load()

def help_of(path):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        try:
            main([*path, "--help"])
        except SystemExit:
            pass
    return out.getvalue()

found, todo = {}, [()]
while todo:
    path = todo.pop()
    text = help_of(path)
    usage = text.split("\n\n", 1)[0]
    commands = re.search(r"\{([\w,-]+)\}\s+\.\.\.", usage)
    found[" ".join(path)] = {
        "options": sorted(set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", text))),
        "commands": commands.group(1).split(",") if commands else []}
    todo += [(*path, name) for name in found[" ".join(path)]["commands"]]
print(json.dumps(found))
"""


@pytest.fixture(scope="module")
def hil_help() -> dict[tuple, dict]:
    """For every command path of ``hil`` (``()``, ``("run",)``, ``("log", "export")``,
    ...): the options its ``--help`` lists and its subcommands."""
    proc = subprocess.run([sys.executable, "-c", HELP_SCRIPT], capture_output=True,
                          text=True, timeout=300, env=environment())
    assert proc.returncode == 0, proc.stderr
    return {tuple(key.split()) if key else (): value
            for key, value in json.loads(proc.stdout).items()}


def environment(bin_dir: Path | None = None) -> dict:
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONUNBUFFERED="1")
    if bin_dir is not None:
        env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return env


def hil_shim(folder: Path) -> Path:
    """A folder holding ``hil``: this interpreter running the installed entry point."""
    folder.mkdir(exist_ok=True)
    shim = folder / "hil"
    shim.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -c "
                    "'import sys; from importlib.metadata import entry_points; "
                    "(hil,) = entry_points(group=\"console_scripts\", name=\"hil\"); "
                    "sys.exit(hil.load()())' \"$@\"\n")
    shim.chmod(0o755)
    return folder


# -- reading a hil command line ----------------------------------------------------------------

SEPARATORS = {"&&", "||", ";"}
REDIRECTIONS = {">", ">>", "<", "2>", "&>", "2>&1"}
OPTION = re.compile(r"^(--?[A-Za-z][\w-]*)(=.*)?$")


def hil_commands(line: str) -> list[list[str]]:
    """The ``hil`` commands of one shell line (or synopsis), each as its words after
    ``hil``, up to a redirection."""
    try:
        words = shlex.split(line, comments=True)
    except ValueError:
        words = line.split("#", 1)[0].split()
    commands, current = [], []
    for word in words + [";"]:
        if word in SEPARATORS:
            if current and current[0] == "hil":
                cut = next((i for i, w in enumerate(current) if w in REDIRECTIONS), None)
                commands.append(current[1:cut])
            current = []
        else:
            current.append(word)
    return commands


def bare(word: str) -> str:
    """A synopsis word without its brackets: ``[--plot`` -> ``--plot``."""
    return word.strip("[](),")


def problems(words: list[str], helps: dict[tuple, dict]) -> list[str]:
    """What is wrong with ``hil WORDS``: an unknown command, an option that the command's
    ``--help`` does not list."""
    paths, i = [()], 0
    while i < len(words):
        word = bare(words[i])
        subcommands = set(helps[paths[0]]["commands"])
        if not subcommands or word.startswith("-"):
            break
        if word.isupper():                     # a placeholder, COMMAND: options unchecked
            return []
        alternatives = word.split("|")
        unknown = [name for name in alternatives if name not in subcommands]
        if unknown:
            return [f"no command `hil {' '.join(paths[0] + (unknown[0],))}` "
                    f"(known: {', '.join(sorted(subcommands))})"]
        paths = [path + (name,) for path in paths for name in alternatives]
        i += 1
    found = []
    for word in words[i:]:
        option = OPTION.match(bare(word))
        if option is None:
            continue
        for path in paths:
            if option.group(1) not in helps[path]["options"]:
                found.append(f"`hil {' '.join(path)}` has no option {option.group(1)}")
    return found


def inline_hil_spans(path: Path) -> list[str]:
    return [span for span in re.findall(r"`([^`\n]+)`", prose(path))
            if span.startswith("hil ")]


# -- the tests --------------------------------------------------------------------------------

def test_every_block_names_its_language_and_markers_are_known():
    wrong = []
    for path in DOCS:
        for block in blocks(path):
            if block.language not in LANGUAGES:
                wrong.append(f"{block.where}: ```{block.language} (use one of "
                             f"{', '.join(sorted(LANGUAGES))})")
            if block.marker == "run" and block.language != "bash":
                wrong.append(f"{block.where}: only a bash block can be marked run")
            if block.marker and block.marker.startswith("illustrative") and block.language != "python":
                wrong.append(f"{block.where}: only a python block can be illustrative")
        text = path.read_text(encoding="utf-8")
        for comment in re.findall(r"<!--\s*snippet:.*?-->", text):
            if not MARKER.match(comment):
                wrong.append(f"{path.relative_to(ROOT)}: unknown marker {comment}")
    assert not wrong, "\n".join(wrong)


def test_hil_command_lines_name_real_commands_and_options(hil_help):
    wrong = []
    for path in DOCS:
        for block in blocks(path):
            if block.language != "bash":
                continue
            for k, line in enumerate(block.text.splitlines()):
                for words in hil_commands(line):
                    wrong += [f"{block.where}+{k + 1}: {p}: {line.strip()}"
                              for p in problems(words, hil_help)]
        for span in inline_hil_spans(path):
            for words in hil_commands(span):
                wrong += [f"{path.relative_to(ROOT)}: {p}: `{span}`"
                          for p in problems(words, hil_help)]
    assert not wrong, "\n".join(wrong)


def test_the_checker_finds_a_wrong_command_and_a_wrong_option(hil_help):
    """The check above can fail: what it says of lines that are wrong."""
    assert problems(hil_commands("hil run rrr3_pd --fast --log x.mcap")[0], hil_help) == []
    assert problems(hil_commands("hil runn rrr3_pd")[0], hil_help)[0].startswith("no command")
    assert problems(hil_commands("hil sim X --out a.npz --fast")[0], hil_help) == [
        "`hil sim` has no option --fast"]
    assert problems(hil_commands("hil analyze modes|stiffness CONFIG [--map]")[0], hil_help) == [
        "`hil analyze modes` has no option --map"]
    assert problems(hil_commands("hil log exprt LOG")[0], hil_help)[0].startswith(
        "no command `hil log exprt`")
    assert hil_commands("python -m pip install -e . && hil configs --show x > y.toml") == [
        ["configs", "--show", "x"]]


def test_toml_blocks_parse():
    wrong = []
    for path in DOCS:
        for block in blocks(path):
            if block.language == "toml":
                try:
                    tomllib.loads(block.text)
                except tomllib.TOMLDecodeError as exc:
                    wrong.append(f"{block.where}: {exc}")
    assert not wrong, "\n".join(wrong)


def cheap(line: str) -> bool:
    """A line of hil commands that are all cheap and have no placeholder."""
    commands = hil_commands(line)
    return bool(commands) and line.lstrip().startswith("hil ") and all(
        not any(ch in line for ch in "[]|") and not any(w.isupper() for w in words)
        and tuple(w for w in words[:1] if not w.startswith("-")) in CHEAP
        for words in commands)


def run_document(path: Path, folder: Path) -> list[str]:
    """Run the document's snippets in order in ``folder``; what ran, for the report."""
    bin_dir = hil_shim(folder.parent / "bin")
    env = environment(bin_dir)
    ran = []
    for block in blocks(path):
        marker = block.marker or ""
        if marker.startswith("file "):
            (folder / marker.split(None, 1)[1]).write_text(block.text, encoding="utf-8")
        if block.language == "python":
            compile(block.text, block.where, "exec")
            if marker.startswith("illustrative"):
                continue
            script = folder / f"_snippet_{block.line}.py"
            script.write_text(block.text, encoding="utf-8")
            proc = subprocess.run([sys.executable, script.name], cwd=folder, env=env,
                                  capture_output=True, text=True, timeout=TIMEOUT)
            assert proc.returncode == 0, (
                f"{block.where}: the python block failed (exit {proc.returncode}):\n"
                f"{textwrap.indent(block.text, '    ')}\n{proc.stderr[-4000:]}")
            ran.append(block.where)
        elif block.language == "bash":
            for k, line in enumerate(block.text.splitlines()):
                if not line.strip() or line.lstrip().startswith("#"):
                    continue
                if marker != "run" and not cheap(line):
                    continue
                proc = subprocess.run(["bash", "-c", line], cwd=folder, env=env,
                                      capture_output=True, text=True, timeout=TIMEOUT)
                assert proc.returncode == 0, (
                    f"{block.where}+{k + 1}: `{line.strip()}` exited {proc.returncode}:\n"
                    f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
                ran.append(f"{block.where}+{k + 1}")
    return ran


@pytest.mark.parametrize("path", DOCS, ids=[str(p.relative_to(ROOT)) for p in DOCS])
@pytest.mark.system
def test_the_snippets_run(path, tmp_path):
    folder = tmp_path / "doc"
    folder.mkdir()
    run_document(path, folder)


@pytest.mark.system
def test_a_broken_snippet_fails(tmp_path):
    """A python block that raises, and a run line that fails, fail the document."""
    doc = tmp_path / "broken_doc.md"
    doc.write_text("```python\nimport hilrig\nraise SystemExit(hilrig.nothing_here)\n```\n",
                   encoding="utf-8")
    folder = tmp_path / "doc"
    folder.mkdir()
    with pytest.raises(AssertionError, match="broken_doc.md:1: the python block failed"):
        run_document(doc, folder)
    doc.write_text("<!-- snippet: run -->\n```bash\nhil configs --show no_such_config\n```\n",
                   encoding="utf-8")
    with pytest.raises(AssertionError, match="exited 2"):
        run_document(doc, folder)


# -- the README itself -------------------------------------------------------------------------

RUN = "python -m pip install -e . && hil run configs/rrr3_pd.toml"
TEST = 'python -m pip install -e ".[test]" && python -m pytest -q'


def test_the_readme_opens_with_the_two_commands():
    first = blocks(ROOT / "README.md")[0]
    assert first.line <= 5
    commands = [line.split("#", 1)[0].strip() for line in first.text.splitlines()]
    assert commands == [RUN, TEST]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "python -m pytest -q" in ci.splitlines()       # CI runs the same test command


def test_the_readme_lists_every_document():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = readme.split("## Documents", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| \[[^\]]+\]\(([^)]+)\) \| \S", table, flags=re.M))
    present = {str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*")
               if p.is_file() and "__pycache__" not in p.parts}
    assert present - listed == set(), "documents missing from the README's table"
    assert listed - present == set(), "the README's table lists files that do not exist"
