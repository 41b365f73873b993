#!/usr/bin/env python3
"""Checks that dtrain's documentation links and the code's citations of it resolve.

  python3 tools/check_links.py [REPO_ROOT]

1. Every relative Markdown link (and image) in README.md, docs/**/*.md and every folder's
   README.md: its target exists, and a `#fragment` names a heading of the target (or of the same
   file), slugged as GitHub does: the heading's text (code spans and link syntax dropped,
   their text kept), lowercased, every character that is not a letter, a digit, a space, `-`
   or `_` dropped, each space made a `-`, and `-1`, `-2`, ... added to repeated headings.
   Links in fenced code blocks and code spans are not links. http(s) and mailto are not checked.
2. Every citation of a Markdown section, in those files' prose and in the code's comments
   (*.cc, *.h, *.cu, *.fbs, *.sh, *.py, *.js, *.yaml, *.conf, *.service, BUILD, *.bzl, WORKSPACE
   and scripts starting with #! under core kernels transport daemon submit tests tools configs
   third_party .ci): `path/to/FILE.md, "Heading"`, `FILE.md "Heading"`, `FILE.md ("Heading")`,
   `FILE.md: "Heading"`, further headings joined by `and` or `,`, and the root README cited
   without its extension (`README, "Heading"`). A citation may run over several comment lines.
   The file is looked up from the repository root, then from the citing file's folder; the
   heading must be one of the file's headings, or its short name: the heading's text before
   " (" or ": " (`"Lanes"` names "Lanes: one link over several I/O threads", `"Image data"`
   names "Image data (`format: images`)"). A bare `FILE.md` with a folder in its path must exist.

Prints each broken link or citation as FILE:LINE: what is wrong, and exits 1; or prints
"links: N checked, all resolve" and exits 0. Python 3 standard library only.
"""
import os
import re
import sys
import unicodedata

CODE_DIRS = ["core", "kernels", "transport", "daemon", "submit", "tests", "tools", "configs",
             "third_party", ".ci"]
CODE_EXTS = (".cc", ".h", ".cu", ".fbs", ".sh", ".py", ".bzl", ".js", ".yaml", ".conf",
             ".service")
CODE_NAMES = ("BUILD", "BUILD.bazel", "WORKSPACE")
SKIP_DIRS = {".git", "node_modules"}
SKIP_PREFIXES = ("bazel-", ".device")
SKIP_PATHS = ("tests/fuzz/corpus",)  # inputs for the fuzzers, not comments
SELF = "tools/check_links.py"  # its own docstring and patterns are examples, not citations


def walk(root, top):
    base = os.path.join(root, top)
    if os.path.isfile(base):
        yield top
        return
    for d, dirs, files in os.walk(base):
        dirs[:] = sorted(x for x in dirs
                         if x not in SKIP_DIRS and not x.startswith(SKIP_PREFIXES)
                         and not os.path.islink(os.path.join(d, x)))
        rel_dir = os.path.relpath(d, root)
        if any(rel_dir == p or rel_dir.startswith(p + "/") for p in SKIP_PATHS):
            dirs[:] = []
            continue
        for f in sorted(files):
            yield os.path.normpath(os.path.join(rel_dir, f))


def markdown_files(root):
    out = []
    if os.path.isfile(os.path.join(root, "README.md")):
        out.append("README.md")
    for top in sorted(os.listdir(root)):
        full = os.path.join(root, top)
        if top in SKIP_DIRS or top.startswith(SKIP_PREFIXES) or not os.path.isdir(full) \
                or os.path.islink(full):
            continue
        for rel in walk(root, top):
            if rel.endswith(".md") and (rel.startswith("docs/")
                                        or os.path.basename(rel) == "README.md"):
                out.append(rel)
    return out


def code_files(root):
    out = []
    for top in CODE_DIRS + ["WORKSPACE", "BUILD.bazel"]:
        if not os.path.exists(os.path.join(root, top)):
            continue
        for rel in walk(root, top):
            name = os.path.basename(rel)
            if name.endswith(CODE_EXTS) or name in CODE_NAMES:
                out.append(rel)
            elif "." not in name:
                try:
                    with open(os.path.join(root, rel), "rb") as f:
                        if f.read(2) == b"#!":
                            out.append(rel)
                except OSError:
                    pass
    return out


def read(root, rel):
    with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
        return f.read()


# ---------------------------------------------------------------- Markdown structure

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def blank_code(text):
    """The text with fenced blocks and code spans replaced by spaces (newlines kept)."""
    lines = text.split("\n")
    fence = None
    for i, line in enumerate(lines):
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)[0] * len(m.group(1))
            lines[i] = " " * len(line)
        elif fence is not None:
            if m and m.group(1).startswith(fence):
                fence = None
            lines[i] = " " * len(line)
    text = "\n".join(lines)
    return re.sub(r"(`+)(.+?)\1", lambda m: m.group(1) + " " * len(m.group(2)) + m.group(1),
                  text, flags=re.S)


def heading_texts(text):
    """Each ATX heading's text, outside fenced blocks, in order."""
    out = []
    fence = None
    for line in text.split("\n"):
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)[0] * len(m.group(1))
            continue
        if fence is not None:
            if m and m.group(1).startswith(fence):
                fence = None
            continue
        h = re.match(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        if h:
            out.append(h.group(1))
    return out


def plain(heading):
    """A heading as GitHub renders its text: code spans, links and emphasis reduced to text."""
    t = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    t = re.sub(r"(`+)(.+?)\1", r"\2", t)
    t = re.sub(r"(\*\*|__|\*)(.+?)\1", r"\2", t)
    return t.strip()


def slug(text):
    out = []
    for ch in plain(text).lower():
        if ch in " -_" or unicodedata.category(ch)[0] in "LN" and unicodedata.category(ch) != "No":
            out.append(ch)
    return "".join(out).replace(" ", "-")


def anchors(text):
    seen = {}
    result = set()
    for h in heading_texts(text):
        s = slug(h)
        if s in seen:
            seen[s] += 1
            result.add("%s-%d" % (s, seen[s]))
        else:
            seen[s] = 0
            result.add(s)
    return result


def short_names(text):
    names = set()
    for h in heading_texts(text):
        p = " ".join(plain(h).split())
        names.add(p)
        for sep in (" (", ": "):
            if sep in p:
                names.add(p.split(sep, 1)[0].strip())
    return names


# ---------------------------------------------------------------- checks

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
REFDEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(\S+)", re.M)
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
CITATION = re.compile(
    r"(?P<path>(?:[\w.-]+/)*[\w.-]+\.md|(?<![\w./-])README(?![\w.]))"
    r"(?:\s*[,:]\s*\(?|\s+\(?|\s*\()\s*\"(?P<h>[^\"\n]{1,120})\"")
MORE = re.compile(r"\s*(?:,|and|,\s*and)\s+\"([^\"\n]{1,120})\"")
BARE = re.compile(r"(?<![\w./-])((?:[\w.-]+/)+[\w.-]+\.md)\b")


class Checker:
    def __init__(self, root):
        self.root = root
        self.cache = {}
        self.errors = []
        self.checked = 0

    def doc(self, rel):
        if rel not in self.cache:
            path = os.path.join(self.root, rel)
            self.cache[rel] = read(self.root, rel) if os.path.isfile(path) else None
        return self.cache[rel]

    def error(self, rel, line, what):
        self.errors.append("%s:%d: %s" % (rel, line, what))

    def resolve(self, citing, path):
        """The cited file's path from the root: as given, then beside the citing file."""
        if path == "README":
            path = "README.md"
        for cand in (os.path.normpath(path),
                     os.path.normpath(os.path.join(os.path.dirname(citing), path))):
            if not cand.startswith("..") and os.path.isfile(os.path.join(self.root, cand)):
                return cand
        return None

    def check_markdown(self, rel):
        text = self.doc(rel)
        prose = blank_code(text)
        targets = [(m.start(1), m.group(1)) for m in LINK.finditer(prose)]
        targets += [(m.start(1), m.group(1)) for m in REFDEF.finditer(prose)]
        for pos, target in targets:
            line = prose.count("\n", 0, pos) + 1
            if EXTERNAL.match(target) or target.startswith("//"):
                continue
            self.checked += 1
            path, _, frag = target.partition("#")
            if path:
                dest = os.path.normpath(os.path.join(os.path.dirname(rel), path))
                full = os.path.join(self.root, dest)
                if dest.startswith("..") or not os.path.exists(full):
                    self.error(rel, line, "link to %s: no such file" % target)
                    continue
            else:
                dest = rel
            if frag:
                if not dest.endswith(".md") or os.path.isdir(os.path.join(self.root, dest)):
                    self.error(rel, line, "link to %s: a #fragment on a file that is not "
                                          "Markdown" % target)
                    continue
                if frag not in anchors(self.doc(dest)):
                    self.error(rel, line, "link to %s: %s has no heading with the anchor #%s"
                               % (target, dest, frag))
        self.check_citations(rel, prose, markdown=True)

    def check_citations(self, rel, text, markdown=False):
        """Citations in `text`; a line break counts as a space, lines are counted on `text`."""
        flat = text.replace("\n", " ")
        cited = set()
        for m in CITATION.finditer(flat):
            cited.add(m.start("path"))
            line = text.count("\n", 0, m.start()) + 1
            path = m.group("path")
            headings = [m.group("h")]
            end = m.end()
            while True:
                more = MORE.match(flat, end)
                if not more:
                    break
                headings.append(more.group(1))
                end = more.end()
            dest = self.resolve(rel, path)
            self.checked += 1
            if dest is None:
                self.error(rel, line, "cites %s: no such file" % path)
                continue
            names = {" ".join(n.replace("`", "").split()) for n in short_names(self.doc(dest))}
            for h in headings:
                h = " ".join(h.replace("`", "").split())
                if h not in names:
                    self.error(rel, line, 'cites %s, "%s": %s has no such heading'
                               % (path, h, dest))
        if not markdown:
            for m in BARE.finditer(flat):
                path = m.group(1)
                if m.start(1) in cited:
                    continue  # checked as a citation
                self.checked += 1
                if self.resolve(rel, path) is None:
                    line = text.count("\n", 0, m.start()) + 1
                    self.error(rel, line, "mentions %s: no such file" % path)

    def check_code(self, rel):
        # The text of every line with its comment leader stripped, so that a citation may run
        # over comment lines; a C string literal split over two lines is joined back (its
        # closing and opening quotes dropped). One output line per input line.
        out = []
        for raw in self.doc(rel).split("\n"):
            s = raw.strip()
            s = re.sub(r"^(//+|#+|\*+|/\*+|\"\"\")\s?", "", s)
            s = s.replace('\\"', '"')
            if out and out[-1].endswith('"') and s.startswith('"') and out[-1].count('"') % 2:
                out[-1] = out[-1][:-1]
                s = s[1:]
            out.append(s)
        self.check_citations(rel, "\n".join(out))


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    c = Checker(root)
    for rel in markdown_files(root):
        c.check_markdown(rel)
    for rel in code_files(root):
        if rel != SELF:
            c.check_code(rel)
    if c.errors:
        for e in c.errors:
            print(e)
        print("links: %d checked, %d broken" % (c.checked, len(c.errors)))
        return 1
    print("links: %d checked, all resolve" % c.checked)
    return 0


if __name__ == "__main__":
    sys.exit(main())
