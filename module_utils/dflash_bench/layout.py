"""Page layout of the reports' text (both bench.yml's and tune.yml's): command lines wrapped as shell
continuation lines, LaTeX escaping with break points, table column widths that fit the page.

A command line of 30 flags and a model path does not fit a page; cut anywhere it would no longer paste into
a shell. ``wrap_command`` breaks between words with `` \\`` and, inside a word longer than a line, with a
backslash-newline (the shell removes both). Table columns: each as wide as its longest piece that cannot
break, the rest of the line shared out by content. No Ansible import.
"""

from __future__ import annotations


def wrap_command(words, width) -> list:
    """A command line as shell continuation lines no longer than ``width`` (a word longer than a line is cut
    with a backslash-newline, which the shell removes: the command stays the same)."""
    lines, cur = [], ""
    for w in [str(x) for x in words]:
        while len(w) > width - 2:
            if cur:
                lines.append(cur + " \\")
                cur = ""
            lines.append(w[:width - 2] + "\\")
            w = w[width - 2:]
        if not cur:
            cur = w
        elif len(cur) + 1 + len(w) <= width - 2:
            cur += " " + w
        else:
            lines.append(cur + " \\")
            cur = "    " + w
    if cur:
        lines.append(cur)
    return lines


def wrap_text(text, width) -> list:
    """Lines of a diff or YAML for a verbatim block: a longer line goes on after a marked break."""
    out = []
    for line in str(text).splitlines():
        while len(line) > width:
            out.append(line[:width - 1] + "\\")
            line = "  " + line[width - 1:]
        out.append(line)
    return out


def tex_escape(value, breaks=False) -> str:
    table = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
             "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "<": r"\textless{}",
             ">": r"\textgreater{}"}
    out = []
    for ch in str(value):
        out.append(table.get(ch, ch))
        if breaks and ch in "-_/,=":
            out.append(r"\allowbreak{}")
    return "".join(out)


LINE_CHARS = 190  # characters of \scriptsize roman in the landscape A4 line (742 pt, about 3.8 pt each)
COL_GAP_CHARS = 3.5  # the 2 \tabcolsep (12 pt) around each column


def _tokens(text):
    """The pieces a table cell cannot break inside (spaces, and the break points texb adds after - _ / , =)."""
    out, cur = [], ""
    for ch in str(text):
        if ch.isspace():
            out.append(cur)
            cur = ""
        else:
            cur += ch
            if ch in "-_/,=":
                out.append(cur)
                cur = ""
    return [t for t in out + [cur] if t]


def col_widths(table) -> list:
    """Column widths in characters: each at least its longest unbreakable piece (header words and cells), the
    rest of the line shared out by how much longer the column's cells are; the sum fits LINE_CHARS."""
    cols = table["columns"]
    avail = LINE_CHARS - COL_GAP_CHARS * len(cols)
    mins, prefs = [], []
    for k, head in enumerate(cols):
        cells = [str(r[k]) for r in table["rows"]]
        mins.append(max(len(t) for t in _tokens(" ".join([head, *cells]))) + 1)
        prefs.append(max([len(head) // 2 + 1] + [min(32, len(c)) for c in cells]))
    prefs = [max(m, p) for m, p in zip(mins, prefs, strict=True)]
    if sum(prefs) <= avail:
        extra = avail - sum(prefs)
        return [p + extra * p / sum(prefs) for p in prefs]
    if sum(mins) >= avail:
        return [m * avail / sum(mins) for m in mins]
    room = avail - sum(mins)
    want = [p - m for p, m in zip(prefs, mins, strict=True)]
    return [m + room * w / sum(want) for m, w in zip(mins, want, strict=True)]


def col_spec(table) -> str:
    """LaTeX column spec: ragged-right p columns of the widths above, as fractions of the line width."""
    return "".join(fr">{{\raggedright\arraybackslash}}p{{{w / LINE_CHARS:.4f}\linewidth}}" for w in col_widths(table))
