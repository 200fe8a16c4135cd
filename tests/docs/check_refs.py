#!/usr/bin/env python3
"""Checks that what the code's comments point at exists in the tree.

In the comments of src/, tools/, include/ and tests/ (and the Markdown files there):
- a document path (docs/sizes.md, tests/fakecuda/README.md; a bare name is looked for beside the
  file, then in docs/, then at the top) names a file of the tree;
- a section cited after it (docs/plan-format.md §4.2, §5.3-§5.4; docs/tuning.md#anchor;
  docs/tuning.md, "Title") is a heading of that document; a § with no document before it in the
  same comment is a section of docs/plan-format.md;
- a decision cited by number (D5, D12-D16) is a heading of docs/decisions.md;
- a source file it names (split.h, exec/split.h, transport/world.c) exists, as a path's tail;
  headers of other projects are listed in OUTSIDE;
- in C and CUDA comments, a function or type it names (shunt_tune_pick, struct shunt_world, or
  any name written as a call, `cuMemMap()`) occurs in code: outside comments in a C-like file of
  the tree, or in one of its scripts (a name of CUDA, NCCL or libc that shunt never uses is
  therefore an error too: a comment should speak of what the code calls).

Usage: check_refs.py [ROOT]   (default: the repository holding this script). Exits 1 and lists
each broken reference as FILE:LINE: what, or 0 when every one resolves."""
import os
import re
import sys

SCAN_DIRS = ("src", "tools", "include", "tests")
C_LIKE = (".c", ".h", ".cu", ".cuh", ".cpp", ".hpp", ".cc")
HASH_LIKE = (".py", ".sh", ".cmake")
PLAN_FORMAT = "docs/plan-format.md"
DECISIONS = "docs/decisions.md"

# Strings first, so that a "/*" inside a string literal starts no comment.
C_TOKENS = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|/\*.*?\*/|//[^\n]*', re.S)
DOC = re.compile(r'(?<![\w/.-])((?:[\w.-]+/)*[\w.-]+\.md)\b(#[\w-]+|,\s*"[^"\n]+")?')
SECTION = re.compile(r"§\s?(\d+(?:\.\d+)*)(?:\s?[-–]\s?§?(\d+(?:\.\d+)*))?")
DECISION = re.compile(r"\bD(\d+)(?:\s?[-–]\s?D?(\d+))?\b")
SOURCE = re.compile(r"(?<![\w/.-])((?:[\w-]+/)*[\w-]+\.(?:c|h|cu|cuh|cpp))\b")
# Files of other projects that the code names: CUDA's, NCCL's, rdma-core's, nccl-tests'.
OUTSIDE = {"cuda.h", "nccl.h", "verbs.h", "src/util.cu"}
DECISION_HINT = re.compile(r"\bD\d")
SOURCE_HINT = re.compile(r"\w\.(?:c|h|cu|cuh|cpp)\b")
HEADING = re.compile(r"^#+\s+(.*?)\s*$", re.M)
IDENT = re.compile(r"\b[A-Za-z_]\w*\b")
# Named in a comment: shunt's own identifiers, and any name written as a call.
NAMED = re.compile(r"\b(shunt_[a-z0-9_]*[a-z0-9]|[A-Za-z_]\w*(?=\(\)))")


def comments(path, text):
    """(line, text) of each comment; a Markdown file is one comment."""
    if path.endswith(".md"):
        return [(1, text)]
    out = []
    if path.endswith(C_LIKE):
        line, pos = 1, 0
        for m in C_TOKENS.finditer(text):
            if m.group(0).startswith("/"):
                line += text.count("\n", pos, m.start())
                pos = m.start()
                out.append((line, m.group(0)))
    elif path.endswith(HASH_LIKE) or os.path.basename(path) == "CMakeLists.txt":
        for i, line in enumerate(text.split("\n"), 1):
            if line.lstrip().startswith("#"):
                out.append((i, line))
    return out


def slug(title):
    """The anchor a Markdown renderer gives a heading (GitHub's rule)."""
    s = re.sub(r"[^\w\- ]", "", title.strip().lower())
    return s.replace(" ", "-")


class Docs:
    def __init__(self, root):
        self.root = root
        self.cache = {}

    def headings(self, rel):
        """The document's headings; none when it does not exist (what cites it then fails)."""
        if rel not in self.cache:
            try:
                with open(os.path.join(self.root, rel), encoding="utf-8") as f:
                    self.cache[rel] = HEADING.findall(f.read())
            except OSError:
                self.cache[rel] = []
        return self.cache[rel]

    def decisions(self):
        if "D" not in self.cache:
            self.cache["D"] = {h.split(".")[0] for h in self.headings(DECISIONS)}
        return self.cache["D"]

    def numbers(self, rel):
        """Section numbers of the headings ("4.2" from "### 4.2 From chunks to bytes")."""
        key = "#" + rel
        if key not in self.cache:
            found = (re.match(r"(\d+(?:\.\d+)*)\.?(?:\s|$)", h) for h in self.headings(rel))
            self.cache[key] = {m.group(1) for m in found if m}
        return self.cache[key]

    def find(self, name, here):
        """The document's path from the root, or None."""
        tries = [os.path.join(here, name)]
        if "/" in name:
            tries.insert(0, name)
        else:
            tries += [os.path.join("docs", name), name]
        for t in tries:
            t = os.path.normpath(t)
            if os.path.isfile(os.path.join(self.root, t)):
                return t
        return None


def check_sections(docs, doc, text, where, errors):
    if doc is None or "§" not in text:  # a document that does not exist is reported once, where it is named
        return
    for m in SECTION.finditer(text):
        lo, hi = m.group(1), m.group(2)
        for n in (lo, hi) if hi else (lo,):
            if n not in docs.numbers(doc):
                errors.append(f"{where}: §{n}: no such section in {doc}")


def code_identifiers(rel, text):
    """The identifiers a file's code uses: a C-like file's outside its comments (string literals
    count: a log line naming a driver call), every word of a script."""
    if rel.endswith(C_LIKE):
        text = C_TOKENS.sub(lambda m: " " if m.group(0).startswith("/") else m.group(0), text)
    return IDENT.findall(text)


def check_comment(docs, rel, line, text, sources, errors, idents=None):
    here = os.path.dirname(rel)
    where = f"{rel}:{line}"
    lines = text.count("\n") > 0

    def at_line(pos):
        return f"{rel}:{line + text.count(chr(10), 0, pos)}" if lines else where
    # Sections belong to the document named last before them in the comment. Each pattern runs
    # only where a cheap look finds what it needs (most comments cite nothing).
    doc, at = PLAN_FORMAT, 0
    for m in DOC.finditer(text) if ".md" in text else ():
        check_sections(docs, doc, text[at : m.start()], at_line(at), errors)
        name, tail = m.group(1), m.group(2)
        where = at_line(m.start())
        found = docs.find(name, here)
        if not found:
            errors.append(f"{where}: {name}: no such document")
            doc, at = None, m.end()
            continue
        doc, at = found, m.end()
        if tail and tail.startswith("#"):
            if tail[1:] not in {slug(h) for h in docs.headings(found)}:
                errors.append(f"{where}: {name}{tail}: no such heading in {found}")
        elif tail:
            title = tail.split('"')[1]
            if not any(h.startswith(title) for h in docs.headings(found)):
                errors.append(f'{where}: {name}, "{title}": no such heading in {found}')
    if "§" in text:
        check_sections(docs, doc, text[at:], at_line(at), errors)
    for m in DECISION.finditer(text) if DECISION_HINT.search(text) else ():
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) else lo
        for n in range(lo, hi + 1):
            if f"D{n}" not in docs.decisions():
                errors.append(f"{at_line(m.start())}: D{n}: no such decision in {DECISIONS}")
    for m in SOURCE.finditer(text) if SOURCE_HINT.search(text) else ():
        if m.group(1) not in sources and m.group(1) not in OUTSIDE:
            errors.append(f"{at_line(m.start())}: {m.group(1)}: no such source file")
    if idents is not None and rel.endswith(C_LIKE):
        for m in NAMED.finditer(text) if ("shunt_" in text or "()" in text) else ():
            if m.group(1) not in idents:
                errors.append(f"{at_line(m.start())}: {m.group(1)}: named by no code in the tree")


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "../.."))
    docs = Docs(root)
    # Every tail of every source path: "world.c", "transport/world.c", "src/transport/world.c".
    files, sources, idents = [], set(), set()
    for top in ("src", "tools", "include", "tests", "bench", "fuzz", "python", "scripts"):
        for d, subdirs, names in os.walk(os.path.join(root, top)):
            subdirs.sort()
            for n in sorted(names):
                rel = os.path.relpath(os.path.join(d, n), root)
                if n.endswith(C_LIKE):
                    parts = rel.split(os.sep)
                    sources.update("/".join(parts[k:]) for k in range(len(parts)))
                if top in SCAN_DIRS:
                    files.append(rel)
                if n.endswith(C_LIKE + HASH_LIKE) or n == "CMakeLists.txt":
                    try:
                        with open(os.path.join(root, rel), encoding="utf-8") as f:
                            idents.update(code_identifiers(rel, f.read()))
                    except (UnicodeDecodeError, OSError):
                        pass
    errors = []
    for rel in files:
        try:
            with open(os.path.join(root, rel), encoding="utf-8") as f:
                text = f.read()
        except (UnicodeDecodeError, OSError):
            continue
        for line, text_ in comments(rel, text):
            check_comment(docs, rel, line, text_, sources, errors, idents)
    for e in errors:
        print(e)
    print(f"{len(files)} files: {len(errors)} broken reference(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
